//! The request `hammer --url` sends: method, URL, headers and body, with the placeholders
//! `{sku}`, `{user}`, `{order}` and `{n}` filled in for each request.
//!
//! Everything is checked once, at the boundary, by filling the templates with sample values:
//! a URL that does not parse, a scheme other than `http`, a header that is not `Name: value`
//! or a value no header may hold is refused before anything is sent, naming the value and the
//! fix. Values go into the URL percent-encoded (a SKU such as `{sku_886}` stays one query
//! value) and into headers and the body as they are. Placeholders may not appear in the host:
//! every request of a run goes to one server, over connections kept alive.

use std::net::{SocketAddr, ToSocketAddrs};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HOST, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Uri};

/// The values of one request's placeholders.
#[derive(Clone, Copy, Debug)]
pub struct Vars<'a> {
    pub sku: &'a str,
    pub user: &'a str,
    pub order: &'a str,
    pub n: u64,
}

/// A piece of a template: literal text, or a placeholder.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Sku,
    User,
    Order,
    N,
}

/// A text with placeholders, split once so that filling it is a few appends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

/// The placeholders, as written.
const PLACEHOLDERS: [(&str, Piece); 4] = [
    ("{sku}", Piece::Sku),
    ("{user}", Piece::User),
    ("{order}", Piece::Order),
    ("{n}", Piece::N),
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

    /// The text with `vars` filled in, each value percent-encoded when `encode` is set.
    pub fn fill(&self, vars: &Vars, encode: bool) -> String {
        let mut out = String::new();
        let value = |out: &mut String, v: &str| {
            if encode {
                percent_encode(out, v)
            } else {
                out.push_str(v)
            }
        };
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Sku => value(&mut out, vars.sku),
                Piece::User => value(&mut out, vars.user),
                Piece::Order => value(&mut out, vars.order),
                Piece::N => out.push_str(&vars.n.to_string()),
            }
        }
        out
    }
}

/// Appends `v` with every byte but the unreserved ones (RFC 3986) as `%XX`.
fn percent_encode(out: &mut String, v: &str) {
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
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
    },
    Vars {
        sku: "other",
        user: "u1",
        order: "h11111111-1",
        n: 1,
    },
];

/// Everything a request is made of, checked.
#[derive(Clone, Debug)]
pub struct RequestSpec {
    method: Method,
    url: Template,
    /// The URL as given, with any password hidden: for reports.
    shown_url: String,
    host: String,
    port: u16,
    /// Headers with placeholders, filled per request.
    headers: Vec<(HeaderName, Template)>,
    /// `Host` and the headers without placeholders, built once and cloned per request.
    fixed_headers: HeaderMap,
    body: Option<Template>,
    /// The parsed URL when it has no placeholder (built once, cloned per request).
    constant_uri: Option<Uri>,
}

impl RequestSpec {
    /// Checks and splits the request of `hammer --url`. The error names the value at fault and
    /// the fix (the command line turns it into a usage error, exit 2).
    pub fn new(
        method: &str,
        url: &str,
        headers: &[String],
        body: Option<&str>,
    ) -> Result<RequestSpec, String> {
        let method = Method::from_bytes(method.as_bytes()).map_err(|_| {
            format!("--method '{method}' is not an HTTP method (GET, POST, PUT, ...)")
        })?;
        let template = Template::parse(url);
        let shown_url = hide_password(url);
        let mut authorities = Vec::new();
        for vars in &SAMPLES {
            let uri = check_url(&template.fill(vars, true), &shown_url)?;
            // The Host header carries host and port, never a user name or password.
            let authority = uri.authority().map_or("", |a| a.as_str());
            authorities.push(authority.rsplit('@').next().unwrap_or_default().to_string());
        }
        if authorities[0] != authorities[1] {
            return Err(format!(
                "--url '{shown_url}' has a placeholder in its host: placeholders may appear in the path, the query, --header and --body"
            ));
        }
        let uri = check_url(&template.fill(&SAMPLES[0], true), &shown_url)?;
        let host = uri.host().unwrap_or_default();
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let authority = authorities.swap_remove(0);
        let mut fixed_headers = HeaderMap::new();
        // hyper's connection-level client sends only what it is given: the Host header too.
        let host_value = HeaderValue::from_str(&authority)
            .map_err(|_| format!("--url '{shown_url}': '{authority}' cannot be a Host header"))?;
        fixed_headers.insert(HOST, host_value);
        let mut templated = Vec::new();
        for h in headers {
            let (name, value) = parse_header(h)?;
            if value.is_constant() {
                let v = value.fill(&SAMPLES[0], false);
                fixed_headers.insert(
                    name,
                    HeaderValue::from_bytes(v.as_bytes()).expect("checked"),
                );
            } else {
                templated.push((name, value));
            }
        }
        Ok(RequestSpec {
            method,
            constant_uri: template.is_constant().then(|| origin_form(&uri)),
            url: template,
            shown_url,
            host,
            port: uri.port_u16().unwrap_or(80),
            headers: templated,
            fixed_headers,
            body: body.map(Template::parse),
        })
    }

