//! The HTTP driver: one thread running a tokio current-thread runtime, `-c` connection tasks,
//! each with one keep-alive HTTP/1.1 connection and one request in flight at a time; requests
//! are written by [`RequestSpec::write`] and answers read by [`super::wire::read_answer`].
//!
//! Why tokio here while the rest of the hammer runs on threads: a buyer of lockctl's own
//! spends its time in Redis round trips, which blocking sockets serve well, but an HTTP load
//! generator must hold many connections from few cores, as wrk does; one thread polling every
//! connection leaves the other core to the server under test. Each task keeps to its own
//! connection (no pool deciding which request goes where). A kept-alive connection is checked
//! before it carries the next request, so one the server closed while idle costs a
//! reconnect, not an error; a request once (even partly) written is never sent again.
//!
//! Two load models. Closed: each connection sends its next request when the last one is
//! answered. Open (`--rate R`): request `i` is due at `start + i/R` whatever the answers; a
//! clock thread hands each request over at its moment and a free connection takes it, so a
//! request waits only when every connection is busy. Its latency counts from that moment (coordinated omission
//! corrected, as wrk2 and k6's constant-arrival-rate do); the service time from sending to
//! the answer is kept beside it, and a request sent more than [`LATE_AFTER_MS`] after its
//! moment is counted late. Every request is sent, late or not: none is silently dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{self, Receiver, channel};

use super::classify::Classifier;
use super::request::RequestSpec;
use super::tls::Dial;
use crate::drive::Driven;
use crate::fan_out::{FOLD_EVERY, OUTAGE_LIMIT, abandoned};
use crate::options::LoadOptions;
use crate::report::{Ended, LATE_AFTER_MS, Sample};
use crate::tally::{Tally, new_histogram, record};
use lockctl_core::error::{Error, Result};
use lockctl_core::stock::Outcome;

mod exchange;
use exchange::{Wire, one_request};

/// What the driver needs besides the common hammer options.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub spec: RequestSpec,
    pub classifier: Classifier,
    /// Where the endpoint is, and its TLS for `https://`.
    pub dial: Dial,
    pub run_id: String,
    /// Requests per second for the open model; `None` for the closed model.
    pub rate: Option<f64>,
    /// The bound on each request, connecting included.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// The run's clock: answers are timed from it.
    pub start: Instant,
    /// What `{user}` is.
    pub users: super::ids::Ids,
    /// Each user's `{token}`, when requests carry one.
    pub tokens: Option<super::login::Tokens>,
    /// Where a user the set-up did not log in gets its token (see [`token_of`]).
    pub logins: Option<std::sync::Arc<super::login::Logins>>,
    /// Demand like a sale: each connection clicks again until it is told sold out or the
    /// time cap is reached; `None`: the run's requests, as many as it has.
    pub sale: Option<super::Sale>,
}

/// Runs every request of `opts` as `plan` says, on a runtime of its own.
pub(super) fn drive(load: &LoadOptions, qty: u64, plan: &Plan) -> Result<Driven> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Error::internal(format!("could not start the HTTP driver: {e}")))?;
    let (tx, rx) = plan.rate.map(|_| channel(BACKLOG)).unzip();
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        keep_body: plan.classifier.judges(),
        sku: load.sku.to_string(),
        users: load.users,
        users_from: load.users_from,
        retries: load.retries,
        requests: load.requests,
        progress: load.progress.clone(),
        stop: load.stop.clone(),
        next: AtomicU64::new(0),
        until: plan.sale.map(|s| plan.start + s.cap),
        due: rx.map(tokio::sync::Mutex::new),
        abandon: AtomicBool::new(false),
        start: plan.start,
        books: Mutex::new(Driven {
            tally: Tally::new(load.requests, qty)
                .keeping(load.history)
                .retrying(load.retries),
            service: plan.rate.map(|_| new_histogram()),
            late: 0,
            max_lag: Duration::ZERO,
            taken: None,
        }),
    });
    let connections = load.in_flight();
    let metronome = match (plan.rate, tx) {
        (Some(rate), Some(tx)) => Some(metronome(rate, load, shared.start, tx)?),
        _ => None,
    };
    runtime.block_on(async {
        let tasks: Vec<_> = (0..connections)
            .map(|_| tokio::spawn(connection_task(shared.clone())))
            .collect();
        for t in tasks {
            // A task that panicked has lost its requests: the judge counts them unaccounted.
            let _ = t.await;
        }
    });
    drop(runtime);
    let shared = Arc::into_inner(shared)
        .ok_or_else(|| Error::internal("an HTTP connection task outlived the run"))?;
    // A sale's requests are those its buyers took, each taken one counted (a task that died
    // with one in hand leaves it unaccounted, as in a run of fixed size).
    let taken = plan
        .sale
        .map(|_| shared.next.load(Ordering::SeqCst).min(shared.requests));
    // A clock still handing out requests (the run was stopped) finds the channel closed.
    drop(shared.due);
    if let Some(m) = metronome {
        let _ = m.join();
    }
    let mut driven = shared.books.into_inner().unwrap_or_else(|e| e.into_inner());
    driven.taken = taken;
    Ok(driven)
}

