//! Operating it: Prometheus metrics (file, live scrape, exporter), status, unlock.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::{
    RedisServer, code, eventually, free_port, json, lockctl, spawn_lockctl, stderr, stdout,
};
use redis::Commands;

fn scrape(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    // The server answers in the request's own version.
    body.starts_with("HTTP/1.0 200").then_some(body)
}

/// The value of the first sample line starting with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn the_metrics_file_has_the_contract_names_and_labels() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.prom");
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "60",
            "-c",
            "6",
            "--stock",
            "20",
            "--watchdog",
            "--ttl-ms",
            "90",
            "--work-ms",
            "40",
            // Every buyer waits its turn, however loaded the machine: 60 turns of 40 ms
            // outlast the default 5 s wait when the machine is slow.
            "--wait-ms",
            "60000",
            "--metrics-file",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let text = std::fs::read_to_string(&file).unwrap();
    for name in [
        "# TYPE lockctl_lock_wait_seconds histogram",
        "# TYPE lockctl_lock_hold_seconds histogram",
        "# TYPE lockctl_lock_waiters gauge",
        "# TYPE lockctl_lock_acquire counter",
        "# TYPE lockctl_lock_renewals counter",
        "# TYPE lockctl_lock_lease_lost counter",
        "# TYPE lockctl_buy counter",
        "# TYPE lockctl_stock gauge",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert_eq!(
        sample(&text, "lockctl_lock_acquire_total{result=\"acquired\"}"),
        Some(60.0)
    );
    assert_eq!(
        sample(&text, "lockctl_buy_total{outcome=\"bought\"}"),
        Some(20.0)
    );
    assert_eq!(
        sample(&text, "lockctl_buy_total{outcome=\"sold_out\"}"),
        Some(40.0)
    );
    assert_eq!(sample(&text, "lockctl_stock{sku=\"sku_886\"}"), Some(0.0));
    assert_eq!(sample(&text, "lockctl_lock_wait_seconds_count"), Some(60.0));
    assert_eq!(sample(&text, "lockctl_lock_hold_seconds_count"), Some(60.0));
    // 40 ms of work on a 90 ms lease renewed every 30 ms: the watchdog must have renewed.
    assert!(
        sample(&text, "lockctl_lock_renewals_total").unwrap() >= 1.0,
        "{text}"
    );
    assert_eq!(sample(&text, "lockctl_lock_lease_lost_total"), Some(0.0));
}

#[test]
fn a_live_scrape_during_a_contended_run_sees_the_wait_queue() {
    let server = RedisServer::start();
    let port = free_port();
    let mut hammer = spawn_lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "400",
            "-c",
            "20",
            "--stock",
            "400",
            "--work-ms",
            "10",
            "--wait-ms",
            "60000",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ],
    );
    let mut most = 0.0_f64;
    let seen = eventually(Duration::from_secs(20), || {
        if let Some(v) = scrape(port).and_then(|t| sample(&t, "lockctl_lock_waiters ")) {
            most = most.max(v);
        }
        most >= 1.0 || matches!(hammer.try_wait(), Ok(Some(_)))
    });
    let status = hammer.wait().unwrap();
    assert!(seen && most >= 1.0, "never saw a waiter (max {most})");
    assert!(status.success());
}

