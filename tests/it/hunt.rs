//! `lockctl hunt` against small flash sales in the tutorial's style (`tests/fixtures/hunt/`),
//! each bug class with a correct twin: the hunt must find every bug within its budget and pass
//! every twin. The system is started by the hunt itself (`--serve 'php -S ...'`), talking to a
//! private redis-server and, for the SQL classes, a PostgreSQL or MariaDB database of the
//! test's own.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    Killed, RedisServer, TestDb, TestMyDb, code, eventually, free_port, json, lockctl, run_ok,
    spawn_lockctl, stderr, stdout,
};

/// What the hunt's `php -S` serves: the repository, so that both the tutorial's PHP
/// (`examples/tutorial-php/`) and the hunt's bug classes (`tests/fixtures/hunt/`) are reachable.
pub(crate) const FIXTURES: &str = env!("CARGO_MANIFEST_DIR");

/// The databases a system may need, named in its environment.
#[derive(Default)]
struct Env {
    pg_dsn: Option<String>,
    mysql_db: Option<String>,
    /// The port the system reaches its Redis on, when not the test's Redis (a proxy).
    redis_port: Option<u16>,
    /// More of the system's environment, `NAME=value ...` (a twin's switch).
    vars: &'static str,
}

/// `lockctl --json hunt` at `script` (under tests/fixtures), served by `php -S` on a free port
/// with 8 workers; `extra` are more hunt flags.
fn hunt(redis: &RedisServer, script: &str, env: &Env, extra: &[&str]) -> (i32, Value, String) {
    require_php_extensions();
    let (_, url, mut serve) = served(redis, script, 8);
    if let Some(port) = env.redis_port {
        serve = serve.replace(
            &format!("REDIS_PORT={} ", redis.port),
            &format!("REDIS_PORT={port} "),
        );
    }
    let url = format!("{url}&user={{user}}&order={{order}}");
    if let Some(dsn) = &env.pg_dsn {
        serve = format!("PG_DSN='{dsn}' {serve}");
    }
    if let Some(db) = &env.mysql_db {
        serve = format!("MYSQL_DB={db} {serve}");
    }
    if !env.vars.is_empty() {
        serve = format!("{} {serve}", env.vars);
    }
    let mut args = vec![
        "--json", "hunt", "--url", &url, "--preset", "tutorial", "--serve", &serve,
    ];
    args.extend_from_slice(extra);
    let out = lockctl(&redis.url(), &args);
    let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    let v = serde_json::from_str(stdout(&out).trim()).unwrap_or(Value::Null);
    (code(&out), v, said)
}

/// A free port, the URL of `script` served there, and the `--serve` command that serves it
/// with `workers` PHP workers talking to `redis`.
pub(crate) fn served(redis: &RedisServer, script: &str, workers: u32) -> (u16, String, String) {
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/{script}?sku={{sku}}");
    let serve = format!(
        "REDIS_PORT={} PHP_CLI_SERVER_WORKERS={workers} exec php -S 127.0.0.1:{port} -t {FIXTURES}",
        redis.port
    );
    (port, url, serve)
}

/// The processes of a `php -S` on `port` still running (or stopped), by pgrep.
fn left_on(port: u16) -> String {
    let out = Command::new("pgrep")
        .args(["-f", &format!("php -S 127.0.0.1:{port}")])
        .output()
        .unwrap();
    stdout(&out).trim().to_string()
}

pub(crate) fn require_php_extensions() {
    let modules = stdout(&run_ok(Command::new("php").arg("-m"))).to_lowercase();
    for m in ["redis", "pdo_pgsql", "pdo_mysql"] {
        assert!(
            modules.lines().any(|l| l.trim() == m),
            "php has no {m} extension: install it (apt-get install -y php-redis php-pgsql php-mysql)"
        );
    }
}

fn violations(v: &Value) -> String {
    v["failure"]["violations"].to_string()
}

/// The bug is found (exit 3) and named; the replay command carries the seed.
fn assert_found(found: (i32, Value, String), needle: &str) {
    let (exit, v, said) = found;
    assert_eq!(exit, 3, "{said}");
    assert_eq!(v["verdict"], "fail", "{said}");
    assert!(
        violations(&v).contains(needle),
        "no '{needle}' in {}",
        violations(&v)
    );
    let seed = v["seed"].as_u64().unwrap();
    assert!(
        v["replay"]
            .as_str()
            .unwrap()
            .ends_with(&format!("--seed {seed}")),
        "{}",
        v["replay"]
    );
}

/// The twin passes (exit 0) in every run, having judged at least 3 rounds with faults in
/// all. One run of an 8 s budget judges 2 rounds when its faults are long (two redis-pauses
/// of 2.3 s with a 3 s heal, a clean-clone CI run on a loaded machine), so `run` is made
/// again, up to 4 times, until 3 are judged: how many rounds fit a budget is the machine's
/// speed; what is asserted is that none fails.
fn assert_passed(mut run: impl FnMut() -> (i32, Value, String)) {
    let mut judged = 0;
    for _ in 0..4 {
        let (exit, v, said) = run();
        assert_eq!(exit, 0, "{said}");
        assert_eq!(v["verdict"], "pass", "{said}");
        judged += v["judged"].as_u64().unwrap();
        if judged >= 3 {
            return;
        }
    }
    panic!("the twin judged {judged} rounds in 4 runs, all passed");
}

const FIND: [&str; 2] = ["--budget", "40s"];
const PASS: [&str; 2] = ["--budget", "8s"];

/// The hunt with `flags` finds `needle` in the buggy `bug` and passes its `twin`.
fn finds_the_bug_and_passes_the_twin(
    redis: &RedisServer,
    env: &Env,
    flags: &[&str],
    (bug, needle): (&str, &str),
    twin: &str,
) {
    let find = [&FIND[..], flags].concat();
    assert_found(hunt(redis, bug, env, &find), needle);
    let pass = [&PASS[..], flags].concat();
    assert_passed(|| hunt(redis, twin, env, &pass));
}

#[test]
fn a_missing_lock_is_found_and_the_tutorials_code_passes() {
    let redis = RedisServer::start();
    let env = Env::default();
    assert_found(
        hunt(&redis, "examples/tutorial-php/nolock.php", &env, &FIND),
        "oversold",
    );
    assert_passed(|| hunt(&redis, "examples/tutorial-php/run_demo.php", &env, &PASS));
    // hammer --url's --stock and -n fix every round's instead of drawing them.
    let fixed = [&FIND[..], &["--stock", "3", "-n", "12"]].concat();
    let (exit, v, said) = hunt(&redis, "examples/tutorial-php/nolock.php", &env, &fixed);
    assert_eq!(exit, 3, "{said}");
    assert_eq!(
        (
            v["failure"]["stock"].as_u64(),
            v["failure"]["requests"].as_u64()
        ),
        (Some(3), Some(12)),
        "{said}"
    );
}

/// The tutorial's homework (a lease of 100 ms, work of 150 ms) answers busy at once: a round
/// of a few times its stock in requests is over before the first lease runs out. Buyers who
/// click again until told sold out outlive the lease, and the second holder oversells.
#[test]
fn the_tutorials_homework_oversells_when_buyers_click_again_until_sold_out() {
    let redis = RedisServer::start();
    let (exit, v, said) = hunt(
        &redis,
        "examples/tutorial-php/homework.php",
        &Env::default(),
        &["--budget", "20s"],
    );
    let seed = &v["seed"];
    assert_eq!(exit, 3, "seed {seed}: {said}");
    assert!(violations(&v).contains("oversold"), "seed {seed}: {said}");
    let shape = v["failure"]["shape"].as_str().unwrap_or_default();
    assert!(shape.starts_with("a sale"), "seed {seed}: {said}");
}

#[test]
fn a_lock_without_expiry_stalls_after_a_fault_and_its_twin_sells_again() {
    let redis = RedisServer::start();
    let env = Env::default();
    let heal = ["--heal-ms", "3000"];
    finds_the_bug_and_passes_the_twin(
        &redis,
        &env,
        &heal,
        ("tests/fixtures/hunt/frozen_lock.php", "stalled"),
        "tests/fixtures/hunt/expiring_lock.php",
    );
}

#[test]
fn a_swallowed_redis_error_is_a_phantom_sale_and_its_twin_passes() {
    let redis = RedisServer::start();
    let env = Env::default();
    // Only the faults that make Redis calls fail.
    let faults = ["--nemesis", "redis-pause,client-kill"];
    finds_the_bug_and_passes_the_twin(
        &redis,
        &env,
        &faults,
        ("tests/fixtures/hunt/swallow.php", "phantom sales"),
        "tests/fixtures/hunt/swallow_twin.php",
    );
}

#[test]
fn one_per_user_checked_then_acted_on_is_broken_by_a_double_click() {
    let redis = RedisServer::start();
    let env = Env::default();
    let users = ["--users", "4", "--limit", "1", "--heal-ms", "3000"];
    finds_the_bug_and_passes_the_twin(
        &redis,
        &env,
        &users,
        (
            "tests/fixtures/hunt/user_check_then_act.php",
            "the per-user limit of 1 was broken",
        ),
        "tests/fixtures/hunt/user_claim_first.php",
    );
}

#[test]
fn a_retry_that_deducts_again_is_caught_and_a_system_that_replays_passes() {
    let redis = RedisServer::start();
    let env = Env::default();
    let retries = ["--idempotent", "--heal-ms", "3000"];
    let find = [&FIND[..], &retries].concat();
    let (exit, v, said) = hunt(
        &redis,
        "tests/fixtures/hunt/retry_deducts_again.php",
        &env,
        &find,
    );
    let named = violations(&v);
    assert!(
        named.contains("not idempotent") || named.contains("ghost deductions"),
        "{named}"
    );
    assert_found((exit, v, said), "");
    let pass = [&PASS[..], &retries].concat();
    assert_passed(|| hunt(&redis, "tests/fixtures/hunt/retry_replays.php", &env, &pass));
}