/// Requests due but not yet taken by a connection, at most: past it the clock waits for room
/// (each request keeps its own moment, so its latency still counts from there), and memory
/// stays bounded whatever `-n` and however far the endpoint falls behind.
const BACKLOG: usize = 65_536;

/// The open model's clock: a thread of its own that hands each request to the connection
/// tasks at its moment, `start + i/rate`. A plain thread sleeps to within tens of
/// microseconds of a moment, where the runtime's timer ticks once a millisecond and would add
/// up to two to every request's latency; the channel wakes the runtime at once. A request no
/// connection is free to take waits in the channel, and its latency keeps counting.
fn metronome(
    rate: f64,
    load: &LoadOptions,
    start: Instant,
    tx: mpsc::Sender<(u64, Instant)>,
) -> Result<thread::JoinHandle<()>> {
    let (requests, stop) = (load.requests, load.stop.clone());
    let stopped = move || stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
    thread::Builder::new()
        .name("lockctl-metronome".into())
        .spawn(move || {
            for i in 0..requests {
                let at = start + Duration::from_secs_f64(i as f64 / rate);
                loop {
                    if stopped() {
                        return;
                    }
                    let now = Instant::now();
                    if now >= at {
                        break;
                    }
                    // In slices, so that Ctrl-C is seen within 100 ms at any rate.
                    thread::sleep((at - now).min(Duration::from_millis(100)));
                }
                if tx.blocking_send((i, at)).is_err() {
                    return;
                }
            }
        })
        .map_err(|e| Error::internal(format!("could not start the open model's clock: {e}")))
}

/// What the connection tasks share.
struct Shared {
    plan: Plan,
    /// Whether answers are kept whole for classification (when nothing is judged, only what
    /// an error message shows of them).
    keep_body: bool,
    sku: String,
    users: Option<u64>,
    /// The first user's number.
    users_from: u64,
    /// Every k-th request retries the one before it.
    retries: Option<u64>,
    requests: u64,
    progress: Option<Arc<AtomicU64>>,
    stop: Option<Arc<AtomicBool>>,
    /// Closed model: the next request to take.
    next: AtomicU64,
    /// A sale's time cap: no request is taken after it.
    until: Option<Instant>,
    /// Open model: requests as they fall due, from the metronome.
    due: Option<tokio::sync::Mutex<Receiver<(u64, Instant)>>>,
    abandon: AtomicBool,
    start: Instant,
    books: Mutex<Driven>,
}

/// One request's record before it is folded into the books.
struct Record {
    sample: Sample,
    service: Duration,
    lag: Option<Duration>,
    trouble: Trouble,
}

/// What a failed request says about going on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trouble {
    None,
    /// The endpoint could not be reached at all (connect refused or timed out): back off, and
    /// give up after [`OUTAGE_LIMIT`] of it.
    Down,
    /// This machine had no local port to connect from: back off (ports come free as their
    /// TIME_WAIT ends), but the endpoint is not down.
    NoPorts,
}

