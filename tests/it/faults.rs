//! Faults and hostile input on real servers: script cache flushes, pauses, shutdowns, timeouts,
//! AUTH and ACL users, TLS, bad names and numbers, Ctrl-C.

use std::path::Path;
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{
    RedisServer, Streams, accounted, code, eventually, free_port, json, lockctl, run_ok, signal,
    spawn_lockctl_with, stderr, stdout,
};
use redis::Commands;

/// A run far longer than any test lets it go on: whatever is done to it lands mid-run.
const ENDLESS: [&str; 6] = ["-n", "100000", "-c", "4", "--stock", "100000"];

/// Starts `lockctl hammer` with `args` (stdout and stderr kept) on `sku_886`, and returns it once
/// it has bought something, so that a fault lands mid-run.
fn hammer_buying(server: &RedisServer, args: &[&str]) -> Child {
    let args = [&["hammer"][..], args].concat();
    let hammer = spawn_lockctl_with(&server.url(), &args, Streams::Capture);
    assert!(
        eventually(Duration::from_secs(30), || server
            .raw()
            .hlen::<_, u64>("item:orders:sku_886")
            .is_ok_and(|n| n > 20)),
        "the hammer never started buying"
    );
    hammer
}

/// The run came through: it passed, oversold nothing, accounted for all its `requests`, and its
/// final stock is the one Redis holds.
#[track_caller]
fn assert_came_through(server: &RedisServer, v: &serde_json::Value, requests: u64) {
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_eq!(v["oversold"], 0);
    assert_eq!(accounted(v), requests);
    let stock: i64 = server.raw().get("item:stock:sku_886").unwrap();
    assert_eq!(Some(stock), v["final_stock"].as_i64());
}

/// `lockctl status` finds the stock and the ledger of `sku_886` in agreement.
#[track_caller]
fn assert_reconciled(server: &RedisServer) {
    let status = json(&lockctl(&server.url(), &["status", "sku_886", "--json"]));
    assert_eq!(status["reconciled"], true, "{status}");
}

#[test]
fn script_flushes_mid_run_cost_no_purchase() {
    let server = RedisServer::start();
    let hammer = hammer_buying(
        &server,
        &[
            "-n",
            "4000",
            "-c",
            "8",
            "--stock",
            "1500",
            "--strategy",
            "lock,fenced,atomic,batch",
            "--json",
        ],
    );
    let pid = hammer.id();
    let mut flushes = 0;
    while Path::new(&format!("/proc/{pid}")).exists() && flushes < 200 {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.raw())
            .unwrap();
        flushes += 1;
        thread::sleep(Duration::from_millis(10));
    }
    let out = hammer.wait_with_output().unwrap();
    let v = json(&out);
    assert_eq!(code(&out), 0, "{v}");
    assert!(flushes >= 3, "the run ended before the flushes ({flushes})");
    for run in v["runs"].as_array().unwrap() {
        assert_eq!(run["verdict"], "pass", "{run}");
        assert_eq!(run["bought"], 1500, "{}", run["strategy"]);
        assert_eq!(accounted(run), 4000);
    }
}

#[test]
fn a_one_second_pause_mid_run_is_accounted_for_and_oversells_nothing() {
    let server = RedisServer::start();
    let hammer = hammer_buying(
        &server,
        &[
            "-n",
            "3000",
            "-c",
            "8",
            "--stock",
            "1000",
            "--timeout-ms",
            "300",
            "--json",
        ],
    );
    server.signal("STOP");
    thread::sleep(Duration::from_secs(1));
    server.signal("CONT");
    let out = hammer.wait_with_output().unwrap();
    let v = json(&out);
    assert_came_through(&server, &v, 3000);
    assert!(
        v["errors"].as_u64().unwrap() > 0,
        "the pause caused no error: {v}"
    );
    assert!(
        v["errors_by_kind"]["timed_out"].as_u64().unwrap() > 0,
        "{v}"
    );
}