/// A correct idempotent endpoint that loses 3 answers in 4 after the sale (503, "retry with
/// the same order id"): a retry's stored "bought" is the earlier request's sale, made before
/// a slower request was told "sold out", and no under-sale; under faults, a liveness probe
/// that sold the last unit with its answer lost makes the next probe's "sold out" true, not
/// an under-sale (issue 40, item 3).
#[test]
fn a_sale_answered_to_a_retry_after_its_first_answer_was_lost_is_no_under_sale() {
    let redis = RedisServer::start();
    let script = "tests/fixtures/hunt/retry_answer_lost.php";
    let fixed = [
        "--idempotent",
        "--nemesis",
        "none",
        "--rate",
        "100",
        "--stock",
        "3",
        "-n",
        "12",
        "--budget",
        "25s",
    ];
    let faults = ["--idempotent", "--heal-ms", "3000", "--budget", "15s"];
    // Ten rounds judged in all, over up to four runs: how many fit in one budget is the
    // machine's speed (and the faults' lengths: holds past 5 s timeouts make long rounds);
    // what is asserted is that none fails.
    for flags in [&fixed[..], &faults[..]] {
        let mut judged = 0;
        for _ in 0..4 {
            let (exit, v, said) = hunt(&redis, script, &Env::default(), flags);
            assert_eq!(exit, 0, "{flags:?}: {said}");
            assert_eq!(v["verdict"], "pass", "{said}");
            judged += v["judged"].as_u64().unwrap();
            if judged >= 10 {
                break;
            }
        }
        assert!(
            judged >= 10,
            "{flags:?}: {judged} rounds judged in 4 runs, all passed"
        );
    }
}

#[test]
fn a_lease_shorter_than_a_slow_path_oversells_and_a_fenced_write_passes() {
    let redis = RedisServer::start();
    // The system reaches Redis through lockctl's proxy, whose connections the stall fault
    // holds still.
    let proxy = free_port();
    let env = Env {
        redis_port: Some(proxy),
        ..Env::default()
    };
    let listen = format!("127.0.0.1:{proxy}");
    let flags = ["--proxy", &listen, "--heal-ms", "3000"];
    let find = [&FIND[..], &flags].concat();
    assert_found(
        hunt(
            &redis,
            "tests/fixtures/hunt/lease_slow_path.php",
            &env,
            &find,
        ),
        "oversold",
    );
    let pass = [&PASS[..], &flags, &["--nemesis", "stall,redis-pause"]].concat();
    assert_passed(|| hunt(&redis, "tests/fixtures/hunt/lease_fenced.php", &env, &pass));
}

/// A lock with a lease of 2.5 s around a read-then-write: only a holder stalled past its
/// lease lets a second buyer read the same stock. The hunt learns the lease from the keys its
/// Redis holds during a round and stalls a holder past it; with faults held 0.3 to 1.5 s (the
/// hunt's old holds, `--fault-ms 300..1500`) it passes. The fenced twin passes with the long
/// stalls on.
#[test]
fn a_lease_of_seconds_is_learned_and_a_holder_stalled_past_it_oversells() {
    let redis = RedisServer::start();
    let proxy = free_port();
    let env = Env {
        redis_port: Some(proxy),
        ..Env::default()
    };
    let listen = format!("127.0.0.1:{proxy}");
    let flags = [
        "--proxy",
        &listen,
        "--nemesis",
        "stall",
        "--heal-ms",
        "8000",
    ];
    let bug = "tests/fixtures/hunt/lease_seconds.php";
    let find = [&FIND[..], &flags].concat();
    let (exit, v, said) = hunt(&redis, bug, &env, &find);
    let seed = &v["seed"];
    let lease = &v["longest_lease"];
    assert!(
        lease["key"]
            .as_str()
            .is_some_and(|k| k.starts_with("lock:"))
            && (2000..=2500).contains(&lease["ttl_ms"].as_u64().unwrap_or(0)),
        "seed {seed}: {said}"
    );
    assert!(
        v["longest_fault_ms"].as_f64().unwrap_or(0.0) > 2500.0,
        "seed {seed}: {said}"
    );
    assert_found((exit, v, said), "oversold");
    let short = [&PASS[..], &flags, &["--fault-ms", "300..1500"]].concat();
    let (exit, v, said) = hunt(&redis, bug, &env, &short);
    assert_eq!(
        exit, 0,
        "faults shorter than the lease found it (seed {}): {said}",
        v["seed"]
    );
    // Every stall past the lease: the fenced write holds.
    let pass = [&["--budget", "12s", "--fault-ms", "2600..3500"][..], &flags].concat();
    let twin = hunt(
        &redis,
        "tests/fixtures/hunt/lease_seconds_fenced.php",
        &env,
        &pass,
    );
    assert!(
        twin.1["longest_fault_ms"].as_f64().unwrap_or(0.0) > 2500.0,
        "{}",
        twin.2
    );
    let mut first = Some(twin);
    assert_passed(|| {
        first.take().unwrap_or_else(|| {
            hunt(
                &redis,
                "tests/fixtures/hunt/lease_seconds_fenced.php",
                &env,
                &pass,
            )
        })
    });
}

/// A correct lock with a lease of 5 s: a holder killed with its lock keeps every buyer out
/// until the lease runs out, past a --heal-ms of 1 s. The stalled finding names the lease it
/// saw and how long the system took to sell again.
#[test]
fn a_stall_names_the_lease_it_saw_and_when_the_system_sold_again() {
    require_php_extensions();
    let redis = RedisServer::start();
    // Two workers: a kill meets the lock's holder often.
    let (_, url, serve) = served(&redis, "tests/fixtures/hunt/lease_five_seconds.php", 2);
    let args = [
        "--json",
        "hunt",
        "--url",
        &url,
        "--preset",
        "tutorial",
        "--serve",
        &serve,
        "--nemesis",
        "kill-worker",
        "--heal-ms",
        "1000",
        "--budget",
        "40s",
    ];
    let out = lockctl(&redis.url(), &args);
    let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap_or(Value::Null);
    let found = violations(&v);
    assert_eq!(code(&out), 3, "seed {}: {said}", v["seed"]);
    assert!(found.contains("stalled"), "{found}");
    assert!(
        found.contains("a key with a 5.0 s TTL was held ('lock:"),
        "seed {}: {found}",
        v["seed"]
    );
    assert!(found.contains("it sold again "), "{found}");
}

/// The database faults need the database: named without SQL facts, each is a usage error
/// that says which flag brings it.
#[test]
fn database_faults_without_a_database_are_usage_errors_naming_the_flag() {
    for (fault, flag) in [("db-lock", "--stock-sql"), ("db-kill", "--orders-sql")] {
        let out = lockctl(
            "redis://127.0.0.1:1",
            &[
                "hunt",
                "--url",
                "http://127.0.0.1:1/?sku={sku}",
                "--nemesis",
                fault,
            ],
        );
        assert_eq!(code(&out), 2, "{fault}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("--nemesis {fault}")) && stderr(&out).contains(flag),
            "{fault}: {}",
            stderr(&out)
        );
    }
}

/// `--fault-ms` takes MIN..MAX in ms, MIN at most MAX; anything else is a usage error that
/// names the value.
#[test]
fn a_fault_range_that_is_no_range_is_a_usage_error_naming_it() {
    for bad in ["5..2", "2000", "a..b", "0..10", "10..", "1..3600001"] {
        let out = lockctl(
            "redis://127.0.0.1:1",
            &[
                "hunt",
                "--url",
                "http://127.0.0.1:1/?sku={sku}",
                "--fault-ms",
                bad,
            ],
        );
        assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("'{bad}' is not a range of fault lengths")),
            "{bad}: {}",
            stderr(&out)
        );
    }
}

/// The proxy itself: a connection through it works, a stalled one moves nothing until it is let
/// go, and a reset one is broken; the others go on meanwhile.
#[test]
fn the_proxy_stalls_and_resets_one_connection_while_the_others_go_on() {
    use lockctl_hunt::proxy::Proxy;
    let redis = RedisServer::start();
    let upstream = vec![std::net::SocketAddr::from(([127, 0, 0, 1], redis.port))];
    let proxy = Proxy::start("127.0.0.1:0", upstream).unwrap();
    // A stalled connection is told apart by a short wait for its answer; every other wait is
    // long, so that a loaded machine's slow answer is not taken for a stall.
    let through = |wait_ms: u64| {
        let c = redis::Client::open(format!("redis://{}", proxy.addr())).unwrap();
        let conn = c.get_connection().unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(wait_ms)))
            .unwrap();
        conn
    };
    let ping = |c: &mut redis::Connection| redis::cmd("PING").query::<String>(c);
    let mut one = through(10_000);
    assert_eq!(ping(&mut one).unwrap(), "PONG");
    one.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let stalled = proxy.strike(0, false).expect("a connection to stall");
    assert!(stalled.starts_with("stalled"), "{stalled}");
    assert!(ping(&mut one).is_err(), "a stalled connection answered");
    // Another connection, opened meanwhile, goes on.
    let mut two = through(10_000);
    assert_eq!(ping(&mut two).unwrap(), "PONG");
    proxy.unstall_all();
    let mut three = through(10_000);
    assert_eq!(ping(&mut three).unwrap(), "PONG");
    // A reset breaks the connection it hits (the connection picked is the first still open):
    // once the proxy has seen the other two close, it is the third.
    drop((one, two));
    assert!(
        eventually(Duration::from_secs(30), || proxy.open() == 1),
        "the proxy still holds {} connections",
        proxy.open()
    );
    let reset = proxy.strike(0, true).expect("a connection to reset");
    assert!(reset.starts_with("reset"), "{reset}");
    assert!(ping(&mut three).is_err(), "a reset connection answered");
}

/// A database of the test's own with an empty `stock` table, and the PHP fixtures' DSN for it.
fn pg_stock() -> (TestDb, Env) {
    let db = TestDb::create();
    db.client()
        .batch_execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)")
        .unwrap();
    let env = Env {
        pg_dsn: Some(format!("host=127.0.0.1 dbname={} user=postgres", db.name)),
        ..Env::default()
    };
    (db, env)
}

#[test]
fn stock_in_postgresql_read_then_written_loses_updates_and_a_guarded_update_passes() {
    let redis = RedisServer::start();
    let (db, env) = pg_stock();
    let sql = [
        "--stock-sql",
        &db.url,
        "--stock-query",
        "SELECT qty FROM stock WHERE sku = $1",
        "--stock-seed",
        "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty",
        "--heal-ms",
        "3000",
    ];
    finds_the_bug_and_passes_the_twin(
        &redis,
        &env,
        &sql,
        (
            "tests/fixtures/hunt/pg_read_then_write.php",
            "phantom sales",
        ),
        "tests/fixtures/hunt/pg_guarded.php",
    );
}

