//! The request `hammer --url` sends: method, URL, headers and body, with the placeholders
//! `{sku}`, `{user}`, `{order}`, `{n}` and `{token}` (the user's, from its login) filled in for
//! each request.
//!
//! Everything is checked once, at the boundary, by filling the templates with sample values:
//! a URL that does not parse, a scheme other than `http` or `https`, a header that is not `Name: value`
//! or a value no header may hold is refused before anything is sent, naming the value and the
//! fix. Values go into the URL percent-encoded (a SKU such as `{sku_886}` stays one query
//! value) and into headers and the body as they are. Placeholders may not appear in the host:
//! every request of a run goes to one server, over connections kept alive.

use std::net::{SocketAddr, ToSocketAddrs};

use http::header::{CONNECTION, CONTENT_LENGTH, HOST, HeaderName, HeaderValue, TRANSFER_ENCODING};
use http::{Method, Uri};

use lockctl_core::redact::{redact, redact_header};

mod error;
pub use error::{Part, Problem, RequestError, Unwritable};

/// The values of one request's placeholders.
#[derive(Clone, Copy, Debug)]
pub struct Vars<'a> {
    /// `{sku}`: the SKU.
    pub sku: &'a str,
    /// `{user}`: the request's user (`u<k>`); empty when no template holds `{user}` or
    /// `{order}`.
    pub user: &'a str,
    /// `{order}`: the request's order id (`<run id>-<index>`, a retry's that of the request it
    /// retries); empty when no template holds `{user}` or `{order}`.
    pub order: &'a str,
    /// `{n}`: the request's number, 0-based.
    pub n: u64,
    /// `{token}`: the user's token (from its login or the users file); empty when no template
    /// holds `{token}`.
    pub token: &'a str,
}

/// A piece of a template: literal text, or a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Sku,
    User,
    Order,
    N,
    Token,
}

/// A text with placeholders, split once so that filling it is a few appends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

/// The placeholders, as written.
const PLACEHOLDERS: [(&str, Piece); 5] = [
    ("{sku}", Piece::Sku),
    ("{user}", Piece::User),
    ("{order}", Piece::Order),
    ("{n}", Piece::N),
    ("{token}", Piece::Token),
];

impl Template {
    /// Splits `text` at its placeholders; any other text, braces included (a JSON body), is
    /// literal.
    pub fn parse(text: &str) -> Template {
        let mut pieces = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let next = PLACEHOLDERS
                .iter()
                .filter_map(|(name, piece)| rest.find(name).map(|at| (at, *name, piece)))
                .min_by_key(|(at, _, _)| *at);
            match next {
                Some((at, name, piece)) => {
                    if at > 0 {
                        pieces.push(Piece::Text(rest[..at].to_string()));
                    }
                    pieces.push(piece.clone());
                    rest = &rest[at + name.len()..];
                }
                None => {
                    pieces.push(Piece::Text(rest.to_string()));
                    rest = "";
                }
            }
        }
        Template(pieces)
    }

    /// Whether the text has no placeholder (so it can be built once for every request).
    pub fn is_constant(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Piece::Text(_)))
    }

    /// Whether the text holds `{user}`, `{order}` or `{token}` (the user's), whose values are
    /// made per request.
    fn uses_ids(&self) -> bool {
        self.0
            .iter()
            .any(|p| matches!(p, Piece::User | Piece::Order | Piece::Token))
    }

    /// Whether the text holds `piece`.
    fn holds(&self, piece: &Piece) -> bool {
        self.0.contains(piece)
    }

    /// A text taken as it is, braces and all.
    pub fn literal(text: &str) -> Template {
        Template(vec![Piece::Text(text.to_string())])
    }

    /// The text with `vars` filled in, each value percent-encoded when `encode` is set.
    pub fn fill(&self, vars: &Vars, encode: bool) -> String {
        let mut out = Vec::new();
        self.fill_into(vars, encode, &mut out);
        // Only UTF-8 text and ASCII escapes went in.
        String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }

    /// [`Template::fill`] appending to `out`: no allocation once `out` has room.
    pub fn fill_into(&self, vars: &Vars, encode: bool, out: &mut Vec<u8>) {
        let value = |out: &mut Vec<u8>, v: &str| {
            if encode {
                percent_encode(out, v)
            } else {
                out.extend_from_slice(v.as_bytes())
            }
        };
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.extend_from_slice(t.as_bytes()),
                Piece::Sku => value(out, vars.sku),
                Piece::User => value(out, vars.user),
                Piece::Order => value(out, vars.order),
                Piece::N => push_decimal(out, vars.n),
                Piece::Token => value(out, vars.token),
            }
        }
    }

    /// The length of [`Template::fill`] without encoding, counted without writing it.
    fn filled_len(&self, vars: &Vars) -> usize {
        self.0
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.len(),
                Piece::Sku => vars.sku.len(),
                Piece::User => vars.user.len(),
                Piece::Order => vars.order.len(),
                Piece::N => vars.n.checked_ilog10().map_or(1, |d| d as usize + 1),
                Piece::Token => vars.token.len(),
            })
            .sum()
    }
}

