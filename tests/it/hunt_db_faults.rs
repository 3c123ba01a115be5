//! The database faults, `db-lock` and `db-kill`, on real PostgreSQL and MariaDB databases of
//! the test's own: the fault happens (a row lock is held, a session is ended), lockctl's own
//! sessions survive, and a correct system still passes a hunt with them on.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockctl_hammer::http::ids::IdFormat;
use lockctl_hunt::nemesis::{FaultKind, Nemesis, SqlFaults};
use lockctl_hunt::sql::{SkuParam, SqlDb};
use rand::SeedableRng;

use crate::support::{Killed, RedisServer, TestDb, TestMyDb};

fn nemesis(redis: &RedisServer, db: &Arc<SqlDb>, query: &str) -> Nemesis {
    let n = Nemesis::new(redis.target(), None).with_sql(SqlFaults {
        db: db.clone(),
        stock_query: Some(query.into()),
        format: IdFormat::Text,
    });
    n.begin_round();
    n.round_sku("s1");
    n
}

fn strike(n: &Nemesis, kind: FaultKind) -> (bool, String) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    n.strike(kind, Duration::from_secs(5), Duration::ZERO, &mut rng);
    let healed = n.heal(Duration::from_millis(1));
    let f = &healed.faults[0];
    (f.took, f.detail.clone())
}

/// The session lockctl's own queries run on (a pid or a connection id), which must be the
/// same after a db-kill: it was spared, not reconnected.
fn own_session(db: &SqlDb, query: &str) -> i64 {
    db.integer(query, SkuParam::from("s1")).unwrap()
}

#[test]
fn db_lock_and_db_kill_on_postgresql_hold_the_row_and_end_the_systems_sessions_only() {
    let redis = RedisServer::start();
    let test = TestDb::create();
    test.client()
        .batch_execute(
            "CREATE TABLE stock (sku text PRIMARY KEY, qty int NOT NULL); INSERT INTO stock VALUES ('s1', 5)",
        )
        .unwrap();
    let query = "SELECT qty FROM stock WHERE sku = $1";
    let db = Arc::new(SqlDb::connect(&test.url, Duration::from_secs(5)).unwrap());
    let n = nemesis(&redis, &db, query);

    // db-lock: while it holds the row, the system's update waits (and gives up at its
    // lock_timeout); once it is lifted, the update goes through.
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    n.strike(
        FaultKind::DbLock,
        Duration::from_secs(5),
        Duration::ZERO,
        &mut rng,
    );
    let mut system = test.client();
    system.batch_execute("SET lock_timeout = '300ms'").unwrap();
    let update = "UPDATE stock SET qty = qty - 1 WHERE sku = 's1'";
    let waited = system.batch_execute(update).unwrap_err();
    let code = waited.code().map(|c| c.code().to_string());
    // 55P03: lock_not_available, the lock timeout.
    assert_eq!(code.as_deref(), Some("55P03"), "{waited:?}");
    n.lift(FaultKind::DbLock, Duration::from_millis(400));
    system.batch_execute(update).unwrap();
    let healed = n.heal(Duration::from_millis(500));
    assert!(healed.faults[0].took, "{}", healed.faults[0].detail);
    assert!(
        healed.faults[0]
            .detail
            .starts_with("held the stock row of 's1'")
    );

    // db-kill: the system's session is ended; lockctl's own keeps its backend.
    n.begin_round();
    let pid = "SELECT pg_backend_pid() WHERE $1::text IS NOT NULL";
    let before = own_session(&db, pid);
    let (took, detail) = strike(&n, FaultKind::DbKill);
    assert!(took && detail.starts_with("ended 1 session on"), "{detail}");
    assert!(
        system.batch_execute("SELECT 1").is_err(),
        "the system's session survived"
    );
    assert_eq!(
        own_session(&db, pid),
        before,
        "lockctl's own session was ended"
    );
}

/// A `mariadb` client of another process on `db`, running `sql`.
fn session(db: &TestMyDb, sql: &str) -> Killed {
    let child: Child = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-u", "root", &db.name, "-e", sql])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Killed(child)
}

fn wait_for(child: &mut Killed, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn db_lock_and_db_kill_on_mariadb_hold_the_row_and_end_the_systems_sessions_only() {
    let redis = RedisServer::start();
    let test = TestMyDb::create();
    test.exec(
        "CREATE TABLE stock (sku varchar(64) PRIMARY KEY, qty int NOT NULL) ENGINE=InnoDB; INSERT INTO stock VALUES ('s1', 5)",
    );
    let query = "SELECT qty FROM stock WHERE sku = ?";
    let db = Arc::new(SqlDb::connect(&test.url, Duration::from_secs(5)).unwrap());
    let n = nemesis(&redis, &db, query);

    // db-lock: the system's update waits for the row and gives up (its lock wait of 1 s).
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    n.strike(
        FaultKind::DbLock,
        Duration::from_secs(5),
        Duration::ZERO,
        &mut rng,
    );
    let update =
        "SET innodb_lock_wait_timeout = 1; UPDATE stock SET qty = qty - 1 WHERE sku = 's1'";
    let mut waiting = session(&test, update);
    let status = wait_for(&mut waiting, Duration::from_secs(10)).expect("the update returned");
    assert!(!status.success(), "the update went through a held row");
    n.lift(FaultKind::DbLock, Duration::from_secs(2));
    let mut after = session(&test, update);
    let status = wait_for(&mut after, Duration::from_secs(10)).expect("the update returned");
    assert!(status.success(), "the row stayed held after the lift");
    let healed = n.heal(Duration::from_secs(3));
    assert!(healed.faults[0].took, "{}", healed.faults[0].detail);

    // db-kill: the system's session (a long query) is ended; lockctl's own keeps its id.
    n.begin_round();
    let id = "SELECT CONNECTION_ID() FROM DUAL WHERE ? IS NOT NULL";
    let before = own_session(&db, id);
    let mut system = session(&test, "SELECT SLEEP(30)");
    std::thread::sleep(Duration::from_millis(500));
    let (took, detail) = strike(&n, FaultKind::DbKill);
    assert!(took && detail.starts_with("ended 1 session on"), "{detail}");
    let status = wait_for(&mut system, Duration::from_secs(5)).expect("the session was ended");
    assert!(!status.success());
    assert_eq!(
        own_session(&db, id),
        before,
        "lockctl's own session was ended"
    );
}