#[test]
fn status_reports_the_books_and_catches_a_mismatch_made_on_purpose() {
    let server = RedisServer::start();
    let url = server.url();
    lockctl(&url, &["seed", "books", "10"]);
    for _ in 0..3 {
        lockctl(&url, &["buy", "books"]);
    }
    let out = lockctl(&url, &["status", "books", "--json"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["stock"], 7);
    assert_eq!(v["sold"], 3);
    assert_eq!(v["reconciled"], true);
    assert_eq!(v["lock"], serde_json::Value::Null);
    assert_eq!(v["waiters"], 0);
    assert_eq!(v["fence"], 3);

    // An order that no deduction paid for.
    let _: () = server.raw().hset("item:orders:books", "forged", 1).unwrap();
    let out = lockctl(&url, &["status", "books"]);
    assert_eq!(code(&out), 3);
    assert!(
        stdout(&out).contains("DO NOT RECONCILE"),
        "{}",
        stdout(&out)
    );
    assert!(
        stdout(&out).contains("ledger holds 4 units"),
        "{}",
        stdout(&out)
    );

    // A deduction outside lockctl (the tutorial's DECR with no ledger).
    let _: () = server.raw().hdel("item:orders:books", "forged").unwrap();
    let _: i64 = server.raw().decr("item:stock:books", 1).unwrap();
    let v = json(&lockctl(&url, &["status", "books", "--json"]));
    assert_eq!(v["reconciled"], false);
    assert!(
        v["problems"].to_string().contains("1 unit unaccounted"),
        "{v}"
    );
}

#[test]
fn status_shows_the_holder_and_its_ttl() {
    let server = RedisServer::start();
    let url = server.url();
    lockctl(&url, &["seed", "held", "1"]);
    server.hold_lock("held", "holder-token", 30_000);
    let v = json(&lockctl(&url, &["status", "held", "--json"]));
    assert_eq!(v["lock"]["token"], "holder-token");
    let ttl = v["lock"]["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 20_000 && ttl <= 30_000, "{ttl}");
}

#[test]
fn unlock_without_force_changes_nothing() {
    let server = RedisServer::start();
    let url = server.url();
    server.hold_lock("stuck", "stuck-token", 60_000);
    let out = lockctl(&url, &["unlock", "stuck"]);
    assert_eq!(code(&out), 3);
    assert!(stdout(&out).contains("stuck-token"), "{}", stdout(&out));
    assert!(stdout(&out).contains("--force"));
    let holder: String = server.raw().get("dist_lock:stuck").unwrap();
    assert_eq!(holder, "stuck-token");
    let pttl: i64 = server.raw().pttl("dist_lock:stuck").unwrap();
    assert!(pttl > 50_000, "the TTL was touched: {pttl}");

    // The safe form refuses a token that does not hold the lock.
    let out = lockctl(&url, &["unlock", "stuck", "--token", "someone-else"]);
    assert_eq!(code(&out), 3);
    let holder: String = server.raw().get("dist_lock:stuck").unwrap();
    assert_eq!(holder, "stuck-token");
}

#[test]
fn unlock_force_removes_the_lock_and_names_its_token() {
    let server = RedisServer::start();
    let url = server.url();
    server.hold_lock("stuck", "stuck-token", 60_000);
    let out = lockctl(&url, &["unlock", "stuck", "--force", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["held_by"], "stuck-token");
    assert_eq!(v["removed"], true);
    assert!(!server.raw().exists::<_, bool>("dist_lock:stuck").unwrap());

    server.hold_lock("stuck", "t2", 60_000);
    let out = lockctl(&url, &["unlock", "stuck", "--token", "t2"]);
    assert_eq!(code(&out), 0);
    assert!(!server.raw().exists::<_, bool>("dist_lock:stuck").unwrap());
    let out = lockctl(&url, &["unlock", "stuck"]);
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("not held"));
}

#[test]
fn the_exporter_reads_each_sku_from_redis_on_every_scrape() {
    let server = RedisServer::start();
    let url = server.url();
    lockctl(&url, &["seed", "{a}", "10"]);
    lockctl(&url, &["seed", "b", "5"]);
    lockctl(&url, &["buy", "b"]);
    // A bucketed SKU: one row per bucket, labelled, adding up to the SKU's.
    assert_eq!(
        code(&lockctl(&url, &["seed", "hot", "9", "--buckets", "3"])),
        0
    );
    for user in ["u1", "u2"] {
        assert_eq!(
            code(&lockctl(
                &url,
                &["buy", "hot", "--user", user, "--limit", "5"]
            )),
            0
        );
    }
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut exporter = spawn_lockctl(
        &url,
        &[
            "exporter", "--sku", "{a}", "--sku", "b", "--sku", "hot", "--listen", &listen,
        ],
    );
    let mut text = String::new();
    let up = eventually(Duration::from_secs(10), || match scrape(port) {
        Some(t) => {
            text = t;
            true
        }
        None => false,
    });
    assert!(up, "the exporter never answered");
    assert_eq!(
        sample(&text, "lockctl_stock{sku=\"{a}\"}"),
        Some(10.0),
        "{text}"
    );
    assert_eq!(sample(&text, "lockctl_stock{sku=\"b\"}"), Some(4.0));
    assert_eq!(sample(&text, "lockctl_sold{sku=\"b\"}"), Some(1.0));
    assert_eq!(sample(&text, "lockctl_reconciled{sku=\"b\"}"), Some(1.0));
    assert_eq!(sample(&text, "lockctl_lock_held{sku=\"b\"}"), Some(0.0));
    assert!(
        !text.contains("bucket=\"\""),
        "no empty bucket label: {text}"
    );
    assert_eq!(sample(&text, "lockctl_stock{sku=\"hot\"}"), None, "{text}");
    let each = |metric: &str| -> Vec<f64> {
        (0..3)
            .map(|i| {
                sample(&text, &format!("{metric}{{sku=\"hot\",bucket=\"{i}\"}}"))
                    .unwrap_or_else(|| panic!("no {metric} of bucket {i}: {text}"))
            })
            .collect()
    };
    assert_eq!(each("lockctl_stock").iter().sum::<f64>(), 7.0, "{text}");
    assert_eq!(each("lockctl_sold").iter().sum::<f64>(), 2.0, "{text}");
    assert_eq!(each("lockctl_seeded").iter().sum::<f64>(), 9.0, "{text}");
    assert_eq!(each("lockctl_reconciled"), vec![1.0; 3], "{text}");
    assert_eq!(
        sample(&text, "lockctl_scrape_error{sku=\"hot\"}"),
        Some(0.0)
    );
    // Fresh on every scrape.
    server.hold_lock("b", "x", 30_000);
    let _: i64 = server.raw().decr("item:stock:b", 1).unwrap();
    let text = scrape(port).unwrap();
    assert_eq!(sample(&text, "lockctl_lock_held{sku=\"b\"}"), Some(1.0));
    assert_eq!(sample(&text, "lockctl_reconciled{sku=\"b\"}"), Some(0.0));
    exporter.kill().unwrap();
    exporter.wait().unwrap();
}

#[test]
fn status_during_a_live_sale_reconciles_and_catches_a_forged_order_once_quiet() {
    // The ledger is scanned a page at a time while purchases land: status must not cry
    // "DO NOT RECONCILE" at books that are only in motion.
    let server = RedisServer::start();
    let url = server.url();
    for strategy in ["lock", "batch"] {
        let sku = format!("live_{strategy}");
        // A ledger of many pages, so the scan takes a while.
        lockctl(&url, &["seed", &sku, "300000"]);
        let mut sale = spawn_lockctl(
            &url,
            &[
                "hammer",
                "--sku",
                &sku,
                "--strategy",
                strategy,
                "-n",
                "2000000",
                "-c",
                "20",
            ],
        );
        // Patient: a debug build on a busy machine may take a while to get there, and the
        // test is about correctness, never speed.
        assert!(eventually(Duration::from_secs(180), || {
            server
                .raw()
                .hlen::<_, u64>(format!("item:orders:{sku}"))
                .unwrap()
                > 20_000
        }));
        for _ in 0..5 {
            let out = lockctl(&url, &["status", &sku, "--json"]);
            let v = json(&out);
            assert_eq!(v["reconciled"], true, "{strategy} in motion: {v}");
            assert_eq!(code(&out), 0);
        }
        // In motion the ledger can only be held between two readings of the sold counter; once
        // the sale is quiet the check is exact again, and a forged order shows.
        let _: () = server
            .raw()
            .hset(format!("item:orders:{sku}"), "forged", 1)
            .unwrap();
        let _ = sale.kill();
        let _ = sale.wait();
        let out = lockctl(&url, &["status", &sku, "--json"]);
        let v = json(&out);
        assert_eq!(
            v["reconciled"], false,
            "{strategy}: a forged order went unseen: {v}"
        );
        assert_eq!(code(&out), 3);
    }
}

/// The Grafana dashboard (contrib/grafana-dashboard.json) is JSON Grafana can load, and every
/// metric its queries name is one lockctl serves (the exporter's gauges, the in-process
/// metrics): a renamed metric would leave a panel silently empty.
#[test]
fn the_dashboard_queries_only_metrics_lockctl_serves() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("contrib/grafana-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let served = ["src/scrape.rs", "crates/lockctl-core/src/metrics.rs"]
        .map(|f| std::fs::read_to_string(root.join(f)).unwrap())
        .join("\n");
    let name = regex::Regex::new(r"lockctl_[a-z_]+").unwrap();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            queries += 1;
            for m in name.find_iter(expr) {
                let metric = m.as_str();
                let base = ["_bucket", "_total", "_count", "_sum"]
                    .iter()
                    .find_map(|s| metric.strip_suffix(s))
                    .unwrap_or(metric);
                assert!(
                    served.contains(&format!("\"{base}\"")),
                    "panel '{}' queries {metric}, which lockctl does not serve",
                    panel["title"]
                );
            }
        }
    }
    assert!(queries > 10, "the dashboard has {queries} queries");
    assert!(
        text.contains("bucket!=\\\"\\\""),
        "the dashboard has the per-bucket panel"
    );
}

