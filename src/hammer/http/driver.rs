//! The HTTP driver: one thread running a tokio current-thread runtime, `-c` connection tasks,
//! each with one keep-alive HTTP/1.1 connection (hyper's connection-level client) and one
//! request in flight at a time.
//!
//! Why tokio and hyper here while the rest of the hammer runs on threads: a buyer of lockctl's
//! own spends its time in Redis round trips, which blocking sockets serve well, but an HTTP
//! load generator must hold many connections from few cores, as wrk does; one thread polling
//! every connection leaves the other core to the server under test. hyper's connection-level
//! client keeps each task on its own connection (no pool deciding which request goes where)
//! and hands back a request it could not write, so a connection the server closed between two
//! requests costs a reconnect, not an error.
//!
//! Two load models. Closed: each connection sends its next request when the last one is
//! answered. Open (`--rate R`): request `i` is due at `start + i/R` whatever the answers; a
//! clock thread hands each request over at its moment and a free connection takes it, so a
//! request waits only when every connection is busy. Its latency counts from that moment (coordinated omission
//! corrected, as wrk2 and k6's constant-arrival-rate do); the service time from sending to
//! the answer is kept beside it, and a request sent more than [`LATE_AFTER_MS`] after its
//! moment is counted late. Every request is sent, late or not: none is silently dropped.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::CONNECTION;
use hyper::{Request, Response, Version};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc::{self, Receiver, channel};

use super::classify::{Classifier, KEPT_BODY};
use super::request::{RequestSpec, Vars};
use crate::error::{Error, ErrorKind, Result};
use crate::hammer::fan_out::{FOLD_EVERY, OUTAGE_LIMIT, abandoned};
use crate::hammer::tally::{Tally, new_histogram, record};
use crate::hammer::{Ended, HammerOptions, LATE_AFTER_MS, Sample};

/// What the driver needs besides the common hammer options.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub spec: RequestSpec,
    pub classifier: Classifier,
    pub addr: SocketAddr,
    pub run_id: String,
    /// Requests per second for the open model; `None` for the closed model.
    pub rate: Option<f64>,
    /// The bound on each request, connecting included.
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

/// What the driver measured.
pub(super) struct Driven {
    pub tally: Tally,
    /// Open model: time from sending to the answer.
    pub service: Option<Histogram<u64>>,
    /// Open model: requests sent more than [`LATE_AFTER_MS`] after their moment.
    pub late: u64,
    /// Open model: the longest wait past a moment.
    pub max_lag: Duration,
}

/// Runs every request of `opts` as `plan` says, on a runtime of its own.
pub(super) fn drive(opts: &HammerOptions, plan: &Plan) -> Result<Driven> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| Error::internal(format!("could not start the HTTP driver: {e}")))?;
    let (tx, rx) = plan.rate.map(|_| channel(BACKLOG)).unzip();
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        keep_body: plan.classifier.judges(),
        sku: opts.sku.to_string(),
        users: opts.users,
        requests: opts.requests,
        progress: opts.progress.clone(),
        stop: opts.stop.clone(),
        next: AtomicU64::new(0),
        due: rx.map(tokio::sync::Mutex::new),
        abandon: AtomicBool::new(false),
        start: Instant::now(),
        books: Mutex::new(Driven {
            tally: Tally::new(opts.requests, opts.buy.qty),
            service: plan.rate.map(|_| new_histogram()),
            late: 0,
            max_lag: Duration::ZERO,
        }),
    });
    let connections = opts.concurrency.clamp(1, opts.requests.max(1));
    let metronome = match (plan.rate, tx) {
        (Some(rate), Some(tx)) => Some(metronome(rate, opts, shared.start, tx)?),
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
    // A clock still handing out requests (the run was stopped) finds the channel closed.
    drop(shared.due);
    if let Some(m) = metronome {
        let _ = m.join();
    }
    Ok(shared.books.into_inner().unwrap_or_else(|e| e.into_inner()))
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
    opts: &HammerOptions,
    start: Instant,
    tx: mpsc::Sender<(u64, Instant)>,
) -> Result<thread::JoinHandle<()>> {
    let (requests, stop) = (opts.requests, opts.stop.clone());
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
    /// Whether answers are read for classification (not when nothing is judged).
    keep_body: bool,
    sku: String,
    users: Option<u64>,
    requests: u64,
    progress: Option<Arc<AtomicU64>>,
    stop: Option<Arc<AtomicBool>>,
    /// Closed model: the next request to take.
    next: AtomicU64,
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
    /// The endpoint could not be reached at all (connect refused or timed out).
    down: bool,
}

type Sender = SendRequest<Full<Bytes>>;

impl Shared {
    fn stopped(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }

    /// The next request to send and, in the open model, the moment it fell due; `None` when
    /// every request has been taken (or the run was stopped).
    async fn take(&self) -> Option<(u64, Option<Instant>)> {
        if self.stopped() {
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
    let mut conn: Option<Sender> = None;
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
                down: false,
            };
            sh.finished(&mut pending, Some(r), false);
            continue;
        }
        let r = one_request(&sh, &mut conn, i, moment).await;
        let down = r.down;
        sh.finished(&mut pending, Some(r), false);
        if down {
            let since = *down_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= OUTAGE_LIMIT {
                sh.abandon.store(true, Ordering::Relaxed);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        } else {
            down_since = None;
            backoff = Duration::from_millis(10);
        }
    }
    sh.finished(&mut pending, None, true);
}

/// How far a request got, for what a timeout means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Connecting,
    Sent,
}

