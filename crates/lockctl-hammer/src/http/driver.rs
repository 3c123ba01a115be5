//! The HTTP driver: one thread running a tokio current-thread runtime, `-c` connection tasks,
//! each with one keep-alive HTTP/1.1 connection and one request in flight at a time; requests
//! are written by [`RequestSpec::write`] and answers read by [`wire::read_answer`].
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

use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc::{self, Receiver, channel};

use super::classify::{Classifier, KEPT_BODY, SHOWN_BODY};
use super::request::{RequestSpec, Vars};
use super::socket::{
    Link, Stream, connect, failure, failure_fixed_by, is_self_connect, nobody_there, still_open,
    unacknowledged,
};
use super::tls::Dial;
use super::wire::{self, ReadError};
use crate::drive::Driven;
use crate::fan_out::{FOLD_EVERY, OUTAGE_LIMIT, abandoned};
use crate::options::LoadOptions;
use crate::report::{Ended, LATE_AFTER_MS, Sample};
use crate::tally::{Tally, new_histogram, record};
use lockctl_core::error::{Error, ErrorKind, Result};
use lockctl_core::hint::Hint;
use lockctl_core::stock::Outcome;

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

/// A connection task's own: its connection and the buffers every request reuses.
#[derive(Default)]
struct Wire {
    link: Option<Link>,
    /// The request being sent.
    request: Vec<u8>,
    /// Bytes as they come off the connection.
    read: Vec<u8>,
    /// The start of the answer's body, for classification.
    body: Vec<u8>,
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

/// How far a request got, for what a timeout means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Not yet on its way (being written into the buffer).
    Building,
    Connecting,
    /// Being written: this many bytes of the request went out so far.
    Sending(usize),
    Sent,
    /// The answer's head came, with this status; its body had not ended.
    Answering(u16),
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

/// `user`'s `{token}`: known from the set-up, or logged in now (a sale reaches users the
/// set-up did not log in); empty when requests carry none.
async fn token_of(sh: &Shared, user: &str, i: u64) -> crate::error::Result<String> {
    if let Some(token) = sh.plan.tokens.as_ref().and_then(|t| t.get(user)) {
        return Ok(token.clone());
    }
    match &sh.plan.logins {
        Some(logins) => Ok(logins
            .token_now(user, &sh.sku, i, sh.plan.timeout)
            .await?
            .unwrap_or_default()),
        None => Ok(String::new()),
    }
}

/// Request `i`, never sent: its user could not log in.
fn unsent(sh: &Shared, i: u64, moment: Option<Instant>, why: String) -> Record {
    let now = Instant::now();
    Record {
        sample: Sample {
            index: i,
            ended: failure(ErrorKind::Internal, false, why),
            latency: moment.map_or(Duration::ZERO, |m| now - m),
            lock_wait: None,
            lock_hold: None,
            sent: now.saturating_duration_since(sh.start),
            at: Duration::ZERO,
        },
        service: Duration::ZERO,
        lag: moment.map(|m| now.saturating_duration_since(m)),
        trouble: Trouble::None,
    }
}

/// Request `i`: built, sent within the request timeout, its answer classified.
async fn one_request(sh: &Shared, wire: &mut Wire, i: u64, moment: Option<Instant>) -> Record {
    let (order, user) = ids(sh, i);
    let token = match token_of(sh, &user, i).await {
        Ok(token) => token,
        // Nothing was sent: the purchase had no effect, and the login's error says why.
        Err(e) => return unsent(sh, i, moment, e.to_string()),
    };
    let vars = Vars {
        sku: &sh.sku,
        user: &user,
        order: &order,
        n: i,
        token: &token,
    };
    // Taken after the login (set-up, never timed).
    let sent_at = Instant::now();
    let (mut stage, mut status) = (Stage::Building, None);
    let ended = match sh.plan.spec.write(&vars, &mut wire.request) {
        Err(unwritable) => failure(ErrorKind::Internal, false, unwritable.to_string()),
        Ok(()) => {
            let exchange = exchange(sh, wire, &mut stage, &mut status);
            match tokio::time::timeout(sh.plan.timeout, exchange).await {
                Ok(Ok(status)) => sh.plan.classifier.classify(status, &wire.body),
                Ok(Err(failed)) => {
                    wire.link = None;
                    failed
                }
                Err(_) => {
                    let unsent = wire
                        .link
                        .take()
                        .map_or(0, |l| unacknowledged(l.stream.tcp()));
                    let stage = status.map_or(stage, Stage::Answering);
                    let mut ended = timed_out(stage, sh.plan.timeout, wire.request.len());
                    if let (Stage::Sent, Ended::Failed { message, .. }) = (stage, &mut ended) {
                        // Part of a head came: say what, the way a closed connection would.
                        if !wire.read.is_empty() {
                            message.push_str(&format!("; {}", wire::unfinished(&wire.read)));
                        } else if unsent > 0 {
                            // Handed to the kernel whole, but not taken by the endpoint.
                            message.push_str(&format!(
                                "; {unsent} of the request's {} bytes were still unacknowledged: the endpoint was not reading it",
                                wire.request.len()
                            ));
                        }
                    }
                    ended
                }
            }
        }
    };
    let done = Instant::now();
    let service = done - sent_at;
    let failed = match &ended {
        Ended::Failed { kind, .. } => Some(*kind),
        _ => None,
    };
    let trouble = match (stage, failed) {
        // (A refused certificate is not an endpoint down: each request fails at once, counted
        // as `tls`, without backing off.)
        (_, Some(ErrorKind::Refused)) | (Stage::Connecting, Some(ErrorKind::TimedOut)) => {
            Trouble::Down
        }
        // The one failure of this machine's own while connecting: no local port.
        (Stage::Connecting, Some(ErrorKind::Internal)) => Trouble::NoPorts,
        _ => Trouble::None,
    };
    Record {
        sample: Sample {
            index: i,
            ended,
            latency: moment.map_or(service, |m| done - m),
            lock_wait: None,
            lock_hold: None,
            // Taken before the request was built: no byte of it had left.
            sent: sent_at.saturating_duration_since(sh.start),
            at: Duration::ZERO,
        },
        service,
        lag: moment.map(|m| sent_at.saturating_duration_since(m)),
        trouble,
    }
}

fn timed_out(stage: Stage, limit: Duration, total: usize) -> Ended {
    let ms = limit.as_millis();
    match stage {
        Stage::Building | Stage::Connecting => failure_fixed_by(
            Hint::RequestTimeout,
            ErrorKind::TimedOut,
            false,
            format!("timed out after {ms} ms connecting to the endpoint"),
        ),
        // Sent: the endpoint may still act on it.
        Stage::Sending(written) => failure_fixed_by(
            Hint::RequestTimeout,
            ErrorKind::TimedOut,
            written > 0,
            format!(
                "timed out after {ms} ms sending the request ({written} of {total} bytes went out; the endpoint was not reading it)"
            ),
        ),
        Stage::Sent => failure_fixed_by(
            Hint::RequestTimeout,
            ErrorKind::TimedOut,
            true,
            format!("no answer within {ms} ms"),
        ),
        Stage::Answering(status) => failure(
            ErrorKind::TimedOut,
            true,
            format!(
                "HTTP {status} came but its body did not end within {ms} ms (shorter than its Content-Length, or no length on a connection left open?)"
            ),
        ),
    }
}

/// Sends the request in `wire` on the task's connection (opened, or opened again, as needed)
/// and reads the answer: its status, and the start of its body in `wire.body`.
///
/// A connection that has carried an answer is checked before it carries another: if the
/// server closed it meanwhile (an idle keep-alive connection timed out), the request goes on a
/// fresh one. A request is never sent twice: once any of it is written, whatever happens to
/// the answer is that request's outcome. `status` is set as soon as the answer's head is in.
async fn exchange(
    sh: &Shared,
    wire: &mut Wire,
    stage: &mut Stage,
    status: &mut Option<u16>,
) -> std::result::Result<u16, Ended> {
    *stage = Stage::Connecting;
    // From here on it holds this request's answer only.
    wire.read.clear();
    if wire
        .link
        .as_ref()
        .is_some_and(|l| l.used && !still_open(l.stream.tcp()))
    {
        wire.link = None;
    }
    let (link, written) = match &mut wire.link {
        Some(link) => (link, 0),
        None => {
            let (link, written) =
                connect(&sh.plan.dial, sh.plan.connect_timeout, &wire.request).await?;
            (wire.link.insert(link), written)
        }
    };
    *stage = Stage::Sending(written);
    send_rest(&mut link.stream, &wire.request, written, stage).await?;
    *stage = Stage::Sent;
    // Unjudged answers keep what an error message shows of them (an HTTP 400's words).
    let kept = if sh.keep_body { KEPT_BODY } else { SHOWN_BODY };
    let body = &mut wire.body;
    body.clear();
    let mut sink = |data: &[u8]| {
        if body.len() < kept {
            body.extend_from_slice(&data[..data.len().min(kept - body.len())]);
        }
    };
    let head_request = sh.plan.spec.is_head();
    let read = wire::read_answer(
        &mut link.stream,
        &mut wire.read,
        head_request,
        status,
        &mut sink,
    );
    match read.await {
        Ok(answer) => {
            link.used = true;
            if !answer.keep_alive || sh.plan.spec.closes() {
                wire.link = None;
            }
            Ok(answer.status)
        }
        // Sent: the endpoint may have acted on it, whatever came back.
        Err(ReadError::Silent) => Err(failure(
            ErrorKind::Broken,
            true,
            "the endpoint closed the connection without answering".into(),
        )),
        // Our own request read back: the connection met itself, nobody is there.
        Err(ReadError::Malformed(_))
            if is_self_connect(socket2::SockRef::from(link.stream.tcp()), sh.plan.dial.addr) =>
        {
            Err(nobody_there(sh.plan.dial.addr))
        }
        Err(ReadError::Cut(why)) => Err(failure(ErrorKind::Broken, true, why.to_string())),
        Err(ReadError::Malformed(why)) => Err(failure(ErrorKind::Broken, true, why.to_string())),
    }
}

/// Writes what is left of `request` after its first `written` bytes, keeping `stage` up to
/// date. A part that went out may be enough for the endpoint to act on: a failure after it is
/// indeterminate. Over TLS the last of it leaves on the flush.
async fn send_rest(
    stream: &mut Stream,
    request: &[u8],
    mut written: usize,
    stage: &mut Stage,
) -> std::result::Result<(), Ended> {
    while written < request.len() {
        let wrote = match stream.write(&request[written..]).await {
            Ok(0) => Err(std::io::ErrorKind::WriteZero.into()),
            wrote => wrote,
        };
        match wrote {
            Ok(n) => {
                written += n;
                *stage = Stage::Sending(written);
            }
            Err(e) => {
                return Err(failure(
                    ErrorKind::Broken,
                    written > 0,
                    format!(
                        "could not send the request ({written} of {} bytes went out): {e}",
                        request.len()
                    ),
                ));
            }
        }
    }
    // Whatever TLS still holds of it (a plain connection holds nothing).
    stream.flush().await.map_err(|e| {
        failure(
            ErrorKind::Broken,
            true,
            format!("could not send the end of the request: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    /// A socket bound to a port and connected to that same port meets itself (TCP's
    /// simultaneous open), as a connect to a local-range port with nobody listening can.
    #[test]
    fn a_connection_to_itself_is_told_apart() {
        use socket2::{Domain, SockRef, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket
            .bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let me = socket.local_addr().unwrap().as_socket().unwrap();
        socket.connect(&me.into()).unwrap();
        assert!(is_self_connect(SockRef::from(&socket), me));

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let there = listener.local_addr().unwrap();
        let other = std::net::TcpStream::connect(there).unwrap();
        assert!(!is_self_connect(SockRef::from(&other), there));
    }
}
