//! What a user reads: every message a user can cause says what happened and what to type
//! instead; help ends with examples; completions and the man page work; -q and --color do what
//! they say. Each through the real binary, exit code and key words.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::thread;

use crate::support::{RedisServer, code, json, lockctl, run_ok, stderr, stdout};
use redis::Commands;

fn assert_says(out: &std::process::Output, exit: i32, words: &[&str]) {
    let text = format!("{}{}", stdout(out), stderr(out));
    assert_eq!(code(out), exit, "{text}");
    for w in words {
        assert!(text.contains(w), "'{w}' missing from:\n{text}");
    }
}

#[test]
fn a_url_that_does_not_parse_is_a_usage_error_that_shows_the_expected_form() {
    for (url, why) in [
        ("localhost:6379", "has no scheme"),
        ("http://127.0.0.1:6379", "http:// is not a Redis URL scheme"),
        (
            "redis://127.0.0.1:99999",
            "port is not a number from 1 to 65535",
        ),
    ] {
        let out = lockctl(url, &["check"]);
        assert_says(
            &out,
            2,
            &[why, "redis://host:port", "rediss://", "redis+unix://"],
        );
    }
    // Port 0 parses, but no server listens there: not "connection refused, is Redis running?".
    for args in [&["check"][..], &["--cluster", "check"]] {
        let out = lockctl("redis://127.0.0.1:0", args);
        assert_says(&out, 2, &["port 0 is not a port", "1 to 65535", "--redis"]);
        assert!(!stderr(&out).contains("refused"), "{}", stderr(&out));
    }
    // A lock node's URL is said to be one, not --redis's.
    let node = |port: u16| format!("redis://127.0.0.1:{port}");
    let (a, b, c) = (node(0), node(1), node(2));
    let args = [
        "--lock-node",
        &a,
        "--lock-node",
        &b,
        "--lock-node",
        &c,
        "status",
        "x",
    ];
    let out = lockctl("redis://127.0.0.1:1", &args);
    assert_says(&out, 2, &["port 0 is not a port", "(see --lock-node)"]);
}

#[test]
fn something_that_is_not_redis_is_named_so() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for mut s in listener.incoming().flatten().take(4) {
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let out = lockctl(&format!("redis://127.0.0.1:{port}"), &["check"]);
    assert_says(&out, 1, &["not a Redis server", "--redis"]);
    assert!(!stderr(&out).contains("Parse error"), "{}", stderr(&out));
}

#[test]
fn a_database_index_out_of_range_does_not_ask_whether_redis_runs() {
    let server = RedisServer::start();
    let out = lockctl(&format!("{}/99", server.url()), &["check"]);
    assert_says(&out, 1, &["DB index is out of range", "--redis"]);
    assert!(!stderr(&out).contains("is redis-server running"));
}

#[test]
fn busy_after_a_wait_says_how_long_it_waited() {
    let server = RedisServer::start();
    lockctl(&server.url(), &["seed", "b", "3"]);
    server.hold_lock("b", "someone", 30_000);
    let out = lockctl(&server.url(), &["buy", "b"]);
    assert_says(&out, 4, &["busy, try again", "wait for it with --wait-ms"]);
    let out = lockctl(&server.url(), &["buy", "b", "--wait-ms", "200"]);
    assert_says(
        &out,
        4,
        &["for the whole 200 ms wait", "wait longer with --wait-ms"],
    );
}

#[test]
fn negative_and_fractional_counts_say_what_is_expected() {
    let server = RedisServer::start();
    let out = lockctl(&server.url(), &["seed", "s", "-5"]);
    assert_says(&out, 2, &["<COUNT>", "must be 0 or more, not -5"]);
    let out = lockctl(&server.url(), &["seed", "s", "1.5"]);
    assert_says(&out, 2, &["must be a whole number from 0"]);
    let out = lockctl(&server.url(), &["hammer", "-c", "-3"]);
    assert_says(&out, 2, &["--concurrency", "must be 1 or more"]);
    assert!(!server.raw().exists::<_, bool>("item:stock:s").unwrap());
}

#[test]
fn the_hint_for_an_unseeded_sku_that_starts_with_a_dash_can_be_typed() {
    let server = RedisServer::start();
    let out = lockctl(&server.url(), &["buy", "--", "-odd"]);
    assert_says(&out, 1, &["lockctl seed -- -odd <COUNT>"]);
    let out = lockctl(&server.url(), &["hammer", "--sku=-odd"]);
    assert_says(&out, 1, &["lockctl seed -- -odd <COUNT>"]);
}

