//! `lockctl run -- CMD`: a distributed `flock` that never lets two holders overlap.
//!
//! The job runs in a process group of its own, with the lease renewed by the watchdog. The one
//! idea that keeps holders from overlapping: the job's whole group must be dead before the
//! lease could end on the server. So the job is stopped (SIGTERM to the group, SIGKILL after
//! `--grace-ms`) as soon as a renewal fails or finds another holder, or as soon as the lease's
//! validity by this process's own clock falls to the grace period plus a margin; `--grace-ms`
//! is refused when it cannot fit. If lockctl itself dies, the child dies with it (the
//! parent-death signal), a guard process kills the rest of the group, and the lease, no longer
//! renewed, ends within one TTL.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use lockctl_core::lock::{Acquire, Lock, LockOptions, Release};
use lockctl_core::sku::Sku;

use super::run_job::{Job, SAFETY, terminal};
use super::{Ctx, Exit, UsageError, emit, emit_json};
use crate::cli::RunArgs;
use crate::signals;

/// `run --json` when the lock was taken: how the job went under it. Fields in alphabetical
/// order, the order `--json` has always printed them in (docs/run.md shows it).
#[derive(Serialize)]
struct Ran<'a> {
    /// Always true here; [`NotAcquired`] says false.
    acquired: bool,
    /// The job's exit code; null when a signal ended it.
    exit_code: Option<i32>,
    fence: u64,
    held_ms: u64,
    lease_lost: bool,
    name: &'a str,
    released: bool,
    renewals: u64,
    /// The signal that ended the job, if one did.
    signal: Option<i32>,
    waited_ms: u64,
}

/// `run --json` when the lock was not taken within `--wait-ms`.
#[derive(Serialize)]
struct NotAcquired<'a> {
    /// Always false here.
    acquired: bool,
    lease_lost: bool,
    name: &'a str,
    waited_ms: u64,
}

pub fn run(ctx: &Ctx, args: RunArgs) -> anyhow::Result<Exit> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => name_of(&args.command[0])?,
    };
    let ttl = Duration::from_millis(args.ttl_ms);
    let grace = grace(ttl, args.grace_ms)?;
    let stop = signals::listen(signals::First::Forward);
    let mut lock = Lock::new(
        &ctx.target,
        name.as_str(),
        LockOptions {
            ttl,
            wait: Duration::from_millis(args.wait_ms),
            watchdog: true,
        },
    );
    if let Some(q) = &ctx.quorum {
        lock = lock.with_quorum(q.clone());
    }
    let started = Instant::now();
    let mut conn = ctx.target.connect()?;
    let guard = match lock.acquire(&mut conn)? {
        Acquire::Acquired(g) => g,
        Acquire::Busy => {
            report_busy(ctx, &name, &lock, started)?;
            return Ok(Exit::Busy);
        }
    };
    let waited = guard.waited();
    let held_from = Instant::now();
    let job = Job::start(&args.command, &lock, &guard, grace);
    let mut job = match job {
        Ok(j) => j,
        Err(e) => {
            let _ = guard.release(&mut conn);
            return Err(e);
        }
    };
    stop.forward_to.store(job.pgid, Ordering::SeqCst);
    let ended = job.watch(&guard, grace);
    if job.foreground() {
        terminal::take_back();
    }
    stop.forward_to.store(0, Ordering::SeqCst);
    let renewals = guard.renewals();
    let fence = guard.fence();
    let released = guard.release(&mut conn);
    let exit = match (ended.lease_lost, ended.status) {
        (true, _) => Exit::LeaseLost,
        (false, Some(s)) => Exit::Child(exit_code(s)),
        (false, None) => Exit::Error,
    };
    let held = held_from.elapsed();
    let status = ended.status;
    if ctx.json {
        emit_json(&Ran {
            name: name.as_str(),
            acquired: true,
            fence,
            waited_ms: waited.as_millis() as u64,
            held_ms: held.as_millis() as u64,
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            renewals,
            lease_lost: ended.lease_lost,
            released: matches!(released, Ok(Release::Released)),
        })?;
    } else if ended.lease_lost {
        eprintln!(
            "lockctl: the lease on dist_lock:{name} was lost; the command's process group was stopped"
        );
    }
    Ok(exit)
}

/// The lock's name when `--name` is not given: the command's file name.
fn name_of(program: &OsString) -> anyhow::Result<Sku> {
    let file = Path::new(program)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    file.parse::<Sku>().map_err(|e| {
        UsageError(format!(
            "cannot name the lock after the command ({e}); give one with --name"
        ))
        .into()
    })
}

/// The grace period: the one given, or 5 s, and never more than fits in the lease. The lease is
/// renewed every TTL/3 and a renewal may take up to another TTL/3 to fail, so a loss is known
/// at the latest 2/3 of a TTL after the last confirmed renewal; the group must then be dead
/// within the last third, less the drift margin (1% + 2 ms) and [`SAFETY`].
fn grace(ttl: Duration, asked: Option<u64>) -> anyhow::Result<Duration> {
    let fits = (ttl / 3)
        .saturating_sub(ttl / 100 + Duration::from_millis(2))
        .saturating_sub(SAFETY);
    match asked.map(Duration::from_millis) {
        Some(g) if g > fits => Err(UsageError(format!(
            "--grace-ms {} cannot fit: with --ttl-ms {} the job's group must be dead within {} ms of a lost lease being noticed; lower --grace-ms or raise --ttl-ms",
            g.as_millis(),
            ttl.as_millis(),
            fits.as_millis()
        ))
        .into()),
        Some(g) => Ok(g),
        None => Ok(fits.min(Duration::from_secs(5))),
    }
}

fn report_busy(ctx: &Ctx, name: &Sku, lock: &Lock, started: Instant) -> anyhow::Result<()> {
    let waited = started.elapsed();
    if ctx.json {
        emit_json(&NotAcquired {
            name: name.as_str(),
            acquired: false,
            waited_ms: waited.as_millis() as u64,
            lease_lost: false,
        })?;
    } else {
        emit(&format!(
            "busy: {} is held by another job (waited {} ms; wait longer with --wait-ms)\n",
            lock.keys().lock,
            waited.as_millis()
        ))?;
    }
    Ok(())
}

/// The 128+n convention for a child killed by signal n; its own code otherwise.
fn exit_code(s: ExitStatus) -> i32 {
    match (s.code(), s.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        (None, None) => 1,
    }
}
