//! Reading answers as RFC 9112 says, case by case.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::ReadBuf;

use super::*;

/// An answer delivered `step` bytes per read, then the end of the connection.
struct Trickle<'a> {
    rest: &'a [u8],
    step: usize,
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self.step.min(self.rest.len()).min(buf.remaining());
        buf.put_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        Poll::Ready(Ok(()))
    }
}

type Read = Result<(Answer, Vec<u8>, usize), ReadError>;

/// [`read_answer`] on `answer` cut into reads of `step` bytes: the answer, the body, and
/// the bytes left unread.
fn read_in_steps(answer: &[u8], head_request: bool, step: usize) -> Read {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut stream = Trickle { rest: answer, step };
    let (mut buf, mut body, mut status) = (Vec::new(), Vec::new(), None);
    let mut sink = |d: &[u8]| body.extend_from_slice(d);
    let read = runtime.block_on(read_answer(
        &mut stream,
        &mut buf,
        head_request,
        &mut status,
        &mut sink,
    ));
    let left = stream.rest.len();
    read.map(|a| (a, body, left))
}

/// [`read_in_steps`] for every step from 1 byte to the whole answer, which must agree.
fn read(answer: &[u8], head_request: bool) -> Read {
    let first = read_in_steps(answer, head_request, answer.len());
    for step in 1..answer.len() {
        let r = read_in_steps(answer, head_request, step);
        assert_eq!(r, first, "reads of {step} bytes disagree");
    }
    first
}

fn ok(status: u16, body: &[u8], keep_alive: bool) -> Read {
    Ok((Answer { status, keep_alive }, body.to_vec(), 0))
}

/// The error for `answer` read 7 bytes at a time.
fn err(answer: &[u8]) -> String {
    err_in_steps(answer, 7)
}

/// The error for `answer` read `step` bytes at a time (a garbled answer shows as much as
/// the read that revealed it).
fn err_in_steps(answer: &[u8], step: usize) -> String {
    match read_in_steps(answer, false, step) {
        Err(ReadError::Malformed(why)) => why.to_string(),
        Err(ReadError::Cut(why)) => why.to_string(),
        other => panic!("not an error: {other:?}"),
    }
}

#[test]
fn the_three_framings_in_every_split() {
    let length = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
    assert_eq!(read(length, false), ok(200, b"hello", true));
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        5;ext=1\r\nhello\r\n00A \t;x\r\n, world!!!\r\n0\r\nX-Trailer: t\r\n\r\n";
    assert_eq!(read(chunked, false), ok(200, b"hello, world!!!", true));
    let eof = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end";
    assert_eq!(read(eof, false), ok(200, b"until the end", false));
    let bare_lf = b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\nok\n0\n\n";
    assert_eq!(read(bare_lf, false), ok(200, b"ok", true));
    // Two answers back to back: the first ends where it should, and the connection is
    // not trusted with another request.
    let two = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n";
    let (answer, body, _) = read_in_steps(two, false, two.len()).unwrap();
    assert_eq!((answer.keep_alive, body), (false, b"ok".to_vec()));
}

#[test]
fn many_small_chunks_are_fine() {
    let mut a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..20_000 {
        a.extend_from_slice(b"1;piece\r\nx\r\n");
    }
    a.extend_from_slice(b"0\r\n\r\n");
    let (answer, body, _) = read_in_steps(&a, false, 4096).unwrap();
    assert_eq!((answer.status, body.len()), (200, 20_000));
}

#[test]
fn interim_answers_are_skipped_and_bodiless_answers_have_no_body() {
    let a = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n\
        HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
    assert_eq!(read(a, false), ok(201, b"ok", true));
    let head = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
    assert_eq!(read(head, true), ok(200, b"", true));
    let none = b"HTTP/1.1 204 No Content\r\n\r\n";
    assert_eq!(read(none, false), ok(204, b"", true));
    let same = b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\nok";
    assert_eq!(read(same, false), ok(200, b"ok", true));
}

