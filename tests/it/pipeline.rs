//! The orders pipeline on real servers: each test has its own redis-server and its own
//! PostgreSQL database (or, for the restart, its own PostgreSQL server). Nothing lost, nothing
//! doubled, through crashes, restarts and poison.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::Duration;

use crate::support::{
    PrivatePostgres, RedisServer, Streams, TestDb, code, eventually, json, lockctl, signal,
    spawn_lockctl_with, stderr, stdout,
};
use lockctl_core::orders::checkpoint::{Checkpoint, Checkpoints};
use lockctl_core::orders::worker::{self, WorkerOptions, WorkerStats};
use redis::Commands;

/// The database's orders of `sku`: (rows, distinct order ids, units).
pub(crate) fn rows(db: &TestDb, sku: &str) -> (i64, i64, i64) {
    let r = db
        .client()
        .query_one(
            "SELECT count(*), count(DISTINCT order_id), coalesce(sum(qty), 0)::bigint
               FROM lockctl_orders WHERE sku = $1",
            &[&sku],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

pub(crate) fn init(url: &str, db: &TestDb) {
    let out = lockctl(url, &["db", "init", "--db", &db.url]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `n` bought orders of `sku` appended to its stream (waiting there, unless a worker runs).
pub(crate) fn queue_orders(server: &RedisServer, sku: &str, n: &str) {
    let out = lockctl(
        &server.url(),
        &[
            "--json",
            "hammer",
            "--sku",
            sku,
            "-n",
            n,
            "-c",
            "10",
            "--stock",
            n,
            "--strategy",
            "atomic",
            "--queue",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Every purchase was bought, so every order was appended: the hammer checked each against
    // the ledger, written in the same script. (Not XLEN: a worker running beside the buyers
    // may already have persisted and trimmed some.)
    assert_eq!(json(&out)["bought"].to_string(), n, "{}", stdout(&out));
}

fn reconciled(server: &RedisServer, db: &TestDb, sku: &str) -> serde_json::Value {
    let out = lockctl(&server.url(), &["--json", "status", sku, "--db", &db.url]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    json(&out)
}

#[test]
fn db_init_is_idempotent_and_a_worker_before_it_says_what_to_run() {
    let server = RedisServer::start();
    let db = TestDb::create();
    let out = lockctl(
        &server.url(),
        &["worker", "--db", &db.url, "--sku", "s", "--once"],
    );
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("lockctl db init"), "{}", stderr(&out));
    let first = json(&lockctl(
        &server.url(),
        &["--json", "db", "init", "--db", &db.url],
    ));
    assert_eq!(first["schema_version_before"], 0);
    assert_eq!(first["schema_version"], 1);
    let again = json(&lockctl(
        &server.url(),
        &["--json", "db", "init", "--db", &db.url],
    ));
    assert_eq!(again["schema_version_before"], 1);
    let out = lockctl(
        &server.url(),
        &["db", "init", "--db", "postgres://nobody@127.0.0.1:1/x"],
    );
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("is it running"), "{}", stderr(&out));
    // A hammer whose orders database is down fails before it seeds or sells anything.
    let down = "postgres://nobody@127.0.0.1:1/x";
    let args = [
        "hammer", "--sku", "nodb", "-n", "10", "--stock", "10", "--queue", "--db", down,
    ];
    let out = lockctl(&server.url(), &args);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("is it running"), "{}", stderr(&out));
    let keys: Vec<String> = server.raw().keys("*nodb*").unwrap();
    assert!(
        keys.is_empty(),
        "written before the database was asked: {keys:?}"
    );

    // One that accepts connections and never answers: bounded by the limits, not a hang.
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let db = format!("postgres://nobody@{}/x", mute.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        while let Ok((c, _)) = mute.accept() {
            kept.push(c);
        }
    });
    let args = [
        "--connect-timeout-ms",
        "300",
        "--timeout-ms",
        "300",
        "hammer",
        "--sku",
        "mute",
        "-n",
        "10",
        "--stock",
        "10",
        "--queue",
        "--db",
        &db,
    ];
    let child = spawn_lockctl_with(&server.url(), &args, Streams::Capture);
    let out = crate::support::finish_within(child, Duration::from_secs(60), "hammer --queue");
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no answer within"),
        "{}",
        stderr(&out)
    );
    let keys: Vec<String> = server.raw().keys("*mute*").unwrap();
    assert!(
        keys.is_empty(),
        "written before the database answered: {keys:?}"
    );
}

/// `hammer --queue --db` of `n` purchases of a stock of `stock`, with two workers: it must
/// pass, drain, and find one row per unit sold. Returns the report.
#[allow(clippy::too_many_arguments)]
pub(crate) fn through_postgresql(
    url: &str,
    db: &TestDb,
    sku: &str,
    strategy: &str,
    n: &str,
    c: &str,
    stock: &str,
    extra: &[&str],
) -> serde_json::Value {
    let args = [
        "--json",
        "hammer",
        "--sku",
        sku,
        "-n",
        n,
        "-c",
        c,
        "--stock",
        stock,
        "--strategy",
        strategy,
        "--queue",
        "--db",
        &db.url,
        "--workers",
        "2",
    ];
    let out = lockctl(url, &[&args[..], extra].concat());
    assert_eq!(code(&out), 0, "{strategy}: {}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "pass", "{strategy}: {v}");
    assert_eq!(v["pipeline"]["drained"], true, "{strategy}: {v}");
    assert_eq!(v["pipeline"]["rows"].to_string(), stock, "{strategy}: {v}");
    assert_eq!(
        v["pipeline"]["row_units"].to_string(),
        stock,
        "{strategy}: {v}"
    );
    v
}

#[test]
fn the_hammer_verifies_the_whole_path_into_postgresql_for_every_strategy() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    for (strategy, n, stock) in [
        ("atomic", "2000", "1000"),
        ("lock", "300", "150"),
        ("fenced", "300", "150"),
    ] {
        let sku = format!("p-{strategy}");
        through_postgresql(&server.url(), &db, &sku, strategy, n, "10", stock, &[]);
        let (count, distinct, units) = rows(&db, &sku);
        assert_eq!(
            (count, distinct, units.to_string()),
            (distinct, count, stock.to_string())
        );
        let st = reconciled(&server, &db, &sku);
        assert_eq!(st["orders"]["persisted_units"].to_string(), stock);
        assert_eq!(st["orders"]["queued_units"], 0);
    }
}

/// The library's worker on `sku` (batches of `batch`) in a thread of this test, given
/// `checkpoints`, which may stall it or end it; `stop` asks it to finish. Its result (or how it
/// died) arrives on the returned channel.
pub(crate) fn worker_thread(
    server: &RedisServer,
    db: &TestDb,
    sku: &str,
    batch: usize,
    checkpoints: Checkpoints,
    stop: Arc<AtomicBool>,
) -> mpsc::Receiver<std::thread::Result<lockctl_core::Result<WorkerStats>>> {
    let target = server.target();
    let url = db.url.clone();
    let mut opts = WorkerOptions::new(vec![sku.parse().unwrap()]);
    (opts.batch, opts.checkpoints, opts.stop) = (batch, checkpoints, Some(stop));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| worker::run(&target, &url, &opts)));
        let _ = tx.send(ran);
    });
    rx
}