/// A Ctrl-C in the facts check, which writes a probe row with --stock-sql (here a stock query
/// that takes 3 s): the check finishes and removes its row, and the hunt exits 130 before the
/// system starts. Before, no signal was listened for yet: the process died at once and left
/// the probe row in the user's table (found by an attack round).
#[test]
fn a_ctrl_c_in_the_facts_check_removes_its_probe_row_and_exits_130() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (db, env) = pg_stock();
    let (_, url, serve) = served(&redis, "tests/fixtures/hunt/pg_guarded.php", 2);
    let serve = format!("PG_DSN='{}' {serve}", env.pg_dsn.as_deref().unwrap());
    let child = crate::support::spawn_lockctl_with(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--stock-sql",
            &db.url,
            "--stock-query",
            "SELECT qty FROM stock, pg_sleep(3) WHERE sku = $1",
            "--stock-seed",
            "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty",
            "--stock-clean",
            "DELETE FROM stock WHERE sku = $1",
        ],
        crate::support::Streams::Capture,
    );
    // The probe row is written before the slow read: the check is under way.
    let writing = crate::support::eventually(Duration::from_secs(20), || {
        pg_skus(&db).iter().any(|s| s.starts_with("hunt-probe-"))
    });
    assert!(writing, "the facts check never wrote its probe row");
    crate::support::signal(child.id(), "INT");
    let out =
        crate::support::finish_within(child, Duration::from_secs(30), "the hunt after Ctrl-C");
    let err = stderr(&out);
    assert_eq!(code(&out), 130, "{err}");
    assert_eq!(pg_skus(&db), Vec::<String>::new(), "{err}");
}

/// A correct system on PostgreSQL passes with the database faults on: its stock row held by
/// another session, its sessions ended (its requests fail, nothing is sold twice).
#[test]
fn a_guarded_postgresql_stock_passes_with_its_row_held_and_its_sessions_ended() {
    let redis = RedisServer::start();
    let (db, env) = pg_stock();
    // One fault at a time, on a seed whose first rounds strike it: with both drawn at random
    // from a random seed, one of them was never drawn in 7 rounds about one run in 27.
    for f in ["db-lock", "db-kill"] {
        let (exit, v, said) = hunt(
            &redis,
            "tests/fixtures/hunt/pg_guarded.php",
            &env,
            &[
                "--stock-sql",
                &db.url,
                "--stock-query",
                "SELECT qty FROM stock WHERE sku = $1",
                "--stock-seed",
                "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty",
                "--nemesis",
                f,
                "--budget",
                "8s",
                "--seed",
                "1",
            ],
        );
        assert_eq!((exit, &v["verdict"]), (0, &Value::from("pass")), "{said}");
        assert!(
            v["faults"][f].as_u64().unwrap_or(0) >= 1,
            "{f} never took: {said}"
        );
    }
}

/// A stock kept in PostgreSQL is read during the round too, on a connection of lockctl's own:
/// the failing round's history keeps the reads (`read-stock` of the observer), and its
/// timeline draws the stock from them.
#[test]
fn a_stock_in_postgresql_is_read_while_the_round_goes_and_drawn_from_the_reads() {
    let redis = RedisServer::start();
    let (db, env) = pg_stock();
    let dir = tempfile::tempdir().unwrap();
    let (history, page) = (dir.path().join("h.jsonl"), dir.path().join("h.html"));
    let (exit, _, said) = hunt(
        &redis,
        "tests/fixtures/hunt/pg_read_then_write.php",
        &env,
        &[
            "--stock-sql",
            &db.url,
            "--stock-query",
            "SELECT qty FROM stock WHERE sku = $1",
            "--stock-seed",
            "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty",
            "--nemesis",
            "none",
            "--budget",
            "40s",
            "--stock",
            "20",
            "-n",
            "40",
            "--history",
            history.to_str().unwrap(),
            "--export-html",
            page.to_str().unwrap(),
        ],
    );
    assert_eq!(exit, 3, "{said}");
    let reads = std::fs::read_to_string(&history)
        .unwrap()
        .matches(r#""f":"read-stock","process":"observer""#)
        .count();
    assert!(
        reads >= 4,
        "two reads at least, an invoke and an ok each: {reads}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("the stock, read by lockctl during the round"),
        "{html}"
    );
}

#[test]
fn stock_in_mariadb_decremented_without_a_guard_goes_negative_and_a_guard_passes() {
    let redis = RedisServer::start();
    let db = TestMyDb::create();
    db.exec("CREATE TABLE stock (sku VARCHAR(200) PRIMARY KEY, qty INT NOT NULL)");
    let env = Env {
        mysql_db: Some(db.name.clone()),
        ..Env::default()
    };
    let sql = [
        "--stock-sql",
        &db.url,
        "--stock-query",
        "SELECT qty FROM stock WHERE sku = ?",
        "--stock-seed",
        "REPLACE INTO stock VALUES (?, ?)",
        "--heal-ms",
        "3000",
    ];
    finds_the_bug_and_passes_the_twin(
        &redis,
        &env,
        &sql,
        ("tests/fixtures/hunt/my_unguarded.php", "oversold"),
        "tests/fixtures/hunt/my_guarded.php",
    );
}

/// The orders table of the PHP fixtures that write rows (order_id is the request's `{order}`,
/// or the service's own number).
const ORDERS_TABLE: &str = "CREATE TABLE orders (order_id text PRIMARY KEY, sku text NOT NULL, qty int NOT NULL, user_id text NOT NULL)";

/// Units, not answers (issue 50, item 1): a lock whose lease the work sometimes outlives lets
/// two holders write, two rows for one unit the stock gave up, and the stale holder answers
/// 503 "lock lost", which no pattern classifies. Counted by answers, its row is explained by
/// that 503 ("may have bought"), and the hunt passed; counted by units, the rows hold more
/// than the stock gave up: oversold. The guarded twin answers the same 503 and writes nothing.
#[test]
fn order_rows_beyond_the_units_the_stock_gave_up_fail_whatever_a_503_said() {
    let redis = RedisServer::start();
    let (db, env) = pg_stock();
    db.client().batch_execute(ORDERS_TABLE).unwrap();
    let flags = [
        "--stock-sql",
        &db.url,
        "--stock-query",
        "SELECT qty FROM stock WHERE sku = $1",
        "--stock-seed",
        "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty",
        "--orders-sql",
        &db.url,
        "--orders-query",
        "SELECT order_id, qty, user_id FROM orders WHERE sku = $1",
        "--nemesis",
        "none",
        "--heal-ms",
        "3000",
    ];
    let script = "tests/fixtures/hunt/lease_lost_503.php";
    let (exit, v, said) = hunt(&redis, script, &env, &[&FIND[..], &flags].concat());
    assert_eq!(exit, 3, "{said}");
    let found = violations(&v);
    assert!(found.contains("oversold by "), "{said}");
    assert!(found.contains("order rows hold "), "{said}");
    assert!(found.contains("whatever the answers said"), "{said}");
    let guarded = Env {
        vars: "GUARDED=1",
        ..env
    };
    assert_passed(|| hunt(&redis, script, &guarded, &[&PASS[..], &flags].concat()));
}

/// One receipt for several buyers (issue 50, item 2): the service numbers its orders, hands
/// every buyer "SO-SAME" (or a number from a 250 ms clock) and keeps one row per number.
/// Matched by the numbers the answers carry, every answer found its row and the hunt passed;
/// now two "bought" answers naming one number are a finding, and the number owes a unit to
/// each. The twin numbers each order apart and passes.
#[test]
fn one_order_number_answered_to_several_buyers_is_found_and_unique_numbers_pass() {
    let redis = RedisServer::start();
    let db = TestDb::create();
    db.client().batch_execute(ORDERS_TABLE).unwrap();
    let dsn = format!("host=127.0.0.1 dbname={} user=postgres", db.name);
    let flags = [
        "--orders-sql",
        &db.url,
        "--orders-query",
        "SELECT order_id, qty, user_id FROM orders WHERE sku = $1",
        "--order-from",
        "订单号: (\\S+)",
        "--nemesis",
        "none",
    ];
    let script = "tests/fixtures/hunt/orders_one_number.php";
    for vars in ["", "CLOCK=1"] {
        let env = Env {
            pg_dsn: Some(dsn.clone()),
            vars,
            ..Env::default()
        };
        let (exit, v, said) = hunt(&redis, script, &env, &[&FIND[..], &flags].concat());
        assert_eq!(exit, 3, "{vars}: {said}");
        let found = violations(&v);
        assert!(
            found.contains("one order id answered to several buyers"),
            "{vars}: {said}"
        );
        assert!(found.contains("answers named it)"), "{vars}: {said}");
    }
    let unique = Env {
        pg_dsn: Some(dsn),
        vars: "UNIQUE=1",
        ..Env::default()
    };
    assert_passed(|| hunt(&redis, script, &unique, &[&PASS[..], &flags].concat()));
}

#[test]
fn orders_dropped_on_their_way_to_the_database_are_lost_orders() {
    let redis = RedisServer::start();
    let (buggy, twin) = (TestDb::create(), TestDb::create());
    let table = "CREATE TABLE orders (order_id text PRIMARY KEY, sku text NOT NULL, qty int NOT NULL, user_id text NOT NULL)";
    buggy
        .client()
        .batch_execute(&format!(
            "{table}; ALTER TABLE orders ADD UNIQUE (sku, user_id)"
        ))
        .unwrap();
    twin.client().batch_execute(table).unwrap();
    for (db, script, found) in [
        (&buggy, "tests/fixtures/hunt/orders_keyed_by_user.php", true),
        (
            &twin,
            "tests/fixtures/hunt/orders_keyed_by_order.php",
            false,
        ),
    ] {
        let env = Env {
            pg_dsn: Some(format!("host=127.0.0.1 dbname={} user=postgres", db.name)),
            ..Env::default()
        };
        let args = [
            if found { FIND[1] } else { PASS[1] },
            "--orders-sql",
            &db.url,
            "--orders-query",
            "SELECT order_id, qty, user_id FROM orders WHERE sku = $1",
            "--users",
            "3",
            "--heal-ms",
            "3000",
        ];
        let args = [&["--budget"][..], &args].concat();
        match found {
            true => assert_found(hunt(&redis, script, &env, &args), "lost orders"),
            false => assert_passed(|| hunt(&redis, script, &env, &args)),
        }
    }
}

/// A correct endpoint whose orders reach PostgreSQL up to 1.5 s after its answers (a Redis
/// list, and a consumer that flushes it every 1.5 s) passes: its rows are judged at rest,
/// read again for up to --heal-ms (issue 40, item 4). The negative control: the consumer drops
/// every fourth order, and the hunt finds the lost orders all the same.
#[test]
fn orders_written_a_moment_later_are_judged_at_rest_and_a_lost_one_still_fails() {
    require_php_extensions();
    let redis = RedisServer::start();
    let db = TestDb::create();
    db.client()
        .batch_execute("CREATE TABLE orders (order_id text PRIMARY KEY, sku text NOT NULL, qty int NOT NULL, user_id text NOT NULL)")
        .unwrap();
    let dsn = format!("host=127.0.0.1 dbname={} user=postgres", db.name);
    let flusher = |lose: &str| {
        Killed(
            Command::new("php")
                .arg(Path::new(FIXTURES).join("tests/fixtures/hunt/orders_flusher.php"))
                .env("REDIS_PORT", redis.port.to_string())
                .env("PG_DSN", &dsn)
                .env("LOSE_EVERY", lose)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let env = Env {
        pg_dsn: Some(dsn.clone()),
        ..Env::default()
    };
    let orders = [
        "--orders-sql",
        &db.url,
        "--orders-query",
        "SELECT order_id, qty, user_id FROM orders WHERE sku = $1",
        "--nemesis",
        "none",
        "--heal-ms",
        "4000",
    ];
    let script = "tests/fixtures/hunt/orders_queued.php";
    let late = flusher("0");
    let (exit, v, said) = hunt(&redis, script, &env, &[&PASS[..], &orders].concat());
    assert_eq!(exit, 0, "{said}");
    assert_eq!(v["verdict"], "pass", "{said}");
    // At least one round judged: how many fit in the budget depends on the machine's load
    // (CI once judged 1 in 8 s), and one judged round is a verdict.
    assert!(v["judged"].as_u64().unwrap() >= 1, "{said}");
    drop(late);
    let losing = flusher("4");
    assert_found(
        hunt(&redis, script, &env, &[&FIND[..], &orders].concat()),
        "lost orders",
    );
    drop(losing);
    // At least once: every order's second row comes a flush (1.5 s) after its first. The rows
    // agree with the answers for a moment; at rest they do not.
    db.client()
        .batch_execute("DROP TABLE orders; CREATE TABLE orders (order_id text NOT NULL, sku text NOT NULL, qty int NOT NULL, user_id text NOT NULL)")
        .unwrap();
    let _twice = Killed(
        Command::new("php")
            .arg(Path::new(FIXTURES).join("tests/fixtures/hunt/orders_flusher.php"))
            .env("REDIS_PORT", redis.port.to_string())
            .env("PG_DSN", &dsn)
            .env("REDELIVER", "1")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert_found(
        hunt(&redis, script, &env, &[&FIND[..], &orders].concat()),
        "orders written more than once",
    );
}

#[test]
fn a_failing_rounds_history_is_judged_again_the_same() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("round.jsonl");
    let f = file.to_str().unwrap();
    let page = dir.path().join("round.html");
    let p = page.to_str().unwrap();
    let (exit, v, said) = hunt(
        &redis,
        "examples/tutorial-php/nolock.php",
        &Env::default(),
        &["--budget", "40s", "--history", f, "--export-html", p],
    );
    assert_eq!(exit, 3, "{said}");
    let again = lockctl("redis://127.0.0.1:1", &["--json", "judge", f]);
    assert_eq!(code(&again), 3, "{}", stderr(&again));
    assert_eq!(json(&again)["violations"], v["failure"]["violations"]);
    // The round's timeline: a bar per request, the failing round's SKU, the violations.
    let html = std::fs::read_to_string(&page).unwrap();
    let sku = v["failure"]["sku"].as_str().unwrap();
    assert!(html.contains("<svg") && html.contains(sku), "{html}");
    // A fault's band is drawn twice: beneath the bars, and see-through over them.
    assert_eq!(
        html.matches("<rect").count() as u64,
        v["failure"]["requests"].as_u64().unwrap()
            + 2 * v["failure"]["faults"].as_array().unwrap().len() as u64,
        "a bar per request and two bands per fault"
    );
    assert!(html.contains("oversold"), "{html}");
    let page2 = dir.path().join("again.html");
    let again = lockctl(
        "redis://127.0.0.1:1",
        &["judge", f, "--export-html", page2.to_str().unwrap()],
    );
    assert_eq!(code(&again), 3, "{}", stderr(&again));
    assert_eq!(std::fs::read_to_string(&page2).unwrap(), html);
}

#[test]
fn facts_that_cannot_work_are_refused_before_any_request() {
    let redis = RedisServer::start();
    let url = "http://127.0.0.1:1/x.php?sku={sku}";
    let refuse = |args: &[&str], needle: &str| {
        let mut all = vec!["hunt", "--url", url, "--preset", "tutorial"];
        all.extend_from_slice(args);
        let out: Output = lockctl(&redis.url(), &all);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    };
    refuse(&["--nemesis", "kill-worker"], "--serve");
    refuse(&["--nemesis", "stall"], "--proxy LISTEN");
    // A proxy address in use: exit 2 naming it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    refuse(
        &["--proxy", &addr],
        &format!("--proxy cannot listen on '{addr}'"),
    );
    refuse(&["--nemesis", "earthquake"], "'earthquake' is not a fault");
    refuse(&["--budget", "soon"], "'soon' is not a budget");
    refuse(
        &["--history", "/no/such/dir/h.jsonl"],
        "cannot write --history '/no/such/dir/h.jsonl'",
    );
    let db = TestDb::create();
    db.client()
        .batch_execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)")
        .unwrap();
    let seed =
        "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty";
    refuse(
        &[
            "--stock-sql",
            &db.url,
            "--stock-query",
            "SELECT nope FROM stock WHERE sku = $1",
            "--stock-seed",
            seed,
        ],
        "--stock-query 'SELECT nope FROM stock WHERE sku = $1'",
    );
    refuse(
        &[
            "--stock-sql",
            &db.url,
            "--stock-query",
            "SELECT qty, 1 FROM stock WHERE sku = $1",
            "--stock-seed",
            seed,
        ],
        "one row of one integer",
    );
    refuse(
        &[
            "--stock-sql",
            "redis://127.0.0.1:1",
            "--stock-query",
            "x",
            "--stock-seed",
            "y",
        ],
        "neither a PostgreSQL URL",
    );
    // An orders query whose units are not integers is refused before the hunt, not judged
    // round after round.
    db.client()
        .batch_execute("CREATE TABLE orders (order_id text, sku text, qty numeric)")
        .unwrap();
    refuse(
        &[
            "--orders-sql",
            &db.url,
            "--orders-query",
            "SELECT order_id, qty FROM orders WHERE sku = $1",
        ],
        "not an integer",
    );
    // A Redis that refuses CLIENT (as managed services do): the Redis faults are refused up
    // front, not counted as done while they did nothing.
    let locked = RedisServer::start_with(&["--rename-command", "CLIENT", ""]);
    let out = lockctl(
        &locked.url(),
        &[
            "hunt",
            "--url",
            url,
            "--preset",
            "tutorial",
            "--nemesis",
            "redis-pause",
        ],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("redis-pause needs CLIENT PAUSE"),
        "{}",
        stderr(&out)
    );
    // A system that exits at once: exit 1 with the tail of what it said.
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            url,
            "--preset",
            "tutorial",
            "--serve",
            "echo broken-start >&2; exit 7",
        ],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("broken-start"), "{}", stderr(&out));
}