#[test]
fn a_restart_mid_run_is_survived_and_accounted_for() {
    // Persistence on, so the stock and ledger outlive the restart; the script cache does not.
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let hammer = hammer_buying(
        &server,
        &[
            "-n",
            "3000",
            "-c",
            "6",
            "--stock",
            "1000",
            "--timeout-ms",
            "500",
            "--connect-timeout-ms",
            "500",
            "--json",
        ],
    );
    server.restart();
    let out = hammer.wait_with_output().unwrap();
    let v = json(&out);
    assert_came_through(&server, &v, 3000);
    assert_reconciled(&server);
    // The report says the server restarted, where a lost write would have come from, and
    // what that means for this PASS.
    let note = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.contains("restarted during the run"))
        .unwrap_or_else(|| panic!("no restart note: {v}"))
        .to_string();
    assert!(
        note.contains("the books above add up all the same"),
        "{note}"
    );
    assert!(!note.contains("unknown"), "{note}");
}

#[test]
fn a_paused_server_makes_buy_fail_fast_with_a_timeout() {
    let server = RedisServer::start();
    lockctl(&server.url(), &["seed", "p", "5"]);
    server.signal("STOP");
    let t = Instant::now();
    let out = lockctl(
        &server.url(),
        &[
            "buy",
            "p",
            "--timeout-ms",
            "500",
            "--connect-timeout-ms",
            "500",
        ],
    );
    let took = t.elapsed();
    server.signal("CONT");
    assert_eq!(code(&out), 1);
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(
        stderr(&out).contains("timed out after 500 ms"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_server_gone_before_the_read_back_gives_an_unknown_verdict() {
    let server = RedisServer::start();
    let hammer = hammer_buying(
        &server,
        &[
            &ENDLESS[..],
            &[
                "--timeout-ms",
                "300",
                "--connect-timeout-ms",
                "300",
                "--json",
            ],
        ]
        .concat(),
    );
    let _ = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query::<()>(&mut server.raw());
    let out = hammer.wait_with_output().unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "unknown", "{v}");
    assert!(v["final_stock"].is_null());
    assert!(v["errors_by_kind"]["refused"].as_u64().unwrap() > 0, "{v}");
    // A server that stays down ends the run: the requests not yet made are given up, not sent.
    assert!(
        v["errors_by_kind"]["abandoned"].as_u64().unwrap() > 0,
        "{v}"
    );
    assert_eq!(accounted(&v), 100000);
    // A server that cannot be asked is not said to have restarted.
    let notes = v["notes"].to_string();
    assert!(!notes.contains("restarted during the run"), "{notes}");
    assert!(notes.contains("could not ask Redis"), "{notes}");
}

/// The text report of a run whose Redis died says what the errors were (by kind, as --json
/// does), leaves the requests never sent out of the latency (saying so), and names the Redis it
/// ran against. Before: "errors 1643" alone, and a p50 of 0.001 ms from the unsent requests.
#[test]
fn the_text_report_of_a_dead_server_says_its_errors_by_kind_and_its_redis() {
    let server = RedisServer::start();
    let hammer = hammer_buying(
        &server,
        &[
            &ENDLESS[..],
            &["--timeout-ms", "300", "--connect-timeout-ms", "300"],
        ]
        .concat(),
    );
    let _ = redis::cmd("SHUTDOWN")
        .arg("NOSAVE")
        .query::<()>(&mut server.raw());
    let out = hammer.wait_with_output().unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stdout(&out);
    let outcomes = text
        .lines()
        .find(|l| l.trim_start().starts_with("outcomes"))
        .unwrap();
    assert!(
        outcomes.contains("abandoned") && outcomes.contains("refused"),
        "{outcomes}"
    );
    let latency = text
        .lines()
        .find(|l| l.trim_start().starts_with("latency"))
        .unwrap();
    assert!(latency.contains("never sent are not in it"), "{latency}");
    // The percentiles are of requests that were sent: not the 0 ms of those never sent.
    assert!(!latency.contains("p50 0.000 ms"), "{latency}");
    assert!(
        text.contains(&format!("redis       127.0.0.1:{}", server.port)),
        "{text}"
    );
}

#[test]
fn ctrl_c_stops_the_hammer_with_a_partial_report_and_no_lock_left() {
    let server = RedisServer::start();
    let hammer = hammer_buying(
        &server,
        &[&ENDLESS[..], &["--work-ms", "5", "--watchdog"]].concat(),
    );
    signal(hammer.id(), "INT");
    let out = hammer.wait_with_output().unwrap();
    assert_eq!(code(&out), 130, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("interrupted:"), "{text}");
    assert!(text.contains("PASS"), "{text}");
    let mut raw = server.raw();
    assert!(
        !raw.exists::<_, bool>("dist_lock:sku_886").unwrap(),
        "a lock was left held"
    );
    assert_reconciled(&server);
}

#[test]
fn an_acl_user_works_and_a_wrong_one_is_one_clear_error() {
    let server = RedisServer::start();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("alice")
        .arg("on")
        .arg(">s3cret-alice")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .query(&mut server.raw())
        .unwrap();
    let good = format!("redis://alice:s3cret-alice@127.0.0.1:{}", server.port);
    let out = lockctl(&good, &["hammer", "-n", "30", "--stock", "10", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let all = stdout(&out) + &stderr(&out);
    assert!(!all.contains("s3cret-alice"));
    let bad = format!("redis://alice:wrong-pass@127.0.0.1:{}", server.port);
    for args in [
        &["check"][..],
        &["--json", "buy", "x"],
        &["hammer", "--stock", "1"],
    ] {
        let out = lockctl(&bad, args);
        assert_eq!(code(&out), 1, "{args:?}");
        let all = stdout(&out) + &stderr(&out);
        assert!(!all.contains("wrong-pass"), "{all}");
        assert!(
            stderr(&out).contains("wrong user name or password"),
            "{all}"
        );
        assert_eq!(stderr(&out).lines().count(), 1, "{all}");
    }
}

/// A CA, a server certificate for localhost and 127.0.0.1, and a client certificate, made
/// with openssl in `dir`. Version 3 certificates, as rustls requires. (The adversarial tests
/// use it too.)
/// A redis-server that speaks TLS on its own port too (with `extra` arguments), requiring a
/// client certificate; its certificates in the returned directory (`ca.crt`, `client.crt`,
/// `client.key`, `other-ca.crt`).
pub(crate) fn tls_server(extra: &[&str]) -> (tempfile::TempDir, RedisServer, u16) {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path());
    let p = |f: &str| certs.path().join(f).to_str().unwrap().to_string();
    let tls_port = free_port();
    let mut args = vec![
        "--tls-port".to_string(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        p("server.crt"),
        "--tls-key-file".into(),
        p("server.key"),
        "--tls-ca-cert-file".into(),
        p("ca.crt"),
        "--tls-auth-clients".into(),
        "yes".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = RedisServer::start_with(&argv);
    (certs, server, tls_port)
}

pub(crate) fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        run_ok(Command::new("openssl").args(args).current_dir(dir));
    };
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    for ca in ["ca", "other-ca"] {
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={ca}"),
            "-keyout",
            &format!("{ca}.key"),
            "-out",
            &format!("{ca}.crt"),
        ]);
    }
    for (who, ext) in [("server", "server.ext"), ("client", "client.ext")] {
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={who}"),
            "-keyout",
            &format!("{who}.key"),
            "-out",
            &format!("{who}.csr"),
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            &format!("{who}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            ext,
            "-out",
            &format!("{who}.crt"),
        ]);
    }
}

