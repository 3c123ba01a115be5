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
//! Everything here is bounded: the head by [`MAX_HEAD`] (and parsed again only when a blank
//! line may have arrived), each chunk-size line and trailer line by the same, each read by
//! [`READ_SIZE`]; a malformed answer ends the request as an error that shows what came,
//! never a hang or a panic. Time is bounded by the caller's per-request timeout.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::request::has_token;

mod errors;
pub use errors::{Cut, Malformed, ReadError};

/// The longest answer head (status line and headers) read, and the longest chunk-size line
/// or trailer line.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most bytes one read takes.
const READ_SIZE: usize = 16 * 1024;

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
pub fn parse_head(buf: &[u8], head_request: bool) -> Result<Parsed, Malformed> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Malformed::TooManyHeaders);
        }
        Err(e) => return Err(not_http(buf, &e.to_string())),
    };
    let status = resp.code.unwrap_or(0);
    if status == 101 {
        return Err(Malformed::SwitchedProtocols);
    }
    if (100..200).contains(&status) {
        return Ok(Parsed::Interim(len));
    }
    let mut length: Option<u64> = None;
    let (mut chunked, mut encoded, mut close, mut keep) = (false, false, false, false);
    for h in resp.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            // A list of equal values is one length (RFC 9110 §8.6).
            for v in h.value.split(|&b| b == b',') {
                let n = parse_length(v)?;
                if let Some(l) = length.filter(|&l| l != n) {
                    return Err(Malformed::TwoLengths(l, n));
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encoded = true;
            // Only a last coding of `chunked` frames the body; anything else runs to the end.
            let last = h
                .value
                .split(|&b| b == b',')
                .map(<[u8]>::trim_ascii)
                .rfind(|t| !t.is_empty());
            chunked = last.is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"));
        } else if name.eq_ignore_ascii_case(b"connection") {
            close |= has_token(h.value, b"close");
            keep |= has_token(h.value, b"keep-alive");
        }
    }
    let framing = if head_request || status == 204 || status == 304 {
        Framing::Length(0)
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
    // Both framings at once, or an encoding from HTTP/1.0, is faulty framing: close after it.
    let faulty = encoded && (length.is_some() || !http11);
    let keep_alive = framing != Framing::Eof && !close && (http11 || keep) && !faulty;
    Ok(Parsed::Final(Head {
        status,
        len,
        framing,
        keep_alive,
    }))
}

/// The error for bytes that are not an HTTP/1.x answer: what came, and a hint when it looks
/// like TLS (an https endpoint given as http://).
fn not_http(buf: &[u8], why: &str) -> Malformed {
    Malformed::NotHttp {
        why: why.to_string(),
        began: shown(&buf[..buf.len().min(40)]),
        tls: matches!(buf.first(), Some(0x15 | 0x16)),
    }
}

/// What came of a head that never ended: how much, and how it began.
pub fn unfinished(head: &[u8]) -> String {
    format!(
        "after {} bytes that began {}",
        head.len(),
        shown(&head[..head.len().min(40)])
    )
}

/// Bytes as a quoted string, anything unprintable escaped.
fn shown(bytes: &[u8]) -> String {
    format!("\"{}\"", bytes.escape_ascii())
}

/// A `Content-Length` value: digits only, at most 18 of them.
fn parse_length(v: &[u8]) -> Result<u64, Malformed> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return Err(Malformed::Length(shown(&v[..v.len().min(40)])));
    }
    Ok(v.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

/// Where a chunk-size line is, after its digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Digits,
    /// Whitespace after the size: only more of it, `;` or the line's end may follow.
    Space,
    /// A chunk extension: anything printable until the line's end.
    Extension,
}