/// Ctrl-C while Redis is paused by the hunt and a process of the system may be stopped: the
/// hunt stops, Redis takes writes at once, and nothing of the system is left running or
/// stopped.
#[test]
fn ctrl_c_in_the_middle_of_a_fault_undoes_it_and_stops_the_system() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (port, url, serve) = served(&redis, "tests/fixtures/hunt/expiring_lock.php", 4);
    let child = spawn_lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "redis-pause,pause-worker",
            "--budget",
            "60s",
        ],
    );
    // Wait for a pause: a write that does not come back within 100 ms.
    let paused = crate::support::eventually(Duration::from_secs(30), || {
        let mut c = redis.raw();
        c.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        redis::cmd("SET")
            .arg("probe")
            .arg(1)
            .query::<()>(&mut c)
            .is_err()
    });
    assert!(paused, "the hunt never paused Redis");
    let pid = child.id();
    crate::support::signal(pid, "INT");
    let started = Instant::now();
    let out =
        crate::support::finish_within(child, Duration::from_secs(30), "the hunt after Ctrl-C");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        [0, 1, 3, 130].contains(&code(&out)),
        "exit {}: {}",
        code(&out),
        stderr(&out)
    );
    // Redis takes writes at once.
    let mut c = redis.raw();
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    redis::cmd("SET")
        .arg("after")
        .arg(1)
        .query::<()>(&mut c)
        .expect("Redis still paused after the hunt ended");
    // Nothing of the system is left: no php -S on that port, stopped or running.
    assert_eq!(left_on(port), "", "processes of --serve left behind");
    let _ = Path::new(FIXTURES);
}

/// A second Ctrl-C quits at once and leaves what the hunt created in the system's stores: the
/// message names the SKUs whose keys are left, and they are (one Ctrl-C removes them: see
/// `a_hunt_removes_the_rows_and_keys_it_created_and_keep_keeps_them`).
#[test]
fn a_second_ctrl_c_names_the_skus_whose_keys_it_leaves() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (port, url, serve) = served(&redis, "tests/fixtures/hunt/expiring_lock.php", 4);
    let child = crate::support::spawn_lockctl_with(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "none",
            "--budget",
            "60s",
        ],
        crate::support::Streams::Capture,
    );
    let round_keys = || -> Vec<String> {
        redis::cmd("KEYS")
            .arg("*hunt-*")
            .query(&mut redis.raw())
            .unwrap_or_default()
    };
    let started = crate::support::eventually(Duration::from_secs(30), || !round_keys().is_empty());
    assert!(started, "no round's key appeared");
    let pid = child.id();
    crate::support::signal(pid, "INT");
    std::thread::sleep(Duration::from_millis(50));
    crate::support::signal(pid, "INT");
    let out =
        crate::support::finish_within(child, Duration::from_secs(30), "the hunt after two Ctrl-C");
    let err = stderr(&out);
    assert_eq!(code(&out), 130, "{err}");
    let left = round_keys();
    assert!(!left.is_empty(), "{err}");
    let sku = left[0]
        .split(':')
        .find(|p| p.starts_with("hunt-"))
        .unwrap()
        .to_string();
    assert!(
        err.contains("left what the hunt created for") && err.contains(&sku),
        "{left:?}: {err}"
    );
    assert_eq!(left_on(port), "", "processes of --serve left behind");
}

