//! HTTP/1.1 answers as they come off the wire: the head parsed by `httparse` (the parser hyper
//! itself uses), the body framed by its length, by chunks, or by the end of the connection
//! (RFC 9112 §6.3), interim `1xx` answers skipped.
//!
//! Why not hyper's client, which `hammer --url` first used: an endpoint that closes the
//! connection after every answer (the tutorial's `php -S`, anything behind `ab`'s habits)
//! makes a load driver pay for a connection per request, and hyper's per-connection machinery
//! (a dispatcher task, its channels, a header map per answer) cost about 30 µs of CPU per
//! request on these machines, taken from the two cores the endpoint under test needs: the
//! driver, not the endpoint, set the pace. Reading an answer needs none of it: one buffer per
//! connection, reused, and a parser that borrows from it.
//!
//! Everything here is bounded: a head longer than [`MAX_HEAD`], a chunk-size line or trailer
//! past the same bound, or a malformed answer ends the request as an error naming what was
//! wrong, never a hang or a panic.

use std::io;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::request::has_token;

/// The longest answer head (status line and headers) read, and the longest chunk-size line
/// or trailer section.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most header lines an answer may have.
const MAX_HEADERS: usize = 128;

/// How an answer's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes (0 for `HEAD`, `204` and `304`).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Neither: the body runs to the end of the connection.
    Eof,
}

/// An answer's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// Bytes of the head, blank line included.
    pub len: usize,
    pub framing: Framing,
    /// Whether the server keeps the connection open for another request.
    pub keep_alive: bool,
}

/// What the bytes at the start of a buffer are.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// An interim `1xx` answer of this many bytes, to skip.
    Interim(usize),
    Final(Head),
}

/// Parses the answer head at the start of `buf`; `head_request` when the request was `HEAD`
/// (whose answer has no body whatever its headers say). The error says what is wrong.
pub fn parse_head(buf: &[u8], head_request: bool) -> Result<Parsed, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(format!(
                "the answer's head is longer than {} KiB",
                MAX_HEAD / 1024
            ));
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(e) => return Err(format!("the answer is not HTTP/1.x ({e})")),
    };
    let status = resp.code.unwrap_or(0);
    if (100..200).contains(&status) && status != 101 {
        return Ok(Parsed::Interim(len));
    }
    let mut length: Option<u64> = None;
    let (mut chunked, mut encoded, mut close, mut keep) = (false, false, false, false);
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_length(h.value)?;
            if length.is_some_and(|l| l != n) {
                return Err("the answer has two different Content-Length headers".into());
            }
            length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encoded = true;
            // Only a last coding of `chunked` frames the body; anything else runs to the end.
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or_default();
            chunked = last.trim_ascii().eq_ignore_ascii_case(b"chunked");
        } else if name.eq_ignore_ascii_case(b"connection") {
            close |= has_token(h.value, b"close");
            keep |= has_token(h.value, b"keep-alive");
        }
    }
    let framing = if head_request || status == 204 || status == 304 {
        Framing::Length(0)
    } else if status == 101 {
        Framing::Eof
    } else if encoded {
        // Transfer-Encoding overrides Content-Length (RFC 9112 §6.3).
        if chunked {
            Framing::Chunked
        } else {
            Framing::Eof
        }
    } else {
        length.map_or(Framing::Eof, Framing::Length)
    };
    let http11 = resp.version == Some(1);
    let keep_alive =
        framing != Framing::Eof && !close && (http11 || keep) && !(encoded && length.is_some());
    Ok(Parsed::Final(Head {
        status,
        len,
        framing,
        keep_alive,
    }))
}

/// A `Content-Length` value: digits only, at most 18 of them.
fn parse_length(v: &[u8]) -> Result<u64, String> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        let shown = String::from_utf8_lossy(&v[..v.len().min(40)]).into_owned();
        return Err(format!(
            "the answer's Content-Length '{shown}' is not a length"
        ));
    }
    Ok(v.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Where a chunked body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// In a chunk-size line: the size so far, its digits, and whether an extension began.
    Size {
        n: u64,
        digits: u8,
        ext: bool,
    },
    /// After the size line's CR.
    SizeLf(u64),
    /// In a chunk's data, this many bytes to go.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or of the blank line that ends the body).
    TrailerStart,
    /// In a trailer line.
    Trailer,
    /// After the last blank line's CR.
    EndLf,
    Done,
}