#[test]
fn counts_agree_with_their_nouns_and_concurrency_is_capped_at_the_purchases() {
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &["hammer", "-n", "5", "-c", "50", "--stock", "1"],
    );
    assert_says(
        &out,
        0,
        &[
            "5 purchases of sku_886 x1, 5 at a time",
            "ledger 1 unit in 1 order",
        ],
    );
    let out = lockctl(&server.url(), &["hammer", "-n", "1", "--stock", "1"]);
    assert_says(&out, 0, &["1 purchase of sku_886"]);
}

#[test]
fn every_command_s_help_ends_with_examples_and_the_top_lists_exit_codes() {
    let top = lockctl("redis://127.0.0.1:1", &["--help"]);
    assert_says(
        &top,
        0,
        &["Exit codes:", "128+n", "Examples:", "Connection", "Output"],
    );
    for cmd in [
        "check",
        "seed",
        "buy",
        "hammer",
        "status",
        "unlock",
        "run",
        "exporter",
        "completions",
        "man",
    ] {
        let out = lockctl("redis://127.0.0.1:1", &[cmd, "--help"]);
        assert_eq!(code(&out), 0);
        let text = stdout(&out);
        let examples = text.rfind("Examples:").expect(cmd);
        assert!(text[examples..].contains("lockctl"), "{cmd}: {text}");
    }
    let hammer = stdout(&lockctl("redis://127.0.0.1:1", &["hammer", "--help"]));
    for heading in ["Load:", "Purchase:", "Reports:", "Connection:"] {
        assert!(hammer.contains(heading), "{heading} missing: {hammer}");
    }
    // The hunt's flags read as five short lists (issue 51), and a command's short help does
    // not repeat the whole connection block: --redis, and --help for the rest.
    let hunt = stdout(&lockctl("redis://127.0.0.1:1", &["hunt", "-h"]));
    for heading in [
        "The system:",
        "The answers:",
        "The stores:",
        "The search and its faults:",
        "Output:",
    ] {
        assert!(hunt.contains(heading), "{heading} missing: {hunt}");
    }
    assert!(
        hunt.contains("--redis") && !hunt.contains("--tls-ca"),
        "{hunt}"
    );
    let full = stdout(&lockctl("redis://127.0.0.1:1", &["hunt", "--help"]));
    assert!(
        full.contains("--tls-ca") && full.contains("--lock-node"),
        "{full}"
    );
    // clap reads `{n}` in help as a line break: the placeholder must still show.
    for flag in ["-h", "--help"] {
        let text = stdout(&lockctl("redis://127.0.0.1:1", &["hammer", flag]));
        assert!(text.contains("{n} (the request's index)"), "{flag}: {text}");
    }
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let out = lockctl("redis://127.0.0.1:1", &["--version"]);
    let v = stdout(&out);
    assert!(v.starts_with("lockctl 0."), "{v}");
    assert!(v.contains('(') && v.trim_end().ends_with(')'), "{v}");
}

#[test]
fn bash_completes_ha_to_hammer() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("lockctl.bash");
    let out = lockctl("redis://127.0.0.1:1", &["completions", "bash"]);
    assert_eq!(code(&out), 0);
    std::fs::write(&script, &out.stdout).unwrap();
    let probe = format!(
        "source {}; COMP_WORDS=(lockctl ha); COMP_CWORD=1; COMP_LINE='lockctl ha'; COMP_POINT=10; _lockctl lockctl ha lockctl; echo \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let out = run_ok(Command::new("bash").args(["-c", &probe]));
    assert_eq!(stdout(&out).trim(), "hammer", "{}", stdout(&out));
    for shell in ["zsh", "fish"] {
        let out = lockctl("redis://127.0.0.1:1", &["completions", shell]);
        assert_eq!(code(&out), 0);
        assert!(stdout(&out).contains("hammer"));
    }
}

/// `man -l` renders `roff`, as a user reads it.
fn rendered(roff: &[u8]) -> String {
    let mut man = Command::new("man");
    man.args(["-l", "-"])
        .env("MANPAGER", "cat")
        .env("COLUMNS", "100")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = crate::support::spawn_tool(&mut man);
    child.stdin.take().unwrap().write_all(roff).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
}

