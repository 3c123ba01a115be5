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
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde_json::json;

use lockctl::lock::{Acquire, Guard, Lock, LockOptions, Release};
use lockctl::sku::Sku;

use super::{Ctx, Exit, UsageError, emit, emit_json};
use crate::cli::RunArgs;
use crate::signals;

/// How often the job and its lease are looked at.
const POLL: Duration = Duration::from_millis(10);

/// Slack between the group's death and the earliest end of the lease: the poll, a SIGKILL's
/// delivery, and scheduling.
const SAFETY: Duration = Duration::from_millis(40);

/// How the job ended.
struct Ended {
    status: Option<ExitStatus>,
    lease_lost: bool,
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
    // The group is dead: the guard goes now, before its group id could be reused.
    job.dismiss_guard();
    if job.foreground {
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
        emit_json(&json!({
            "name": name.as_str(),
            "acquired": true,
            "fence": fence,
            "waited_ms": waited.as_millis() as u64,
            "held_ms": held.as_millis() as u64,
            "exit_code": status.and_then(|s| s.code()),
            "signal": status.and_then(|s| s.signal()),
            "renewals": renewals,
            "lease_lost": ended.lease_lost,
            "released": matches!(released, Ok(Release::Released)),
        }))?;
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
        emit_json(&json!({
            "name": name.as_str(),
            "acquired": false,
            "waited_ms": waited.as_millis() as u64,
            "lease_lost": false,
        }))?;
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

/// How often the guard process is told the lease's deadlines.
const HEARTBEAT: Duration = Duration::from_millis(50);

/// The job: the child (leader of its own process group) and the guard process that kills that
/// group if lockctl dies or stops renewing (see `run_guard`).
struct Job {
    child: Child,
    pgid: i32,
    guard: Option<(Child, ChildStdin, ChildStdout)>,
    told: Instant,
    /// Whether the job was given the terminal's foreground (lockctl had it).
    foreground: bool,
}

impl Job {
    fn start(
        command: &[OsString],
        lock: &Lock,
        guard: &Guard,
        grace: Duration,
    ) -> anyhow::Result<Job> {
        let deadline = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            + guard.remaining_validity();
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .env("LOCKCTL_LOCK_KEY", &lock.keys().lock)
            .env("LOCKCTL_TOKEN", guard.token())
            .env("LOCKCTL_FENCE", guard.fence().to_string())
            .env(
                "LOCKCTL_LEASE_DEADLINE_MS",
                deadline.as_millis().to_string(),
            )
            .process_group(0);
        let foreground = terminal::in_foreground();
        // SAFETY: prctl, signal and tcsetpgrp are async-signal-safe and affect only the child
        // being started (already the leader of its own group: std sets the group first).
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if foreground {
                    // The job's group takes the terminal, as a shell gives it to a foreground
                    // job: it may read the terminal, and Ctrl-C and Ctrl-Z reach it directly.
                    libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                    libc::tcsetpgrp(libc::STDIN_FILENO, libc::getpid());
                    libc::signal(libc::SIGTTOU, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot run '{}'", command[0].to_string_lossy()))?;
        let pgid = child.id() as i32;
        let mut job = Job {
            child,
            pgid,
            guard: spawn_group_guard(pgid),
            told: Instant::now(),
            foreground,
        };
        job.tell_guard(guard, grace);
        Ok(job)
    }

    /// Tells the guard process when the group must be gone by: SIGTERM when the validity left
    /// falls to the grace period plus half the margin, SIGKILL at half the margin, so that a
    /// lockctl paused (SIGSTOP) or stuck cannot let the job outlive its lease. Each renewal
    /// moves both; lockctl's own watch acts first whenever it can run.
    fn tell_guard(&mut self, guard: &Guard, grace: Duration) {
        use std::io::Write as _;
        self.told = Instant::now();
        let left = guard.remaining_validity();
        let kill = left.saturating_sub(SAFETY / 2);
        let term = kill.saturating_sub(grace);
        if let Some((_, stdin, _)) = &mut self.guard {
            let _ = writeln!(stdin, "{} {}", term.as_millis(), kill.as_millis());
        }
    }

    /// Waits for the child, stopping the group if the lease is lost (or about to be). After
    /// the child exits, what is left of its group (background processes) is stopped too,
    /// before the lock is released: nothing of the job may outlive its lock.
    fn watch(&mut self, guard: &Guard, grace: Duration) -> Ended {
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.stop_group(grace);
                // Stopped by the guard while lockctl was paused, or ended as the lease did: it
                // may have been cut short, and the lease is gone either way.
                let expired = guard.lease_lost()
                    || guard.remaining_validity() < grace + SAFETY
                    || self.guard_fired();
                return Ended {
                    status: Some(status),
                    lease_lost: expired,
                };
            }
            if guard.lease_lost() || guard.remaining_validity() < grace + SAFETY {
                self.stop_group(grace);
                return Ended {
                    status: self.child.wait().ok(),
                    lease_lost: true,
                };
            }
            if self.told.elapsed() >= HEARTBEAT {
                self.tell_guard(guard, grace);
            }
            thread::sleep(POLL);
        }
    }

    /// Whether the guard process stopped the job (it says `fired` on its stdout, which is
    /// non-blocking: nothing said is nothing read).
    fn guard_fired(&mut self) -> bool {
        use std::io::Read as _;
        let Some((_, _, out)) = &mut self.guard else {
            return false;
        };
        let mut buf = [0u8; 16];
        matches!(out.read(&mut buf), Ok(n) if n > 0)
    }

    /// SIGTERM to the group, then SIGKILL after `grace` if anyone is left.
    fn stop_group(&mut self, grace: Duration) {
        if !self.group_alive() {
            return;
        }
        self.signal_group(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.group_alive() {
            let _ = self.child.try_wait();
            thread::sleep(Duration::from_millis(2));
        }
        if self.group_alive() {
            self.signal_group(libc::SIGKILL);
        }
        let _ = self.child.wait();
    }

    fn signal_group(&self, sig: i32) {
        // SAFETY: kill(2) on the job's own process group.
        unsafe {
            libc::kill(-self.pgid, sig);
        }
    }

    /// Whether any process of the group is left (zombies of our own child aside, which
    /// `try_wait` reaps).
    fn group_alive(&mut self) -> bool {
        let _ = self.child.try_wait();
        // SAFETY: signal 0 only checks that the group exists.
        unsafe { libc::kill(-self.pgid, 0) == 0 }
    }

    /// The job is over: the guard must not outlive it (the group id could be reused).
    fn dismiss_guard(&mut self) {
        if let Some((mut g, _, _)) = self.guard.take() {
            let _ = g.kill();
            let _ = g.wait();
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.dismiss_guard();
    }
}

/// The guard: `lockctl __run-guard PGID`, in a process group of its own (a SIGSTOP or a
/// terminal's Ctrl-Z of lockctl does not stop it). It kills the job's group when its stdin
/// closes, which happens when lockctl dies however it dies (the parent-death signal reaches
/// only the child, not what the child started), and when the deadlines lockctl keeps sending
/// pass unrenewed. Without it (it could not be started) the job still dies with lockctl, and
/// lockctl says so.
fn spawn_group_guard(pgid: i32) -> Option<(Child, ChildStdin, ChildStdout)> {
    let spawned = Command::new("/proc/self/exe")
        .args([super::run_guard::ARG, &pgid.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn();
    match spawned {
        Ok(mut child) => {
            let stdin = child.stdin.take()?;
            let stdout = child.stdout.take()?;
            // SAFETY: fcntl on a pipe this process owns; non-blocking so that looking for
            // the guard's word never waits.
            unsafe {
                let fd = std::os::fd::AsRawFd::as_raw_fd(&stdout);
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
            Some((child, stdin, stdout))
        }
        Err(e) => {
            eprintln!(
                "lockctl: could not start the guard of the job's process group ({e}): if lockctl is paused or killed, what the job started could outlive the lock"
            );
            None
        }
    }
}

/// The terminal's foreground: a job started from an interactive shell gets it, as the shell
/// would give it, and lockctl takes it back when the job is over.
mod terminal {
    /// Whether stdin is a terminal whose foreground is lockctl's own process group.
    pub fn in_foreground() -> bool {
        // SAFETY: isatty, tcgetpgrp and getpgrp only read.
        unsafe {
            libc::isatty(libc::STDIN_FILENO) == 1
                && libc::tcgetpgrp(libc::STDIN_FILENO) == libc::getpgrp()
        }
    }

    /// Makes lockctl's group the foreground again, after a job it gave the foreground to (a
    /// background group may do this only with SIGTTOU ignored).
    pub fn take_back() {
        // SAFETY: as above; the SIGTTOU disposition is restored before returning.
        unsafe {
            if libc::isatty(libc::STDIN_FILENO) != 1 {
                return;
            }
            let mine = libc::getpgrp();
            if libc::tcgetpgrp(libc::STDIN_FILENO) == mine {
                return;
            }
            let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(libc::STDIN_FILENO, mine);
            libc::signal(libc::SIGTTOU, old);
        }
    }
}