/// lockctl's own strategies under the same nemesis: the negative control and a lease shorter
/// than the work fail, the safe strategies and the watchdog pass, under every fault.
#[test]
fn lockctls_own_strategies_make_the_expected_matrix() {
    let redis = RedisServer::start();
    let matrix = |args: &[&str]| {
        let mut all = vec!["--json", "hunt"];
        all.extend_from_slice(args);
        let out = lockctl(&redis.url(), &all);
        let v = json(&out);
        let cells: Vec<(String, String, String)> = v["matrix"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["strategy"].as_str().unwrap().to_string(),
                    c["fault"].as_str().unwrap_or("none").to_string(),
                    c["verdict"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        (code(&out), cells, v.to_string())
    };
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("matrix.html");
    let (exit, cells, said) = matrix(&[
        "--export-html",
        page.to_str().unwrap(),
        "--strategy",
        "fenced,atomic,batch,naive",
        "--ttl-ms",
        "300",
        "--budget",
        "16s",
    ]);
    assert_eq!(exit, 3, "{said}");
    assert_eq!(
        cells.len(),
        16,
        "4 strategies x (no fault + 3 faults): {said}"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("<td ").count(), 16, "{html}");
    assert!(
        html.contains("pause-holder") && html.contains("FAIL"),
        "{html}"
    );
    for (strategy, fault, verdict) in &cells {
        match strategy.as_str() {
            "naive" if fault == "none" => assert_eq!(verdict, "fail", "{said}"),
            "naive" => {}
            _ => assert_eq!(verdict, "pass", "{strategy} under {fault}: {said}"),
        }
    }
    let (exit, cells, said) = matrix(&[
        "--strategy",
        "lock",
        "--ttl-ms",
        "100",
        "--work-ms",
        "150",
        "--budget",
        "4s",
    ]);
    assert_eq!(exit, 3, "{said}");
    // Without a fault it oversells every time; a fault may slow a round's buyers enough that
    // one round happens not to.
    assert!(
        cells.iter().any(|c| c.1 == "none" && c.2 == "fail"),
        "{said}"
    );
    let (exit, cells, said) = matrix(&[
        "--strategy",
        "lock",
        "--watchdog",
        "--ttl-ms",
        "300",
        "--work-ms",
        "400",
        "--budget",
        "4s",
    ]);
    assert_eq!(exit, 0, "{said}");
    assert!(cells.iter().all(|c| c.2 == "pass"), "{said}");
}

/// Nothing of `--serve` is left behind when its shell backgrounds the server and exits, nor
/// when Ctrl-C comes while the system is still starting; and a Ctrl-C in the middle of a round
/// is not a stall.
#[test]
fn no_system_is_left_running_and_an_interrupted_round_is_no_stall() {
    require_php_extensions();
    let redis = RedisServer::start();
    // A shell that starts the server in the background and exits.
    let (port, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 1);
    let serve = format!("{} >/dev/null 2>&1 &", serve.replace("exec ", ""));
    let out = lockctl(
        &redis.url(),
        &[
            "hunt", "--url", &url, "--preset", "tutorial", "--serve", &serve, "--budget", "2s",
        ],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("exited"), "{}", stderr(&out));
    assert_eq!(left_on(port), "", "a backgrounded server was left running");

    // Ctrl-C while the system is starting.
    let (port, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 1);
    let serve = format!("sleep 2; {serve}");
    let child = spawn_lockctl(
        &redis.url(),
        &[
            "hunt", "--url", &url, "--preset", "tutorial", "--serve", &serve,
        ],
    );
    std::thread::sleep(Duration::from_millis(800));
    crate::support::signal(child.id(), "INT");
    let out = crate::support::finish_within(child, Duration::from_secs(20), "hunt after Ctrl-C");
    assert_ne!(code(&out), 0, "{}", stderr(&out));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        left_on(port),
        "",
        "the system was left running after Ctrl-C"
    );

    // Ctrl-C in the middle of a round of a slow, correct endpoint: not a stall (exit 130, not 3).
    let (port, url, serve) = served(&redis, "examples/tutorial-php/slow.php", 8);
    let child = spawn_lockctl(
        &redis.url(),
        &[
            "--json",
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "none",
            "--budget",
            "30s",
            "--heal-ms",
            "20000",
        ],
    );
    std::thread::sleep(Duration::from_millis(2500));
    crate::support::signal(child.id(), "INT");
    let started = Instant::now();
    let out = crate::support::finish_within(child, Duration::from_secs(15), "hunt after Ctrl-C");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "Ctrl-C waited out --heal-ms"
    );
    assert_eq!(code(&out), 130, "{}{}", stdout(&out), stderr(&out));
    assert!(!stdout(&out).contains("stalled"), "{}", stdout(&out));
    assert_eq!(left_on(port), "");
}

/// A system that cannot be brought back after a kill ends the hunt with an error (exit 1,
/// saying so), never a FAIL that blames the system; and a liveness budget shorter than the
/// round's own work still sends a probe before it calls anything stalled.
#[test]
fn a_failed_restart_is_lockctls_error_and_a_short_heal_still_probes() {
    require_php_extensions();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("started");
    let (_, url, serve) = served(&redis, "tests/fixtures/hunt/expiring_lock.php", 4);
    let once = format!(
        "test -e {m} && exit 9; touch {m}; {serve}",
        m = mark.display()
    );
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &once,
            "--nemesis",
            "kill-worker",
            "--budget",
            "20s",
        ],
    );
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("could not restart --serve"),
        "{}",
        stderr(&out)
    );
    let (_, url, serve) = served(&redis, "tests/fixtures/hunt/expiring_lock.php", 8);
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "none",
            "--heal-ms",
            "1",
            "--budget",
            "4s",
        ],
    );
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

/// Bytes that drive a terminal: ESC, BEL, CR, and the C1 CSI (U+009B, as UTF-8).
pub(crate) fn terminal_controls(bytes: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        let c1 = *b == 0xc2 && bytes.get(i + 1).is_some_and(|n| (0x80..0xa0).contains(n));
        if matches!(b, 0x1b | 0x07 | b'\r') || c1 {
            let from = i.saturating_sub(40);
            found.push(String::from_utf8_lossy(&bytes[from..(i + 40).min(bytes.len())]).into());
        }
    }
    found
}

/// An endpoint whose 500 answer is made of terminal escapes (erase the line, move up, a fake
/// `verdict PASS`) is shown escaped in the hunt's report, and so is the history it wrote when
/// `judge` reads it again: no byte of it can move the cursor or rewrite a line.
#[test]
fn an_answer_made_of_terminal_escapes_cannot_rewrite_the_screen() {
    require_php_extensions();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let history = dir.path().join("h.jsonl");
    let (_, url, serve) = served(&redis, "tests/fixtures/hunt/rewrites_the_screen.php", 4);
    let url = format!("{url}&order={{order}}");
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "none",
            "--budget",
            "6s",
            "--history",
            history.to_str().unwrap(),
        ],
    );
    let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert_eq!(code(&out), 3, "{said}");
    assert!(stdout(&out).contains("first error"), "{said}");
    assert!(stdout(&out).contains(r"\u{1b}[2K"), "{said}");
    for bytes in [&out.stdout, &out.stderr] {
        assert_eq!(terminal_controls(bytes), Vec::<String>::new(), "{said}");
    }
    let judged = lockctl(&redis.url(), &["judge", history.to_str().unwrap()]);
    let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&judged), stderr(&judged));
    assert_eq!(code(&judged), 3, "{said}");
    assert!(stdout(&judged).contains(r"\u{1b}[2K"), "{said}");
    for bytes in [&judged.stdout, &judged.stderr] {
        assert_eq!(terminal_controls(bytes), Vec::<String>::new(), "{said}");
    }
    // JSON stays JSON: the body is there, escaped by JSON's own rules.
    let judged = lockctl(
        &redis.url(),
        &["--json", "judge", history.to_str().unwrap()],
    );
    assert!(
        stdout(&judged).contains(r"\u001b[2K"),
        "{}",
        stdout(&judged)
    );
}

