//! The orders pipeline when the database misbehaves, and the books it is judged by: no paid
//! order dead-lettered for the server's trouble, no pipeline stalled by one stopped worker,
//! no false alarm from `status --db` during a live sale or after a re-seed, no queue depth
//! read from Redis's lag. Each test here failed on the code before it.

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use lockctl_core::orders::checkpoint::{Checkpoint, Checkpoints};
use redis::Commands;

use crate::pipeline::{drain, init, queue_orders, rows, worker_thread};
use crate::support::{
    Killed, RedisServer, Streams, TestDb, code, eventually, json, lockctl, signal,
    spawn_lockctl_with, stderr, stdout,
};

/// A PostgreSQL role of the test's own (roles are the server's, not the database's), dropped
/// at the end.
struct Role {
    name: String,
    db: String,
    admin: postgres::Client,
}

impl Role {
    fn create(db: &TestDb) -> Role {
        let name = format!("lockctl_role_{}", hex::encode(rand::random::<[u8; 5]>()));
        let mut admin = db.client();
        admin
            .batch_execute(&format!(
                "CREATE ROLE {name} LOGIN;
                 GRANT ALL ON ALL TABLES IN SCHEMA public TO {name};"
            ))
            .unwrap();
        Role {
            db: db
                .url
                .rsplit_once('/')
                .unwrap()
                .0
                .replace("postgres@", &format!("{name}@"))
                + "/"
                + &db.name,
            name,
            admin,
        }
    }

    /// Refuses (or allows again) its logins, and ends its sessions so they must log in again.
    fn login(&mut self, allowed: bool) {
        let name = &self.name;
        let login = if allowed { "LOGIN" } else { "NOLOGIN" };
        self.admin
            .batch_execute(&format!(
                "ALTER ROLE {name} {login};
                 SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}';"
            ))
            .unwrap();
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let name = &self.name;
        let _ = self.admin.batch_execute(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}';
             REASSIGN OWNED BY {name} TO postgres; DROP OWNED BY {name}; DROP ROLE IF EXISTS {name};"
        ));
    }
}

fn dead_letters(server: &RedisServer, sku: &str) -> u64 {
    server
        .raw()
        .xlen(format!("item:order_dead:{sku}"))
        .unwrap_or(0)
}

fn status(server: &RedisServer, db: &TestDb, sku: &str) -> std::process::Output {
    lockctl(&server.url(), &["--json", "status", sku, "--db", &db.url])
}

