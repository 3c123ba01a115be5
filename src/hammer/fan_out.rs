//! What every way of driving load shares: handing out request indices to workers, Ctrl-C,
//! progress, outages, and turning a purchase or a failure into a [`Sample`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::{Ended, HammerOptions, Sample};
use crate::error::{Error, ErrorKind};
use crate::stock::Purchase;

pub(super) fn user_of(opts: &HammerOptions, index: u64) -> Option<String> {
    opts.users.map(|k| format!("u{}", index % k.max(1)))
}

/// Runs every request index through `round` on `workers` threads, each with its own state,
/// `per_round` indices at a time (the concurrency is `workers * per_round`); a round may leave
/// requests in flight for the next, and `drain` collects them at the end. Handles what is
/// common to every way of running: Ctrl-C, progress, and outages (a server that refuses
/// connections is down or restarting: the worker backs off, 10 ms doubling to 500 ms, rather
/// than spend the remaining requests as instant failures while it comes back; after
/// [`OUTAGE_LIMIT`] of it the requests not yet made are given up, so a dead server ends the run).
pub(super) fn fan_out<S>(
    opts: &HammerOptions,
    workers: u64,
    per_round: u64,
    init: impl Fn() -> S + Sync,
    round: impl Fn(&mut S, &[u64]) -> Vec<Sample> + Sync,
    drain: impl Fn(&mut S) -> Vec<Sample> + Sync,
) -> Vec<Sample> {
    let next = AtomicU64::new(0);
    let abandon = AtomicBool::new(false);
    let started = Instant::now();
    let stopped = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    };
    let mut all = Vec::with_capacity(opts.requests as usize);
    thread::scope(|s| {
        let handles: Vec<_> = (0..workers.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut state = init();
                    let mut mine = Vec::new();
                    let mut backoff = Duration::from_millis(10);
                    let mut down_since: Option<Instant> = None;
                    while !stopped() {
                        let batch: Vec<u64> = (0..per_round.max(1))
                            .map(|_| next.fetch_add(1, Ordering::Relaxed))
                            .filter(|&i| i < opts.requests)
                            .collect();
                        if batch.is_empty() {
                            break;
                        }
                        let samples = if abandon.load(Ordering::Relaxed) {
                            batch.iter().map(|&i| abandoned(i)).collect()
                        } else {
                            round(&mut state, &batch)
                        };
                        let down = samples.iter().any(
                            |s| matches!(&s.ended, Ended::Failed { kind, .. } if kind.is_outage()),
                        );
                        if let Some(p) = &opts.progress {
                            p.fetch_add(samples.len() as u64, Ordering::Relaxed);
                        }
                        let at = started.elapsed();
                        mine.extend(samples.into_iter().map(|s| Sample { at, ..s }));
                        if down && !abandon.load(Ordering::Relaxed) {
                            let since = *down_since.get_or_insert_with(Instant::now);
                            if since.elapsed() >= OUTAGE_LIMIT {
                                abandon.store(true, Ordering::Relaxed);
                            }
                            thread::sleep(backoff);
                            backoff = (backoff * 2).min(Duration::from_millis(500));
                        } else {
                            down_since = None;
                            backoff = Duration::from_millis(10);
                        }
                    }
                    // Whatever a round left in flight.
                    let rest = drain(&mut state);
                    if let Some(p) = &opts.progress {
                        p.fetch_add(rest.len() as u64, Ordering::Relaxed);
                    }
                    let at = started.elapsed();
                    mine.extend(rest.into_iter().map(|s| Sample { at, ..s }));
                    mine
                })
            })
            .collect();
        for h in handles {
            // A worker that panicked loses its samples; judge() reports them unaccounted for.
            if let Ok(mine) = h.join() {
                all.extend(mine);
            }
        }
    });
    all
}

pub(super) fn done(index: u64, latency: Duration, p: &Purchase) -> Sample {
    Sample {
        index,
        ended: Ended::Done {
            outcome: p.outcome,
            replayed: p.replayed.is_some(),
            overran_lease: p.overran_lease,
        },
        latency,
        lock_wait: p.lock_wait,
        lock_hold: p.lock_hold,
        at: Duration::ZERO,
    }
}

/// How long the server may stay unreachable before the hammer gives up on the requests it has
/// not made yet (each is then counted as an error of kind `abandoned`, never sent).
pub const OUTAGE_LIMIT: Duration = Duration::from_secs(5);

fn abandoned(index: u64) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: ErrorKind::Abandoned,
            indeterminate: false,
            message: format!(
                "not sent: Redis was unreachable for {} s",
                OUTAGE_LIMIT.as_secs()
            ),
        },
        latency: Duration::ZERO,
        lock_wait: None,
        lock_hold: None,
        at: Duration::ZERO,
    }
}

pub(super) fn failed(index: u64, latency: Duration, e: &Error) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: e.kind(),
            indeterminate: e.is_indeterminate(),
            message: e.to_string(),
        },
        latency,
        lock_wait: None,
        lock_hold: None,
        at: Duration::ZERO,
    }
}