/// Appends `n` in decimal, without an allocation.
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// Appends `v` with every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(out: &mut Vec<u8>, v: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// Sample values for checking templates: two sets, so a placeholder in the host shows.
const SAMPLES: [Vars<'static>; 2] = [
    Vars {
        sku: "sku_886",
        user: "u0",
        order: "h00000000-0",
        n: 0,
        token: "t0",
    },
    Vars {
        sku: "other",
        user: "u1",
        order: "h11111111-1",
        n: 1,
        token: "t1",
    },
];

/// Everything a request is made of, checked.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    method: Method,
    /// The request target (path and query, no fragment), with placeholders.
    target: Template,
    /// The URL as given, with any password hidden: for reports.
    shown_url: String,
    host: String,
    port: u16,
    /// `https://`: the connection speaks TLS.
    https: bool,
    /// Header lines without placeholders (`Host` first), written once, copied per request.
    fixed_head: Vec<u8>,
    /// Headers with placeholders, filled per request.
    headers: Vec<(HeaderName, Template)>,
    body: Option<Template>,
    /// The whole request when nothing in it varies (built once, copied per request).
    constant: Option<Vec<u8>>,
    /// `--header 'Connection: close'`: never send a second request on a connection.
    closes: bool,
}

impl RequestSpec {
    /// Checks and splits the request of `hammer --url`. The error names the part and the value
    /// at fault and the fix (the command line turns it into a usage error, exit 2).
    pub fn new(
        method: &str,
        url: &str,
        headers: &[String],
        body: Option<&str>,
    ) -> Result<RequestSpec, RequestError> {
        // Methods are case-sensitive on the wire; on the command line `head` means HEAD.
        let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| RequestError::new(Part::Method, method, Problem::NotAMethod))?;
        let template = Template::parse(url);
        let shown_url = redact(url);
        let mut authorities = Vec::new();
        for vars in &SAMPLES {
            let uri = check_url(&template.fill(vars, true), &shown_url)?;
            // The Host header carries host and port, never a user name or password.
            let authority = uri.authority().map_or("", |a| a.as_str());
            authorities.push(authority.rsplit('@').next().unwrap_or_default().to_string());
        }
        if authorities[0] != authorities[1] {
            return Err(RequestError::new(
                Part::Url,
                shown_url,
                Problem::PlaceholderInHost,
            ));
        }
        let uri = check_url(&template.fill(&SAMPLES[0], true), &shown_url)?;
        let https = uri.scheme_str() == Some("https");
        let host = uri.host().unwrap_or_default();
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let authority = authorities.swap_remove(0);
        if HeaderValue::from_str(&authority).is_err() {
            return Err(RequestError::new(
                Part::Url,
                shown_url,
                Problem::HostHeader { authority },
            ));
        }
        let (fixed_head, headers, closes) = split_headers(&authority, headers)?;
        let mut spec = RequestSpec {
            method,
            target: Template::parse(&target_of(url)),
            shown_url,
            host,
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            https,
            fixed_head,
            headers,
            body: body.map(Template::parse),
            constant: None,
            closes,
        };
        let constant = spec.target.is_constant()
            && spec.headers.is_empty()
            && spec.body.as_ref().is_none_or(Template::is_constant);
        if constant {
            let mut whole = Vec::new();
            // Nothing varies, so the values checked above are the values written.
            let written = spec.write(&SAMPLES[0], &mut whole);
            debug_assert!(written.is_ok(), "{written:?}");
            spec.constant = Some(whole);
        }
        Ok(spec)
    }

    /// Whether every request is the same (no placeholder anywhere), so its values need not
    /// be made.
    pub fn is_constant(&self) -> bool {
        self.constant.is_some()
    }

    /// Whether any request needs its `{user}` and `{order}` values (else they need not be
    /// made: the cost shows at tens of thousands of requests a second).
    pub fn uses_ids(&self) -> bool {
        self.target.uses_ids()
            || self.headers.iter().any(|(_, t)| t.uses_ids())
            || self.body.as_ref().is_some_and(Template::uses_ids)
    }

    /// Whether the body is JSON (it opens with `{` or `[`) sent with no `Content-Type`: many
    /// frameworks read such a body as a form, or not at all, and answer as if it were empty.
    pub fn sends_untyped_json(&self) -> bool {
        let json = self.body.as_ref().is_some_and(|b| {
            matches!(b.0.first(), Some(Piece::Text(t)) if t.trim_start().starts_with(['{', '[']))
        });
        let head = String::from_utf8_lossy(&self.fixed_head).to_ascii_lowercase();
        let typed = head.contains("\r\ncontent-type:")
            || head.starts_with("content-type:")
            || self
                .headers
                .iter()
                .any(|(n, _)| n.as_str().eq_ignore_ascii_case("content-type"));
        json && !typed
    }

    /// Whether any request carries its `{sku}`: without it, the service never learns which
    /// SKU a round is of.
    pub fn uses_sku(&self) -> bool {
        self.uses(&Piece::Sku)
    }

    /// Whether any request carries its `{order}` (an order id lockctl made).
    pub fn uses_order(&self) -> bool {
        self.uses(&Piece::Order)
    }

    /// Whether any request names its user: by `{user}`, or by the user's `{token}`.
    pub fn uses_user(&self) -> bool {
        self.uses(&Piece::User) || self.uses_token()
    }

    /// Whether any request carries its user's `{token}`.
    pub fn uses_token(&self) -> bool {
        self.uses(&Piece::Token)
    }

    fn uses(&self, piece: &Piece) -> bool {
        self.target.holds(piece)
            || self.headers.iter().any(|(_, t)| t.holds(piece))
            || self.body.as_ref().is_some_and(|t| t.holds(piece))
    }

    /// The URL as given, any password in it hidden.
    pub fn shown_url(&self) -> &str {
        &self.shown_url
    }

    /// Whether the URL is `https://`.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The URL's host (an IPv6 address without its brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The HTTP method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// Whether the answers carry no body whatever their headers say (`HEAD`).
    pub fn is_head(&self) -> bool {
        self.method == Method::HEAD
    }

    /// Whether the request asks the server to close the connection after answering.
    pub fn closes(&self) -> bool {
        self.closes
    }

    /// The server's address, looked up once for the whole run.
    pub fn resolve(&self) -> Result<SocketAddr, crate::error::Error> {
        let unresolved = |reason| crate::error::Error::Unresolved {
            host: format!("{}:{}", self.host, self.port),
            reason,
        };
        let found = (self.host.as_str(), self.port).to_socket_addrs();
        match found.map(|mut a| a.next()) {
            Ok(Some(addr)) => Ok(addr),
            Ok(None) => Err(unresolved(None)),
            Err(e) => Err(unresolved(Some(e.to_string()))),
        }
    }

    /// Request number `vars.n` as the bytes to send, HTTP/1.1, into `out` (emptied first).
    /// Fails only if a filled-in header value is not one a header may hold.
    pub fn write(&self, vars: &Vars, out: &mut Vec<u8>) -> Result<(), Unwritable> {
        out.clear();
        if let Some(whole) = &self.constant {
            out.extend_from_slice(whole);
            return Ok(());
        }
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        self.target.fill_into(vars, true, out);
        out.extend_from_slice(b" HTTP/1.1\r\n");
        out.extend_from_slice(&self.fixed_head);
        for (name, template) in &self.headers {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            let at = out.len();
            template.fill_into(vars, false, out);
            if !header_value_ok(&out[at..]) {
                return Err(Unwritable {
                    request: vars.n,
                    name: name.to_string(),
                });
            }
            out.extend_from_slice(b"\r\n");
        }
        let body_len = self.body.as_ref().map_or(0, |t| t.filled_len(vars));
        // A body is framed by its length; a method that usually has one says when it has none.
        if body_len > 0 || matches!(self.method, Method::POST | Method::PUT | Method::PATCH) {
            out.extend_from_slice(b"content-length: ");
            push_decimal(out, body_len as u64);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if let Some(t) = &self.body {
            let at = out.len();
            t.fill_into(vars, false, out);
            debug_assert_eq!(out.len() - at, body_len);
        }
        Ok(())
    }
}

