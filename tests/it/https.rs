//! `hammer --url https://...` and `hunt`'s https URLs: the certificate checked by default
//! (the system's roots, or `--tls-ca`), the name checked against the URL's host, and a refusal
//! that names the URL and the fix, counted as an error, never a hang.
//!
//! The endpoint is a small HTTPS server of the test's own (rustls, a thread per connection,
//! HTTP/1.1 kept alive) that sells the tutorial's way against the test's redis-server, so a
//! verdict over TLS means what it means over plain HTTP. Its certificates are made with
//! openssl by the Redis TLS tests' helper: a CA, and a server certificate for localhost and
//! 127.0.0.1.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::Value;

use crate::faults::make_certs;
use crate::support::{RedisServer, code, lockctl, run_ok, stderr, stdout};

const SELL: &str = "local s = tonumber(redis.call('GET', KEYS[1])) \
    if s and s > 0 then return redis.call('DECR', KEYS[1]) end return -1";

/// An HTTPS endpoint selling against a redis-server: `/buy?sku=...` in the tutorial's
/// words, `/ready` answering 200, `/login` handing out a token (`{"token":"tok-N"}`); a
/// purchase that carries `Authorization: Bearer tok-...` must carry one it handed out.
struct HttpsEndpoint {
    port: u16,
    accepted: Arc<AtomicU64>,
    logins: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl HttpsEndpoint {
    /// Serves with the certificate `cert` (and its key `<cert>.key`) of `dir`.
    fn start(redis: &RedisServer, dir: &Path, cert: &str) -> HttpsEndpoint {
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join(format!("{cert}.crt")))
                .unwrap()
                .map(Result::unwrap)
                .collect();
        let key = PrivateKeyDer::from_pem_file(dir.join(format!("{cert}.key"))).unwrap();
        let config = Arc::new(
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port for the endpoint");
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicU64::new(0));
        let logins = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (count, halt, url) = (accepted.clone(), stop.clone(), redis.url());
        let handed = logins.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                if halt.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let (url, config, handed) = (url.clone(), config.clone(), handed.clone());
                thread::spawn(move || serve(stream, config, &url, &handed));
            }
        });
        HttpsEndpoint {
            port,
            accepted,
            logins,
            stop,
        }
    }

    fn url(&self, host: &str) -> String {
        format!("https://{host}:{}/buy?sku={{sku}}", self.port)
    }
}

impl Drop for HttpsEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// One connection: the handshake, then requests answered until the client closes it (or
/// refuses the certificate).
fn serve(stream: TcpStream, config: Arc<ServerConfig>, redis_url: &str, logins: &AtomicU64) {
    let Ok(conn) = ServerConnection::new(config) else {
        return;
    };
    let mut redis = redis::Client::open(redis_url)
        .and_then(|c| c.get_connection())
        .expect("the endpoint's redis connection");
    let sell = redis::Script::new(SELL);
    let mut reader = BufReader::new(StreamOwned::new(conn, stream));
    while let Some((target, bearer)) = read_request(&mut reader) {
        let handed_out = |t: &str| {
            t.strip_prefix("tok-")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n < logins.load(Ordering::SeqCst))
        };
        let text = match target.split_once("sku=") {
            _ if target.starts_with("/login") => {
                format!(
                    r#"{{"token":"tok-{}"}}"#,
                    logins.fetch_add(1, Ordering::SeqCst)
                )
            }
            Some(_) if bearer.as_deref().is_some_and(|t| !handed_out(t)) => {
                "a token it never handed out".to_string()
            }
            Some((_, sku)) => {
                let left: i64 = sell
                    .key(format!("item:stock:{sku}"))
                    .invoke(&mut redis)
                    .unwrap();
                match left {
                    -1 => "已售罄，拦截请求".to_string(),
                    n => format!("扣减成功 | 剩余库存: {n}"),
                }
            }
            None => "ready".to_string(),
        };
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", text.len());
        let out = reader.get_mut();
        let sent = out
            .write_all(head.as_bytes())
            .and_then(|()| out.write_all(text.as_bytes()))
            .and_then(|()| out.flush());
        if sent.is_err() {
            return;
        }
    }
}

