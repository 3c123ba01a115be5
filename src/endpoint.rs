//! The `/metrics` endpoint of `hammer --metrics-addr` and `lockctl exporter`, on hyper.
//!
//! An endpoint that monitoring depends on must not be blinded by one client: every connection
//! is its own task, so a connection that sends nothing, or a byte a second, delays nobody else
//! and is dropped when its time is up ([`EndpointOptions::connection_limit`]); request heads
//! are bounded by hyper's buffer limit; at most [`EndpointOptions::max_connections`] are served
//! at once and the rest are refused at accept, so nothing an unauthenticated client does can
//! exhaust memory or threads. Each scrape gathers on a blocking thread of its own, with its own
//! bound, so a scrape never waits on another scrape's Redis reads.
//!
//! Prometheus asks for OpenMetrics in its `Accept` header; anything else gets the classic text
//! format (0.0.4). `GET` and `HEAD` on `/metrics`, `/-/healthy` for a liveness probe, 404
//! elsewhere.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;

/// What a scrape is asked to produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`
    OpenMetrics,
    /// `text/plain; version=0.0.4`, Prometheus's classic format.
    Text,
}

const OPENMETRICS_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The endpoint's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointOptions {
    /// How long a client may take to send its request head. Default: 2 s.
    pub header_timeout: Duration,
    /// How long one connection may last in all (one request per connection). Default: 10 s.
    pub connection_limit: Duration,
    /// Connections served at once; more are closed at accept. Default: 64.
    pub max_connections: usize,
    /// The most a scrape may take before the endpoint answers 503. Default: 5 s.
    pub scrape_limit: Duration,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            header_timeout: Duration::from_secs(2),
            connection_limit: Duration::from_secs(10),
            max_connections: 64,
            scrape_limit: Duration::from_secs(5),
        }
    }
}

/// The metrics, gathered fresh for each scrape, in OpenMetrics text (converted for the classic
/// format when that is what the scraper asked for).
pub type Scrape = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `scrape` at `http://addr/metrics` from a background thread until the process exits.
/// Returns the address bound (useful with port 0); a bad address fails here.
pub fn serve(addr: &str, scrape: Scrape, options: EndpointOptions) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(options.max_connections.max(1))
        .build()?;
    std::thread::Builder::new()
        .name("lockctl-metrics".into())
        .spawn(move || runtime.block_on(accept_loop(listener, scrape, options)))?;
    Ok(bound)
}

async fn accept_loop(listener: TcpListener, scrape: Scrape, options: EndpointOptions) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, say: wait a moment rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        // Full: refuse at once (the client sees the connection closed), never queue.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let scrape = scrape.clone();
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(options.header_timeout)
                .keep_alive(false)
                .max_buf_size(8192);
            let service = hyper::service::service_fn(move |req| {
                respond(req, scrape.clone(), options.scrape_limit)
            });
            let conn = http.serve_connection(TokioIo::new(stream), service);
            // Whatever the client does, the connection ends by this limit.
            let _ = tokio::time::timeout(options.connection_limit, conn).await;
            drop(slot);
        });
    }
}

async fn respond(
    req: Request<Incoming>,
    scrape: Scrape,
    limit: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let head = req.method() == Method::HEAD;
    let reply = |status: StatusCode, kind: &'static str, body: String| {
        let body = if head { String::new() } else { body };
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(kind));
        Ok(r)
    };
    let path = req.uri().path();
    if path == "/-/healthy" {
        return reply(StatusCode::OK, TEXT_TYPE, "OK\n".into());
    }
    if path != "/metrics" {
        return reply(StatusCode::NOT_FOUND, TEXT_TYPE, "try /metrics\n".into());
    }
    if req.method() != Method::GET && !head {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT_TYPE,
            "GET or HEAD\n".into(),
        );
    }
    let format = negotiate(req.headers().get(ACCEPT));
    let gathered = tokio::time::timeout(limit, tokio::task::spawn_blocking(move || scrape())).await;
    match gathered {
        Ok(Ok(body)) => match format {
            Format::OpenMetrics => reply(StatusCode::OK, OPENMETRICS_TYPE, body),
            Format::Text => reply(StatusCode::OK, TEXT_TYPE, to_text_format(&body)),
        },
        _ => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT_TYPE,
            format!("the scrape took longer than {} ms\n", limit.as_millis()),
        ),
    }
}

/// OpenMetrics when the scraper's `Accept` names it, the classic text format otherwise.
pub fn negotiate(accept: Option<&HeaderValue>) -> Format {
    match accept.and_then(|a| a.to_str().ok()) {
        Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
        _ => Format::Text,
    }
}

/// OpenMetrics text turned into Prometheus's classic text format: a counter family is named
/// after its `_total` samples, and the `# EOF` and `# UNIT` lines go.
pub fn to_text_format(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# TYPE ", "# HELP "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        match renamed {
            Some(l) => out.push_str(&l),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_renamed_for_the_classic_format() {
        let om =
            "# HELP a_b Things.\n# TYPE a_b counter\na_b_total 3\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            to_text_format(om),
            "# HELP a_b_total Things.\n# TYPE a_b_total counter\na_b_total 3\n# TYPE g gauge\ng 1\n"
        );
    }

    #[test]
    fn openmetrics_only_when_asked() {
        let om = HeaderValue::from_static(
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        );
        assert_eq!(negotiate(Some(&om)), Format::OpenMetrics);
        assert_eq!(negotiate(None), Format::Text);
        let text = HeaderValue::from_static("text/plain");
        assert_eq!(negotiate(Some(&text)), Format::Text);
    }
}