/// A signal while `--serve`'s system is still starting stops it and exits as the signal says:
/// 130 for Ctrl-C, 143 for SIGTERM (not 1, an error), with nothing of the system left.
#[test]
fn a_signal_while_the_system_starts_exits_with_the_signals_code() {
    require_php_extensions();
    let redis = RedisServer::start();
    for (signal, exit) in [("INT", 130), ("TERM", 143)] {
        let (port, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 1);
        let serve = format!("sleep 3; {serve}");
        let child = crate::support::spawn_lockctl_with(
            &redis.url(),
            &[
                "hunt", "--url", &url, "--preset", "tutorial", "--serve", &serve,
            ],
            crate::support::Streams::Capture,
        );
        std::thread::sleep(Duration::from_millis(800));
        crate::support::signal(child.id(), signal);
        let out =
            crate::support::finish_within(child, Duration::from_secs(20), "hunt after a signal");
        assert_eq!(code(&out), exit, "SIG{signal}: {}", stderr(&out));
        assert!(stderr(&out).contains("starting"), "{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(2500));
        assert_eq!(
            left_on(port),
            "",
            "the system was left running after SIG{signal}"
        );
    }
}

/// The processes whose command line holds `marker`, by pgrep (none: "").
fn running(marker: &str) -> String {
    let out = Command::new("pgrep")
        .args(["-af", "--", marker])
        .output()
        .unwrap();
    stdout(&out)
        .lines()
        .filter(|l| !l.contains("pgrep"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether something still accepts connections on `port`.
fn answers_on(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// `--serve` commands whose system starts a daemon: it leaves the system's process group (and
/// with `env -i` its environment too), and is still stopped with the system, at the end of the
/// hunt, after one Ctrl-C and after two: no process left, no port bound.
#[test]
fn daemons_the_system_starts_are_stopped_with_it() {
    require_php_extensions();
    let redis = RedisServer::start();
    let redis_server = crate::support::redis_server_program();
    let dir = tempfile::tempdir().unwrap();
    // Each a name and the `--serve` command from (port, the plain command, a free port).
    type Variant<'a> = (&'a str, Box<dyn Fn(u16, &str, u16) -> String + 'a>);
    let variants: Vec<Variant> = vec![
        (
            "redis-server --daemonize yes",
            Box::new(|_, serve: &str, extra: u16| {
                format!(
                    "{} --daemonize yes --port {extra} --save '' --appendonly no --dir {d} --pidfile {d}/r{extra}.pid; {serve}",
                    redis_server.display(),
                    d = dir.path().display()
                )
            }),
        ),
        (
            "setsid -f php -S",
            Box::new(|port, serve: &str, _| {
                let php = serve.replace("exec php", "setsid -f php");
                format!("{php}; exec sleep 600.{port}")
            }),
        ),
        (
            "setsid -f env -i php -S",
            Box::new(|port, serve: &str, _| {
                let php = serve.replace(
                    "exec php",
                    "setsid -f env -i PATH=\"$PATH\" REDIS_PORT=$REDIS_PORT php",
                );
                format!(
                    "export REDIS_PORT={}; {php}; exec sleep 600.{port}",
                    redis.port
                )
            }),
        ),
    ];
    for (name, command) in &variants {
        for ending in ["end", "ctrl-c", "ctrl-c twice"] {
            let extra = free_port();
            let (port, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 2);
            let serve = command(port, &serve, extra);
            let child = crate::support::spawn_lockctl_with(
                &redis.url(),
                &[
                    "hunt",
                    "--url",
                    &url,
                    "--preset",
                    "tutorial",
                    "--serve",
                    &serve,
                    "--nemesis",
                    "none",
                    "--budget",
                    "3s",
                ],
                crate::support::Streams::Capture,
            );
            if ending != "end" {
                assert!(
                    crate::support::eventually(Duration::from_secs(15), || answers_on(port)),
                    "{name}: the system never answered"
                );
                std::thread::sleep(Duration::from_millis(300));
                crate::support::signal(child.id(), "INT");
                if ending == "ctrl-c twice" {
                    std::thread::sleep(Duration::from_millis(50));
                    crate::support::signal(child.id(), "INT");
                }
            }
            let out = crate::support::finish_within(child, Duration::from_secs(30), name);
            let said = format!("{name}, {ending}: {}{}", stdout(&out), stderr(&out));
            let expected = if ending == "end" { 0 } else { 130 };
            assert_eq!(code(&out), expected, "{said}");
            // A process killed a moment ago may still be on its way out.
            let gone = crate::support::eventually(Duration::from_secs(3), || {
                running(&format!("127.0.0.1:{port}")).is_empty()
                    && running(&format!(":{extra}")).is_empty()
                    && running(&format!("600.{port}")).is_empty()
                    && !answers_on(port)
                    && !answers_on(extra)
            });
            assert!(
                gone,
                "{said}\nleft: {} {} {}; port {port} answers: {}, port {extra}: {}",
                running(&format!("127.0.0.1:{port}")),
                running(&format!(":{extra}")),
                running(&format!("600.{port}")),
                answers_on(port),
                answers_on(extra)
            );
        }
    }
}

/// A system of a few hundred processes (a pool of workers, or a supervisor that keeps starting
/// them) is stopped in seconds: the stop looked at the whole process tree once per process,
/// in time quadratic in the tree each look, so 400 processes took 22 s to stop and a respawning
/// supervisor kept a Ctrl-C'd hunt running for more than ten minutes.
#[test]
fn a_system_of_hundreds_of_processes_is_stopped_in_seconds() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (port, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 2);
    let marker = format!("60{port}");
    let serve = format!("for i in $(seq 600); do sleep {marker} & done; {serve}");
    let started = Instant::now();
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "none",
            "--budget",
            "1s",
        ],
    );
    let took = started.elapsed();
    let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert_eq!(code(&out), 0, "{said}");
    assert!(
        took < Duration::from_secs(20),
        "the hunt took {took:?}\n{said}"
    );
    assert_eq!(running(&format!("sleep {marker}")), "", "{said}");
    assert_eq!(left_on(port), "", "{said}");
}

/// The replay line a hunt prints runs as printed, through `sh`, and replays the hunt: the same
/// seed, the same verdict. Placeholders (`Idempotency-Key: {order}`, `idempotency_key={order}`)
/// and a user's name in a URL without a password are no secrets and are printed as they are;
/// the Redis given by `REDIS_URL` is on the line; a real secret (an API key) is read from an
/// environment variable the report names.
#[test]
fn the_replay_line_runs_as_printed_and_replays_the_hunt() {
    require_php_extensions();
    let redis = RedisServer::start();
    let db = TestDb::create();
    db.client()
        .batch_execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL)")
        .unwrap();
    let (_, url, serve) = served(&redis, "tests/fixtures/hunt/pg_guarded.php", 4);
    let serve = format!(
        "PG_DSN='host=127.0.0.1 dbname={} user=postgres' {serve}",
        db.name
    );
    let url = format!("{url}&user={{user}}&order={{order}}&idempotency_key={{order}}");
    let args = [
        "hunt",
        "--url",
        &url,
        "--preset",
        "tutorial",
        "--serve",
        &serve,
        "--header",
        "Idempotency-Key: {order}",
        "--header",
        "X-Api-Key: k1-secret",
        "--stock-sql",
        &db.url,
        "--stock-query",
        "SELECT qty FROM stock WHERE sku = $1",
        "--stock-seed",
        "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty",
        "--nemesis",
        "none",
        "--budget",
        "3s",
    ];
    let out = lockctl(&redis.url(), &args);
    let said = format!("stdout:\n{}\nstderr:\n{}", stdout(&out), stderr(&out));
    assert_eq!(code(&out), 0, "{said}");
    let text = stdout(&out);
    let line = |prefix: &str, text: &str| -> String {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no '{prefix}' line in:\n{text}"))
            .trim()
            .to_string()
    };
    let replay = line("replay ", &text);
    // Nothing of what must run is hidden, and the Redis used is named: checked before the
    // line runs, so that it never reaches a Redis of the machine's.
    assert!(!replay.contains("***"), "{replay}");
    assert!(replay.contains("Idempotency-Key: {order}"), "{replay}");
    assert!(replay.contains("idempotency_key={order}"), "{replay}");
    assert!(replay.contains(&db.url), "{replay}");
    assert!(
        replay.contains(&format!("--redis {}", redis.url())),
        "{replay}"
    );
    assert!(!text.contains("k1-secret"), "{text}");
    assert!(
        line("(set ", &text).starts_with("LOCKCTL_SECRET_1 to the secret in --header"),
        "{text}"
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_lockctl")).parent().unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let again = Command::new("sh")
        .args(["-c", &replay])
        .env("PATH", path)
        .env("LOCKCTL_SECRET_1", "k1-secret")
        .env_remove("REDIS_URL")
        .env("LOCKCTL_DEFAULT_REDIS_URL", "redis://127.0.0.1:1")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said_again = format!("stdout:\n{}\nstderr:\n{}", stdout(&again), stderr(&again));
    assert_eq!(code(&again), 0, "{said_again}");
    let seed = |text: &str| {
        line("hunt: seed", text)
            .split(',')
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(seed(&text), seed(&stdout(&again)), "{said_again}");
    assert!(
        line("verdict ", &stdout(&again)).starts_with("PASS"),
        "{said_again}"
    );
}

/// Redlock nodes given by `LOCKCTL_LOCK_NODES` (not on the command line) are on the replay
/// line, each as `--lock-node`, a node's password read from an environment variable the report
/// names: without them a pasted replay locked on `--redis` alone, another hunt than the one
/// that failed.
#[test]
fn the_replay_line_names_the_lock_nodes_from_the_environment_with_their_passwords_hidden() {
    let a = RedisServer::start();
    let b = RedisServer::start_with(&["--requirepass", "n0de-secret"]);
    let c = RedisServer::start();
    let b_url = format!("redis://:n0de-secret@127.0.0.1:{}", b.port);
    let nodes = format!("{},{b_url},{}", a.url(), c.url());
    let out = crate::support::lockctl_env(
        &a.url(),
        &["hunt", "--strategy", "atomic", "--budget", "1s"],
        &[("LOCKCTL_LOCK_NODES", &nodes)],
    );
    let text = stdout(&out);
    let said = format!("stdout:\n{text}\nstderr:\n{}", stderr(&out));
    assert_eq!(code(&out), 0, "{said}");
    assert!(!said.contains("n0de-secret"), "{said}");
    let replay = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("replay "))
        .unwrap_or_else(|| panic!("no replay line: {said}"));
    for node in [a.url(), c.url()] {
        assert!(replay.contains(&format!("--lock-node {node} ")), "{replay}");
    }
    assert!(
        replay.contains(&format!(
            "--lock-node redis://:\"${{LOCKCTL_SECRET_1}}\"@127.0.0.1:{} ",
            b.port
        )),
        "{replay}"
    );
    assert!(
        text.contains("(set LOCKCTL_SECRET_1 to the secret in --lock-node first)"),
        "{text}"
    );
}

/// A value with control characters (an escape, a tab, a carriage return, a C1 CSI, a line
/// break) in the replay line: it was printed raw, so the terminal coloured the rest of the line
/// and a copy of it was not the command that ran. It is shown with nothing a terminal acts on
/// but the line break, and `sh` reads it back as the very arguments of the hunt.
#[test]
fn a_replay_line_with_control_characters_shows_none_and_runs_as_printed() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (_, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 2);
    let url = format!("{url}&order={{order}}");
    let body = "a\x1b[31mred\tb\r\u{9b}2J c\n'd' $HOME {order}\x07";
    let args = [
        "hunt",
        "--url",
        &url,
        "--preset",
        "tutorial",
        "--serve",
        &serve,
        "--method",
        "POST",
        "--body",
        body,
        "--nemesis",
        "none",
        "--budget",
        "1s",
    ];
    let out = lockctl(&redis.url(), &args);
    let text = stdout(&out);
    assert_eq!(code(&out), 0, "stdout:\n{text}\nstderr:\n{}", stderr(&out));
    let replay = text
        .split_once("  replay    ")
        .unwrap_or_else(|| panic!("no replay in:\n{text}"))
        .1
        .trim_end();
    assert!(
        !replay.contains(|c: char| c.is_control() && c != '\n'),
        "{replay:?}"
    );
    // A `lockctl` that prints the arguments it was given, each ended by a NUL.
    let dir = tempfile::tempdir().unwrap();
    let shim = dir.path().join("lockctl");
    std::fs::write(&shim, "#!/bin/sh\nprintf '%s\\0' \"$@\"\n").unwrap();
    run_ok(Command::new("chmod").arg("+x").arg(&shim));
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    let ran = run_ok(Command::new("sh").args(["-c", replay]).env("PATH", path));
    let given: Vec<String> = String::from_utf8(ran.stdout)
        .unwrap()
        .split_terminator('\0')
        .map(str::to_string)
        .collect();
    let seed = given.last().unwrap().clone();
    let mut expected = vec!["--redis".to_string(), redis.url()];
    expected.extend(args.iter().map(|a| a.to_string()));
    expected.extend(["--seed".to_string(), seed]);
    assert_eq!(given, expected, "{replay}");
}

/// The SKUs of the rows in `table` of the MariaDB database `db`, in order.
fn my_skus(db: &TestMyDb, table: &str) -> Vec<String> {
    let out = run_ok(
        Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-u", "root", "-N", "-e"])
            .arg(format!("SELECT sku FROM {}.{table} ORDER BY sku", db.name)),
    );
    stdout(&out).lines().map(str::to_string).collect()
}

/// The SKUs of the rows of `stock` in the PostgreSQL database `db`, in order.
fn pg_skus(db: &TestDb) -> Vec<String> {
    db.client()
        .query("SELECT sku FROM stock ORDER BY sku", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The keys on `redis`, in order.
fn keys(redis: &RedisServer) -> Vec<String> {
    let mut k: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis.raw()).unwrap();
    k.sort();
    k
}

/// A hunt refused at its facts check after --stock-seed wrote the probe's row takes the row
/// away (issue 50): a --stock-query naming a missing column left one row a run in the user's
/// table. With a query no delete is known for, the error names the row left and how to go.
#[test]
fn a_hunt_refused_at_its_facts_check_leaves_no_probe_row_behind() {
    let redis = RedisServer::start();
    let (db, env) = pg_stock();
    let seed =
        "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty";
    let run = |query: &str| {
        let flags = [
            "--budget",
            "2s",
            "--stock-sql",
            &db.url,
            "--stock-query",
            query,
            "--stock-seed",
            seed,
        ];
        hunt(&redis, "tests/fixtures/hunt/pg_guarded.php", &env, &flags)
    };
    let query = "SELECT qtty FROM stock WHERE sku = $1";
    let (exit, _, said) = run(query);
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains(&format!("--stock-query '{query}'")), "{said}");
    assert!(pg_skus(&db).is_empty(), "{:?} {said}", pg_skus(&db));
    // No delete can be derived from this one (it reads 8, not the 7 seeded): the row is
    // left, and named.
    let (exit, _, said) = run("SELECT qty + 1 FROM stock WHERE sku = $1");
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("do not name the same stock"), "{said}");
    let left = pg_skus(&db);
    assert_eq!(left.len(), 1, "{said}");
    assert!(
        said.contains(&format!(
            "the probe row that --stock-seed wrote for '{}' could not be removed",
            left[0]
        )),
        "{said}"
    );
}