/// Request `i`: built, sent within the request timeout, its answer classified.
async fn one_request(
    sh: &Shared,
    conn: &mut Option<Sender>,
    i: u64,
    moment: Option<Instant>,
) -> Record {
    // A request with no placeholder needs no values (the cost shows at 80,000 requests/s).
    let constant = sh.plan.spec.is_constant();
    let order = match constant {
        true => String::new(),
        false => format!("{}-{i}", sh.plan.run_id),
    };
    let user = match (constant, sh.users) {
        (true, _) => String::new(),
        (false, Some(k)) => format!("u{}", i % k.max(1)),
        (false, None) => format!("u{i}"),
    };
    let vars = Vars {
        sku: &sh.sku,
        user: &user,
        order: &order,
        n: i,
    };
    let sent_at = Instant::now();
    let mut stage = Stage::Connecting;
    let ended = match sh.plan.spec.build(&vars) {
        Err(message) => failure(ErrorKind::Internal, false, message),
        Ok(req) => {
            let answer = tokio::time::timeout(sh.plan.timeout, exchange(sh, conn, req, &mut stage));
            match answer.await {
                Ok(Ok((status, body))) => sh.plan.classifier.classify(status, &body),
                Ok(Err(failed)) => {
                    *conn = None;
                    failed
                }
                Err(_) => {
                    *conn = None;
                    timed_out(stage, sh.plan.timeout)
                }
            }
        }
    };
    let done = Instant::now();
    let service = done - sent_at;
    let down = matches!(&ended, Ended::Failed { kind, .. } if *kind == ErrorKind::Refused)
        || (stage == Stage::Connecting
            && matches!(&ended, Ended::Failed { kind, .. } if *kind == ErrorKind::TimedOut));
    Record {
        sample: Sample {
            index: i,
            ended,
            latency: moment.map_or(service, |m| done - m),
            lock_wait: None,
            lock_hold: None,
            at: Duration::ZERO,
        },
        service,
        lag: moment.map(|m| sent_at.saturating_duration_since(m)),
        down,
    }
}

fn failure(kind: ErrorKind, indeterminate: bool, message: String) -> Ended {
    Ended::Failed {
        kind,
        indeterminate,
        message,
    }
}

fn timed_out(stage: Stage, limit: Duration) -> Ended {
    let ms = limit.as_millis();
    match stage {
        Stage::Connecting => failure(
            ErrorKind::TimedOut,
            false,
            format!("timed out after {ms} ms connecting to the endpoint (see --timeout-ms)"),
        ),
        // Sent: the endpoint may still act on it.
        Stage::Sent => failure(
            ErrorKind::TimedOut,
            true,
            format!("no answer within {ms} ms (see --timeout-ms)"),
        ),
    }
}

/// Sends `req` on the task's connection (opened, or opened again, as needed) and reads the
/// answer: its status and the start of its body. A request the connection could not write
/// (the server closed it between two requests) is sent once more on a fresh connection.
async fn exchange(
    sh: &Shared,
    conn: &mut Option<Sender>,
    mut req: Request<Full<Bytes>>,
    stage: &mut Stage,
) -> std::result::Result<(u16, Vec<u8>), Ended> {
    for _ in 0..2 {
        *stage = Stage::Connecting;
        let sender = match conn {
            Some(s) if !s.is_closed() => s,
            _ => conn.insert(connect(sh).await?),
        };
        if sender.ready().await.is_err() {
            *conn = None;
            continue;
        }
        *stage = Stage::Sent;
        match sender.try_send_request(req).await {
            Ok(resp) => return read_answer(resp, sh.keep_body, conn).await,
            Err(mut e) => match e.take_message() {
                Some(unsent) => {
                    *conn = None;
                    req = unsent;
                }
                None => return Err(broken(&e.into_error())),
            },
        }
    }
    Err(failure(
        ErrorKind::Broken,
        false,
        "the endpoint closed two connections before the request could be written".into(),
    ))
}

/// A fresh connection to the endpoint, its HTTP/1.1 state machine running as a task of its own.
async fn connect(sh: &Shared) -> std::result::Result<Sender, Ended> {
    let addr = sh.plan.addr;
    let limit = sh.plan.connect_timeout;
    let stream = match tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(failure(
                ErrorKind::Refused,
                false,
                format!("could not connect to {addr}: {e} (is the endpoint running? see --url)"),
            ));
        }
        Err(_) => {
            return Err(failure(
                ErrorKind::TimedOut,
                false,
                format!(
                    "timed out after {} ms connecting to {addr} (see --connect-timeout-ms)",
                    limit.as_millis()
                ),
            ));
        }
    };
    let _ = stream.set_nodelay(true);
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failure(ErrorKind::Broken, false, format!("HTTP handshake: {e}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Reads the whole answer, keeping the first [`KEPT_BODY`] bytes when `keep`. A connection
/// the server means to close after this answer is dropped here, before the next request.
async fn read_answer(
    resp: Response<Incoming>,
    keep: bool,
    conn: &mut Option<Sender>,
) -> std::result::Result<(u16, Vec<u8>), Ended> {
    let (parts, mut body) = resp.into_parts();
    let closing = parts.version == Version::HTTP_10
        || parts
            .headers
            .get(CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let mut kept = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| broken(&e))?;
        if let Some(data) = frame.data_ref()
            && keep
            && kept.len() < KEPT_BODY
        {
            let room = KEPT_BODY - kept.len();
            kept.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    if closing {
        *conn = None;
    }
    Ok((parts.status.as_u16(), kept))
}

/// A connection that failed after the request was written: the endpoint may have acted on it.
fn broken(e: &hyper::Error) -> Ended {
    let mut message = format!("the connection broke: {e}");
    if let Some(cause) = std::error::Error::source(e) {
        message.push_str(&format!(" ({cause})"));
    }
    failure(ErrorKind::Broken, true, message)
}