/// Where a chunked body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// In a chunk-size line: the size so far, its digits, and what follows them.
    Size {
        n: u64,
        digits: bool,
        after: After,
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

const NEW_LINE: Chunk = Chunk::Size {
    n: 0,
    digits: false,
    after: After::Digits,
};

/// The body of one answer, fed as its bytes arrive.
#[derive(Debug)]
pub struct Body {
    framing: Framing,
    /// Body bytes handed over so far.
    received: u64,
    chunk: Chunk,
    /// Bytes of the current chunk-size or trailer line: bounded by [`MAX_HEAD`].
    line: usize,
}

impl Body {
    pub fn new(framing: Framing) -> Body {
        Body {
            framing,
            received: 0,
            chunk: NEW_LINE,
            line: 0,
        }
    }

    /// Whether the body is complete.
    pub fn done(&self) -> bool {
        match self.framing {
            Framing::Length(n) => self.received == n,
            Framing::Chunked => self.chunk == Chunk::Done,
            Framing::Eof => false,
        }
    }

    /// What the end of the connection means here: `None` if it ends the body, else why it
    /// cut the body short.
    pub fn cut_by_eof(&self) -> Option<Cut> {
        match self.framing {
            _ if self.done() => None,
            Framing::Eof => None,
            Framing::Length(length) => Some(Cut::ShortBody {
                received: self.received,
                length,
            }),
            Framing::Chunked => Some(Cut::InChunks {
                received: self.received,
            }),
        }
    }

    /// Takes what it can of `input`, handing the body's data to `sink`; returns the bytes
    /// used: all of `input` unless the body ended inside it.
    pub fn feed(&mut self, input: &[u8], sink: &mut impl FnMut(&[u8])) -> Result<usize, Malformed> {
        let used = match self.framing {
            Framing::Eof => {
                sink(input);
                input.len()
            }
            Framing::Length(n) => {
                let left = n - self.received;
                let take = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                sink(&input[..take]);
                take
            }
            Framing::Chunked => return self.feed_chunked(input, sink),
        };
        self.received += used as u64;
        Ok(used)
    }

    fn feed_chunked(
        &mut self,
        input: &[u8],
        sink: &mut impl FnMut(&[u8]),
    ) -> Result<usize, Malformed> {
        let mut at = 0;
        while at < input.len() && self.chunk != Chunk::Done {
            if let Chunk::Data(left) = self.chunk {
                let take = (input.len() - at).min(usize::try_from(left).unwrap_or(usize::MAX));
                sink(&input[at..at + take]);
                at += take;
                self.received += take as u64;
                let left = left - take as u64;
                self.chunk = if left == 0 {
                    Chunk::DataCr
                } else {
                    Chunk::Data(left)
                };
                continue;
            }
            self.line += 1;
            if self.line > MAX_HEAD {
                return Err(Malformed::LongLine);
            }
            self.chunk = step(self.chunk, input[at])?;
            if matches!(self.chunk, NEW_LINE | Chunk::TrailerStart) {
                self.line = 0;
            }
            at += 1;
        }
        Ok(at)
    }
}

/// One byte of a chunked body outside chunk data.
fn step(state: Chunk, b: u8) -> Result<Chunk, Malformed> {
    let bad = |what: &'static str| {
        Err(Malformed::Chunked {
            what,
            byte: shown(&[b]),
        })
    };
    let line_end = |n: u64| match n {
        0 => Chunk::TrailerStart,
        n => Chunk::Data(n),
    };
    Ok(match (state, b) {
        (
            Chunk::Size {
                n,
                after: After::Digits,
                ..
            },
            _,
        ) if b.is_ascii_hexdigit() => {
            if n >> 60 != 0 {
                return bad("a chunk size past 2^64");
            }
            let d = (b as char).to_digit(16).unwrap_or(0);
            Chunk::Size {
                n: n * 16 + u64::from(d),
                digits: true,
                after: After::Digits,
            }
        }
        (Chunk::Size { digits: false, .. }, _) => return bad("a chunk-size line without a size"),
        (Chunk::Size { n, .. }, b'\r') => Chunk::SizeLf(n),
        (Chunk::Size { n, .. }, b'\n') | (Chunk::SizeLf(n), b'\n') => line_end(n),
        (
            Chunk::Size {
                n,
                after: After::Digits | After::Space,
                ..
            },
            b' ' | b'\t',
        ) => Chunk::Size {
            n,
            digits: true,
            after: After::Space,
        },
        (Chunk::Size { n, .. }, b';') => Chunk::Size {
            n,
            digits: true,
            after: After::Extension,
        },
        (
            Chunk::Size {
                after: After::Extension,
                ..
            },
            _,
        ) if b >= 0x20 || b == b'\t' => state,
        (Chunk::Size { .. }, _) => return bad("a stray byte in a chunk-size line"),
        (Chunk::SizeLf(_), _) => return bad("CR without LF after a chunk size"),
        (Chunk::DataCr, b'\r') => Chunk::DataLf,
        (Chunk::DataCr | Chunk::DataLf, b'\n') => NEW_LINE,
        (Chunk::DataCr | Chunk::DataLf, _) => return bad("chunk data longer than its size"),
        (Chunk::TrailerStart, b'\r') => Chunk::EndLf,
        (Chunk::TrailerStart, b'\n') | (Chunk::EndLf, b'\n') => Chunk::Done,
        (Chunk::EndLf, _) => return bad("CR without LF at the end"),
        (Chunk::Trailer, b'\n') => Chunk::TrailerStart,
        (Chunk::TrailerStart | Chunk::Trailer, _) => Chunk::Trailer,
        (Chunk::Data(_) | Chunk::Done, _) => state,
    })
}

