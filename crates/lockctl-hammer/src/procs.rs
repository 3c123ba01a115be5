//! `--mode procs`: each purchase is a child `lockctl buy --json`, as in the tutorial's
//! "several terminals".
//!
//! The contract between parent and child is typed on both sides: the caller's [`crate::options::Children`]
//! writes the child's command from a [`ChildBuy`], the very option structs the parent runs
//! with (the binary writes `lockctl buy --json ...`), and the child's one JSON object is a
//! [`BuyReply`], the type `buy --json` prints. Every child has a deadline derived
//! from the run's own limits; one past it is killed and counted as an indeterminate error.

use std::io::Read;
use std::process::{Child, Command};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::fan_out::{fan_out, user_of};
use crate::options::{ChildBuy, HammerOptions};
use crate::report::{Ended, Sample};
use crate::tally::Tally;
use lockctl_core::conn::Target;
use lockctl_core::error::{Error, ErrorKind, Result};
use lockctl_core::stock::BuyOptions;
use lockctl_core::wire::BuyReply;

/// How long a child may take before it is killed: its own limits (connecting, waiting for
/// the lock, working, the lease, a handful of calls) and two seconds to start and exit.
pub fn child_deadline(target: &Target, buy: &BuyOptions) -> Duration {
    let o = target.options();
    Duration::from_secs(2)
        + o.connect_timeout * 3
        + o.call_timeout * 8
        + buy.lock.wait
        + buy.work
        + buy.lock.ttl
}

pub(super) fn run_procs(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Tally> {
    let Some(children) = &opts.children else {
        return Err(Error::internal(
            "the child-process driver was given no command to start a purchase with (HammerOptions::children)",
        ));
    };
    let lock_nodes = opts.quorum.as_ref().map(|q| q.secret_urls().join(","));
    let deadline = child_deadline(target, &opts.buy);
    let start = Instant::now();
    let one_child = |i: u64| {
        let t = Instant::now();
        let order_id = format!("{run_id}-{i}");
        let user = user_of(opts, i);
        let child = ChildBuy {
            target,
            sku: &opts.load.sku,
            buy: &opts.buy,
            order_id: &order_id,
            user: user.as_deref(),
            lock_nodes: lock_nodes.as_deref(),
        };
        let ended = run_child(children.command(&child), deadline);
        let (ended, lock_wait, lock_hold) = match ended {
            Ok(reply) => reply,
            // A child that died without saying what happened may have deducted.
            Err(failed) => (
                Ended::Failed {
                    kind: ErrorKind::Child,
                    indeterminate: true,
                    message: failed.to_string(),
                    hint: None,
                },
                None,
                None,
            ),
        };
        Sample {
            index: i,
            ended,
            latency: t.elapsed(),
            lock_wait,
            lock_hold,
            sent: t.saturating_duration_since(start),
            at: Duration::ZERO,
        }
    };
    let workers = opts.load.in_flight();
    fan_out(
        opts,
        start,
        workers,
        1,
        || (),
        |_, batch| batch.iter().map(|&i| one_child(i)).collect(),
        |_| Vec::new(),
    )
}

type ChildResult = (Ended, Option<Duration>, Option<Duration>);

/// A child purchase that never said what happened: it may have deducted.
#[derive(Debug, thiserror::Error)]
enum ChildError {
    #[error("could not start lockctl: {0}")]
    Start(std::io::Error),
    #[error("could not read lockctl's output: {0}")]
    Read(std::io::Error),
    #[error("lockctl buy did not finish within {} ms and was killed", .0.as_millis())]
    Killed(Duration),
    #[error("lockctl did not finish: {0}")]
    Wait(std::io::Error),
    #[error("lockctl buy exited with {status} and no JSON reply ({reason}): {stderr}")]
    NoReply {
        status: std::process::ExitStatus,
        reason: serde_json::Error,
        stderr: String,
    },
}

/// Runs one child `lockctl buy --json` and reads its one JSON object, killing the child if it
/// has not finished within `deadline` (a stopped or hung child must not hang the run).
fn run_child(mut cmd: Command, deadline: Duration) -> Result<ChildResult, ChildError> {
    let mut child = cmd.spawn().map_err(ChildError::Start)?;
    let (stdout, stderr) = match read_within(&mut child, deadline) {
        Ok(Some(out)) => out,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ChildError::Read(e));
        }
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ChildError::Killed(deadline));
        }
    };
    let status = child.wait().map_err(ChildError::Wait)?;
    let reply: BuyReply =
        serde_json::from_str(stdout.trim()).map_err(|reason| ChildError::NoReply {
            status,
            reason,
            stderr: stderr.trim().to_string(),
        })?;
    let ms = |v: Option<f64>| v.map(|x| Duration::from_secs_f64(x.max(0.0) / 1000.0));
    Ok(match reply {
        BuyReply::Failed(e) => (
            Ended::Failed {
                kind: e.error_kind,
                indeterminate: e.indeterminate,
                message: e.error,
                hint: None,
            },
            None,
            None,
        ),
        BuyReply::Done(b) => (
            Ended::Done {
                outcome: b.buy(),
                replayed: b.replayed,
                overran_lease: b.lease_overrun,
            },
            ms(b.lock_wait_ms),
            ms(b.lock_hold_ms),
        ),
    })
}

/// The child's whole stdout and stderr, or `None` if it has not closed them by the deadline
/// (an error when the threads that read them could not be started).
fn read_within(child: &mut Child, deadline: Duration) -> std::io::Result<Option<(String, String)>> {
    let (tx, rx) = mpsc::channel();
    let pipes = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    for (n, pipe) in pipes.into_iter().enumerate() {
        let tx = tx.clone();
        thread::Builder::new()
            .name("lockctl-child-pipe".into())
            .spawn(move || {
                let mut text = String::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_string(&mut text);
                }
                let _ = tx.send((n, text));
            })?;
    }
    let end = Instant::now() + deadline;
    let mut out = [String::new(), String::new()];
    for _ in 0..2 {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok((n, text)) => out[n] = text,
            Err(_) => return Ok(None),
        }
    }
    let [stdout, stderr] = out;
    Ok(Some((stdout, stderr)))
}
