//! How reading an answer fails: the connection cut it short, or the bytes are not an HTTP/1.1
//! answer. Each says what came, for the report's first error.

use super::{MAX_HEAD, MAX_HEADERS};

/// How reading an answer failed.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The connection ended (closed or reset) before a single byte of an answer.
    Silent,
    /// The connection ended or failed part way through the answer.
    Cut(Cut),
    /// The bytes were not an HTTP/1.1 answer.
    Malformed(Malformed),
}

/// Where the connection ended an answer part way through.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Cut {
    #[error("the connection closed after interim (1xx) answers only")]
    AfterInterim,
    /// What came of the head: [`super::unfinished`].
    #[error("the connection closed inside the answer's head, {0}")]
    InHead(String),
    #[error("reading the answer{}: {reason}", if *.body { "'s body" } else { "" })]
    Failed {
        /// Whether the head was in, and the body was being read.
        body: bool,
        /// What the socket said.
        reason: String,
    },
    #[error("the connection closed after {received} of the answer's {length} body bytes")]
    ShortBody { received: u64, length: u64 },
    #[error(
        "the connection closed inside the answer's chunked body, after {received} bytes of data"
    )]
    InChunks { received: u64 },
}

/// Bytes that are not an HTTP/1.1 answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the answer has more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    /// What the parser said, and how the bytes began, quoted; `tls` when they look like TLS
    /// (an https endpoint given as http://).
    #[error("the answer is not HTTP/1.x ({why}); it began {began}{}", if *.tls { "; it looks like TLS: is the endpoint https?" } else { "" })]
    NotHttp {
        why: String,
        began: String,
        tls: bool,
    },
    #[error("HTTP 101: the endpoint switched protocols, which nobody asked for")]
    SwitchedProtocols,
    #[error("the answer has two Content-Length values, {0} and {1}")]
    TwoLengths(u64, u64),
    /// The value, quoted.
    #[error("the answer's Content-Length {0} is not a length")]
    Length(String),
    #[error("the answer's head is longer than {} KiB", MAX_HEAD / 1024)]
    LongHead,
    #[error("a chunk-size or trailer line of the answer runs past {} KiB", MAX_HEAD / 1024)]
    LongLine,
    /// What is wrong, and the byte at fault, quoted.
    #[error("the answer's chunked body is malformed: {what} (byte {byte})")]
    Chunked { what: &'static str, byte: String },
}