/// What [`read_answer`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Whether the connection may carry the next request.
    pub keep_alive: bool,
}

/// Reads one answer from `stream` into `buf` (a buffer kept by the connection, emptied
/// first), handing its body's data to `sink`. `status` is set as soon as the final head is
/// in, so that a caller whose time runs out can say how far the answer got.
pub async fn read_answer<R: AsyncRead + Unpin>(
    stream: &mut R,
    buf: &mut Vec<u8>,
    head_request: bool,
    status: &mut Option<u16>,
    sink: &mut impl FnMut(&[u8]),
) -> Result<Answer, ReadError> {
    buf.clear();
    // How far the head was searched for its blank line, so that a head trickling in is not
    // parsed again for every byte; the first bytes are parsed at once, so that an answer that
    // is not HTTP shows without waiting for a blank line that may never come.
    let mut searched = 0;
    let mut interim = false;
    let head = loop {
        if !buf.is_empty() && (searched == 0 || ends_head(buf, searched)) {
            match parse_head(buf, head_request).map_err(ReadError::Malformed)? {
                Parsed::Final(head) => break head,
                Parsed::Interim(len) => {
                    // Gone from the buffer: however many come, it holds one head at most.
                    buf.drain(..len);
                    (searched, interim) = (0, true);
                    continue;
                }
                Parsed::Partial => {}
            }
        }
        if buf.len() >= MAX_HEAD {
            return Err(ReadError::Malformed(Malformed::LongHead));
        }
        searched = buf.len();
        let nothing_yet = buf.is_empty() && !interim;
        match fill(stream, buf).await {
            Ok(0) | Err(_) if nothing_yet => return Err(ReadError::Silent),
            Ok(0) => {
                let why = match buf.is_empty() {
                    true => Cut::AfterInterim,
                    false => Cut::InHead(unfinished(buf)),
                };
                return Err(ReadError::Cut(why));
            }
            Ok(_) => {}
            Err(e) => {
                return Err(ReadError::Cut(Cut::Failed {
                    body: false,
                    reason: e.to_string(),
                }));
            }
        }
    };
    *status = Some(head.status);
    let mut body = Body::new(head.framing);
    let mut at = head.len;
    loop {
        at += body.feed(&buf[at..], sink).map_err(ReadError::Malformed)?;
        if body.done() {
            break;
        }
        buf.clear();
        at = 0;
        let n = fill(stream, buf).await.map_err(|e| {
            ReadError::Cut(Cut::Failed {
                body: true,
                reason: e.to_string(),
            })
        })?;
        if n == 0 {
            match body.cut_by_eof() {
                None => break,
                Some(why) => return Err(ReadError::Cut(why)),
            }
        }
    }
    Ok(Answer {
        status: head.status,
        // Bytes past the answer were never asked for: the connection cannot be trusted.
        keep_alive: head.keep_alive && at == buf.len(),
    })
}

/// Whether `head` (searched up to `searched` before) may hold a whole head: a blank line
/// (`\n\n` or `\n\r\n`) in what is new, three bytes back for one cut across two reads.
fn ends_head(head: &[u8], searched: usize) -> bool {
    let from = searched.saturating_sub(3);
    head.get(from..).is_some_and(|new| {
        new.windows(2).enumerate().any(|(i, w)| {
            w[0] == b'\n' && (w[1] == b'\n' || (w[1] == b'\r' && new.get(i + 2) == Some(&b'\n')))
        })
    })
}

/// Reads what has arrived, at most [`READ_SIZE`] bytes, onto the end of `buf`; 0 at the end
/// of the connection.
async fn fill<R: AsyncRead + Unpin>(stream: &mut R, buf: &mut Vec<u8>) -> io::Result<usize> {
    buf.reserve(READ_SIZE);
    stream.take(READ_SIZE as u64).read_buf(buf).await
}

#[cfg(test)]
mod tests;