/// The request target of the next request and its bearer token, its head and body read;
/// `None` at the end.
fn read_request(reader: &mut impl BufRead) -> Option<(String, Option<String>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let target = line.split(' ').nth(1)?.to_string();
    let (mut length, mut bearer) = (0, None);
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            } else if name.eq_ignore_ascii_case("authorization") {
                bearer = value.trim().strip_prefix("Bearer ").map(str::to_string);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((target, bearer))
}

/// The CA, its server certificate for localhost and 127.0.0.1 (`server`), and one it signed
/// for another name only (`elsewhere`, for `elsewhere.test`).
fn certificates() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let run = |args: &[&str]| {
        run_ok(Command::new("openssl").args(args).current_dir(dir.path()));
    };
    std::fs::write(
        dir.path().join("elsewhere.ext"),
        "subjectAltName=DNS:elsewhere.test\n",
    )
    .unwrap();
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=elsewhere.test",
        "-keyout",
        "elsewhere.key",
        "-out",
        "elsewhere.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "elsewhere.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "elsewhere.ext",
        "-out",
        "elsewhere.crt",
    ]);
    dir
}

fn said(out: &std::process::Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", stdout(out), stderr(out))
}

/// `lockctl [flags] --json hunt --url URL [facts]` of a small hunt (no faults, stock 3, 6
/// requests) on a system that is already up (`--serve 'exec sleep 600'`, the facts' `--ready`
/// saying how to tell it is): its exit, its JSON and all it said.
fn small_hunt(
    redis: &RedisServer,
    url: &str,
    flags: &[&str],
    facts: &[&str],
) -> (i32, Value, String) {
    let mut args = flags.to_vec();
    args.extend(["--json", "hunt", "--url", url]);
    args.extend(facts);
    args.extend([
        "--serve",
        "exec sleep 600",
        "--preset",
        "tutorial",
        "--nemesis",
        "none",
        "--budget",
        "3s",
        "--stock",
        "3",
        "-n",
        "6",
        "--heal-ms",
        "500",
    ]);
    let out = lockctl(&redis.url(), &args);
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap_or(Value::Null);
    (code(&out), v, said(&out))
}

/// `hammer --url https://...` with `flags` before the subcommand (`--tls-ca`), the tutorial's
/// answers and a stock of 40 for 60 requests on 3 connections; how long it took.
fn hammer(redis: &RedisServer, url: &str, flags: &[&str]) -> (i32, Value, String, Duration) {
    let mut args = flags.to_vec();
    args.extend([
        "--json", "hammer", "--url", url, "--preset", "tutorial", "-n", "60", "-c", "3", "--stock",
        "40",
    ]);
    let began = Instant::now();
    let out = lockctl(&redis.url(), &args);
    let took = began.elapsed();
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap_or(Value::Null);
    (code(&out), v, said(&out), took)
}

#[test]
fn an_https_endpoint_is_hammered_and_judged_when_its_ca_is_given() {
    let redis = RedisServer::start();
    let certs = certificates();
    let ca = certs.path().join("ca.crt");
    let endpoint = HttpsEndpoint::start(&redis, certs.path(), "server");
    for host in ["127.0.0.1", "localhost"] {
        let (exit, v, text, _) = hammer(
            &redis,
            &endpoint.url(host),
            &["--tls-ca", ca.to_str().unwrap()],
        );
        assert_eq!((exit, v["verdict"].as_str()), (0, Some("pass")), "{text}");
        assert_eq!(
            (
                v["bought"].as_u64(),
                v["sold_out"].as_u64(),
                v["errors"].as_u64()
            ),
            (Some(40), Some(20), Some(0)),
            "{text}"
        );
    }
    // Three connections per run carried all the requests: TLS connections are kept alive.
    assert_eq!(endpoint.accepted.load(Ordering::SeqCst), 6);
}