/// The body of one answer, fed as its bytes arrive.
#[derive(Debug)]
pub struct Body {
    framing: Framing,
    /// `Length`: bytes still to come.
    left: u64,
    chunk: Chunk,
    /// Bytes of chunk-size lines and trailers seen: bounded by [`MAX_HEAD`].
    meta: usize,
}

impl Body {
    pub fn new(framing: Framing) -> Body {
        Body {
            framing,
            left: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunk: Chunk::Size {
                n: 0,
                digits: 0,
                ext: false,
            },
            meta: 0,
        }
    }

    /// Whether the body is complete.
    pub fn done(&self) -> bool {
        match self.framing {
            Framing::Length(_) => self.left == 0,
            Framing::Chunked => self.chunk == Chunk::Done,
            Framing::Eof => false,
        }
    }

    /// Whether the end of the connection ends this body (rather than cutting it short).
    pub fn ends_at_eof(&self) -> bool {
        self.framing == Framing::Eof || self.done()
    }

    /// Takes what it can of `input`, handing the body's data to `sink`; returns the bytes
    /// used: all of `input` unless the body ended inside it.
    pub fn feed(&mut self, input: &[u8], sink: &mut impl FnMut(&[u8])) -> Result<usize, String> {
        match self.framing {
            Framing::Eof => {
                sink(input);
                Ok(input.len())
            }
            Framing::Length(_) => {
                let take = input
                    .len()
                    .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                sink(&input[..take]);
                self.left -= take as u64;
                Ok(take)
            }
            Framing::Chunked => self.feed_chunked(input, sink),
        }
    }

    fn feed_chunked(
        &mut self,
        input: &[u8],
        sink: &mut impl FnMut(&[u8]),
    ) -> Result<usize, String> {
        let mut at = 0;
        while at < input.len() && self.chunk != Chunk::Done {
            if let Chunk::Data(left) = self.chunk {
                let take = (input.len() - at).min(usize::try_from(left).unwrap_or(usize::MAX));
                sink(&input[at..at + take]);
                at += take;
                let left = left - take as u64;
                self.chunk = if left == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(left)
                };
                continue;
            }
            self.meta += 1;
            if self.meta > MAX_HEAD {
                return Err(format!(
                    "the answer's chunk lines and trailers run past {} KiB",
                    MAX_HEAD / 1024
                ));
            }
            self.chunk = step(self.chunk, input[at])?;
            at += 1;
        }
        Ok(at)
    }
}

/// One byte of a chunked body outside chunk data.
fn step(state: Chunk, b: u8) -> Result<Chunk, String> {
    let bad = |what: &str| Err(format!("the answer's chunked body is malformed ({what})"));
    Ok(match (state, b) {
        (
            Chunk::Size {
                n,
                digits,
                ext: false,
            },
            _,
        ) if b.is_ascii_hexdigit() => {
            if digits >= 15 {
                return bad("a chunk size of more than 15 hex digits");
            }
            let d = (b as char).to_digit(16).unwrap_or(0);
            Chunk::Size {
                n: n * 16 + u64::from(d),
                digits: digits + 1,
                ext: false,
            }
        }
        (Chunk::Size { digits: 0, .. }, _) => return bad("a chunk-size line without a size"),
        (Chunk::Size { n, .. }, b'\r') => Chunk::SizeLf(n),
        (Chunk::Size { n, .. }, b'\n') | (Chunk::SizeLf(n), b'\n') => match n {
            0 => Chunk::TrailerStart,
            n => Chunk::Data(n),
        },
        (Chunk::Size { n, digits, .. }, b';' | b' ' | b'\t') => Chunk::Size {
            n,
            digits,
            ext: true,
        },
        (
            Chunk::Size {
                n,
                digits,
                ext: true,
            },
            _,
        ) if b >= 0x20 || b == b'\t' => Chunk::Size {
            n,
            digits,
            ext: true,
        },
        (Chunk::Size { .. }, _) => return bad("a stray byte in a chunk-size line"),
        (Chunk::SizeLf(_), _) => return bad("CR without LF after a chunk size"),
        (Chunk::DataCr, b'\r') => Chunk::DataLf,
        (Chunk::DataCr | Chunk::DataLf, b'\n') => Chunk::Size {
            n: 0,
            digits: 0,
            ext: false,
        },
        (Chunk::DataCr | Chunk::DataLf, _) => return bad("chunk data longer than its size"),
        (Chunk::TrailerStart, b'\r') => Chunk::EndLf,
        (Chunk::TrailerStart, b'\n') | (Chunk::EndLf, b'\n') => Chunk::Done,
        (Chunk::EndLf, _) => return bad("CR without LF at the end"),
        (Chunk::Trailer, b'\n') => Chunk::TrailerStart,
        (Chunk::TrailerStart | Chunk::Trailer, _) => Chunk::Trailer,
        (Chunk::Data(_) | Chunk::Done, _) => state,
    })
}

