//! The HTTP driver's sockets: a connect that sends its request in the same breath, and what
//! the kernel can say of a connection (still open, bytes not yet acknowledged, connected to
//! itself), each said as whose trouble it is: this machine's or the endpoint's. An `https://`
//! endpoint's connections speak TLS ([`Stream::Tls`]) once the handshake is done.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use super::tls::{Dial, Tls};
use crate::report::Ended;
use lockctl_core::error::ErrorKind;
use lockctl_core::hint::Hint;

/// An open connection.
pub(crate) struct Link {
    pub(crate) stream: Stream,
    /// Whether it has carried an answer already (so the server may have closed it since).
    pub(crate) used: bool,
}

/// A connection's bytes: as they are, or through TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Stream {
    /// The TCP connection underneath, for what the kernel can say of it.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref().0,
        }
    }
}

impl AsyncRead for Stream {
    /// A TLS connection closed without its close_notify ends as a plain one does: many
    /// servers close that way after an answer, and an answer cut short is still told by its
    /// framing (a Content-Length or chunked body that did not end).
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => match Pin::new(s.as_mut()).poll_read(cx, buf) {
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    Poll::Ready(Ok(()))
                }
                other => other,
            },
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

pub(super) fn failure(kind: ErrorKind, indeterminate: bool, message: String) -> Ended {
    Ended::Failed {
        kind,
        indeterminate,
        message,
        hint: None,
    }
}

/// A [`failure`] with its fix named, for the program to word.
pub(super) fn failure_fixed_by(
    hint: Hint,
    kind: ErrorKind,
    indeterminate: bool,
    message: String,
) -> Ended {
    Ended::Failed {
        kind,
        indeterminate,
        message,
        hint: Some(hint),
    }
}

/// Bytes written on `stream` that its peer has not acknowledged yet (SIOCOUTQ); 0 when not
/// known. Asked only of a request that timed out.
pub(super) fn unacknowledged(stream: &TcpStream) -> usize {
    use std::os::fd::AsRawFd;
    // No safe wrapper asks for SIOCOUTQ (rustix's ioctl helpers are unsafe too).
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int into a live local.
    match unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut n) } {
        0 => usize::try_from(n).unwrap_or(0),
        _ => 0,
    }
}

/// Whether an idle connection is still open: nothing to read (a peek would block). An end of
/// file, an error or bytes nobody asked for all mean it cannot carry a request. A real peek,
/// one system call: tokio's own readiness may not have heard of a close that just arrived.
pub(super) fn still_open(stream: &TcpStream) -> bool {
    use rustix::net::{RecvFlags, recv};
    let mut probe = [0u8; 1];
    matches!(
        recv(stream, &mut probe, RecvFlags::PEEK | RecvFlags::DONTWAIT),
        Err(rustix::io::Errno::AGAIN)
    )
}

/// A fresh connection to the endpoint, and how much of `request` already went out on it.
///
/// On loopback a connect is done by the time the call returns: the handshake runs in the
/// kernel within it. So the request is offered at once, before waiting to hear the connection
/// is up, which saves a turn of the event loop (and two system calls) per connection, as
/// every request costs against a server that closes after each answer (PHP's built-in server,
/// plain `ab`). Only when the connection is not up yet (a send then takes nothing) does the
/// wait come, and nothing has been sent. A failure after bytes went out is counted as a
/// request that may have been acted on.
///
/// Over TLS nothing can go before the handshake: the connection is awaited, the handshake
/// made within `limit` too, and none of the request has gone out when this returns.
pub(crate) async fn connect(
    dial: &Dial,
    limit: Duration,
    request: &[u8],
) -> std::result::Result<(Link, usize), Ended> {
    let addr = dial.addr;
    let socket = start_connect(addr).map_err(|e| connect_failed(addr, e))?;
    // Offered before the socket is handed to the runtime: on loopback the request then
    // reaches the endpoint a system call sooner, which measurably raises what a server that
    // closes every connection serves.
    let offered = match dial.tls {
        Some(_) => Ok(0),
        None => socket.send_with_flags(request, libc::MSG_NOSIGNAL),
    };
    let written = match offered {
        Ok(n) => n,
        // Not up yet: nothing went.
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => 0,
        // Up, then reset or closed before the request went: the endpoint is there.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) => {
            return Err(failure(
                ErrorKind::Broken,
                false,
                format!(
                    "the endpoint at {addr} closed the connection before the request went out: {e}"
                ),
            ));
        }
        Err(e) => return Err(connect_failed(addr, e)),
    };
    let stream = TcpStream::from_std(socket.into()).map_err(|e| {
        // Whatever went out may be acted on.
        failure(
            ErrorKind::Internal,
            written > 0,
            format!(
                "could not watch the connection to {addr} ({written} bytes of the request had gone out): {e}"
            ),
        )
    })?;
    if written == 0 {
        // Up when writable, refused or reset when an error is pending.
        let up = async {
            stream.writable().await?;
            match stream.take_error()? {
                Some(e) => Err(e),
                None => Ok(()),
            }
        };
        match tokio::time::timeout(limit, up).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(connect_failed(addr, e)),
            Err(_) => {
                return Err(failure_fixed_by(
                    Hint::ConnectTimeout,
                    ErrorKind::TimedOut,
                    false,
                    format!(
                        "timed out after {} ms connecting to {addr}",
                        limit.as_millis()
                    ),
                ));
            }
        }
    }
    let stream = match &dial.tls {
        None => Stream::Plain(stream),
        Some(tls) => secure(tls, addr, stream, limit).await?,
    };
    let link = Link {
        stream,
        used: false,
    };
    Ok((link, written))
}