#[test]
fn the_man_page_renders() {
    let page = lockctl("redis://127.0.0.1:1", &["man"]);
    assert_eq!(code(&page), 0);
    let text = rendered(&page.stdout);
    for want in [
        "NAME",
        "lockctl",
        "hammer",
        "Exit codes",
        "--redis",
        "lockctl-hammer(1)",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
}

/// Every page lockctl(1) refers to exists: `lockctl man hammer` prints one, `--out-dir`
/// writes them all, and a subcommand's page shows its own options, not the connection block
/// again (it points to lockctl(1) for those). The help of the commands that never connect
/// leaves the connection block out too.
#[test]
fn every_subcommand_has_its_manual_page_and_the_connection_block_is_shown_once() {
    let text = rendered(&lockctl("redis://127.0.0.1:1", &["man", "hammer"]).stdout);
    assert!(
        text.contains("--stock") && text.contains("--strategy"),
        "{text}"
    );
    // The block's own entries (--url's help may name --tls-ca, which serves https:// too).
    assert!(
        !text.contains("--tls-ca <") && !text.contains("--connect-timeout-ms"),
        "{text}"
    );
    assert!(text.contains("lockctl(1)"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let out = lockctl(
        "redis://127.0.0.1:1",
        &["man", "--out-dir", dir.path().to_str().unwrap()],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let top = rendered(&std::fs::read(dir.path().join("lockctl.1")).unwrap());
    for sub in [
        "check",
        "seed",
        "buy",
        "hammer",
        "status",
        "unlock",
        "run",
        "exporter",
        "worker",
        "hunt",
        "judge",
        "db",
        "completions",
        "man",
    ] {
        assert!(top.contains(&format!("lockctl-{sub}(1)")), "{sub}: {top}");
        let page = dir.path().join(format!("lockctl-{sub}.1"));
        assert!(page.exists(), "{} missing", page.display());
    }
    assert!(dir.path().join("lockctl-db-init.1").exists());
    let out = lockctl("redis://127.0.0.1:1", &["man", "no-such-page"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("hammer"), "{}", stderr(&out));
    for args in [
        &["man", "--help"][..],
        &["completions", "--help"],
        &["db", "--help"],
        &["db", "init", "--help"],
    ] {
        let out = lockctl("redis://127.0.0.1:1", args);
        let help = stdout(&out);
        assert!(
            !help.contains("--tls-ca") && !help.contains("--redis <"),
            "{args:?}: {help}"
        );
        assert!(help.lines().count() < 25, "{args:?}: {help}");
    }
    let help = stdout(&lockctl("redis://127.0.0.1:1", &["man", "--help"]));
    assert!(help.contains("--out-dir"), "{help}");
    let help = stdout(&lockctl("redis://127.0.0.1:1", &["db", "init", "--help"]));
    assert!(help.contains("--db <URL>"), "{help}");
}

#[test]
fn quiet_prints_the_verdict_alone_and_color_does_what_it_is_told() {
    let server = RedisServer::start();
    let url = server.url();
    let out = lockctl(&url, &["-q", "hammer", "-n", "20", "--stock", "5"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains("verdict") && text.contains("PASS"), "{text}");
    let out = lockctl(&url, &["-q", "check"]);
    assert_eq!(stdout(&out).lines().count(), 1);
    let always = stdout(&lockctl(
        &url,
        &["--color", "always", "hammer", "-n", "5", "--stock", "2"],
    ));
    assert!(always.contains("\x1b[1;32mPASS"), "{always}");
    let never = stdout(&lockctl(
        &url,
        &["--color", "never", "hammer", "-n", "5", "--stock", "2"],
    ));
    assert!(!never.contains('\x1b'), "{never}");
}

#[test]
fn the_json_export_has_one_shape_whatever_the_number_of_strategies() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for strategies in ["lock", "lock,atomic"] {
        let file = dir.path().join(format!("{strategies}.json"));
        let out = lockctl(
            &server.url(),
            &[
                "hammer",
                "-n",
                "20",
                "--stock",
                "5",
                "--strategy",
                strategies,
                "--export-json",
                file.to_str().unwrap(),
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(doc["schema_version"], 1);
        assert_eq!(doc["verdict"], "pass");
        let runs = doc["runs"].as_array().unwrap();
        assert_eq!(runs.len(), strategies.split(',').count());
        assert_eq!(runs[0]["sku"], "sku_886");
        assert!(doc["context"]["redis_version"].is_string(), "{doc}");
        assert!(
            doc["context"]["command_line"]
                .as_str()
                .unwrap()
                .contains("hammer")
        );
    }
    // --json on stdout keeps the contract's fields at the top for one strategy.
    let v = json(&lockctl(
        &server.url(),
        &["--json", "hammer", "-n", "10", "--stock", "3"],
    ));
    assert_eq!(v["requests"], 10);
    assert_eq!(v["schema_version"], 1);
}

#[test]
fn an_argument_that_is_not_utf8_is_a_usage_error_not_a_panic() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bad = OsStr::from_bytes(b"\xff");
    for (args, json_flag) in [
        (
            vec![
                OsStr::new("run"),
                OsStr::new("--name"),
                bad,
                OsStr::new("--"),
                OsStr::new("true"),
            ],
            false,
        ),
        (vec![OsStr::new("--json"), OsStr::new("status"), bad], true),
        (vec![OsStr::new("status"), bad], false),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_lockctl"))
            .arg("--redis")
            .arg("redis://127.0.0.1:1")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("run lockctl");
        assert_says(&out, 2, &["invalid UTF-8"]);
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        if json_flag {
            assert_eq!(json(&out)["error_kind"], "usage", "{}", stdout(&out));
        }
    }
}

#[test]
fn an_order_stream_of_the_wrong_type_says_how_to_clear_it_not_to_reseed() {
    let server = RedisServer::start();
    assert_eq!(code(&lockctl(&server.url(), &["seed", "sq", "5"])), 0);
    let _: () = server.raw().set("item:order_events:sq", "junk").unwrap();
    let out = lockctl(&server.url(), &["buy", "sq", "--queue"]);
    assert_says(
        &out,
        1,
        &[
            "item:order_events:sq is a string",
            "redis-cli DEL item:order_events:sq",
        ],
    );
    assert!(!stderr(&out).contains("lockctl seed"), "{}", stderr(&out));
    let stock: i64 = server.raw().get("item:stock:sq").unwrap();
    assert_eq!(stock, 5, "nothing may change");
}

#[test]
fn a_lock_key_of_the_wrong_type_is_named_and_unlock_force_mends_it() {
    let server = RedisServer::start();
    let url = server.url();
    for (key, kind) in [
        ("dist_lock_queue:dmg", "zset"),
        ("dist_lock_waiting:dmg", "zset"),
        ("dist_lock:dmg", "string"),
        ("dist_lock_grant:dmg", "string"),
    ] {
        lockctl(&url, &["seed", "dmg", "10"]);
        let _: () = server.raw().hset(key, "a", "b").unwrap();
        let named = format!("'{key}' holds a hash, not a {kind}");
        if key != "dist_lock_grant:dmg" {
            // Every lock strategy, alone and under the hammer: the key, not a bare WRONGTYPE.
            for strategy in ["lock", "fenced"] {
                let out = lockctl(
                    &url,
                    &["buy", "dmg", "--wait-ms", "100", "--strategy", strategy],
                );
                assert_says(&out, 1, &[&named, "lockctl unlock dmg --force"]);
                assert!(!stderr(&out).contains("user_script"), "{}", stderr(&out));
            }
        }
        let out = lockctl(&url, &["status", "dmg"]);
        assert_says(&out, 3, &["damaged"]);
        let out = lockctl(&url, &["unlock", "dmg", "--force"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let out = lockctl(&url, &["status", "dmg"]);
        assert_eq!(code(&out), 0, "{key}: {}", stdout(&out));
        let out = lockctl(&url, &["buy", "dmg"]);
        assert_eq!(code(&out), 0, "{key}: {}", stderr(&out));
    }
}

#[test]
fn queue_with_naive_names_every_strategy_that_queues() {
    let server = RedisServer::start();
    for cmd in [
        &["buy", "nq"][..],
        &["hammer", "--sku", "nq", "--stock", "5"][..],
    ] {
        let out = lockctl(
            &server.url(),
            &[cmd, &["--queue", "--strategy", "naive"][..]].concat(),
        );
        assert_says(
            &out,
            2,
            &["--queue works with lock, fenced, atomic and batch"],
        );
    }
}

/// A purchase of a SKU that was never seeded (a typo) fails saying how to seed it, and leaves
/// no key behind under any strategy: before, the lock strategies left the SKU's fencing
/// counter (`dist_lock_fence:<SKU>`). A seeded SKU keeps its counter (fences never go back).
#[test]
fn a_failed_buy_of_an_unknown_sku_leaves_no_key_behind() {
    let server = RedisServer::start();
    for strategy in ["lock", "fenced", "atomic", "batch", "naive"] {
        let sku = format!("typo_{strategy}");
        let out = lockctl(&server.url(), &["buy", &sku, "--strategy", strategy]);
        assert_eq!(code(&out), 1, "{strategy}: {}", stderr(&out));
        assert!(stderr(&out).contains("lockctl seed"), "{}", stderr(&out));
    }
    let keys: Vec<String> = server.raw().keys("*").unwrap();
    assert_eq!(keys, Vec::<String>::new());
    let out = lockctl(&server.url(), &["seed", "kept", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = lockctl(&server.url(), &["buy", "kept", "--strategy", "fenced"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fence: Option<u64> = server.raw().get("dist_lock_fence:kept").unwrap();
    assert_eq!(fence, Some(1));
}

/// DATABASE_URL exported for `worker` and `status` (as docs/orders.md does)
/// leaves a plain hammer alone: before, clap's `requires` turned it into "the following
/// required arguments were not provided: --queue", with a usage line that made -n and --stock
/// look required. An explicit --db without --queue says what to add.
#[test]
fn database_url_in_the_environment_leaves_a_plain_hammer_alone() {
    let server = RedisServer::start();
    let out = crate::support::lockctl_env(
        &server.url(),
        &["hammer", "-n", "10", "--stock", "5"],
        &[("DATABASE_URL", "postgres://postgres@127.0.0.1:1/none")],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("PASS"), "{}", stdout(&out));
    let out = lockctl(
        &server.url(),
        &["hammer", "--db", "postgres://x/y", "-n", "10"],
    );
    assert_eq!(code(&out), 2);
    let err = stderr(&out);
    assert!(
        err.contains("add --queue") && !err.contains("Usage:"),
        "{err}"
    );
}

/// `hunt --help` stopped mid-sentence before `{n}` (clap took `{n}` for a placeholder of its
/// own): the list of placeholders is whole.
#[test]
fn the_hunt_help_keeps_the_placeholder_n_whole() {
    let help = stdout(&lockctl("redis://127.0.0.1:1", &["hunt", "--help"]));
    assert!(
        help.contains("{n} (the request's index)") && help.contains("are filled in the URL"),
        "{help}"
    );
}

/// The `--nemesis` help omitted `stall` and `pause-holder`: it names every fault, and says
/// that the faults on a Redis server need that Redis named (the first example names none).
#[test]
fn the_nemesis_help_names_every_fault_and_what_the_redis_faults_need() {
    let help = stdout(&lockctl("redis://127.0.0.1:1", &["hunt", "--help"]));
    for fault in [
        "client-kill",
        "redis-pause",
        "stall",
        "pause-worker",
        "kill-worker",
        "db-lock",
        "db-kill",
        "pause-holder",
    ] {
        assert!(
            help.contains(fault),
            "--nemesis help misses {fault}:\n{help}"
        );
    }
    assert!(
        help.contains("client-kill, redis-pause (need a Redis named by --redis or REDIS_URL"),
        "{help}"
    );
}

/// `lockctl buy` without a SKU printed "Usage: lockctl buy --redis <REDIS> <SKU>", as if
/// --redis were required, though REDIS_URL gave it (lockctl() sets it).
#[test]
fn a_usage_line_does_not_show_redis_as_required_when_redis_url_gives_it() {
    let out = lockctl("redis://127.0.0.1:1", &["buy"]);
    assert_says(&out, 2, &["Usage: lockctl buy <SKU>"]);
    assert!(
        !stderr(&out).contains("--redis <REDIS>"),
        "{}",
        stderr(&out)
    );
}

/// A mistyped host got "is redis-server running?": a host that does not resolve says so.
#[test]
fn a_host_that_does_not_resolve_is_named_not_asked_whether_redis_runs() {
    let out = lockctl("redis://no-such-host.invalid:6379", &["check"]);
    assert_says(
        &out,
        1,
        &[
            "'no-such-host.invalid:6379'",
            "no such host: check the host name in --redis",
        ],
    );
    assert!(
        !stderr(&out).contains("is redis-server running"),
        "{}",
        stderr(&out)
    );
}

/// `--json` usage errors said "invalid value for one of the arguments": they carry clap's own
/// sentence, the value and the argument named.
#[test]
fn json_usage_errors_carry_the_specific_message() {
    let out = lockctl(
        "redis://127.0.0.1:1",
        &["--json", "buy", "sku", "--qty", "abc"],
    );
    assert_eq!(code(&out), 2);
    assert_eq!(
        json(&out)["error"],
        "invalid value 'abc' for '--qty <QTY>': must be a whole number from 1 to 1000000, not 'abc'"
    );
    let out = lockctl("redis://127.0.0.1:1", &["--json", "buy"]);
    assert_eq!(
        json(&out)["error"],
        "the following required arguments were not provided: <SKU>"
    );
}

/// An empty `REDIS_URL=` gave "invalid Redis URL ''": it says the URL is empty and how to
/// unset it.
#[test]
fn an_empty_redis_url_is_named_as_empty() {
    let out = lockctl("", &["check"]);
    assert_says(
        &out,
        2,
        &[
            "the Redis URL is empty",
            "is REDIS_URL set to an empty string? unset it",
        ],
    );
}

/// `hammer --url` with no pattern to judge by: an HTTP 400's body is shown in its error, not
/// "(empty body)".
#[test]
fn an_unjudged_error_answer_shows_its_body() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.php"),
        "<?php http_response_code(400); echo 'sku must be numeric';",
    )
    .unwrap();
    let port = crate::support::free_port();
    let php = crate::support::spawn_tool(
        Command::new("php")
            .args(["-S", &format!("127.0.0.1:{port}"), "-t"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let _php = crate::support::Killed(php);
    assert!(crate::support::eventually(
        std::time::Duration::from_secs(10),
        || { std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() }
    ));
    let out = lockctl(
        &redis.url(),
        &[
            "hammer",
            "--url",
            &format!("http://127.0.0.1:{port}/bad.php"),
            "-n",
            "3",
            "-c",
            "1",
        ],
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("HTTP 400: 'sku must be numeric'"), "{text}");
    assert!(!text.contains("(empty body)"), "{text}");
}

/// The shop prints its errors as sentences, once, not in `Debug` form.
#[test]
fn the_shop_prints_its_errors_as_sentences() {
    let exe = std::env::current_exe().unwrap();
    let shop = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/shop");
    let out = Command::new(shop)
        .args(["--redis", "bogus", "--listen", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(
        stderr(&out),
        "shop: error: invalid Redis URL 'bogus': it has no scheme; expected redis://host:port[/db], rediss://host:port (TLS) or redis+unix:///path/to/socket\n"
    );
}

/// What is stored in Redis cannot drive the terminal through `status` or `unlock`: a lock
/// holder's token made of terminal escapes (a fake line, a screen cleared) is shown escaped.
#[test]
fn a_lock_token_made_of_escapes_is_shown_escaped() {
    let redis = RedisServer::start();
    lockctl(&redis.url(), &["seed", "esc", "5"]);
    let token = "\u{1b}[2J\u{1b}[1Areconciled: yes\u{7}\r";
    let _: () = redis.raw().set("dist_lock:esc", token).unwrap();
    for args in [&["status", "esc"][..], &["unlock", "esc", "--force"][..]] {
        let out = lockctl(&redis.url(), args);
        let found = crate::hunt::terminal_controls(&out.stdout);
        assert!(found.is_empty(), "{args:?} printed controls: {found:?}");
        assert!(
            stdout(&out).contains("\\u{1b}[2J"),
            "{args:?}: {}",
            stdout(&out)
        );
    }
}

/// Taking --redis out of a usage line when REDIS_URL gave it took it out of the help's list of
/// options too, with or without REDIS_URL: `lockctl --help` showed a blank where the flag is,
/// so a reader could not learn its name. The help names it; a usage error's line still does not.
#[test]
fn the_help_names_the_redis_flag_with_or_without_redis_url() {
    let bin = env!("CARGO_BIN_EXE_lockctl");
    for with_env in [true, false] {
        for args in [
            &["--help"][..],
            &["-h"],
            &["status", "--help"],
            &["hunt", "-h"],
        ] {
            let mut cmd = Command::new(bin);
            cmd.args(args).env_remove("NO_COLOR");
            match with_env {
                true => cmd.env("REDIS_URL", "redis://127.0.0.1:1"),
                false => cmd.env_remove("REDIS_URL"),
            };
            let out = cmd.output().unwrap();
            assert_eq!(code(&out), 0, "{}", stderr(&out));
            assert!(
                stdout(&out).contains("--redis <REDIS>"),
                "lockctl {args:?} (REDIS_URL set: {with_env}) does not name --redis:\n{}",
                stdout(&out)
            );
        }
    }
    let out = lockctl("redis://127.0.0.1:1", &["buy"]);
    assert_says(&out, 2, &["Usage: lockctl buy <SKU>"]);
    assert!(
        !stderr(&out).contains("--redis <REDIS>"),
        "{}",
        stderr(&out)
    );
}
