//! The real `lockctl` binary: every subcommand, its exit codes, JSON fields and messages.

use crate::support::{
    HAMMER_FIELDS, RedisServer, accounted, code, eventually, free_port, json, lockctl, stderr,
    stdout,
};
use redis::Commands;

#[test]
fn check_passes_on_a_fresh_server_and_reports_the_contract_fields() {
    let server = RedisServer::start();
    let out = lockctl(&server.url(), &["check", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["ok"], true);
    assert!(v["redis_version"].as_str().unwrap().contains('.'));
    assert!(v["rtt_ms"].as_f64().unwrap() >= 0.0);
    // Test servers run with no persistence, which check must point out.
    let warnings = v["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("persistence")),
        "{warnings:?}"
    );
    let human = lockctl(&server.url(), &["check"]);
    assert!(stdout(&human).contains("ok: fit for locking"));
}

/// `check` names the product and its own version: Redis by `redis_version`, Valkey by
/// `valkey_version` (it answers `redis_version:7.2.4` for compatibility, which check used to
/// print as the version), each on a real server of its own.
#[test]
fn check_names_the_server_product_and_version_on_redis_and_valkey() {
    // The product each binary is, by what it says of itself ("Redis server v=7.0.15 ...",
    // "Valkey server v=9.1.2 ..."): LOCKCTL_TEST_REDIS_SERVER may point the suite at Valkey.
    let programs = [
        crate::support::redis_server_program(),
        crate::support::valkey_server_program(),
    ];
    for program in programs {
        let said = stdout(&crate::support::run_ok(
            std::process::Command::new(&program).arg("--version"),
        ));
        let product = if said.starts_with("Valkey") {
            "Valkey"
        } else {
            "Redis"
        };
        let server = RedisServer::start_program(&program, &[]);
        let out = lockctl(&server.url(), &["check", "--json"]);
        assert_eq!(code(&out), 0, "{product}: {}", stderr(&out));
        let v = json(&out);
        assert_eq!(v["server"], product, "{v}");
        let version = v["version"].as_str().unwrap().to_string();
        // The version the binary itself reports ("... v=9.1.2 ...").
        assert!(
            said.contains(&format!("v={version} ")),
            "{}: {said} / {version}",
            program.display()
        );
        let human = stdout(&lockctl(&server.url(), &["check"]));
        assert!(
            human.starts_with(&format!("{product} {version}")),
            "{human}"
        );
        if product == "Valkey" {
            assert_ne!(v["redis_version"], v["version"], "{v}");
            assert!(human.contains("(redis_version "), "{human}");
        }
        // The native compare-and-delete, probed (COMMAND INFO), not assumed from the name:
        // Valkey 9 has DELIFEQ, Redis 7.0 has none; and a tested product gets no warning that
        // it is untested.
        let has = crate::support::run_ok(
            std::process::Command::new(crate::support::redis_cli_program()).args([
                "-p",
                &server.port.to_string(),
                "command",
                "info",
                "delifeq",
            ]),
        );
        let native = !stdout(&has).trim().is_empty();
        assert_eq!(v["native"].to_string().contains("DELIFEQ"), native, "{v}");
        assert_eq!(human.contains("native: DELIFEQ"), native, "{human}");
        if product == "Valkey" && version.starts_with("9.") {
            assert!(native, "Valkey 9 has DELIFEQ: {v}");
        }
        assert!(!v["warnings"].to_string().contains("not among"), "{v}");
    }
}

#[test]
fn check_warns_about_an_eviction_policy_that_can_drop_locks() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let v = json(&lockctl(&server.url(), &["--json", "check"]));
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("volatile-lru"), "{warnings}");
}

#[test]
fn check_refuses_a_replica() {
    let master = RedisServer::start();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let out = lockctl(&replica.url(), &["check", "--json"]);
    assert_eq!(code(&out), 3, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["ok"], false);
    assert!(v["problems"].to_string().contains("replica"));
    // And the master is told about its replica.
    let m = json(&lockctl(&master.url(), &["check", "--json"]));
    assert!(
        eventually(std::time::Duration::from_secs(30), || {
            json(&lockctl(&master.url(), &["check", "--json"]))["warnings"]
                .to_string()
                .contains("replica")
        }),
        "{m}"
    );
}