#[test]
fn who_keeps_the_connection_open() {
    let keep = |a: &[u8]| read(a, false).unwrap().0.keep_alive;
    assert!(!keep(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(keep(
        b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n"
    ));
    assert!(!keep(
        b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n"
    ));
    // Faulty framing is read, then the connection closed (RFC 9112 §6.1, §6.3).
    assert!(!keep(
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ));
    assert!(!keep(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    ));
    // A trailing comma does not hide the chunked coding.
    let comma = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n0\r\n\r\n";
    assert_eq!(read(comma, false), ok(200, b"", true));
}

#[test]
fn a_connection_that_ends_before_an_answer_is_silent() {
    assert_eq!(read_in_steps(b"", false, 1), Err(ReadError::Silent));
    // After an interim answer it is not: something came.
    let cut = read_in_steps(b"HTTP/1.1 100 Continue\r\n\r\n", false, 5);
    assert!(
        matches!(&cut, Err(ReadError::Cut(Cut::AfterInterim))),
        "{cut:?}"
    );
}

#[test]
fn a_flood_of_interim_answers_holds_one_head_at_a_time() {
    let mut a = b"HTTP/1.1 100 Continue\r\n\r\n".repeat(100_000);
    a.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut stream = Trickle {
        rest: &a,
        step: READ_SIZE,
    };
    let (mut buf, mut status) = (Vec::new(), None);
    let read = runtime.block_on(read_answer(
        &mut stream,
        &mut buf,
        false,
        &mut status,
        &mut |_| {},
    ));
    assert_eq!(read.map(|r| r.status), Ok(200));
    assert!(
        buf.capacity() <= 4 * READ_SIZE,
        "the buffer grew to {}",
        buf.capacity()
    );
}

#[test]
fn what_is_not_http_shows_without_a_blank_line() {
    // A TLS alert, SSH's banner: no blank line ever comes, and the bytes show at once.
    let tls = err(b"\x15\x03\x03\x00\x02\x02\x32");
    assert!(
        tls.contains("is the endpoint https?") && tls.contains("\\x15"),
        "{tls}"
    );
    assert!(err_in_steps(b"SSH-2.0-OpenSSH_9.2\r\n", 64).contains("\"SSH-2.0-OpenSSH_9.2"));
    // A head cut short says how much came and how it began.
    let cut = err(b"HTTP/1.1 200 OK\r\nX: y");
    assert!(
        cut.contains(
            "closed inside the answer's head, after 21 bytes that began \"HTTP/1.1 200 OK"
        ),
        "{cut}"
    );
}

#[test]
fn malformed_answers_are_errors_showing_what_came() {
    let why = err_in_steps(b"SSH-2.0-OpenSSH_9.2\r\n\r\n", 64);
    assert!(
        why.contains("not HTTP/1.x") && why.contains("\"SSH-2.0-OpenSSH_9.2"),
        "{why}"
    );
    assert!(err(b"\x16\x03\x01\x02\x00\x01\r\n\r\n").contains("is the endpoint https?"));
    assert!(
        err(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").contains("\"-1\" is not a length")
    );
    let two = err(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
    assert!(two.contains("two Content-Length values, 1 and 2"), "{two}");
    assert!(err(b"HTTP/1.1 101 Switching Protocols\r\n\r\n").contains("switched protocols"));
    let many = format!("HTTP/1.1 200 OK\r\n{}\r\n", "X: y\r\n".repeat(200));
    assert!(err(many.as_bytes()).contains("more than 128 header lines"));
    let short = err(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel");
    assert!(
        short.contains("after 3 of the answer's 5 body bytes"),
        "{short}"
    );
    let chunked = |body: &str| {
        let mut a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        a.extend_from_slice(body.as_bytes());
        err(&a)
    };
    assert!(chunked("zz\r\n").contains("without a size (byte \"z\")"));
    assert!(chunked("5 junk\r\n").contains("stray byte in a chunk-size line (byte \"j\")"));
    assert!(chunked("2\r\nabc\r\n").contains("longer than its size"));
    assert!(chunked("10000000000000000\r\n").contains("past 2^64"));
    assert!(chunked("5\r\nhel").contains("inside the answer's chunked body, after 3 bytes"));
    let endless = format!("1;{}", "x".repeat(MAX_HEAD));
    assert!(chunked(&endless).contains("runs past 64 KiB"));
    // Leading zeros are only zeros.
    let zeros = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        00000000000000000002\r\nok\r\n0\r\n\r\n";
    assert_eq!(read_in_steps(zeros, false, 5), ok(200, b"ok", true));
    // A head that never ends is refused once it passes the bound, read by read.
    let huge_head = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "y".repeat(MAX_HEAD));
    let why = match read_in_steps(huge_head.as_bytes(), false, MAX_HEAD * 2) {
        Err(ReadError::Malformed(why)) => why,
        other => panic!("{other:?}"),
    };
    assert_eq!(why, Malformed::LongHead);
    assert!(why.to_string().contains("longer than 64 KiB"), "{why}");
}