#[test]
fn a_certificate_signed_by_a_ca_nobody_named_is_refused_naming_the_url_and_tls_ca() {
    let redis = RedisServer::start();
    let certs = certificates();
    let endpoint = HttpsEndpoint::start(&redis, certs.path(), "server");
    let url = endpoint.url("127.0.0.1");
    let other = certs.path().join("other-ca.crt");
    for flags in [vec![], vec!["--tls-ca", other.to_str().unwrap()]] {
        let (exit, v, text, took) = hammer(&redis, &url, &flags);
        assert_ne!(exit, 0, "{text}");
        assert_eq!(v["errors"], 60, "{text}");
        assert_eq!(v["errors_by_kind"]["tls"], 60, "{text}");
        assert_eq!(v["bought"], 0, "{text}");
        let first = v["first_error"].as_str().unwrap_or_default();
        for words in [
            &format!("refused the certificate of '{}'", url) as &str,
            "unknown issuer",
            "--tls-ca FILE",
        ] {
            assert!(first.contains(words), "{words:?} missing: {text}");
        }
        assert!(took < Duration::from_secs(5), "took {took:?}: {text}");
    }
    // Nothing was sold through a connection that was never trusted.
    let stock: i64 = redis::Commands::get(&mut redis.raw(), "item:stock:sku_886").unwrap();
    assert_eq!(stock, 40);
}

#[test]
fn a_certificate_for_another_name_is_refused_even_from_the_ca_given() {
    let redis = RedisServer::start();
    let certs = certificates();
    let ca = certs.path().join("ca.crt");
    let endpoint = HttpsEndpoint::start(&redis, certs.path(), "elsewhere");
    let url = endpoint.url("127.0.0.1");
    let (exit, v, text, _) = hammer(&redis, &url, &["--tls-ca", ca.to_str().unwrap()]);
    assert_ne!(exit, 0, "{text}");
    assert_eq!(v["errors_by_kind"]["tls"], 60, "{text}");
    let first = v["first_error"].as_str().unwrap_or_default();
    assert!(
        first.contains(&format!("refused the certificate of '{url}'"))
            && first.contains("not valid for name \"127.0.0.1\"")
            && first.contains("elsewhere.test"),
        "{text}"
    );
}

#[test]
fn hunt_reaches_an_https_endpoint_and_awaits_its_https_ready_url() {
    let redis = RedisServer::start();
    let certs = certificates();
    let ca = certs.path().join("ca.crt");
    let endpoint = HttpsEndpoint::start(&redis, certs.path(), "server");
    let url = endpoint.url("localhost");
    let ready = format!("https://localhost:{}/ready", endpoint.port);
    let hunt = |flags: &[&str]| small_hunt(&redis, &url, flags, &["--ready", &ready]);
    let (exit, v, text) = hunt(&["--tls-ca", ca.to_str().unwrap()]);
    assert_eq!(exit, 0, "{text}");
    assert!(v["judged"].as_u64().unwrap_or(0) >= 1, "{text}");
    assert_eq!(v["unjudged_rounds"], 0, "{text}");
}