#[test]
fn an_unreachable_redis_is_a_one_line_error_with_exit_1() {
    // A port nobody listens on: bind one, then let it go.
    let port = free_port();
    let url = format!("redis://127.0.0.1:{port}");
    for args in [
        &["check"][..],
        &["seed", "s", "1"],
        &["buy", "s"],
        &["hammer"],
    ] {
        let out = lockctl(&url, args);
        assert_eq!(code(&out), 1, "{args:?}");
        let err = stderr(&out);
        assert!(err.starts_with("lockctl: error: "), "{err}");
        assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
        assert!(err.contains("--redis"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_wrong_password_is_one_clear_error_that_never_shows_the_password() {
    let server = RedisServer::start_with(&["--requirepass", "right-pass"]);
    let url = format!("redis://:hunter2-wrong@127.0.0.1:{}", server.port);
    for args in [&["check"][..], &["buy", "s"], &["--json", "check"]] {
        let out = lockctl(&url, args);
        assert_eq!(code(&out), 1, "{args:?}");
        let all = stdout(&out) + &stderr(&out);
        assert!(!all.contains("hunter2"), "{all}");
        assert!(stderr(&out).contains("credentials"), "{}", stderr(&out));
    }
    let ok = format!("redis://:right-pass@127.0.0.1:{}", server.port);
    let out = lockctl(&ok, &["seed", "s", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!stdout(&out).contains("right-pass"));
}

/// Issue 25. A libpq string typed without its quotes splits into several arguments, and clap's
/// usage error quoted the one it did not expect: `unexpected argument 'password=...'`.
#[test]
fn a_usage_error_never_quotes_a_password_typed_without_quotes() {
    for args in [
        &["hammer", "--queue", "--db", "host=h", "password=S3cr3tPW"][..],
        &[
            "--json",
            "hammer",
            "--queue",
            "--db",
            "host=h",
            "password=S3cr3tPW",
        ],
        &[
            "hammer",
            "--url",
            "http://h/",
            "--header",
            "X: y",
            "token=S3cr3tPW",
        ],
    ] {
        // Parsing fails before any server is asked.
        let out = lockctl("redis://127.0.0.1:1", args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        let all = stdout(&out) + &stderr(&out);
        assert!(!all.contains("S3cr3tPW"), "{args:?}: {all}");
        assert!(stderr(&out).contains("unexpected argument '"), "{all}");
        assert!(stderr(&out).contains("=***'"), "{all}");
    }
}

#[test]
fn seed_sets_the_stock_and_refuses_bad_counts_with_exit_2() {
    let server = RedisServer::start();
    let out = lockctl(&server.url(), &["seed", "sku_886", "10"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("stock 10"));
    let mut raw = server.raw();
    let v: String = raw.get("item:stock:sku_886").unwrap();
    assert_eq!(v, "10");
    for bad in ["-1", "ten", "1.5", "", "99999999999999999999"] {
        let out = lockctl(&server.url(), &["seed", "sku_886", bad]);
        assert_eq!(code(&out), 2, "{bad:?}: {}", stderr(&out));
        let v: String = raw.get("item:stock:sku_886").unwrap();
        assert_eq!(v, "10", "a refused seed changed the stock");
    }
    let out = lockctl(&server.url(), &["seed", "bad sku", "1"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("no spaces"), "{}", stderr(&out));
}

#[test]
fn buy_reports_each_outcome_with_its_exit_code_and_json_fields() {
    let server = RedisServer::start();
    let url = server.url();
    lockctl(&url, &["seed", "sku_886", "1"]);
    let out = lockctl(&url, &["buy", "sku_886"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("bought, 0 left"),
        "{}",
        stdout(&out)
    );

    let out = lockctl(&url, &["buy", "sku_886", "--json"]);
    assert_eq!(code(&out), 3);
    let v = json(&out);
    assert_eq!(v["outcome"], "sold_out");
    assert_eq!(v["remaining"], 0);
    assert_eq!(v["sku"], "sku_886");
    assert_eq!(v["qty"], 1);
    assert!(v["order_id"].is_string());
    assert!(stdout(&lockctl(&url, &["buy", "sku_886"])).starts_with("sold out"));

    lockctl(&url, &["seed", "sku_886", "5"]);
    server.hold_lock("sku_886", "another-holder", 10_000);
    let out = lockctl(&url, &["buy", "sku_886", "--json"]);
    assert_eq!(code(&out), 4);
    assert_eq!(json(&out)["outcome"], "busy");
    assert_eq!(json(&out)["remaining"], serde_json::Value::Null);
    assert!(stdout(&lockctl(&url, &["buy", "sku_886"])).starts_with("busy, try again"));
    let _: () = server.raw().del("dist_lock:sku_886").unwrap();

    let out = lockctl(
        &url,
        &[
            "buy",
            "sku_886",
            "--json",
            "--strategy",
            "fenced",
            "--ttl-ms",
            "50",
            "--work-ms",
            "200",
        ],
    );
    assert_eq!(code(&out), 5, "{}", stdout(&out));
    assert_eq!(json(&out)["outcome"], "lease_lost");
    let v: String = server.raw().get("item:stock:sku_886").unwrap();
    assert_eq!(v, "5", "a lost lease deducted");
}

#[test]
fn buy_on_an_unseeded_or_corrupt_sku_fails_clearly_and_leaves_no_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let out = lockctl(&url, &["buy", "nothing"]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("seed it first: lockctl seed nothing <COUNT>"),
        "{}",
        stderr(&out)
    );
    let mut raw = server.raw();
    let _: () = raw.set("item:stock:corrupt", "lots").unwrap();
    let out = lockctl(&url, &["buy", "corrupt", "--json"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("'lots'"), "{}", stderr(&out));
    assert_eq!(json(&out)["error_kind"], "bad_stock");
    let v: String = raw.get("item:stock:corrupt").unwrap();
    assert_eq!(v, "lots");
    for sku in ["nothing", "corrupt"] {
        let held: bool = raw.exists(format!("dist_lock:{sku}")).unwrap();
        assert!(!held, "{sku}: lock left behind");
    }
}

#[test]
fn usage_errors_exit_2() {
    let server = RedisServer::start();
    for args in [
        &["buy"][..],
        &["buy", "s", "--strategy", "optimistic"],
        &["buy", "s", "--ttl-ms", "0"],
        &["buy", "s", "--qty", "0"],
        &["buy", "s", "--wait-ms", "-5"],
        &["buy", "s", "--user", "alice"],
        &["hammer", "-n", "0"],
        &["hammer", "-c", "0"],
        &["hammer", "--mode", "fibers"],
        &["frobnicate"],
    ] {
        let out = lockctl(&server.url(), args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
    }
}

fn hammer_passes_in(mode: &str) {
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &[
            "hammer", "-n", "100", "-c", "10", "--stock", "10", "--mode", mode, "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let v = json(&out);
    for field in HAMMER_FIELDS {
        assert!(!v[field].is_null(), "missing {field}: {v}");
    }
    for p in ["p50", "p99", "max"] {
        assert!(v["latency_ms"][p].is_number(), "latency_ms.{p}: {v}");
    }
    assert_eq!(v["verdict"], "pass");
    assert_eq!(v["requests"], 100);
    assert_eq!(v["concurrency"], 10);
    assert_eq!(v["strategy"], "lock");
    assert_eq!(v["initial_stock"], 10);
    assert_eq!(v["final_stock"], 0);
    assert_eq!(v["bought"], 10);
    assert_eq!(v["sold_qty"], 10);
    assert_eq!(v["oversold"], 0);
    // Every request ended in one outcome (none of them limit_reached: there is no limit).
    assert_eq!(v["limit_reached"], 0);
    assert_eq!(accounted(&v), 100);
    let stock: String = server.raw().get("item:stock:sku_886").unwrap();
    assert_eq!(stock, "0");
    let orders: u64 = server.raw().hlen("item:orders:sku_886").unwrap();
    assert_eq!(orders, 10);
}

#[test]
fn hammer_with_threads_sells_exactly_the_stock() {
    hammer_passes_in("threads");
}

/// Without --mode a run gets the driver measured fastest for its purchases: tasks for atomic
/// on a single server, threads for the lock strategies, and threads for atomic with simulated
/// work; an explicit --mode is kept. Each run sells exactly its stock.
#[test]
fn hammer_without_mode_runs_atomic_as_tasks_and_the_rest_as_threads() {
    let server = RedisServer::start();
    for (extra, want) in [
        (&["--strategy", "atomic"][..], "tasks"),
        (
            &["--strategy", "atomic", "--mode", "threads"][..],
            "threads",
        ),
        (&["--strategy", "atomic", "--work-ms", "1"][..], "threads"),
        (&["--strategy", "lock"][..], "threads"),
        (&["--strategy", "batch"][..], "threads"),
    ] {
        let mut args = vec!["hammer", "-n", "40", "-c", "8", "--stock", "20", "--json"];
        args.extend_from_slice(extra);
        let out = lockctl(&server.url(), &args);
        assert_eq!(
            code(&out),
            0,
            "{extra:?}: {}\n{}",
            stdout(&out),
            stderr(&out)
        );
        let v = json(&out);
        assert_eq!(v["mode"], want, "{extra:?}: {v}");
        assert_eq!(
            (v["verdict"].as_str(), v["bought"].as_u64()),
            (Some("pass"), Some(20)),
            "{extra:?}: {v}"
        );
    }
}

#[test]
fn hammer_with_processes_sells_exactly_the_stock() {
    hammer_passes_in("procs");
}

#[test]
fn hammer_prints_a_readable_summary() {
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &["hammer", "-n", "20", "-c", "4", "--stock", "5"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "bought 5",
        "sold out 15",
        "5 -> 0",
        "p99",
        "purchases/s",
        "PASS",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

#[test]
fn hammer_without_stock_says_how_to_seed() {
    let server = RedisServer::start();
    let out = lockctl(&server.url(), &["hammer", "--sku", "empty"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("--stock"), "{}", stderr(&out));
    // With stock already there it uses it, and says so.
    lockctl(&server.url(), &["seed", "there", "3"]);
    let out = lockctl(&server.url(), &["hammer", "--sku", "there", "-n", "5"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("already in Redis"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn json_errors_are_one_object_on_stdout() {
    let server = RedisServer::start();
    let out = lockctl(&server.url(), &["--json", "buy", "unseeded"]);
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(v["error_kind"], "unseeded");
    assert!(v["error"].as_str().unwrap().contains("seed it first"));
}

#[test]
fn hammer_exports_json_markdown_and_html_files() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (j, m, h) = (
        dir.path().join("r.json"),
        dir.path().join("r.md"),
        dir.path().join("r.html"),
    );
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "50",
            "--stock",
            "10",
            "--strategy",
            "lock,atomic",
            "--export-json",
            j.to_str().unwrap(),
            "--export-markdown",
            m.to_str().unwrap(),
            "--export-html",
            h.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("times faster than"),
        "{}",
        stdout(&out)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
    assert_eq!(doc["verdict"], "pass");
    assert_eq!(doc["runs"].as_array().unwrap().len(), 2);
    assert!(doc["runs"][0]["latency_buckets"].as_array().unwrap().len() > 1);
    let md = std::fs::read_to_string(&m).unwrap();
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| ")).count(),
        3,
        "{md}"
    );
    let html = std::fs::read_to_string(&h).unwrap();
    // Latency, lock wait, lock hold, stock and throughput: the lock strategies have all five.
    assert_eq!(html.matches("<svg").count(), 5, "{html}");
    assert_eq!(doc["schema_version"], 1);
}

#[test]
fn a_bad_export_path_fails_before_anything_is_bought() {
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "--sku",
            "untouched",
            "--stock",
            "10",
            "--export-json",
            "/nonexistent-dir/report.json",
        ],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("/nonexistent-dir/report.json"),
        "{}",
        stderr(&out)
    );
    let seeded: bool = server.raw().exists("item:stock:untouched").unwrap();
    assert!(!seeded, "the run started despite the bad path");
}

/// A run that fails leaves whatever the export paths held before untouched: a file keeps its
/// contents, a pipe (or a device such as /dev/null) stays what it was; and no temporary file
/// is left beside them. A run that succeeds replaces a file whole, keeping its permissions.
#[test]
fn a_failed_run_leaves_existing_exports_as_they_were() {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().join("keep.html");
    std::fs::write(&keep, "precious").unwrap();
    std::fs::set_permissions(&keep, std::fs::Permissions::from_mode(0o640)).unwrap();
    let fifo = dir.path().join("pipe");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    // Unseeded: the run fails (exit 1) after the exports were opened.
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "--sku",
            "nosuch",
            "-n",
            "5",
            "--export-html",
            keep.to_str().unwrap(),
            "--export-json",
            fifo.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(reader.join().unwrap(), "", "nothing goes down the pipe");
    assert_eq!(std::fs::read_to_string(&keep).unwrap(), "precious");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let names = |d: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(dir.path()), ["keep.html", "pipe"]);

    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "5",
            "--stock",
            "5",
            "--export-html",
            keep.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let html = std::fs::read_to_string(&keep).unwrap();
    assert!(
        html.contains("<html") && !html.contains("precious"),
        "{html}"
    );
    let mode = std::fs::metadata(&keep).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert_eq!(names(dir.path()), ["keep.html", "pipe"]);

    // Two exports into one file (spelled two ways) would keep only the last: refused.
    let twice = dir.path().join("twice.out");
    let again = format!("{}/./twice.out", dir.path().display());
    let args = [
        "hammer",
        "-n",
        "5",
        "--stock",
        "5",
        "--export-json",
        twice.to_str().unwrap(),
        "--export-html",
        &again,
    ];
    let out = lockctl(&server.url(), &args);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--export-json and --export-html both write"),
        "{}",
        stderr(&out)
    );
    assert_eq!(names(dir.path()), ["keep.html", "pipe"]);
}

#[test]
fn an_export_to_stdout_is_all_that_stdout_carries() {
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "20",
            "--stock",
            "5",
            "--export-markdown",
            "-",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("Hammer on `sku_886`"), "{text}");
    assert!(!text.contains("verdict     PASS"), "{text}");
    let both = lockctl(
        &server.url(),
        &["hammer", "--export-markdown", "-", "--export-json", "-"],
    );
    assert_eq!(code(&both), 2);
}

#[test]
fn several_strategies_in_json_are_one_object() {
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "30",
            "--stock",
            "5",
            "--strategy",
            "fenced,atomic",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "pass");
    for run in v["runs"].as_array().unwrap() {
        assert_eq!(run["final_stock"], 0);
        assert_eq!(run["bought"], 5);
    }
}

#[test]
fn atomic_buyers_wait_out_a_foreign_lock_when_given_a_wait() {
    // The tutorial's PHP client holds the lock for 300 ms; atomic buyers yield, then buy.
    let server = RedisServer::start();
    server.hold_lock("sku_886", "php-holder", 300);
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "20",
            "-c",
            "4",
            "--stock",
            "5",
            "--strategy",
            "atomic",
            "--wait-ms",
            "3000",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["busy"], 0, "{v}");
    assert_eq!(v["bought"], 5);
    // Without a wait they are turned away while it is held.
    server.hold_lock("sku_886", "php-holder", 2000);
    let v = json(&lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "8",
            "--stock",
            "5",
            "--strategy",
            "atomic",
            "--wait-ms",
            "0",
            "--json",
        ],
    ));
    assert_eq!(v["busy"], 8, "{v}");
    assert_eq!(v["final_stock"], 5);
}

#[test]
fn a_usage_error_under_json_is_still_one_object_on_stdout() {
    let server = RedisServer::start();
    for args in [
        &["--json", "buy"][..],
        &["buy", "s", "--qty", "0", "--json"],
    ] {
        let out = lockctl(&server.url(), args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert_eq!(json(&out)["error_kind"], "usage", "{args:?}");
        assert!(!stderr(&out).is_empty());
    }
    let help = lockctl(&server.url(), &["--help"]);
    assert_eq!(code(&help), 0);
    assert!(stdout(&help).contains("hammer"));
}

/// The HTML report opens with its verdict: a banner (PASS, FAIL or UNKNOWN) naming the
/// invariants checked and, for a FAIL, the ones violated; the page title carries the verdict;
/// the stock chart has lines at the initial stock and at zero (and says when the stock went
/// below it); a single run has no "slower than fastest" column.
#[test]
fn the_html_report_opens_with_its_verdict_and_what_was_checked() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("r.html");
    let page_s = page.to_str().unwrap();
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "50",
            "--stock",
            "10",
            "--export-html",
            page_s,
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    let banner = html
        .find("<div class=\"banner pass\"><h2>PASS</h2>")
        .expect("a PASS banner");
    assert!(
        banner < html.find("<table").unwrap(),
        "the banner comes first"
    );
    assert!(html.contains("<title>PASS"), "the title says the verdict");
    assert!(
        html.contains("the stock never went below zero"),
        "checked invariants"
    );
    assert!(html.contains("initial stock (10)") && html.contains(">zero<"));
    assert!(
        !html.contains("slower than fastest"),
        "one run, no comparison"
    );
    assert!(
        html.contains("<h2>Throughput over time</h2>"),
        "a throughput chart"
    );
    assert!(
        !html.contains("Errors by kind"),
        "no errors, no errors table"
    );
    // The homework: a lease shorter than the work oversells.
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "40",
            "-c",
            "8",
            "--stock",
            "5",
            "--strategy",
            "naive",
            "--work-ms",
            "20",
            "--export-html",
            page_s,
        ],
    );
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("<div class=\"banner fail\"><h2>FAIL</h2>"),
        "a FAIL banner"
    );
    assert!(
        html.contains("violated:") && html.contains("oversold by"),
        "what broke"
    );
    assert!(
        html.contains("oversold)"),
        "the zero line names the oversell"
    );
}