    /// Whether every request is the same (no placeholder anywhere), so its values need not
    /// be made.
    pub fn is_constant(&self) -> bool {
        self.constant_uri.is_some()
            && self.headers.is_empty()
            && self.body.as_ref().is_none_or(Template::is_constant)
    }

    /// The URL as given, any password in it hidden.
    pub fn shown_url(&self) -> &str {
        &self.shown_url
    }

    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The server's address, looked up once for the whole run.
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        let name = format!("{}:{}", self.host, self.port);
        let found = (self.host.as_str(), self.port).to_socket_addrs();
        match found.map(|mut a| a.next()) {
            Ok(Some(addr)) => Ok(addr),
            Ok(None) => Err(format!("'{name}' (from --url) has no address")),
            Err(e) => Err(format!("cannot look up '{name}' (from --url): {e}")),
        }
    }

    /// Request number `vars.n`, ready to send. Fails only if a filled-in header value is not
    /// one a header may hold.
    pub fn build(&self, vars: &Vars) -> Result<Request<Full<Bytes>>, String> {
        let uri = match &self.constant_uri {
            Some(u) => u.clone(),
            None => {
                let full: Uri =
                    self.url.fill(vars, true).parse().map_err(|e| {
                        format!("the URL of request {} does not parse: {e}", vars.n)
                    })?;
                origin_form(&full)
            }
        };
        let body = match &self.body {
            Some(t) => Bytes::from(t.fill(vars, false)),
            None => Bytes::new(),
        };
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = self.method.clone();
        *req.uri_mut() = uri;
        *req.headers_mut() = self.fixed_headers.clone();
        let headers = req.headers_mut();
        for (name, value) in &self.headers {
            let v = HeaderValue::from_bytes(value.fill(vars, false).as_bytes()).map_err(|_| {
                format!(
                    "request {}: the value of header '{name}' holds characters no header may hold",
                    vars.n
                )
            })?;
            headers.insert(name.clone(), v);
        }
        Ok(req)
    }
}

/// The request target as sent on a connection to the server: the path and query only
/// (`/run_demo.php?sku=sku_886`), which every server accepts.
fn origin_form(full: &Uri) -> Uri {
    let target = full.path_and_query().map_or("/", |p| p.as_str());
    target.parse().unwrap_or_else(|_| Uri::from_static("/"))
}

/// The URL with `vars` filled in, parsed and checked: `http://host[:port]/...`.
fn check_url(filled: &str, shown: &str) -> Result<Uri, String> {
    if filled.contains('{') || filled.contains('}') {
        return Err(format!(
            "--url '{shown}' holds a brace that is not a placeholder; the placeholders are {{sku}}, {{user}}, {{order}} and {{n}} (write a literal brace as %7B or %7D)"
        ));
    }
    let uri: Uri = filled.parse().map_err(|e| {
        format!("--url '{shown}' is not a URL ({e}); write it as http://host:port/path?query")
    })?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(format!(
                "--url '{shown}': https is not supported yet (lockctl's client speaks plain HTTP/1.1); test the endpoint over http://, on loopback or behind a TLS terminator"
            ));
        }
        Some(other) => {
            return Err(format!(
                "--url '{shown}': the scheme '{other}' is not http; write it as http://host:port/path"
            ));
        }
        None => {
            return Err(format!(
                "--url '{shown}' has no scheme and host; write it as http://host:port/path"
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!(
            "--url '{shown}' has no host; write it as http://host:port/path"
        ));
    }
    Ok(uri)
}