/// The usual slips get a hint (issue 50): a request that never carries `{sku}` (the service
/// is never told the round's SKU), and a text SKU bound to an integer column.
#[test]
fn a_request_without_sku_and_a_text_sku_for_an_integer_column_are_hinted() {
    let redis = RedisServer::start();
    let db = TestDb::create();
    db.client()
        .batch_execute("CREATE TABLE stock (sku bigint PRIMARY KEY, qty int NOT NULL)")
        .unwrap();
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            "http://127.0.0.1:1/buy",
            "--preset",
            "tutorial",
            "--budget",
            "1s",
            "--stock-sql",
            &db.url,
            "--stock-query",
            "SELECT qty FROM stock WHERE sku = $1",
            "--stock-seed",
            "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty",
        ],
    );
    let said = stderr(&out);
    assert_eq!(code(&out), 2, "{said}");
    assert!(
        said.contains("lockctl: warning: neither --url, --header nor --body carries {sku}"),
        "{said}"
    );
    assert!(
        said.contains("(the SKU is bound as text: for an integer or uuid column give --sku-format int or --sku-format uuid)"),
        "{said}"
    );
    assert!(pg_skus_of(&db).is_empty(), "{said}");
}

fn pg_skus_of(db: &TestDb) -> Vec<i64> {
    db.client()
        .query("SELECT sku FROM stock", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A hunt removes what it created in the system's stores when it ends (issue 40, item 8): the
/// probe's and every round's stock row in PostgreSQL and MariaDB (the delete derived from a
/// simple --stock-query, or given as --stock-clean), and every Redis key that names a round's
/// SKU; nothing else (a row and keys of other SKUs stay, another hunt's included). --keep keeps
/// them, and rows no delete is known for are named as left, with the flag that removes them.
#[test]
fn a_hunt_removes_the_rows_and_keys_it_created_and_keep_keeps_them() {
    let redis = RedisServer::start();
    let mut raw = redis.raw();
    let others = [
        "item:stock:sku_886",
        "item:stock:hunt-0a0b0c-1",
        "hunt-probe",
    ];
    for k in others {
        let _: () = redis::cmd("SET").arg(k).arg(5).query(&mut raw).unwrap();
    }
    let short = ["--budget", "2s", "--heal-ms", "2000"];

    // Stock in Redis: the round's stock keys and the system's own order keys go.
    let (exit, v, said) = hunt(
        &redis,
        "tests/fixtures/hunt/retry_replays.php",
        &Env::default(),
        &[&short[..], &["--idempotent"]].concat(),
    );
    assert_eq!(exit, 0, "{said}");
    assert!(v["cleaned"]["keys"].as_u64().unwrap() > 0, "{said}");
    let mut expected = others.map(String::from).to_vec();
    expected.sort();
    assert_eq!(keys(&redis), expected, "{said}");
    let (_, v, said) = hunt(
        &redis,
        "tests/fixtures/hunt/retry_replays.php",
        &Env::default(),
        &[&short[..], &["--idempotent", "--keep"]].concat(),
    );
    assert!(v["cleaned"].is_null(), "{said}");
    assert!(keys(&redis).len() > others.len(), "{said}");

    // Stock in PostgreSQL.
    let db = TestDb::create();
    db.client()
        .batch_execute("CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL); INSERT INTO stock VALUES ('sku_886', 5), ('hunt-probe', 7)")
        .unwrap();
    // The user's own rows: 'hunt-probe' is the name the probe had before it took a tag of its
    // own, and was seeded over and deleted.
    let theirs = ["hunt-probe", "sku_886"];
    let env = Env {
        pg_dsn: Some(format!("host=127.0.0.1 dbname={} user=postgres", db.name)),
        ..Env::default()
    };
    let seed =
        "INSERT INTO stock VALUES ($1, $2) ON CONFLICT (sku) DO UPDATE SET qty = excluded.qty";
    let pg = |query: &'static str, extra: &[&'static str]| {
        let flags = [
            &short[..],
            &[
                "--stock-sql",
                &db.url,
                "--stock-query",
                query,
                "--stock-seed",
                seed,
            ],
            extra,
        ]
        .concat();
        hunt(&redis, "tests/fixtures/hunt/pg_guarded.php", &env, &flags)
    };
    let simple = "SELECT qty FROM stock WHERE sku = $1";
    let (exit, v, said) = pg(simple, &[]);
    assert_eq!(exit, 0, "{said}");
    assert!(v["cleaned"]["rows"].as_u64().unwrap() >= 1, "{said}");
    assert_eq!(pg_skus(&db), theirs, "{said}");
    let qty: i32 = db
        .client()
        .query_one("SELECT qty FROM stock WHERE sku = 'hunt-probe'", &[])
        .unwrap()
        .get(0);
    assert_eq!(qty, 7, "the user's row was written: {said}");
    let (_, _, said) = pg(simple, &["--keep"]);
    let kept = pg_skus(&db);
    assert!(
        kept.iter().any(|s| s.starts_with("hunt-probe-")) && kept.len() > 3,
        "{kept:?} {said}"
    );
    db.client()
        .batch_execute("DELETE FROM stock WHERE sku NOT IN ('sku_886', 'hunt-probe')")
        .unwrap();
    // A query the hunt cannot tell the rows of: they are left, and said so.
    let guarded = "SELECT qty FROM stock WHERE sku = $1 AND qty >= 0";
    let (exit, v, said) = pg(guarded, &[]);
    assert_eq!(exit, 0, "{said}");
    let left = v["cleaned"]["left"].to_string();
    assert!(
        left.contains("hunt-probe-") && left.contains("--stock-clean"),
        "{left}"
    );
    assert!(pg_skus(&db).len() > 3, "{said}");
    db.client()
        .batch_execute("DELETE FROM stock WHERE sku NOT IN ('sku_886', 'hunt-probe')")
        .unwrap();
    let clean = ["--stock-clean", "DELETE FROM stock WHERE sku = $1"];
    let (exit, v, said) = pg(guarded, &clean);
    assert_eq!(exit, 0, "{said}");
    assert_eq!(v["cleaned"]["left"], serde_json::json!([]), "{said}");
    assert_eq!(pg_skus(&db), theirs, "{said}");
    // A --stock-clean that deletes nothing of the probe is refused before any request.
    let (exit, _, said) = pg(
        simple,
        &[
            "--stock-clean",
            "DELETE FROM stock WHERE sku = 'none' AND sku <> $1",
        ],
    );
    assert_eq!(exit, 2, "{said}");
    assert!(said.contains("--stock-clean"), "{said}");

    // Stock in MariaDB.
    let my = TestMyDb::create();
    my.exec("CREATE TABLE stock (sku VARCHAR(200) PRIMARY KEY, qty INT NOT NULL); INSERT INTO stock VALUES ('sku_886', 5)");
    let env = Env {
        mysql_db: Some(my.name.clone()),
        ..Env::default()
    };
    let mariadb = |extra: &[&str]| {
        let flags = [
            &short[..],
            &[
                "--stock-sql",
                &my.url,
                "--stock-query",
                "SELECT qty FROM stock WHERE sku = ?",
                "--stock-seed",
                "REPLACE INTO stock VALUES (?, ?)",
            ],
            extra,
        ]
        .concat();
        hunt(&redis, "tests/fixtures/hunt/my_guarded.php", &env, &flags)
    };
    let (exit, v, said) = mariadb(&[]);
    assert_eq!(exit, 0, "{said}");
    assert!(v["cleaned"]["rows"].as_u64().unwrap() >= 1, "{said}");
    assert_eq!(my_skus(&my, "stock"), ["sku_886"], "{said}");
    let (_, _, said) = mariadb(&["--keep"]);
    assert!(my_skus(&my, "stock").len() > 2, "{said}");
    // Nothing of other SKUs was ever touched (a fresh connection: client-kill took the first).
    for k in others {
        let v: Option<i64> = redis::cmd("GET").arg(k).query(&mut redis.raw()).unwrap();
        assert_eq!(v, Some(5), "{k}");
    }
}

/// The hunt faults only a Redis the user named (`--redis` or `REDIS_URL`): with neither, a
/// fault on the Redis server is a usage error when asked for by name, and `auto` leaves the
/// Redis faults out; the run goes on with the others. (The default is moved to a private
/// server here, as it would be 6379.)
#[test]
fn only_a_named_redis_is_faulted() {
    require_php_extensions();
    let redis = RedisServer::start();
    let tmp = tempfile::tempdir().unwrap();
    let (_, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 4);
    for fault in ["redis-pause", "client-kill"] {
        let out = crate::support::lockctl_unconfigured(
            &redis.url(),
            tmp.path(),
            &[
                "hunt",
                "--url",
                &url,
                "--preset",
                "tutorial",
                "--nemesis",
                fault,
            ],
        )
        .output()
        .unwrap();
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("no Redis was named: lockctl never faults a Redis by default"),
            "{}",
            stderr(&out)
        );
    }
    let out = crate::support::lockctl_unconfigured(
        &redis.url(),
        tmp.path(),
        &[
            "--json", "hunt", "--url", &url, "--preset", "tutorial", "--serve", &serve, "--budget",
            "4s", "--seed", "7",
        ],
    )
    .output()
    .unwrap();
    let said = format!("{}{}", stdout(&out), stderr(&out));
    let v: Value = serde_json::from_str(stdout(&out).trim()).expect(&said);
    let tried = v["faults_tried"].as_object().cloned().unwrap_or_default();
    assert!(
        !tried.contains_key("redis-pause") && !tried.contains_key("client-kill"),
        "{said}"
    );
    assert!(!tried.is_empty(), "no fault was tried at all: {said}");
}