/// The header lines that never change (`Host` first) written out, the headers with
/// placeholders, and whether `Connection: close` was asked for. A `--header` of a name given
/// before (`Host` included) takes the earlier one's place; `Content-Length` and
/// `Transfer-Encoding` are lockctl's to write, from `--body`.
type Headers = (Vec<u8>, Vec<(HeaderName, Template)>, bool);

fn split_headers(authority: &str, given: &[String]) -> Result<Headers, RequestError> {
    let mut all = vec![(HOST, Template::literal(authority))];
    for h in given {
        let (name, value) = parse_header(h)?;
        if name == CONTENT_LENGTH || name == TRANSFER_ENCODING {
            return Err(RequestError::new(
                Part::Header,
                redact_header(h),
                Problem::Framing {
                    name: name.to_string(),
                },
            ));
        }
        match all.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => all.push((name, value)),
        }
    }
    let mut closes = false;
    let (mut fixed, mut templated) = (Vec::new(), Vec::new());
    for (name, value) in all {
        if !value.is_constant() {
            templated.push((name, value));
            continue;
        }
        let v = value.fill(&SAMPLES[0], false);
        closes |= name == CONNECTION && has_token(v.as_bytes(), b"close");
        header_line(&mut fixed, &name, v.as_bytes());
    }
    Ok((fixed, templated, closes))
}