/// Users who log in over https: `--login` goes through the same TLS client (the CA of
/// `--tls-ca`, the name checked), each user's token rides on its purchases, and the hunt
/// judges them. Without the CA the login is refused, exit 2, before any purchase.
#[test]
fn hunt_logs_users_in_over_https_and_buys_with_their_tokens() {
    let redis = RedisServer::start();
    let certs = certificates();
    let ca = certs.path().join("ca.crt");
    let endpoint = HttpsEndpoint::start(&redis, certs.path(), "server");
    let url = endpoint.url("localhost");
    let login = format!(
        r#"POST https://localhost:{}/login {{"user":{{user}}}}"#,
        endpoint.port
    );
    let facts = [
        "--login",
        &login,
        "--header",
        "Authorization: Bearer {token}",
    ];
    // Without the CA (on hammer --url, which logs in the same way): refused, nothing sold.
    let (exit, _, text, _) = hammer(
        &redis,
        &url,
        &[&facts[..], &["--preset", "tutorial", "-n", "4"]].concat(),
    );
    assert_eq!(exit, 2, "a login to a CA nobody named: {text}");
    assert_eq!(endpoint.logins.load(Ordering::SeqCst), 0, "{text}");
    // The endpoint is up before the hunt: --ready says how to tell the system is (without
    // it, an address that answers before --serve starts is refused).
    let ready = format!("https://localhost:{}/ready", endpoint.port);
    let facts = [&facts[..], &["--ready", &ready]].concat();
    // --ready at a certificate of a CA nobody named: refused once it has been for 3 s on end
    // (it waited the whole 15 s, then exit 1), exit 2, naming the URL and the fix; nothing
    // sold.
    let started = Instant::now();
    let (exit, _, text) = small_hunt(&redis, &url, &[], &facts);
    assert_eq!(exit, 2, "{text}");
    assert!(
        text.contains(&format!("--ready '{ready}': refused the certificate"))
            && text.contains("--tls-ca"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "{text}");
    assert_eq!(endpoint.logins.load(Ordering::SeqCst), 0, "{text}");
    let (exit, v, text) = small_hunt(&redis, &url, &["--tls-ca", ca.to_str().unwrap()], &facts);
    assert_eq!(exit, 0, "{text}");
    assert!(v["judged"].as_u64().unwrap_or(0) >= 1, "{text}");
    assert!(endpoint.logins.load(Ordering::SeqCst) >= 1, "{text}");
}

/// Not an https endpoint at all: the handshake fails at once, saying so.
#[test]
fn https_to_a_plain_http_endpoint_fails_at_once_saying_it_may_not_speak_https() {
    let redis = RedisServer::start();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let url = format!("https://127.0.0.1:{port}/buy?sku={{sku}}");
    let (exit, v, text, took) = hammer(&redis, &url, &[]);
    assert_ne!(exit, 0, "{text}");
    assert_eq!(v["errors_by_kind"]["tls"], 60, "{text}");
    assert!(
        v["first_error"]
            .as_str()
            .is_some_and(|e| e.contains("speak https")),
        "{text}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}: {text}");
}

/// A wrong `--tls-ca` file is a usage-time error naming the file, before any request.
#[test]
fn a_tls_ca_file_that_holds_no_certificate_is_refused_naming_it() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.pem");
    std::fs::write(&bogus, "not a certificate\n").unwrap();
    let out = lockctl(
        &redis.url(),
        &[
            "--tls-ca",
            bogus.to_str().unwrap(),
            "hammer",
            "--url",
            "https://127.0.0.1:1/",
            "-n",
            "1",
        ],
    );
    assert_eq!(code(&out), 1, "{}", said(&out));
    assert!(
        stderr(&out).contains(&format!("'{}'", bogus.display())),
        "{}",
        said(&out)
    );
}

/// Certificates of the CA of [`certificates`] in `dir`, for localhost, valid only from
/// `start` to `end` (`YYYYMMDDHHMMSSZ`), as `<name>.crt` and `<name>.key`: `openssl ca`, the
/// one of openssl 3.0's commands that sets both dates.
fn dated_certificate(dir: &Path, name: &str, start: &str, end: &str) {
    let run = |args: &[&str]| {
        run_ok(Command::new("openssl").args(args).current_dir(dir));
    };
    std::fs::write(
        dir.join("dated.cnf"),
        "[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n\
         default_md = sha256\npolicy = any\ncopy_extensions = copy\nunique_subject = no\n\
         [any]\ncommonName = supplied\n",
    )
    .unwrap();
    if !dir.join("index.txt").exists() {
        std::fs::write(dir.join("index.txt"), "").unwrap();
        std::fs::write(dir.join("serial"), "1000\n").unwrap();
    }
    let (key, csr, crt) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
    );
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &key,
        "-out",
        &csr,
    ]);
    run(&[
        "ca",
        "-batch",
        "-config",
        "dated.cnf",
        "-cert",
        "ca.crt",
        "-keyfile",
        "ca.key",
        "-in",
        &csr,
        "-out",
        &crt,
        "-startdate",
        start,
        "-enddate",
        end,
        "-extfile",
        "server.ext",
    ]);
}