/// `Name: value` split and checked; placeholders may appear in the value.
fn parse_header(text: &str) -> Result<(HeaderName, Template), String> {
    let Some((name, value)) = text.split_once(':') else {
        return Err(format!(
            "--header '{text}' has no ':'; write it as 'Name: value'"
        ));
    };
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
        format!(
            "--header '{text}': '{}' is not a header name (letters, digits and -, no spaces); write it as 'Name: value'",
            name.trim()
        )
    })?;
    let value = Template::parse(value.trim());
    for vars in &SAMPLES {
        HeaderValue::from_bytes(value.fill(vars, false).as_bytes()).map_err(|_| {
            format!(
                "--header '{text}': the value holds characters no header may hold (control characters or line breaks)"
            )
        })?;
    }
    Ok((name, value))
}

/// `http://user:secret@host/` shown as `http://user:***@host/`.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VARS: Vars = Vars {
        sku: "{sku 1}",
        user: "u7",
        order: "h1-7",
        n: 7,
    };

    #[test]
    fn placeholders_fill_encoded_in_the_url_and_as_is_elsewhere() {
        let t = Template::parse("/buy?sku={sku}&u={user}&o={order}&n={n}");
        assert_eq!(
            t.fill(&VARS, true),
            "/buy?sku=%7Bsku%201%7D&u=u7&o=h1-7&n=7"
        );
        let body = Template::parse(r#"{"sku":"{sku}","n":{n}}"#);
        assert!(!body.is_constant());
        assert_eq!(body.fill(&VARS, false), r#"{"sku":"{sku 1}","n":7}"#);
        assert!(Template::parse("plain {x}").is_constant());
    }

    #[test]
    fn a_request_is_built_with_its_host_and_headers() {
        let spec = RequestSpec::new(
            "POST",
            "http://127.0.0.1:8080/run_demo.php?sku={sku}",
            &["X-Order: {order}".into(), "Content-Type: text/plain".into()],
            Some("n={n}"),
        )
        .unwrap();
        let req = spec.build(&VARS).unwrap();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri().to_string(), "/run_demo.php?sku=%7Bsku%201%7D");
        assert_eq!(req.headers()["host"], "127.0.0.1:8080");
        assert_eq!(req.headers()["x-order"], "h1-7");
        assert_eq!(spec.port, 8080);
    }

    #[test]
    fn bad_requests_are_refused_naming_the_value() {
        let bad = |method: &str, url: &str, header: &str| {
            let headers: Vec<String> = [header]
                .iter()
                .filter(|h| !h.is_empty())
                .map(|h| h.to_string())
                .collect();
            RequestSpec::new(method, url, &headers, None).unwrap_err()
        };
        assert!(bad("GET", "not a url", "").contains("'not a url' is not a URL"));
        assert!(bad("GET", "https://x/", "").contains("https is not supported"));
        assert!(bad("GET", "ftp://x/", "").contains("'ftp' is not http"));
        assert!(bad("GET", "/path", "").contains("no scheme"));
        assert!(bad("GET", "http://{sku}.shop/", "").contains("placeholder in its host"));
        assert!(bad("GET", "http://x/{skus}", "").contains("brace that is not a placeholder"));
        assert!(bad("GE T", "http://x/", "").contains("--method 'GE T'"));
        assert!(bad("GET", "http://x/", "NoColon").contains("has no ':'"));
        assert!(bad("GET", "http://x/", "Bad Name: v").contains("'Bad Name' is not a header name"));
    }

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(
            hide_password("http://me:secret@h:1/p?q=a@b"),
            "http://me:***@h:1/p?q=a@b"
        );
        assert_eq!(hide_password("http://h/p"), "http://h/p");
    }
}