/// `name: value\r\n`.
fn header_line(out: &mut Vec<u8>, name: &HeaderName, value: &[u8]) {
    out.extend_from_slice(name.as_str().as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// What a header value may hold (RFC 9110 field-value): no control character but tab.
fn header_value_ok(v: &[u8]) -> bool {
    v.iter().all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

/// Whether a comma-separated header value holds `token`, in any case.
pub fn has_token(value: &[u8], token: &[u8]) -> bool {
    value
        .split(|&b| b == b',')
        .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
}

/// The request target of `url`: its path and query, `/` when there is neither; the fragment
/// is never sent. Placeholders never sit in the authority (checked before), so the split is
/// the same for every request.
fn target_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let tail = &rest[rest.find(['/', '?', '#']).unwrap_or(rest.len())..];
    let tail = tail.split_once('#').map_or(tail, |(t, _)| t);
    match tail.starts_with('/') {
        true => tail.to_string(),
        false => format!("/{tail}"),
    }
}

/// The URL with `vars` filled in, parsed and checked: `http[s]://host[:port]/...`.
fn check_url(filled: &str, shown: &str) -> Result<Uri, RequestError> {
    let bad = |problem| Err(RequestError::new(Part::Url, shown, problem));
    if filled.contains('{') || filled.contains('}') {
        return bad(Problem::StrayBrace);
    }
    let uri: Uri = match filled.parse() {
        Ok(uri) => uri,
        Err(e) => {
            return bad(Problem::NotAUrl {
                reason: e.to_string(),
            });
        }
    };
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return bad(Problem::Scheme {
                scheme: other.to_string(),
            });
        }
        None => return bad(Problem::NoScheme),
    }
    if uri.host().is_none_or(str::is_empty) {
        return bad(Problem::NoHost);
    }
    // The URL parser takes any digits (or, after an IPv6 address, anything) as a port and
    // then has none: never port 80 instead. What follows the host is nothing, or ':' and a
    // port of digits only (empty means the default, as URLs have it).
    let host_port = uri.authority().map_or("", |a| a.as_str());
    let host_port = host_port.rsplit('@').next().unwrap_or_default();
    let after_host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or("", |(_, rest)| rest),
        None => host_port.rfind(':').map_or("", |at| &host_port[at..]),
    };
    let port = after_host.strip_prefix(':');
    let valid = match port {
        None => after_host.is_empty(),
        Some("") => true,
        Some(p) => p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok_and(|p| p != 0),
    };
    if !valid {
        return bad(Problem::Port {
            port: port.unwrap_or(after_host).to_string(),
        });
    }
    Ok(uri)
}

/// `Name: value` split and checked; placeholders may appear in the value. An error quotes
/// the header as [`redact_header`] shows it: a mistyped `Authorization` still holds the token.
fn parse_header(text: &str) -> Result<(HeaderName, Template), RequestError> {
    let bad = |problem| RequestError::new(Part::Header, redact_header(text), problem);
    let Some((name, value)) = text.split_once(':') else {
        return Err(bad(Problem::NoColon));
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
        bad(Problem::HeaderName {
            name: redact_header(name.trim()),
        })
    })?;
    let value = Template::parse(value.trim());
    for vars in &SAMPLES {
        HeaderValue::from_bytes(value.fill(vars, false).as_bytes())
            .map_err(|_| bad(Problem::HeaderValue))?;
    }
    Ok((name, value))
}

#[cfg(test)]
mod tests;