/// How reading an answer failed.
#[derive(Debug)]
pub enum ReadError {
    /// The connection ended (closed or reset) before a single byte of the answer.
    Silent,
    /// The connection ended or failed part way through the answer.
    Cut(String),
    /// The bytes were not an HTTP/1.1 answer.
    Malformed(String),
}

/// What [`read_answer`] found.
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub status: u16,
    /// Whether the connection may carry the next request.
    pub keep_alive: bool,
}

/// Reads one answer from `stream` into `buf` (a buffer kept by the connection, emptied
/// first), handing its body's data to `sink`.
pub async fn read_answer(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    head_request: bool,
    sink: &mut impl FnMut(&[u8]),
) -> Result<Answer, ReadError> {
    buf.clear();
    let head = loop {
        match parse_head(buf, head_request).map_err(ReadError::Malformed)? {
            Parsed::Final(head) => break head,
            Parsed::Interim(len) => {
                buf.drain(..len);
            }
            Parsed::Partial => {
                let silent = buf.is_empty();
                match fill(stream, buf).await {
                    Ok(0) | Err(_) if silent => return Err(ReadError::Silent),
                    Ok(0) => {
                        let why = "the connection closed inside the answer's head";
                        return Err(ReadError::Cut(why.into()));
                    }
                    Ok(_) => {}
                    Err(e) => return Err(ReadError::Cut(format!("reading the answer: {e}"))),
                }
            }
        }
    };
    let mut body = Body::new(head.framing);
    let mut at = head.len;
    loop {
        at += body.feed(&buf[at..], sink).map_err(ReadError::Malformed)?;
        if body.done() {
            break;
        }
        buf.clear();
        at = 0;
        let n = fill(stream, buf)
            .await
            .map_err(|e| ReadError::Cut(format!("reading the answer: {e}")))?;
        if n == 0 {
            if body.ends_at_eof() {
                break;
            }
            return Err(ReadError::Cut(
                "the connection closed inside the answer's body".into(),
            ));
        }
    }
    Ok(Answer {
        status: head.status,
        // Bytes past the answer were never asked for: the connection cannot be trusted.
        keep_alive: head.keep_alive && at == buf.len(),
    })
}