/// Item 14: a `--ready` certificate that expired, or is not valid yet, is refused as an
/// unknown CA's is: within seconds, exit 2, naming the URL, why and `--tls-ca` (it took the
/// whole 15 s and exit 1).
#[test]
fn a_ready_url_whose_certificate_expired_or_is_not_yet_valid_is_refused_at_once_naming_why() {
    let redis = RedisServer::start();
    let certs = certificates();
    let ca = certs.path().join("ca.crt");
    dated_certificate(
        certs.path(),
        "expired",
        "20200101000000Z",
        "20200201000000Z",
    );
    dated_certificate(certs.path(), "future", "20990101000000Z", "20990201000000Z");
    for (name, why) in [("expired", "expired"), ("future", "not valid yet")] {
        let endpoint = HttpsEndpoint::start(&redis, certs.path(), name);
        let url = endpoint.url("localhost");
        let ready = format!("https://localhost:{}/ready", endpoint.port);
        let started = Instant::now();
        let (exit, _, text) = small_hunt(
            &redis,
            &url,
            &["--tls-ca", ca.to_str().unwrap()],
            &["--ready", &ready],
        );
        assert_eq!(exit, 2, "{name}: {text}");
        assert!(
            text.contains(&format!("--ready '{ready}': refused the certificate"))
                && text.contains(why)
                && text.contains("--tls-ca"),
            "{name}: {text}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name}: {text}"
        );
    }
}

/// Item 14: the usual one-liner's self-signed certificate (marked as a CA, a common name and
/// no other name), given as `--tls-ca`, is trusted for its name, as `curl --cacert` trusts it
/// (webpki alone refused it, "CaUsedAsEndEntity"); for another name, or when another
/// certificate is given, it is still refused.
#[test]
fn a_self_signed_certificate_given_as_tls_ca_is_trusted_for_its_name_as_curl_does() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for name in ["self", "stranger"] {
        run_ok(
            Command::new("openssl")
                .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout"])
                .arg(format!("{name}.key"))
                .arg("-out")
                .arg(format!("{name}.crt"))
                .args(["-days", "1", "-subj", "/CN=localhost"])
                .current_dir(dir.path()),
        );
    }
    let endpoint = HttpsEndpoint::start(&redis, dir.path(), "self");
    let own = dir.path().join("self.crt");
    let (exit, v, text, _) = hammer(
        &redis,
        &endpoint.url("localhost"),
        &["--tls-ca", own.to_str().unwrap()],
    );
    assert_eq!((exit, v["verdict"].as_str()), (0, Some("pass")), "{text}");
    assert_eq!(v["errors"], 0, "{text}");
    // Another name than its own: refused.
    let (exit, v, text, _) = hammer(
        &redis,
        &endpoint.url("127.0.0.1"),
        &["--tls-ca", own.to_str().unwrap()],
    );
    assert_ne!(exit, 0, "{text}");
    assert_eq!(v["errors_by_kind"]["tls"], 60, "{text}");
    // Another certificate named: refused, whatever its name.
    let stranger = dir.path().join("stranger.crt");
    let (exit, v, text, _) = hammer(
        &redis,
        &endpoint.url("localhost"),
        &["--tls-ca", stranger.to_str().unwrap()],
    );
    assert_ne!(exit, 0, "{text}");
    assert_eq!(v["errors_by_kind"]["tls"], 60, "{text}");
}