/// How a worker given [`dies_at`] ends.
struct Died;

/// The worker dies at `at`, the first time it gets there, as a `kill -9` would: nothing of it
/// runs after that point (it unwinds, and nothing it holds writes anything on the way out).
fn dies_at(at: Checkpoint) -> Checkpoints {
    Checkpoints::new(move |reached| {
        if reached == at {
            std::panic::resume_unwind(Box::new(Died));
        }
    })
}

/// Runs a worker on `sku` that dies at `at`, and fails the test unless it died there.
fn worker_dying_at(server: &RedisServer, db: &TestDb, sku: &str, at: Checkpoint) {
    let stop = Arc::new(AtomicBool::new(false));
    let ended = worker_thread(server, db, sku, 100, dies_at(at), stop)
        .recv_timeout(Duration::from_secs(60))
        .expect("the worker neither died nor returned within 60 s");
    match ended {
        Err(how) if how.is::<Died>() => {}
        Err(_) => panic!("the worker panicked before it got to {at:?}"),
        Ok(r) => panic!("the worker never got to {at:?}: it returned {r:?}"),
    }
}

#[test]
fn a_worker_killed_before_its_commit_loses_nothing() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "k1", "500");
    worker_dying_at(&server, &db, "k1", Checkpoint::BeforeCommit);
    assert_eq!(rows(&db, "k1").0, 0, "nothing committed before the crash");
    drain(&server, &db, "k1");
    assert_eq!(rows(&db, "k1"), (500, 500, 500));
    reconciled(&server, &db, "k1");
}

#[test]
fn a_worker_killed_between_commit_and_ack_adds_no_row_when_redelivered() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "k2", "500");
    worker_dying_at(&server, &db, "k2", Checkpoint::AfterCommit);
    assert_eq!(
        rows(&db, "k2").0,
        100,
        "the first batch committed, then the crash"
    );
    let v = drain(&server, &db, "k2");
    assert!(v["redelivered"].as_u64().unwrap() >= 100, "{v}");
    assert_eq!(rows(&db, "k2"), (500, 500, 500));
    reconciled(&server, &db, "k2");
}