/// The TLS handshake on a connection to `addr`, within `limit`; a failure says why, with the
/// fix.
pub(crate) async fn secure(
    tls: &Tls,
    addr: SocketAddr,
    stream: TcpStream,
    limit: Duration,
) -> std::result::Result<Stream, Ended> {
    let handshake = tls.connector.connect(tls.name.clone(), stream);
    match tokio::time::timeout(limit, handshake).await {
        Ok(Ok(s)) => Ok(Stream::Tls(Box::new(s))),
        Ok(Err(e)) => Err(tls.refused(addr, &e)),
        Err(_) => Err(Ended::Failed {
            kind: ErrorKind::TimedOut,
            indeterminate: false,
            message: format!(
                "timed out after {} ms in the TLS handshake with {addr}",
                limit.as_millis()
            ),
            hint: Some(lockctl_core::hint::Hint::ConnectTimeout),
        }),
    }
}

/// A non-blocking connect to `addr` under way (or done).
fn start_connect(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    // A request written in one go leaves nothing for Nagle's algorithm to hold back, except
    // the tail of one longer than a segment.
    socket.set_tcp_nodelay(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => Ok(socket),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(socket),
        Err(e) => Err(e),
    }
}

/// A connect that failed, said as this machine's trouble (no local port, no file descriptor
/// left: the endpoint may be fine) or the endpoint's (refused, unreachable).
pub(super) fn connect_failed(addr: SocketAddr, e: std::io::Error) -> Ended {
    match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => failure(
            ErrorKind::Internal,
            false,
            format!(
                "could not connect to {addr}: {e}: no local port is free (each closed connection holds one for a minute in TIME_WAIT); lower -n or -c, or widen net.ipv4.ip_local_port_range"
            ),
        ),
        Some(code @ (libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) => {
            let fix = match code {
                libc::EMFILE => "lower -c, or raise this process's limit (ulimit -n)",
                libc::ENFILE => "lower -c, or raise the system's limit (sysctl fs.file-max)",
                _ => "lower -c, or free memory",
            };
            failure(
                ErrorKind::Internal,
                false,
                format!(
                    "could not open a connection to {addr}: {e}: this machine ran short, not the endpoint; {fix}"
                ),
            )
        }
        _ => failure_fixed_by(
            Hint::StartEndpoint,
            ErrorKind::Refused,
            false,
            format!("could not connect to {addr}: {e}"),
        ),
    }
}

/// Whether a connection came back to lockctl itself: with nothing listening on a port of the
/// local range, a connect from that very port meets itself (TCP's simultaneous open), and what
/// it "sends" it reads back as an answer, which is not HTTP. Asked only of such an answer, so
/// that a sound run pays nothing for it.
pub(super) fn is_self_connect(socket: socket2::SockRef<'_>, addr: SocketAddr) -> bool {
    socket
        .local_addr()
        .is_ok_and(|local| local.as_socket() == Some(addr))
}

pub(super) fn nobody_there(addr: SocketAddr) -> Ended {
    failure_fixed_by(
        Hint::StartEndpoint,
        ErrorKind::Refused,
        false,
        format!(
            "could not connect to {addr}: nothing is listening there (the connection came back to lockctl itself)"
        ),
    )
}