#[test]
fn a_login_refused_for_two_seconds_dead_letters_no_paid_order() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let mut role = Role::create(&db);
    let worker = Killed(spawn_lockctl_with(
        &server.url(),
        &[
            "worker", "--db", &role.db, "--sku", "login", "--batch", "100",
        ],
        Streams::Discard,
    ));
    // The worker is up (it logged in and made its group); then its logins are refused.
    assert!(eventually(Duration::from_secs(30), || {
        server
            .raw()
            .exists::<_, bool>("item:order_events:login")
            .unwrap()
    }));
    role.login(false);
    queue_orders(&server, "login", "2000");
    std::thread::sleep(Duration::from_secs(2));
    role.login(true);
    assert!(
        eventually(Duration::from_secs(60), || rows(&db, "login").0 == 2000),
        "the worker persisted {} of 2000 orders",
        rows(&db, "login").0
    );
    assert_eq!(
        dead_letters(&server, "login"),
        0,
        "no order is dead-lettered"
    );
    assert_eq!(rows(&db, "login"), (2000, 2000, 2000));
    drop(worker);
    let out = status(&server, &db, "login");
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn a_refused_row_is_kept_whole_and_requeued_once_after_the_fix() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    db.client()
        .batch_execute("ALTER TABLE lockctl_orders ADD CONSTRAINT only_ten CHECK (qty <> 3)")
        .unwrap();
    let url = server.url();
    lockctl(&url, &["seed", "req", "100"]);
    for (order, qty) in [("keep-1", "1"), ("refused", "3"), ("keep-2", "1")] {
        let out = lockctl(
            &url,
            &[
                "buy",
                "req",
                "--queue",
                "--order-id",
                order,
                "--qty",
                qty,
                "--strategy",
                "atomic",
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let v = drain(&server, &db, "req");
    assert_eq!(v["dead_letters"], 1, "{v}");
    assert_eq!(rows(&db, "req"), (2, 2, 2));
    // The dead letter keeps the order whole, and status names it as set aside, not lost.
    let dead: redis::streams::StreamRangeReply =
        server.raw().xrange_all("item:order_dead:req").unwrap();
    let entry = &dead.ids[0];
    assert_eq!(
        entry.get::<String>("entry.order_id").as_deref(),
        Some("refused")
    );
    assert_eq!(entry.get::<String>("entry.qty").as_deref(), Some("3"));
    let out = status(&server, &db, "req");
    assert_eq!(code(&out), 3, "{}", stdout(&out));
    let problems = json(&out)["problems"].to_string();
    assert!(
        problems.contains("set aside in item:order_dead:req"),
        "{problems}"
    );
    assert!(problems.contains("--requeue-dead"), "{problems}");
    assert!(!problems.contains("lost"), "{problems}");
    // After the fix: put back once, however often asked.
    db.client()
        .batch_execute("ALTER TABLE lockctl_orders DROP CONSTRAINT only_ten")
        .unwrap();
    // A dead letter lockctl did not write (no id of its deduction) stays, and holds up nothing.
    let _: String = server
        .raw()
        .xadd(
            "item:order_dead:req",
            "*",
            &[
                ("reason", "forged"),
                ("entry.order_id", "hx-1"),
                ("entry.sku", "req"),
            ],
        )
        .unwrap();
    let args = ["--json", "worker", "--sku", "req", "--requeue-dead"];
    let first = lockctl(&url, &args);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    assert_eq!(json(&first)["requeued"][0]["requeued"], 1);
    assert_eq!(json(&first)["requeued"][0]["left"], 1);
    let again = lockctl(&url, &args);
    assert_eq!(json(&again)["requeued"][0]["requeued"], 0);
    drain(&server, &db, "req");
    assert_eq!(rows(&db, "req"), (3, 3, 5));
    assert_eq!(dead_letters(&server, "req"), 1, "the forged one stays");
    let _: () = server.raw().del("item:order_dead:req").unwrap();
    let out = status(&server, &db, "req");
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
}

/// Stalls the worker at [`Checkpoint::InTransaction`] the first time it gets there (its batch
/// inserted, its rows locked, nothing committed), as a paused VM or a partition would: says so
/// on `reached`, and goes on only once `release` is dropped.
fn stalls_in_transaction(reached: mpsc::Sender<()>, release: mpsc::Receiver<()>) -> Checkpoints {
    let (reached, release) = (Mutex::new(reached), Mutex::new(release));
    let once = AtomicBool::new(false);
    Checkpoints::new(move |at| {
        if at == Checkpoint::InTransaction && !once.swap(true, Ordering::SeqCst) {
            let _ = reached.lock().unwrap().send(());
            let _ = release.lock().unwrap().recv();
        }
    })
}

#[test]
fn a_worker_stopped_mid_transaction_does_not_stall_the_pipeline() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "stall", "3000");
    // Worker A inserts its first batch and stalls before the commit, holding the rows' locks
    // "idle in transaction".
    let (reached, stalled) = mpsc::channel();
    let (release, released) = mpsc::channel();
    let stop_a = Arc::new(AtomicBool::new(false));
    let a = worker_thread(
        &server,
        &db,
        "stall",
        100,
        stalls_in_transaction(reached, released),
        stop_a.clone(),
    );
    stalled
        .recv_timeout(Duration::from_secs(30))
        .expect("worker A never got to its transaction");
    // Worker B takes A's batch over after 200 ms; the rows are locked by A.
    let _b = Killed(spawn_lockctl_with(
        &server.url(),
        &[
            "worker",
            "--db",
            &db.url,
            "--sku",
            "stall",
            "--batch",
            "100",
            "--claim-idle-ms",
            "200",
        ],
        Streams::Discard,
    ));
    // The other 2900 go on at once; A's 100 once the server has ended A's idle transaction.
    assert!(
        eventually(Duration::from_secs(60), || rows(&db, "stall").0 == 3000),
        "{} of 3000 persisted while worker A was stalled",
        rows(&db, "stall").0
    );
    // A goes on, finds its transaction ended, and stops when asked.
    stop_a.store(true, Ordering::SeqCst);
    drop(release);
    // Its own result may be either: the server ended its transaction under it.
    let _ = a
        .recv_timeout(Duration::from_secs(60))
        .expect("worker A did not stop within 60 s once asked")
        .expect("worker A panicked");
    assert_eq!(rows(&db, "stall"), (3000, 3000, 3000));
}