/// Runs `worker --once` with a 1 ms claim time (the crashed worker's entries are taken over at
/// once) and returns its JSON summary.
pub(crate) fn drain(server: &RedisServer, db: &TestDb, sku: &str) -> serde_json::Value {
    let out = lockctl(
        &server.url(),
        &[
            "--json",
            "worker",
            "--db",
            &db.url,
            "--sku",
            sku,
            "--once",
            "--claim-idle-ms",
            "1",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    json(&out)
}

#[test]
fn two_workers_on_one_sku_write_each_order_once() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "two", "3000");
    let args = [
        "--json", "worker", "--db", &db.url, "--sku", "two", "--once", "--batch", "50",
    ];
    let a = spawn_lockctl_with(&server.url(), &args, Streams::Capture);
    let b = spawn_lockctl_with(&server.url(), &args, Streams::Capture);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert_eq!((code(&a), code(&b)), (0, 0));
    let persisted =
        json(&a)["persisted"].as_u64().unwrap() + json(&b)["persisted"].as_u64().unwrap();
    assert_eq!(persisted, 3000);
    assert_eq!(rows(&db, "two"), (3000, 3000, 3000));
}

#[test]
fn a_poison_entry_goes_to_the_dead_letter_stream_and_never_blocks_the_queue() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "poison", "100");
    let _: String = server
        .raw()
        .xadd(
            "item:order_events:poison",
            "*",
            &[("order_id", "x"), ("qty", "many")],
        )
        .unwrap();
    queue_orders_more(&server, "poison");
    let v = drain(&server, &db, "poison");
    assert_eq!(v["dead_letters"], 1);
    assert_eq!(rows(&db, "poison").0, 100 + 50);
    let dead: u64 = server.raw().xlen("item:order_dead:poison").unwrap();
    assert_eq!(dead, 1);
}

/// 50 more orders of `sku` on top of its stock, without reseeding.
fn queue_orders_more(server: &RedisServer, sku: &str) {
    let _: () = server.raw().incr(format!("item:stock:{sku}"), 50).unwrap();
    let _: () = server.raw().incr(format!("item:seeded:{sku}"), 50).unwrap();
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "--sku",
            sku,
            "-n",
            "50",
            "--strategy",
            "atomic",
            "--queue",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

#[test]
fn postgresql_restarted_mid_run_loses_nothing() {
    let server = RedisServer::start();
    let pg = PrivatePostgres::start();
    let db = TestDb::create_on(&pg.admin_url());
    init(&server.url(), &db);
    let mut worker = spawn_lockctl_with(
        &server.url(),
        &["worker", "--db", &db.url, "--sku", "pgr"],
        Streams::Discard,
    );
    let buyers = spawn_lockctl_with(
        &server.url(),
        &[
            "hammer",
            "--sku",
            "pgr",
            "-n",
            "400",
            "-c",
            "4",
            "--stock",
            "400",
            "--strategy",
            "atomic",
            "--work-ms",
            "5",
            "--queue",
        ],
        Streams::Capture,
    );
    std::thread::sleep(Duration::from_millis(150));
    pg.stop();
    std::thread::sleep(Duration::from_millis(500));
    pg.start_again();
    assert_eq!(code(&buyers.wait_with_output().unwrap()), 0);
    assert!(
        eventually(Duration::from_secs(60), || rows(&db, "pgr").0 == 400),
        "the worker did not catch up after the restart: {:?}",
        rows(&db, "pgr")
    );
    signal(worker.id(), "TERM");
    let _ = worker.wait();
    assert_eq!(rows(&db, "pgr"), (400, 400, 400));
    reconciled(&server, &db, "pgr");
}

#[test]
fn redis_restarted_mid_run_with_appendonly_loses_nothing() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let db = TestDb::create();
    init(&server.url(), &db);
    let mut worker = spawn_lockctl_with(
        &server.url(),
        &["worker", "--db", &db.url, "--sku", "rr"],
        Streams::Discard,
    );
    queue_orders(&server, "rr", "300");
    server.restart();
    queue_orders_more(&server, "rr");
    assert!(
        eventually(Duration::from_secs(60), || rows(&db, "rr").0 == 350),
        "the worker did not resume after Redis came back: {:?}",
        rows(&db, "rr")
    );
    signal(worker.id(), "TERM");
    let _ = worker.wait();
    assert_eq!(rows(&db, "rr"), (350, 350, 350));
    reconciled(&server, &db, "rr");
}