#[test]
fn tls_with_the_right_ca_and_client_certificate_works_and_anything_less_is_refused() {
    let (certs, server, tls_port) = tls_server(&[]);
    let p = |f: &str| certs.path().join(f).to_str().unwrap().to_string();
    let url = format!("rediss://localhost:{tls_port}");
    let (ca, cert, key) = (p("ca.crt"), p("client.crt"), p("client.key"));
    let full = ["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let mut args = full.to_vec();
    args.extend(["hammer", "-n", "30", "--stock", "10", "--json"]);
    let out = lockctl(&url, &args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["final_stock"], 0);
    let stock: i64 = server.raw().get("item:stock:sku_886").unwrap();
    assert_eq!(stock, 0, "the TLS run did not reach this server");

    let other = p("other-ca.crt");
    let refusals: [(&[&str], &str); 4] = [
        (&["check"], "--tls-ca"),
        (
            &[
                "--tls-ca",
                &other,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "check",
            ],
            "--tls-ca",
        ),
        (&["--tls-ca", &ca, "check"], "--tls-cert"),
        (
            &["--tls-ca", "/nonexistent/ca.pem", "check"],
            "/nonexistent/ca.pem",
        ),
    ];
    for (args, hint) in refusals {
        let out = lockctl(&url, args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(hint), "{args:?}: {}", stderr(&out));
    }
    let out = lockctl(&server.url(), &["--tls-ca", &ca, "check"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("rediss://"), "{}", stderr(&out));
}

#[test]
fn hostile_names_and_numbers_are_usage_errors_that_write_nothing() {
    let server = RedisServer::start();
    let long = "x".repeat(201);
    let bad_skus = [
        "",
        " ",
        "a b",
        "a\nb",
        "a\tb",
        "\u{7}bell",
        "zero\u{0}byte",
        long.as_str(),
    ];
    let mut cases: Vec<Vec<&str>> = Vec::new();
    for sku in bad_skus.iter().filter(|s| !s.contains('\0')) {
        cases.push(vec!["seed", sku, "1"]);
        cases.push(vec!["buy", sku]);
        cases.push(vec!["hammer", "--sku", sku]);
        cases.push(vec!["status", sku]);
        cases.push(vec!["unlock", sku]);
    }
    for count in [
        "-1",
        "1.5",
        "ten",
        "1e3",
        "0x10",
        "1000000000000000001",
        "99999999999999999999",
        "",
    ] {
        cases.push(vec!["seed", "s", count]);
        cases.push(vec!["hammer", "--stock", count]);
    }
    for (flag, value) in [
        ("--qty", "0"),
        ("--qty", "1000001"),
        ("--ttl-ms", "0"),
        ("--ttl-ms", "86400001"),
        ("--wait-ms", "-1"),
        ("--work-ms", "3600001"),
        ("--limit", "0"),
        ("--order-id", "has space"),
        ("--order-id", ""),
        ("--strategy", "optimistic"),
    ] {
        cases.push(vec!["buy", "s", flag, value]);
    }
    cases.push(vec!["hammer", "-n", "0"]);
    cases.push(vec!["hammer", "-n", "100000001"]);
    cases.push(vec!["hammer", "-c", "10001"]);
    cases.push(vec!["--timeout-ms", "0", "check"]);
    for args in &cases {
        let out = lockctl(&server.url(), args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}");
    }
    let keys: u64 = redis::cmd("DBSIZE").query(&mut server.raw()).unwrap();
    assert_eq!(keys, 0, "a refused command wrote something");
}

#[test]
fn names_that_look_like_lua_or_patterns_are_only_ever_keys() {
    let server = RedisServer::start();
    for sku in [
        "a'b", "a\"b", "]]--", "--[[x", "%d%s", "{tag}x", "end)", "商品",
    ] {
        for strategy in ["lock", "fenced", "atomic", "batch"] {
            // `--` so that a SKU starting with a dash is not read as a flag.
            lockctl(&server.url(), &["seed", "--", sku, "2"]);
            let out = lockctl(
                &server.url(),
                &[
                    "buy",
                    "--strategy",
                    strategy,
                    "--order-id",
                    "o'--]]",
                    "--json",
                    "--",
                    sku,
                ],
            );
            assert_eq!(code(&out), 0, "{sku} {strategy}: {}", stderr(&out));
            let v: Option<i64> = server
                .raw()
                .hget(format!("item:orders:{sku}"), "o'--]]")
                .unwrap();
            assert_eq!(v, Some(1), "{sku} {strategy}");
        }
    }
}

/// The server's NOSCRIPT reply is known by its code (what a script call retries on), and a
/// script call keeps working while the script cache is flushed under it over and over (the
/// seed of a hammer's next strategy ran into a flush between the driver's load and its retry).
#[test]
fn script_calls_survive_a_cache_flushed_over_and_over() {
    let server = RedisServer::start();
    let mut conn = server.conn();
    let bogus = redis::Script::new("return 'never loaded'");
    let evalsha = lockctl_core::conn::evalsha(&bogus, &["k"]);
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.raw())
        .unwrap();
    match conn.query::<String>(&evalsha) {
        Err(lockctl_core::Error::Redis { code, .. }) => {
            assert_eq!(code.as_deref(), Some("NOSCRIPT"))
        }
        other => panic!("{other:?}"),
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flusher = {
        let (stop, mut raw) = (stop.clone(), server.raw());
        thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut raw).unwrap();
                // A flush every millisecond: ten times the hammer test's rate. (A cache flushed
                // back to back, with no pause at all, can still starve a script call: the
                // driver's EVALSHA-after-LOAD is retried, not replaced by an EVAL.)
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let sku: lockctl_core::sku::Sku = "flushed".parse().unwrap();
    for n in 0..300 {
        lockctl_core::stock::seed(&mut conn, &sku, n).unwrap_or_else(|e| panic!("seed {n}: {e}"));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    flusher.join().unwrap();
}

/// Ctrl-C twice at 2,000 lock buyers (tasks, 16 of them waiting in Redis): the first gives up
/// the buyers still waiting for a place (unsent), the second quits at once, and whatever way
/// the exit falls, no lock or queue place is left behind for a dead process: the give-back
/// runs twice, 100 ms apart, and no new wait begins after it. Before, a refresh on its way
/// queued a dead waiter again and it was granted the lock for a whole lease (1 run in 4).
#[test]
fn ctrl_c_twice_at_two_thousand_lock_buyers_leaves_no_lock_behind() {
    let server = RedisServer::start();
    for round in 0..3 {
        let sku = format!("cc{round}");
        let hammer = spawn_lockctl_with(
            &server.url(),
            &[
                "hammer",
                "--sku",
                &sku,
                "-n",
                "20000",
                "-c",
                "2000",
                "--stock",
                "20000",
                "--work-ms",
                "5",
                "--wait-ms",
                "30000",
            ],
            Streams::Capture,
        );
        assert!(
            eventually(Duration::from_secs(30), || server
                .raw()
                .hlen::<_, u64>(format!("item:orders:{sku}"))
                .is_ok_and(|n| n > 20)),
            "the hammer never started buying"
        );
        signal(hammer.id(), "INT");
        thread::sleep(Duration::from_millis(20));
        signal(hammer.id(), "INT");
        let out = crate::support::finish_within(hammer, Duration::from_secs(30), "the hammer");
        assert_eq!(code(&out), 130, "{}", stderr(&out));
        let v = json(&lockctl(&server.url(), &["status", &sku, "--json"]));
        assert!(v["lock"].is_null(), "round {round}: {v}");
        assert_eq!(v["waiters"], 0, "round {round}: {v}");
        assert_eq!(v["reconciled"], true, "round {round}: {v}");
    }
}