#[test]
fn status_warns_of_a_restart_since_the_seed_and_not_before() {
    let mut s = RedisServer::start_with(&["--appendonly", "yes"]);
    let url = s.url();
    assert_eq!(code(&lockctl(&url, &["seed", "restarted", "10"])), 0);
    assert_eq!(code(&lockctl(&url, &["buy", "restarted"])), 0);
    let st = json(&lockctl(&url, &["--json", "status", "restarted"]));
    assert!(st.get("warnings").is_none(), "{st}");
    // kill -9 and back from its append-only file: the books survive and add up, but the
    // server serving them is not the one the sale was seeded on.
    s.restart();
    let out = lockctl(&url, &["--json", "status", "restarted"]);
    assert_eq!(code(&out), 0, "the books still reconcile: {}", stdout(&out));
    let st = json(&out);
    assert_eq!(st["reconciled"], true, "{st}");
    let warned = st["warnings"][0].as_str().unwrap_or_default();
    assert!(warned.contains("master changed since the seed"), "{st}");
    let text = stdout(&lockctl(&url, &["status", "restarted"]));
    assert!(
        text.contains("warning: its master changed since the seed"),
        "{text}"
    );
    // A new seed is a new sale, served by this server: no warning.
    assert_eq!(code(&lockctl(&url, &["seed", "restarted", "10"])), 0);
    let st = json(&lockctl(&url, &["--json", "status", "restarted"]));
    assert!(st.get("warnings").is_none(), "{st}");
}
