//! The `/metrics` endpoint (`hammer --metrics-addr`, `lockctl exporter`): served concurrently,
//! bounded against idle, slow and oversized clients, negotiated as Prometheus expects, and
//! valid for `promtool check metrics`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{Killed, RedisServer, free_port, lockctl, spawn_lockctl};

/// A plain HTTP/1.1 request; returns the status code, the head and the body.
fn get(port: u16, path: &str, extra: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the endpoint");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_lowercase(), body.to_string())
}

/// Waits until the endpoint answers its liveness probe.
fn wait_up(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() && get(port, "/-/healthy", "").0 == 200 {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    panic!("the endpoint on port {port} never answered");
}

fn exporter(url: &str, port: u16, extra: &[&str]) -> Killed {
    let listen = format!("127.0.0.1:{port}");
    let mut args = extra.to_vec();
    args.extend(["exporter", "--sku", "a", "--sku", "b", "--listen", &listen]);
    let child = Killed(spawn_lockctl(url, &args));
    wait_up(port);
    child
}

#[test]
fn idle_and_slow_clients_do_not_blind_the_scrape() {
    let server = RedisServer::start();
    lockctl(&server.url(), &["seed", "a", "3"]);
    let port = free_port();
    let _exporter = exporter(&server.url(), port, &[]);
    // Ten connections that say nothing, and one that sends a byte a second.
    let idle: Vec<TcpStream> = (0..10)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    let loris = thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        for b in b"GET /metrics HTTP/1.1\r\n" {
            if s.write_all(&[*b]).is_err() {
                return;
            }
            thread::sleep(Duration::from_secs(1));
        }
    });
    thread::sleep(Duration::from_millis(200));
    // Served one connection at a time, this scrape would wait for all eleven to time out;
    // the bound only tells those two apart, far from any machine's speed.
    let t = Instant::now();
    let (status, _, body) = get(port, "/metrics", "");
    assert_eq!(status, 200);
    assert!(body.contains("lockctl_stock{sku=\"a\"} 3"), "{body}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the scrape waited {:?} behind idle clients",
        t.elapsed()
    );
    drop(idle);
    drop(loris);
}

#[test]
fn a_huge_request_line_is_refused_without_the_process_growing() {
    let server = RedisServer::start();
    let port = free_port();
    let exporter = exporter(&server.url(), port, &[]);
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", exporter.0.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap()
    };
    let before = rss();
    for _ in 0..5 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(1 << 20));
        let _ = s.write_all(line.as_bytes());
        let mut reply = Vec::new();
        let _ = s.read_to_end(&mut reply);
        let reply = String::from_utf8_lossy(&reply);
        assert!(!reply.contains(" 200 "), "{reply}");
    }
    assert!(
        rss() < before + 8 * 1024,
        "grew from {before} kB to {} kB",
        rss()
    );
    assert_eq!(get(port, "/metrics", "").0, 200);
}

#[test]
fn fifty_concurrent_scrapes_all_answer_and_paths_and_methods_are_checked() {
    let server = RedisServer::start();
    let port = free_port();
    let _exporter = exporter(&server.url(), port, &[]);
    let scrapes: Vec<_> = (0..50)
        .map(|_| thread::spawn(move || get(port, "/metrics", "").0))
        .collect();
    for s in scrapes {
        assert_eq!(s.join().unwrap(), 200);
    }
    assert_eq!(get(port, "/-/healthy", "").0, 200);
    assert_eq!(get(port, "/nowhere", "").0, 404);
    // Another method on a served path is 405, as docs/operating.md says.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut post = String::new();
    let _ = s.read_to_string(&mut post);
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut head = String::new();
    let _ = s.read_to_string(&mut head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.contains("lockctl_stock"),
        "a HEAD with a body: {head}"
    );
}

#[test]
fn openmetrics_when_asked_and_the_text_format_otherwise() {
    let server = RedisServer::start();
    let port = free_port();
    let _exporter = exporter(&server.url(), port, &[]);
    let (_, head, body) = get(
        port,
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n",
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    let (_, head, body) = get(port, "/metrics", "");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(!body.contains("# EOF"), "{body}");
}

#[test]
fn the_exporter_starts_without_redis_and_every_scrape_is_bounded_on_its_own() {
    let mut server = RedisServer::start();
    let port = free_port();
    let url = server.url();
    // Redis is not there at all when the exporter starts.
    server.signal("STOP");
    let quick = ["--timeout-ms", "300", "--connect-timeout-ms", "300"];
    let _exporter = exporter(&url, port, &quick);
    // Ten scrapes at once against a server that accepts and never answers: each waits out its
    // own 300 ms limits; served one after another they would take at least ten times that.
    let t = Instant::now();
    let scrapes: Vec<_> = (0..10)
        .map(|_| thread::spawn(move || get(port, "/metrics", "")))
        .collect();
    for s in scrapes {
        let (status, _, body) = s.join().unwrap();
        assert_eq!(status, 200);
        assert!(body.contains("lockctl_scrape_error{sku=\"a\"} 1"), "{body}");
    }
    assert!(
        t.elapsed() < Duration::from_millis(2_900),
        "ten scrapes took {:?}: they waited on each other",
        t.elapsed()
    );
    server.signal("CONT");
    server.restart();
    lockctl(&url, &["seed", "a", "7"]);
    let (_, _, body) = get(port, "/metrics", "");
    assert!(body.contains("lockctl_stock{sku=\"a\"} 7"), "{body}");
    assert!(body.contains("lockctl_scrape_error{sku=\"a\"} 0"), "{body}");
}

/// `promtool check metrics` (Debian's `prometheus` package) on what `port` serves in the
/// classic text format, which is what promtool reads (it has no OpenMetrics parser).
fn promtool_accepts(port: u16) {
    let (status, _, body) = get(port, "/metrics", "");
    assert_eq!(status, 200);
    let mut check = Command::new("promtool");
    check
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = crate::support::spawn_tool(&mut check);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool refused:\n{}\n{}\n{body}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_the_hammer_endpoint_and_the_exporter() {
    let server = RedisServer::start();
    let url = server.url();
    lockctl(&url, &["seed", "a", "5"]);
    let port = free_port();
    let _exporter = exporter(&url, port, &[]);
    promtool_accepts(port);

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _hammer = Killed(spawn_lockctl(
        &url,
        &[
            "hammer",
            "-n",
            "100000",
            "-c",
            "4",
            "--stock",
            "100000",
            "--work-ms",
            "2",
            "--metrics-addr",
            &addr,
        ],
    ));
    wait_up(port);
    thread::sleep(Duration::from_millis(300));
    promtool_accepts(port);
}