/// Reads what has arrived into `buf`'s spare room; 0 at the end of the connection.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.reserve(8 * 1024);
    stream.read_buf(buf).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status, the body and whether the connection stays open, for `answer` fed in pieces
    /// of `step` bytes, every split tried.
    fn read(answer: &[u8], head_request: bool) -> Result<(u16, Vec<u8>, bool, usize), String> {
        let mut results = Vec::new();
        for step in 1..=answer.len().max(1) {
            results.push(read_in_steps(answer, head_request, step));
        }
        let first = results[0].clone();
        assert!(
            results.iter().all(|r| *r == first),
            "splits disagree: {results:?}"
        );
        first
    }

    fn read_in_steps(
        answer: &[u8],
        head_request: bool,
        step: usize,
    ) -> Result<(u16, Vec<u8>, bool, usize), String> {
        let mut buf = Vec::new();
        let mut rest = answer;
        let head = loop {
            match parse_head(&buf, head_request)? {
                Parsed::Final(h) => break h,
                Parsed::Interim(len) => {
                    buf.drain(..len);
                }
                Parsed::Partial if rest.is_empty() => return Err("cut in the head".into()),
                Parsed::Partial => {
                    let n = step.min(rest.len());
                    buf.extend_from_slice(&rest[..n]);
                    rest = &rest[n..];
                }
            }
        };
        let mut body = Body::new(head.framing);
        let mut data = Vec::new();
        let mut at = head.len;
        loop {
            at += body.feed(&buf[at..], &mut |d: &[u8]| data.extend_from_slice(d))?;
            if body.done() {
                break;
            }
            buf.clear();
            at = 0;
            if rest.is_empty() {
                if body.ends_at_eof() {
                    break;
                }
                return Err("cut in the body".into());
            }
            let n = step.min(rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        let left = buf.len() - at + rest.len();
        Ok((head.status, data, head.keep_alive, left))
    }

    #[test]
    fn the_three_framings_in_every_split() {
        let length = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(
            read(length, false).unwrap(),
            (200, b"hello".to_vec(), true, 0)
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            5;ext=1\r\nhello\r\nA\r\n, world!!!\r\n0\r\nX-Trailer: t\r\n\r\n";
        assert_eq!(
            read(chunked, false).unwrap(),
            (200, b"hello, world!!!".to_vec(), true, 0)
        );
        let eof = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end";
        assert_eq!(
            read(eof, false).unwrap(),
            (200, b"until the end".to_vec(), false, 0)
        );
        // Two answers back to back: the first ends where it should.
        let two = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n";
        let (_, body, _, left) = read_in_steps(two, false, two.len()).unwrap();
        assert_eq!((body, left), (b"ok".to_vec(), 17));
    }

    #[test]
    fn interim_answers_are_skipped_and_bodiless_answers_have_no_body() {
        let a = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(read(a, false).unwrap(), (201, b"ok".to_vec(), true, 0));
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
        assert_eq!(read(head, true).unwrap(), (200, vec![], true, 0));
        let none = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(read(none, false).unwrap(), (204, vec![], true, 0));
    }

    #[test]
    fn who_keeps_the_connection_open() {
        let keep = |a: &[u8]| read(a, false).unwrap().2;
        assert!(!keep(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
        assert!(keep(
            b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n"
        ));
        assert!(!keep(
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n"
        ));
        // A length and an encoding together: read as chunked, then closed (RFC 9112 §6.3).
        assert!(!keep(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ));
    }

    #[test]
    fn malformed_answers_are_errors_naming_the_fault() {
        let err = |a: &[u8]| read_in_steps(a, false, a.len()).unwrap_err();
        assert!(err(b"SSH-2.0-OpenSSH\r\n\r\n").contains("not HTTP/1.x"));
        assert!(
            err(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").contains("'-1' is not a length")
        );
        assert!(
            err(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .contains("two different Content-Length")
        );
        let chunked = |body: &str| {
            let mut a = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
            a.extend_from_slice(body.as_bytes());
            read_in_steps(&a, false, 3)
        };
        assert!(chunked("zz\r\n").unwrap_err().contains("without a size"));
        assert!(
            chunked("2\r\nabc\r\n")
                .unwrap_err()
                .contains("longer than its size")
        );
        assert!(
            chunked("1000000000000000\r\n")
                .unwrap_err()
                .contains("15 hex digits")
        );
        assert_eq!(chunked("5\r\nhel").unwrap_err(), "cut in the body");
        let endless = format!("1;{}", "x".repeat(MAX_HEAD));
        assert!(chunked(&endless).unwrap_err().contains("run past 64 KiB"));
        let huge_head = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "y".repeat(MAX_HEAD));
        // As a connection delivers it: a read at a time, the head checked after each.
        let cut = read_in_steps(huge_head.as_bytes(), false, 8 * 1024).unwrap_err();
        assert!(cut.contains("longer than 64 KiB"), "{cut}");
    }
}