impl Shared {
    fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// The next request to send and, in the open model, the moment it fell due; `None` when
    /// every request has been taken (or the run was stopped).
    async fn take(&self) -> Option<(u64, Option<Instant>)> {
        if self.stopped() || self.until.is_some_and(|u| Instant::now() >= u) {
            return None;
        }
        match &self.due {
            Some(due) => due.lock().await.recv().await.map(|(i, at)| (i, Some(at))),
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed);
                (i < self.requests).then_some((i, None))
            }
        }
    }

    /// Keeps `records` and folds them into the books once there are enough (or `all`).
    fn finished(&self, pending: &mut Vec<Record>, done: Option<Record>, all: bool) {
        if let Some(mut r) = done {
            if let Some(p) = &self.progress {
                p.fetch_add(1, Ordering::Relaxed);
            }
            r.sample.at = self.start.elapsed();
            pending.push(r);
        }
        if !(all || pending.len() >= FOLD_EVERY) {
            return;
        }
        let mut b = self.books.lock().unwrap_or_else(|e| e.into_inner());
        for r in pending.drain(..) {
            b.tally.add(&r.sample);
            if let Some(h) = &mut b.service {
                record(h, r.service);
            }
            if let Some(lag) = r.lag {
                b.max_lag = b.max_lag.max(lag);
                b.late += u64::from(lag > Duration::from_millis(LATE_AFTER_MS));
            }
        }
    }
}

/// One connection's share of the run: take the next request, wait for its moment (open
/// model), send it, record the answer; back off while the endpoint refuses connections, and
/// give up the requests not yet made after [`OUTAGE_LIMIT`] of it.
async fn connection_task(sh: Arc<Shared>) {
    let mut wire = Wire::default();
    let mut pending = Vec::with_capacity(FOLD_EVERY);
    let mut backoff = Duration::from_millis(10);
    let mut down_since: Option<Instant> = None;
    while let Some((i, moment)) = sh.take().await {
        if sh.abandon.load(Ordering::Relaxed) {
            let sample = abandoned(i, "the endpoint");
            let r = Record {
                sample,
                service: Duration::ZERO,
                lag: None,
                trouble: Trouble::None,
            };
            sh.finished(&mut pending, Some(r), false);
            continue;
        }
        let r = one_request(&sh, &mut wire, i, moment).await;
        let trouble = r.trouble;
        let sold_out = matches!(
            r.sample.ended,
            Ended::Answered {
                outcome: Some(Outcome::SoldOut),
                ..
            }
        );
        sh.finished(&mut pending, Some(r), false);
        if let Some(sale) = sh.plan.sale {
            // A buyer told sold out goes home; any other answer, and they click again after a
            // moment's thought (a new buyer takes the place of one who bought).
            if sold_out {
                break;
            }
            if trouble == Trouble::None {
                tokio::time::sleep(sale.think()).await;
            }
        }
        if trouble == Trouble::None {
            down_since = None;
            backoff = Duration::from_millis(10);
            continue;
        }
        if trouble == Trouble::Down {
            let since = *down_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= OUTAGE_LIMIT {
                sh.abandon.store(true, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
    sh.finished(&mut pending, None, true);
}

/// Request `i`'s order id and user (empty when the request names neither). A retry carries
/// the order id and the user of the request it retries.
fn ids(sh: &Shared, i: u64) -> (String, String) {
    if !sh.plan.spec.uses_ids() {
        return (String::new(), String::new());
    }
    let base = crate::options::original_of(sh.retries, i);
    let user = sh
        .plan
        .users
        .name(user_number(sh.users, sh.users_from, base));
    (format!("{}-{base}", sh.plan.run_id), user)
}

/// The number of the user of the request (or the retried request) `base`.
fn user_number(users: Option<u64>, from: u64, base: u64) -> u64 {
    match users {
        Some(k) => from + base % k.max(1),
        None => from + base,
    }
}

/// The users a run of `load` sends requests as, each once (with `--users`, at most that many;
/// without, one per request).
pub(super) fn users_of(load: &LoadOptions, names: &super::ids::Ids) -> Vec<String> {
    let n = match load.users {
        Some(k) => k.min(load.requests),
        None => load.requests,
    };
    (0..n)
        .map(|base| names.name(user_number(load.users, load.users_from, base)))
        .collect()
}