#[test]
fn status_db_raises_no_false_alarm_during_a_live_sale_and_catches_a_forged_row_once_quiet() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let url = server.url();
    let hammer = spawn_lockctl_with(
        &url,
        &[
            "--json",
            "hammer",
            "--sku",
            "live",
            "-n",
            "60000",
            "-c",
            "20",
            "--stock",
            "30000",
            "--strategy",
            "atomic",
            "--queue",
            "--db",
            &db.url,
            "--workers",
            "2",
        ],
        Streams::Capture,
    );
    let mut hammer = Killed(hammer);
    let (mut calls, mut alarms) = (0, Vec::new());
    while hammer.0.try_wait().unwrap().is_none() {
        let out = status(&server, &db, "live");
        match code(&out) {
            0 => calls += 1,
            _ => alarms.push(format!("{}{}", stdout(&out), stderr(&out))),
        }
    }
    let out = hammer.0.wait_with_output_ref();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        alarms.is_empty(),
        "{} false alarms: {}",
        alarms.len(),
        alarms[0]
    );
    assert!(calls >= 3, "only {calls} readings during the sale");
    assert_eq!(code(&status(&server, &db, "live")), 0);
    // A row no buyer paid for, once the sale is quiet: named.
    db.client()
        .batch_execute(
            "INSERT INTO lockctl_orders (order_id, sku, qty, stream_id, deducted_at)
             VALUES ('forged', 'live', 1, '99999999999999-0', now())",
        )
        .unwrap();
    let out = status(&server, &db, "live");
    assert_eq!(code(&out), 3, "{}", stdout(&out));
    assert!(
        json(&out)["problems"]
            .to_string()
            .contains("not in the ledger"),
        "{}",
        stdout(&out)
    );
}

trait WaitRef {
    fn wait_with_output_ref(&mut self) -> std::process::Output;
}

impl WaitRef for Child {
    /// The output of a child that has exited, read from its pipes.
    fn wait_with_output_ref(&mut self) -> std::process::Output {
        use std::io::Read;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        if let Some(o) = self.stdout.as_mut() {
            let _ = o.read_to_end(&mut out);
        }
        if let Some(e) = self.stderr.as_mut() {
            let _ = e.read_to_end(&mut err);
        }
        std::process::Output {
            status: self.wait().unwrap(),
            stdout: out,
            stderr: err,
        }
    }
}

