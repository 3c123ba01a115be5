//! What every way of driving load shares: handing out request indices to workers, Ctrl-C,
//! progress, outages, and turning a purchase or a failure into a [`Sample`].

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::options::HammerOptions;
use crate::report::{Ended, Sample};
use crate::tally::Tally;
use lockctl_core::error::{Error, ErrorKind, Result};
use lockctl_core::stock::Purchase;

pub(super) fn user_of(opts: &HammerOptions, index: u64) -> Option<String> {
    opts.load.users.map(|k| format!("u{}", index % k.max(1)))
}

/// Runs every request index through `round` on `workers` threads, each with its own state,
/// `per_round` indices at a time (the concurrency is `workers * per_round`); a round may leave
/// requests in flight for the next, and `drain` collects them at the end. Handles what is
/// common to every way of running: Ctrl-C, progress, outages (a server that refuses
/// connections is down or restarting: the worker backs off, 10 ms doubling to 500 ms, rather
/// than spend the remaining requests as instant failures while it comes back; after
/// [`OUTAGE_LIMIT`] of it the requests not yet made are given up, so a dead server ends the
/// run), and folding every sample into one [`Tally`] as it comes (a few at a time, so memory
/// does not grow with the number of requests). `start` is the run's clock: the driver's
/// samples count their `sent` from it, and their `at` is counted from it here.
pub(super) fn fan_out<S>(
    opts: &HammerOptions,
    start: Instant,
    workers: u64,
    per_round: u64,
    init: impl Fn() -> S + Sync,
    round: impl Fn(&mut S, &[u64]) -> Vec<Sample> + Sync,
    drain: impl Fn(&mut S) -> Vec<Sample> + Sync,
) -> Result<Tally> {
    let shared = Shared {
        opts,
        per_round,
        next: AtomicU64::new(0),
        abandon: AtomicBool::new(false),
        started: start,
        tally: Mutex::new(Tally::new(opts.load.requests, opts.buy.qty).keeping(opts.load.history)),
    };
    let started_workers = thread::scope(|s| {
        let mut n = 0;
        for _ in 0..workers.max(1) {
            let spawned = thread::Builder::new()
                .name("lockctl-buyer".into())
                .spawn_scoped(s, || shared.work(init(), &round, &drain));
            // The OS would give no more threads: run with those started.
            if spawned.is_err() {
                break;
            }
            n += 1;
        }
        n
    });
    if started_workers == 0 {
        return Err(Error::internal(
            "could not start any buyer thread (lower -c, or raise the process's thread limit)",
        ));
    }
    Ok(shared.tally.into_inner().unwrap_or_else(|e| e.into_inner()))
}

/// What the workers of one run share.
struct Shared<'a> {
    opts: &'a HammerOptions,
    per_round: u64,
    next: AtomicU64,
    abandon: AtomicBool,
    started: Instant,
    tally: Mutex<Tally>,
}

/// Samples a worker keeps before folding them into the shared tally.
pub(super) const FOLD_EVERY: usize = 32;

impl Shared<'_> {
    fn stopped(&self) -> bool {
        self.opts
            .load
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// The next `n` request indices not yet taken.
    fn take(&self, n: u64) -> Vec<u64> {
        (0..n.max(1))
            .map(|_| self.next.fetch_add(1, Ordering::Relaxed))
            .filter(|&i| i < self.opts.load.requests)
            .collect()
    }

    /// Counts `samples` as finished now and keeps them in `pending`, folding `pending` into
    /// the tally once it holds enough (or when `all` is set).
    fn finished(&self, pending: &mut Vec<Sample>, samples: Vec<Sample>, all: bool) {
        if let Some(p) = &self.opts.load.progress {
            p.fetch_add(samples.len() as u64, Ordering::Relaxed);
        }
        let at = self.started.elapsed();
        pending.extend(samples.into_iter().map(|s| Sample { at, ..s }));
        if all || pending.len() >= FOLD_EVERY {
            let mut t = self.tally.lock().unwrap_or_else(|e| e.into_inner());
            for s in pending.drain(..) {
                t.add(&s);
            }
        }
    }

    fn work<S>(
        &self,
        mut state: S,
        round: &impl Fn(&mut S, &[u64]) -> Vec<Sample>,
        drain: &impl Fn(&mut S) -> Vec<Sample>,
    ) {
        let mut pending = Vec::with_capacity(FOLD_EVERY);
        let mut backoff = Duration::from_millis(10);
        let mut down_since: Option<Instant> = None;
        while !self.stopped() {
            let batch = self.take(self.per_round);
            if batch.is_empty() {
                break;
            }
            let samples: Vec<Sample> = if self.abandon.load(Ordering::Relaxed) {
                batch.iter().map(|&i| abandoned(i, "Redis")).collect()
            } else {
                round(&mut state, &batch)
            };
            let down = samples
                .iter()
                .any(|s| matches!(&s.ended, Ended::Failed { kind, .. } if kind.is_outage()));
            self.finished(&mut pending, samples, false);
            if down && !self.abandon.load(Ordering::Relaxed) {
                let since = *down_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= OUTAGE_LIMIT {
                    self.abandon.store(true, Ordering::Relaxed);
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
        self.finished(&mut pending, rest, true);
    }
}

/// The moment a request began, before anything of it was sent, and the run's clock it counts
/// on (the `start` given to [`fan_out`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct Began {
    at: Instant,
    start: Instant,
}

impl Began {
    pub(super) fn now(start: Instant) -> Began {
        Began {
            at: Instant::now(),
            start,
        }
    }

    /// The time from then to now.
    fn latency(self) -> Duration {
        self.at.elapsed()
    }

    /// Then, from the run's start.
    fn sent(self) -> Duration {
        self.at.saturating_duration_since(self.start)
    }
}

/// A purchase that began at `b`.
pub(super) fn done(index: u64, b: Began, p: &Purchase) -> Sample {
    Sample {
        index,
        ended: Ended::Done {
            outcome: p.outcome,
            replayed: p.replayed.is_some(),
            overran_lease: p.overran_lease,
        },
        latency: b.latency(),
        lock_wait: p.lock_wait,
        lock_hold: p.lock_hold,
        sent: b.sent(),
        at: Duration::ZERO,
    }
}

/// How long the server may stay unreachable before the hammer gives up on the requests it has
/// not made yet (each is then counted as an error of kind `abandoned`, never sent).
pub const OUTAGE_LIMIT: Duration = Duration::from_secs(5);

/// Request `index`, given up unsent because `server` stayed unreachable.
pub(super) fn abandoned(index: u64, server: &str) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: ErrorKind::Abandoned,
            indeterminate: false,
            message: format!(
                "not sent: {server} was unreachable for {} s",
                OUTAGE_LIMIT.as_secs()
            ),
            hint: None,
        },
        latency: Duration::ZERO,
        lock_wait: None,
        lock_hold: None,
        sent: Duration::ZERO,
        at: Duration::ZERO,
    }
}

/// A purchase that began at `b` and failed.
pub(super) fn failed(index: u64, b: Began, e: &Error) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: e.kind(),
            indeterminate: e.is_indeterminate(),
            message: e.to_string(),
            hint: e.hint(),
        },
        latency: b.latency(),
        lock_wait: None,
        lock_hold: None,
        sent: b.sent(),
        at: Duration::ZERO,
    }
}