/// Redis without persistence restarts while orders told "bought" wait in its stream: they are
/// lost, so PostgreSQL lacks them and the verdict is FAIL. The stock went with the restart
/// and cannot be read back, but that makes nothing of this FAIL unknown: no word of the report
/// may say so, and the restart's note says what the restart means for the FAIL.
#[test]
fn a_fail_after_redis_restarts_without_persistence_is_not_called_unknown() {
    let mut server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    // The workers' inserts wait behind this lock, so the orders stay in the stream.
    let mut blocker = db.client();
    blocker
        .batch_execute("BEGIN; LOCK TABLE lockctl_orders IN SHARE MODE")
        .unwrap();
    let hammer = spawn_lockctl_with(
        &server.url(),
        &[
            "--json",
            "--timeout-ms",
            "500",
            "--connect-timeout-ms",
            "500",
            "hammer",
            "--sku",
            "rs",
            "-n",
            "2000",
            "-c",
            "4",
            "--stock",
            "200",
            "--strategy",
            "atomic",
            "--work-ms",
            "5",
            "--queue",
            "--db",
            &db.url,
        ],
        Streams::Capture,
    );
    // Sold out, and the buyers still at it (1,800 more requests, 5 ms each, 4 at a time).
    assert!(
        eventually(Duration::from_secs(30), || {
            server.raw().get::<_, Option<i64>>("item:stock:rs").ok() == Some(Some(0))
        }),
        "the stock never sold out"
    );
    server.restart();
    blocker.batch_execute("COMMIT").unwrap();
    let out = hammer.wait_with_output().unwrap();
    let v = json(&out);
    assert_eq!(code(&out), 3, "{}\n{}", stdout(&out), stderr(&out));
    assert_eq!(v["verdict"], "fail", "{v}");
    assert!(
        v["violations"].to_string().contains("not in PostgreSQL"),
        "{}",
        v["violations"]
    );
    assert!(
        v["unknown_because"].is_null(),
        "{} {}",
        v["unknown_because"],
        v["notes"]
    );
    let notes = v["notes"].to_string();
    assert!(!notes.contains("unknown"), "{notes}");
    assert!(
        notes.contains("restarted during the run") && notes.contains("keeps nothing"),
        "{notes}"
    );
    assert!(notes.contains("the FAIL stands"), "{notes}");
}

#[test]
fn a_queue_faster_than_its_worker_grows_then_drains_and_the_verdict_holds() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let out = lockctl(
        &server.url(),
        &[
            "--json",
            "hammer",
            "--sku",
            "burst",
            "-n",
            "20000",
            "-c",
            "20",
            "--stock",
            "20000",
            "--strategy",
            "atomic",
            "--queue",
            "--db",
            &db.url,
            "--workers",
            "1",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["verdict"], "pass");
    assert!(
        v["pipeline"]["queue_peak"].as_u64().unwrap() > 0,
        "{}",
        v["pipeline"]
    );
    assert_eq!(v["pipeline"]["drained"], true);
    assert_eq!(rows(&db, "burst"), (20000, 20000, 20000));
}

/// Ctrl-C on a waiting worker says what it finishes (its batch, not the hammer's "requests in
/// flight"), and the read the signal interrupted is not reported as Redis failing.
#[test]
fn ctrl_c_on_a_worker_says_it_finishes_its_batch_and_blames_no_server() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "cc", "20");
    let worker = spawn_lockctl_with(
        &server.url(),
        &["worker", "--db", &db.url, "--sku", "cc"],
        Streams::Capture,
    );
    assert!(
        eventually(Duration::from_secs(30), || rows(&db, "cc").0 == 20),
        "{:?}",
        rows(&db, "cc")
    );
    // Blocked in its read of the stream now.
    std::thread::sleep(Duration::from_millis(300));
    signal(worker.id(), "INT");
    let out = crate::support::finish_within(worker, Duration::from_secs(20), "the worker");
    let err = stderr(&out);
    assert!(err.contains("finishing the batch in hand"), "{err}");
    assert!(!err.contains("requests in flight"), "{err}");
    assert!(
        !err.contains("failed") && !err.contains("retrying"),
        "{err}"
    );
}

/// A worker's Redis user without `@dangerous` (INFO among it), as least-privilege accounts are
/// set up, still persists: the check that the server is new enough lets an unreadable version
/// through (found by an attack session: the check refused such a worker outright).
#[test]
fn a_worker_whose_redis_user_may_not_run_info_still_persists() {
    let server = RedisServer::start();
    let db = TestDb::create();
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "worker",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@dangerous",
        ])
        .query(&mut server.raw())
        .unwrap();
    assert_eq!(
        code(&lockctl(&server.url(), &["db", "init", "--db", &db.url])),
        0
    );
    assert_eq!(code(&lockctl(&server.url(), &["seed", "acl_sku", "3"])), 0);
    for _ in 0..2 {
        let out = lockctl(&server.url(), &["buy", "acl_sku", "--queue"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let worker_url = format!("redis://worker:pw@127.0.0.1:{}", server.port);
    let out = lockctl(
        &worker_url,
        &["worker", "--db", &db.url, "--sku", "acl_sku", "--once"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let rows: i64 = db
        .client()
        .query_one(
            "select count(*) from lockctl_orders where sku = 'acl_sku'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 2);
}