#[test]
fn a_second_sale_of_a_sku_is_judged_on_its_own_rows() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    for sale in 0..3 {
        let out = lockctl(
            &server.url(),
            &[
                "hammer", "--sku", "again", "--stock", "100", "--queue", "--db", &db.url,
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        if sale == 1 {
            // The stream goes (an operator's cleanup, a restart without persistence): the
            // next sale is still told from the earlier ones.
            let _: () = server.raw().del("item:order_events:again").unwrap();
        }
    }
    assert_eq!(
        rows(&db, "again").0,
        300,
        "the earlier sales' rows are kept"
    );
    let out = status(&server, &db, "again");
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    let v = json(&out);
    assert_eq!(v["orders"]["persisted_orders"], 100, "{v}");
}

#[test]
fn a_second_deduction_under_one_order_id_is_a_conflict_not_a_redelivery() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let url = server.url();
    lockctl(&url, &["seed", "twice", "10"]);
    for _ in 0..2 {
        let out = lockctl(&url, &["buy", "twice", "--queue", "--order-id", "same"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    }
    let v = drain(&server, &db, "twice");
    assert_eq!(
        (v["redelivered"].as_u64(), v["conflicts"].as_u64()),
        (Some(0), Some(1)),
        "{v}"
    );
    let out = status(&server, &db, "twice");
    assert_eq!(code(&out), 3);
    let problems = json(&out)["problems"].to_string();
    assert!(problems.contains("deducted more than once"), "{problems}");
    assert!(!problems.contains("lost"), "{problems}");
}

#[test]
fn the_queue_depth_is_what_the_stream_holds_after_xdel_and_xtrim() {
    let server = RedisServer::start();
    let keys = lockctl_core::keys::StockKeys::new(&"depth".parse().unwrap());
    queue_orders(&server, "depth", "300");
    let mut conn = server.conn();
    lockctl_core::orders::ensure_group(&mut conn, &keys).unwrap();
    let mut raw = server.raw();
    // A worker read 100 of them and acknowledged none.
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg(&[
            "GROUP",
            "lockctl",
            "w",
            "COUNT",
            "100",
            "STREAMS",
            &keys.events,
            ">",
        ])
        .query(&mut raw)
        .unwrap();
    // XDEL of an entry ahead of the group: Redis's lag becomes nil.
    let ids: redis::streams::StreamRangeReply = raw.xrange_all(&keys.events).unwrap();
    let _: u64 = raw.xdel(&keys.events, &[&ids.ids[250].id]).unwrap();
    let q = lockctl_core::orders::queue_state(&mut conn, &keys).unwrap();
    assert_eq!((q.pending, q.undelivered), (100, 199), "{q:?}");
    // XTRIM of every undelivered entry: Redis's lag keeps counting them.
    let _: u64 = redis::cmd("XTRIM")
        .arg(&keys.events)
        .arg("MINID")
        .arg(&ids.ids[299].id)
        .query(&mut raw)
        .unwrap();
    let _: u64 = raw.xdel(&keys.events, &[&ids.ids[299].id]).unwrap();
    let q = lockctl_core::orders::queue_state(&mut conn, &keys).unwrap();
    assert_eq!((q.pending, q.undelivered), (100, 0), "{q:?}");
}

#[test]
fn a_trigger_that_fails_with_a_data_sqlstate_dead_letters_no_paid_order() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    // An audit trigger of the DBA's that divides by zero (SQLSTATE 22012, a "data" class)
    // while its switch is on: the server's code fails, not the rows.
    db.client()
        .batch_execute(
            "CREATE TABLE broken (on_ boolean);
             INSERT INTO broken VALUES (true);
             CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$
               BEGIN
                 IF (SELECT on_ FROM broken) THEN PERFORM 1 / 0; END IF;
                 RETURN NEW;
               END $$;
             CREATE TRIGGER audit BEFORE INSERT ON lockctl_orders
               FOR EACH ROW EXECUTE FUNCTION audit();",
        )
        .unwrap();
    let mut worker = Killed(spawn_lockctl_with(
        &server.url(),
        &["worker", "--db", &db.url, "--sku", "trg", "--batch", "50"],
        Streams::Capture,
    ));
    queue_orders(&server, "trg", "200");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(dead_letters(&server, "trg"), 0, "no order is dead-lettered");
    db.client()
        .batch_execute("UPDATE broken SET on_ = false")
        .unwrap();
    assert!(
        eventually(Duration::from_secs(60), || rows(&db, "trg").0 == 200),
        "{} of 200 persisted after the trigger was mended",
        rows(&db, "trg").0
    );
    assert_eq!(dead_letters(&server, "trg"), 0);
    // The wait was said, as it went on and when it ended.
    signal(worker.0.id(), "INT");
    let out = worker.0.wait_with_output_ref();
    let said = stderr(&out);
    assert!(
        said.contains("22012") && said.contains("batch kept"),
        "{said}"
    );
    assert!(said.contains("going again after"), "{said}");
}

#[test]
fn an_events_key_of_the_wrong_type_ends_the_worker_naming_it() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let _: () = server
        .raw()
        .set("item:order_events:bad", "garbage")
        .unwrap();
    let out = lockctl(
        &server.url(),
        &[
            "worker", "--db", &db.url, "--sku", "good", "--sku", "bad", "--once",
        ],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("'item:order_events:bad' holds a string, not a stream"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_forged_queued_entry_is_caught_once_quiet() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "fz", "100");
    drain(&server, &db, "fz");
    assert_eq!(code(&status(&server, &db, "fz")), 0);
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        .to_string();
    let _: String = server
        .raw()
        .xadd(
            "item:order_events:fz",
            "*",
            &[
                ("order_id", "forged-q1"),
                ("sku", "fz"),
                ("qty", "7"),
                ("user", ""),
                ("fence", ""),
                ("at", &at),
            ],
        )
        .unwrap();
    let out = status(&server, &db, "fz");
    assert_eq!(code(&out), 3, "{}", stdout(&out));
    assert!(
        json(&out)["problems"]
            .to_string()
            .contains("queued for a worker, not in the ledger"),
        "{}",
        stdout(&out)
    );
}