/// Before the first fault on a Redis, its clients that are not the system's are named: here a
/// client this test holds (neither lockctl's nor started by --serve).
#[test]
fn a_redis_with_clients_outside_the_system_is_named_before_it_is_faulted() {
    require_php_extensions();
    let redis = RedisServer::start();
    let mut bystander = redis.raw();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("bystander")
        .query(&mut bystander)
        .unwrap();
    let (_, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 4);
    let hunt = |nemesis: &str| {
        let flags = [
            "--preset",
            "tutorial",
            "--nemesis",
            nemesis,
            "--budget",
            "2s",
        ];
        let mut args = vec!["hunt", "--url", &url, "--serve", &serve];
        args.extend(flags);
        lockctl(&redis.url(), &args)
    };
    let out = hunt("redis-pause");
    let err = stderr(&out);
    let me = format!("(pid {}, ", std::process::id());
    assert!(
        err.contains("lockctl: warning: Redis at ")
            && err.contains("outside the system under test (not started by --serve)")
            && err.contains(&me)
            && err.contains("redis-pause pauses them too"),
        "{err}"
    );
    // client-kill spares it, and says so.
    let out = hunt("client-kill");
    let err = stderr(&out);
    assert!(err.contains("; client-kill spares them"), "{err}");
    let struck = stdout(&out);
    assert!(
        struck
            .lines()
            .any(|l| l.trim_start().starts_with("faults    client-kill ")),
        "client-kill never struck: {struck}"
    );
    let pong: String = redis::cmd("PING")
        .query(&mut bystander)
        .unwrap_or_else(|e| panic!("the bystander was killed: {e}\n{err}"));
    assert_eq!(pong, "PONG");
    // Without a bystander, no warning.
    drop(bystander);
    let out = hunt("redis-pause");
    assert!(
        !stderr(&out).contains("warning: Redis at"),
        "{}",
        stderr(&out)
    );
}

/// `--request-timeout-ms` cuts the hunt's HTTP requests, and `--timeout-ms` (Redis's) does
/// not: a service 100 ms slow is judged under `--timeout-ms 30`, and under
/// `--request-timeout-ms 30` no round is, each named as timed out.
#[test]
fn the_hunts_http_requests_are_cut_by_the_request_timeout_not_the_redis_one() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (_, url, serve) = served(&redis, "examples/tutorial-php/slow.php", 4);
    let hunt = |limit: &[&str]| {
        let mut args = vec!["--json", "hunt", "--url", &url, "--serve", &serve];
        args.extend([
            "--preset",
            "tutorial",
            "--nemesis",
            "none",
            "--budget",
            "2s",
        ]);
        args.extend(limit);
        let out = lockctl(&redis.url(), &args);
        let said = format!("{}{}", stdout(&out), stderr(&out));
        (code(&out), json(&out), said)
    };
    let (exit, v, said) = hunt(&["--timeout-ms", "30"]);
    assert_eq!(exit, 0, "{said}");
    assert!(v["judged"].as_u64().unwrap() >= 1, "{said}");
    let (exit, v, said) = hunt(&["--request-timeout-ms", "30"]);
    assert_ne!(exit, 0, "{said}");
    assert_eq!(v["verdict"], "unknown", "{said}");
    assert_eq!(v["judged"], 0, "{said}");
    let first = v["unjudged"][0].as_str().unwrap_or_default();
    assert!(
        first.contains("timed_out") && first.contains("no answer within 30 ms"),
        "{said}"
    );
}

/// A server already answering at the address `--serve` is to serve on (one an earlier hunt
/// left running after a kill -9, say) is refused before anything starts: the hunt's own
/// server could not bind, and the hunt judged the stale one, PASS, exit 0.
#[test]
fn a_server_already_on_the_systems_address_is_refused_not_hunted() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (port, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 2);
    let _stale = Killed(crate::support::spawn_tool(
        Command::new("php")
            .args(["-S", &format!("127.0.0.1:{port}"), "-t", FIXTURES])
            .env("REDIS_PORT", redis.port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    ));
    assert!(
        crate::support::eventually(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        }),
        "the stale server never listened"
    );
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--nemesis",
            "none",
            "--budget",
            "2s",
        ],
    );
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{}{err}", stdout(&out));
    assert!(
        err.contains(&format!("something already answers at 127.0.0.1:{port}")),
        "{err}"
    );
}

/// client-kill kills the system's connections to Redis, and with `--serve` spares a
/// connection another process of this machine holds (an operator's `redis-cli`, another
/// service): killed too before, the hunt faulted whoever shared its Redis. Without `--serve`
/// nothing tells the system's clients apart, and every client but lockctl's is killed.
#[test]
fn client_kill_spares_the_connections_of_processes_outside_the_system() {
    use lockctl_hunt::nemesis::{FaultKind, Nemesis};
    use rand::SeedableRng;
    use std::sync::{Arc, Mutex};
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("redis.sock");
    let sock = sock.to_str().unwrap();
    let redis = RedisServer::start_with(&["--unixsocket", sock]);
    let port = free_port();
    let command = format!(
        "python3 -m http.server --bind 127.0.0.1 {port} >/dev/null 2>&1 & \
         exec redis-cli -p {} subscribe hunt-system >/dev/null",
        redis.port
    );
    // The addresses of the clients running `cmd` (subscribe: the system's; psubscribe: the
    // bystander's).
    let clients = |cmd: &str| -> Vec<String> {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut redis.raw())
            .unwrap();
        list.lines()
            .filter(|l| l.contains(&format!(" cmd={cmd} ")))
            .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("addr=")))
            .map(str::to_string)
            .collect()
    };
    let one = |cmd: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while clients(cmd).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let found = clients(cmd);
        assert_eq!(found.len(), 1, "{cmd}: {found:?}");
        found[0].clone()
    };
    let served = crate::hunt_process_faults::serve(&command, port);
    let system = one("subscribe");
    // A process of this machine outside the system, on the same Redis.
    let _bystander = Killed(crate::support::spawn_tool(
        Command::new("redis-cli")
            .args(["-p", &redis.port.to_string(), "psubscribe", "elsewhere*"])
            .stdout(std::process::Stdio::null()),
    ));
    let bystander = one("psubscribe");
    // And one on the Redis's unix socket, whose process /proc does not tell.
    let _on_socket = Killed(crate::support::spawn_tool(
        Command::new("redis-cli")
            .args(["-s", sock, "ssubscribe", "elsewhere"])
            .stdout(std::process::Stdio::null()),
    ));
    let on_socket = one("ssubscribe");
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let strike = |nemesis: &Nemesis, rng: &mut rand::rngs::StdRng| {
        crate::hunt_process_faults::strike_once(nemesis, FaultKind::ClientKill, rng)
    };
    let nemesis = Nemesis::new(redis.target(), Some(Arc::new(Mutex::new(served))));
    let fault = strike(&nemesis, &mut rng);
    assert!(fault.took, "{}", fault.detail);
    assert!(
        fault.detail.contains("spared 2 of other processes"),
        "{}",
        fault.detail
    );
    assert!(
        !clients("subscribe").contains(&system),
        "the system's connection lives"
    );
    assert_eq!(
        clients("psubscribe"),
        std::slice::from_ref(&bystander),
        "{}",
        fault.detail
    );
    assert_eq!(clients("ssubscribe"), std::slice::from_ref(&on_socket));
    drop(nemesis);
    // Without --serve, the bystander is killed with the rest.
    let nemesis = Nemesis::new(redis.target(), None);
    let fault = strike(&nemesis, &mut rng);
    assert!(fault.took, "{}", fault.detail);
    assert!(
        !clients("psubscribe").contains(&bystander),
        "spared without --serve: {}",
        fault.detail
    );
}

/// On a terminal the hunt prints one line per round as it ends (round, shape, requests,
/// faults, verdict, rounds judged, time left); not when stderr is not a terminal, nor with
/// --json. The terminal is `script`'s pseudo-terminal.
#[test]
fn on_a_terminal_each_round_is_a_live_line() {
    require_php_extensions();
    let redis = RedisServer::start();
    let (_, url, serve) = served(&redis, "examples/tutorial-php/run_demo.php", 4);
    let quoted = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let line = format!(
        "{} hunt --url {} --preset tutorial --serve {} --budget 3s --nemesis none",
        env!("CARGO_BIN_EXE_lockctl"),
        quoted(&url),
        quoted(&serve)
    );
    // `line` run on script's pseudo-terminal: what the terminal was shown.
    let on_a_terminal = |line: &str| {
        let out = Command::new("script")
            .args(["-qec", line, "/dev/null"])
            .env("REDIS_URL", redis.url())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let shown = on_a_terminal(&line);
    // Round, shape, requests, faults, verdict so far, rounds judged, time left.
    let live = regex::Regex::new(
        r"hunt: round 1 · (burst|sale|rate|double-click) · \d+ requests? · no fault · PASS · \d+ judged · \d+ s left",
    )
    .unwrap();
    assert!(live.is_match(&shown), "{shown}");
    // A round with a fault names it.
    let shown = on_a_terminal(&line.replace("--nemesis none", "--nemesis redis-pause"));
    assert!(shown.contains(" requests · redis-pause · "), "{shown}");
    // A terminal, but --json: the one JSON object, no live line.
    let shown = on_a_terminal(&line.replacen(" hunt ", " --json hunt ", 1));
    assert!(
        shown.contains("\"verdict\"") && !shown.contains("hunt: round 1 · "),
        "{shown}"
    );
    // Not a terminal: no live line, on either stream.
    let out = lockctl(
        &redis.url(),
        &[
            "hunt",
            "--url",
            &url,
            "--preset",
            "tutorial",
            "--serve",
            &serve,
            "--budget",
            "2s",
            "--nemesis",
            "none",
        ],
    );
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(!said.contains("hunt: round 1 · "), "{said}");
}
