//! Why a request cannot be built: which part of it (the method, the URL, a header), the value
//! as given (any credential hidden), and what is wrong with it. The words name the part, never
//! the setting it came from: a program says that in its own terms (the `lockctl` binary names
//! its flags, `--url`, `--header`, `--method`).

/// The part of a request a value was given for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The HTTP method.
    Method,
    /// The URL.
    Url,
    /// A header line, `Name: value`.
    Header,
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::Method => "the method",
            Part::Url => "the URL",
            Part::Header => "the header",
        })
    }
}

/// A value given for a request that cannot be sent: "{part} '{given}'{problem}".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{part} '{given}'{problem}")]
pub struct RequestError {
    /// The part at fault.
    pub part: Part,
    /// The value as given, any password or credential hidden.
    pub given: String,
    /// What is wrong with it.
    pub problem: Problem,
}

/// What is wrong with a value; it displays as the words that follow the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Problem {
    /// Not an HTTP method token.
    #[error(" is not an HTTP method (GET, POST, PUT, ...)")]
    NotAMethod,
    /// A brace that opens or closes no placeholder.
    #[error(
        " holds a brace that is not a placeholder; the placeholders are {{sku}}, {{user}}, {{order}}, {{n}} and {{token}} (write a literal brace as %7B or %7D)"
    )]
    StrayBrace,
    /// The URL does not parse.
    #[error(" is not a URL ({reason}); write it as http://host:port/path?query")]
    NotAUrl {
        /// What the parser said.
        reason: String,
    },
    /// A scheme other than http or https.
    #[error(
        ": the scheme '{scheme}' is neither http nor https; write it as http://host:port/path or https://host:port/path"
    )]
    Scheme {
        /// The scheme given.
        scheme: String,
    },
    /// No scheme and host at all (a path).
    #[error(" has no scheme and host; write it as http://host:port/path")]
    NoScheme,
    /// A scheme but no host.
    #[error(" has no host; write it as http://host:port/path")]
    NoHost,
    /// What follows the host is not a port.
    #[error(": '{port}' is not a port (1 to 65535); write it as http://host:port/path")]
    Port {
        /// What was given where the port goes.
        port: String,
    },
    /// A placeholder where the host is: every request of a run goes to one server.
    #[error(
        " has a placeholder in its host: placeholders may appear in the path, the query, the headers and the body"
    )]
    PlaceholderInHost,
    /// The host and port cannot be a `Host` header.
    #[error(": '{authority}' cannot be a Host header")]
    HostHeader {
        /// The host and port.
        authority: String,
    },
    /// A header without a colon.
    #[error(" has no ':'; write it as 'Name: value'")]
    NoColon,
    /// A header name that is not a token.
    #[error(
        ": '{name}' is not a header name (letters, digits and -, no spaces); write it as 'Name: value'"
    )]
    HeaderName {
        /// The name given, any credential hidden.
        name: String,
    },
    /// A header value with characters no header may hold.
    #[error(": the value holds characters no header may hold (control characters or line breaks)")]
    HeaderValue,
    /// A header that frames the body, which lockctl writes itself from the body given.
    #[error(": lockctl frames the body itself; leave {name} out")]
    Framing {
        /// The header's name.
        name: String,
    },
}

impl RequestError {
    pub(super) fn new(part: Part, given: impl Into<String>, problem: Problem) -> RequestError {
        RequestError {
            part,
            given: given.into(),
            problem,
        }
    }
}

/// A request that cannot be written once its placeholders are filled in: a header value
/// holds characters no header may hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("request {request}: the value of header '{name}' holds characters no header may hold")]
pub struct Unwritable {
    /// The request's number.
    pub request: u64,
    /// The header's name.
    pub name: String,
}
