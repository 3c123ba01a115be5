//! What every way of driving load shares: handing out request indices to workers, Ctrl-C,
//! progress, outages, and turning a purchase or a failure into a [`Sample`].

use std::future::Future;

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use tokio::sync::watch;

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
    let shared = Shared::new(opts, start, per_round);
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

impl<'a> Shared<'a> {
    fn new(opts: &'a HammerOptions, start: Instant, per_round: u64) -> Shared<'a> {
        Shared {
            opts,
            per_round,
            next: AtomicU64::new(0),
            abandon: AtomicBool::new(false),
            started: start,
            tally: Mutex::new(
                Tally::new(opts.load.requests, opts.buy.qty).keeping(opts.load.history),
            ),
        }
    }

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
        let mut outage = Outage::default();
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
            let pause = outage.after(self, &samples);
            self.finished(&mut pending, samples, false);
            if let Some(pause) = pause {
                thread::sleep(pause);
            }
        }
        // Whatever a round left in flight.
        let rest = drain(&mut state);
        self.finished(&mut pending, rest, true);
    }

    /// [`Shared::work`] for a task that makes one purchase at a time (`purchase`).
    async fn work_async<F: Future<Output = Sample>>(&self, purchase: impl Fn(u64, Began) -> F) {
        let mut pending = Vec::with_capacity(FOLD_EVERY);
        let mut outage = Outage::default();
        while !self.stopped() {
            let Some(&i) = self.take(1).first() else {
                break;
            };
            let sample = if self.abandon.load(Ordering::Relaxed) {
                abandoned(i, "Redis")
            } else {
                purchase(i, Began::now(self.started)).await
            };
            let pause = outage.after(self, std::slice::from_ref(&sample));
            self.finished(&mut pending, vec![sample], false);
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
        }
        self.finished(&mut pending, Vec::new(), true);
    }
}

/// A worker's view of an outage: since when the server has refused it, and how long it backs
/// off next (10 ms doubling to 500 ms).
struct Outage {
    backoff: Duration,
    down_since: Option<Instant>,
}

impl Default for Outage {
    fn default() -> Self {
        Outage {
            backoff: Duration::from_millis(10),
            down_since: None,
        }
    }
}

impl Outage {
    /// After `samples`: the pause to take before the next request, if the server looks down;
    /// gives up the requests not yet made (`abandon`) once it has been down [`OUTAGE_LIMIT`].
    fn after(&mut self, shared: &Shared, samples: &[Sample]) -> Option<Duration> {
        let down = samples
            .iter()
            .any(|s| matches!(&s.ended, Ended::Failed { kind, .. } if kind.is_outage()));
        if !down || shared.abandon.load(Ordering::Relaxed) {
            *self = Outage::default();
            return None;
        }
        let since = *self.down_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= OUTAGE_LIMIT {
            shared.abandon.store(true, Ordering::Relaxed);
        }
        let pause = self.backoff;
        self.backoff = (self.backoff * 2).min(Duration::from_millis(500));
        Some(pause)
    }
}

/// [`fan_out`] for purchases that are tasks, not threads: `tasks` of them on one thread (a
/// runtime of the driver's own), each making one purchase at a time through `purchase`, with
/// the same Ctrl-C, progress, outages and tally. `purchase` is also given the run's stop
/// signal, which turns true on Ctrl-C: one watcher looks at the stop flag for all the tasks.
pub(super) fn fan_out_tasks<F: Future<Output = Sample>>(
    opts: &HammerOptions,
    start: Instant,
    tasks: u64,
    purchase: impl Fn(u64, Began, watch::Receiver<bool>) -> F,
) -> Result<Tally> {
    // Time and I/O: the native async purchases' connections are the runtime's sockets.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(crate::capacity::TASKS_BLOCKING_THREADS)
        .build()
        .map_err(|e| Error::internal(format!("could not start the buyers' runtime: {e}")))?;
    let shared = Shared::new(opts, start, 1);
    let (stop_tx, stop_rx) = watch::channel(false);
    let watcher = async {
        while !shared.stopped() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = stop_tx.send(true);
        std::future::pending::<()>().await;
    };
    let work = futures_util::future::join_all(
        (0..tasks.max(1))
            .map(|_| shared.work_async(|i, began| purchase(i, began, stop_rx.clone()))),
    );
    runtime.block_on(async {
        // The work ends the run; the watcher never ends on its own.
        tokio::select! {
            _ = work => {}
            () = watcher => {}
        }
    });
    Ok(shared.tally.into_inner().unwrap_or_else(|e| e.into_inner()))
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
    let why = format!("{server} was unreachable for {} s", OUTAGE_LIMIT.as_secs());
    not_sent(index, &why)
}

/// Request `index`, given up unsent (`why`), counted as an error of kind `abandoned`.
pub(super) fn not_sent(index: u64, why: &str) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: ErrorKind::Abandoned,
            indeterminate: false,
            message: format!("not sent: {why}"),
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
