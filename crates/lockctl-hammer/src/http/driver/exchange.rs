//! One request on one connection: built, sent within the request timeout (the connection
//! opened, or opened again, as needed), its answer read and classified; a timeout says how far
//! the request got, for whether the endpoint may have acted on it.

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use super::super::classify::{KEPT_BODY, SHOWN_BODY};
use super::super::request::Vars;
use super::super::socket::{
    Link, Stream, connect, failure, failure_fixed_by, is_self_connect, nobody_there, still_open,
    unacknowledged,
};
use super::super::wire::{self, ReadError};
use super::{Record, Shared, Trouble, ids};
use crate::report::{Ended, Sample};
use lockctl_core::error::ErrorKind;
use lockctl_core::hint::Hint;

/// A connection task's own: its connection and the buffers every request reuses.
#[derive(Default)]
pub(super) struct Wire {
    link: Option<Link>,
    /// The request being sent.
    request: Vec<u8>,
    /// Bytes as they come off the connection.
    read: Vec<u8>,
    /// The start of the answer's body, for classification.
    body: Vec<u8>,
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
pub(super) async fn one_request(
    sh: &Shared,
    wire: &mut Wire,
    i: u64,
    moment: Option<Instant>,
) -> Record {
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
    let mut stage = Stage::Building;
    let ended = match sh.plan.spec.write(&vars, &mut wire.request) {
        Err(unwritable) => failure(ErrorKind::Internal, false, unwritable.to_string()),
        Ok(()) => answer(sh, wire, &mut stage).await,
    };
    let done = Instant::now();
    let service = done - sent_at;
    let trouble = trouble(stage, &ended);
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

/// The request in `wire`, sent and answered within the request timeout: the answer
/// classified, or how it failed. `stage` is left where the request got to.
async fn answer(sh: &Shared, wire: &mut Wire, stage: &mut Stage) -> Ended {
    let mut status = None;
    let exchange = exchange(sh, wire, stage, &mut status);
    match tokio::time::timeout(sh.plan.timeout, exchange).await {
        Ok(Ok(status)) => sh.plan.classifier.classify(status, &wire.body),
        Ok(Err(failed)) => {
            wire.link = None;
            failed
        }
        Err(_) => gave_up(sh, wire, status.map_or(*stage, Stage::Answering)),
    }
}

/// A request the timeout ended at `stage`: its connection dropped, and what it got to said.
fn gave_up(sh: &Shared, wire: &mut Wire, stage: Stage) -> Ended {
    let unsent = wire
        .link
        .take()
        .map_or(0, |l| unacknowledged(l.stream.tcp()));
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

/// What a request that `ended` at `stage` says about going on.
fn trouble(stage: Stage, ended: &Ended) -> Trouble {
    let failed = match ended {
        Ended::Failed { kind, .. } => Some(*kind),
        _ => None,
    };
    match (stage, failed) {
        // (A refused certificate is not an endpoint down: each request fails at once, counted
        // as `tls`, without backing off.)
        (_, Some(ErrorKind::Refused)) | (Stage::Connecting, Some(ErrorKind::TimedOut)) => {
            Trouble::Down
        }
        // The one failure of this machine's own while connecting: no local port.
        (Stage::Connecting, Some(ErrorKind::Internal)) => Trouble::NoPorts,
        _ => Trouble::None,
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
