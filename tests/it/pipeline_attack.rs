//! The orders pipeline against what an attacker (or a bug elsewhere) can put in its way:
//! hostile stream entries, duplicates within a batch, acknowledged entries without a row, a
//! dropped table, a dead-letter key of the wrong type, and passwords in `--db`.

use std::time::Duration;

use redis::Commands;

use crate::pipeline::{drain, init, queue_orders, rows};
use crate::support::{
    RedisServer, Streams, TestDb, code, finish_within, json, lockctl, spawn_lockctl_with, stderr,
    stdout,
};

/// Appends one entry with `fields` to `sku`'s stream, the others an order needs filled in.
fn xadd(server: &RedisServer, sku: &str, fields: &[(&str, &str)]) -> String {
    let mut all: Vec<(&str, &str)> = vec![
        ("order_id", "o"),
        ("sku", sku),
        ("qty", "1"),
        ("user", ""),
        ("fence", ""),
        ("at", "1780000000000"),
    ];
    for (k, v) in fields {
        all.retain(|(a, _)| a != k);
        all.push((k, v));
    }
    server
        .raw()
        .xadd(format!("item:order_events:{sku}"), "*", &all)
        .unwrap()
}

/// `worker --once --json`, which must end on its own within a minute.
fn once(server: &RedisServer, db: &TestDb, sku: &str) -> std::process::Output {
    let child = spawn_lockctl_with(
        &server.url(),
        &["--json", "worker", "--db", &db.url, "--sku", sku, "--once"],
        Streams::Capture,
    );
    finish_within(child, Duration::from_secs(60), "worker --once")
}

fn dead_letters(server: &RedisServer, sku: &str) -> u64 {
    server.raw().xlen(format!("item:order_dead:{sku}")).unwrap()
}

#[test]
fn hostile_entries_are_dead_lettered_and_the_orders_behind_them_persisted() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let big = "x".repeat(10_000);
    let hostile: Vec<Vec<(&str, &str)>> = vec![
        vec![("order_id", "h1"), ("at", "9223372036854775807")],
        vec![("order_id", "h2"), ("at", "-9223372036854775807")],
        vec![("order_id", "nul\0id")],
        vec![("order_id", "h4"), ("user", "bad\0user")],
        vec![("order_id", &big)],
        vec![("order_id", "h6"), ("sku", &big)],
        vec![("order_id", "h7"), ("qty", "9223372036854775807")],
    ];
    for (i, fields) in hostile.iter().enumerate() {
        xadd(&server, "hs", fields);
        xadd(&server, "hs", &[("order_id", &format!("legit-{i}"))]);
    }
    let out = once(&server, &db, "hs");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(json(&out)["dead_letters"], 7, "{}", stderr(&out));
    assert_eq!(rows(&db, "hs"), (7, 7, 7));
    assert_eq!(dead_letters(&server, "hs"), 7);
    // Rows written behind lockctl's back with quantities whose sum overflows: status says the
    // books do not reconcile, never panics and never wraps round.
    for id in ["forged-1", "forged-2"] {
        db.client()
            .execute(
                "INSERT INTO lockctl_orders (order_id, sku, qty, stream_id, deducted_at)
                 VALUES ($1, 'hs', 9223372036854775807, '0-1', now())",
                &[&id],
            )
            .unwrap();
    }
    let out = lockctl(&server.url(), &["--json", "status", "hs", "--db", &db.url]);
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn a_row_postgresql_refuses_is_dead_lettered_alone_and_its_batch_persisted() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    // A constraint a DBA added: PostgreSQL refuses this one row (SQLSTATE 23514), however often
    // the batch is retried; the parse cannot know.
    db.client()
        .batch_execute(
            "ALTER TABLE lockctl_orders ADD CONSTRAINT no_evil CHECK (order_id <> 'evil')",
        )
        .unwrap();
    xadd(&server, "iso", &[("order_id", "good-1")]);
    let evil = xadd(&server, "iso", &[("order_id", "evil")]);
    xadd(&server, "iso", &[("order_id", "good-2")]);
    let out = once(&server, &db, "iso");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(rows(&db, "iso"), (2, 2, 2));
    let dead: redis::streams::StreamRangeReply =
        server.raw().xrange_all("item:order_dead:iso").unwrap();
    assert_eq!(dead.ids.len(), 1);
    let entry = &dead.ids[0];
    assert_eq!(entry.get::<String>("stream_id"), Some(evil));
    let reason: String = entry.get("reason").unwrap();
    assert!(reason.contains("23514"), "{reason}");
    let pending: redis::streams::StreamPendingReply = server
        .raw()
        .xpending("item:order_events:iso", "lockctl")
        .unwrap();
    assert_eq!(pending.count(), 0, "everything handled is acknowledged");
}

#[test]
fn a_dead_letter_key_of_another_type_is_an_error_that_says_what_to_do() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let _: () = server.raw().set("item:order_dead:wt", "oops").unwrap();
    xadd(&server, "wt", &[("order_id", "a")]);
    xadd(&server, "wt", &[("order_id", "b"), ("qty", "many")]);
    xadd(&server, "wt", &[("order_id", "c")]);
    let out = once(&server, &db, "wt");
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("'item:order_dead:wt' holds a string") && err.contains("RENAME"),
        "{err}"
    );
    // The orders around the poison are persisted all the same; the poison stays pending.
    assert_eq!(rows(&db, "wt").0, 2);
    let _: () = server.raw().del("item:order_dead:wt").unwrap();
    let out = lockctl(
        &server.url(),
        &[
            "--json",
            "worker",
            "--db",
            &db.url,
            "--sku",
            "wt",
            "--once",
            "--claim-idle-ms",
            "1",
        ],
    );
    assert_eq!(json(&out)["dead_letters"], 1, "{}", stderr(&out));
}

#[test]
fn a_duplicate_order_id_with_other_content_within_one_batch_is_a_conflict() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    assert_eq!(code(&lockctl(&server.url(), &["seed", "dup4", "10"])), 0);
    let out = lockctl(
        &server.url(),
        &["buy", "dup4", "--queue", "--order-id", "ord-Z4"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    xadd(&server, "dup4", &[("order_id", "ord-Z4"), ("qty", "7")]);
    let out = once(&server, &db, "dup4");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (v["persisted"].as_u64(), v["conflicts"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    let recorded: i64 = db
        .client()
        .query_one("SELECT count(*) FROM lockctl_order_conflicts", &[])
        .unwrap()
        .get(0);
    assert_eq!(recorded, 1);
    let out = lockctl(&server.url(), &["status", "dup4", "--db", &db.url]);
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn an_acknowledged_entry_without_its_row_is_lost_not_queued() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    queue_orders(&server, "ack", "5");
    let key = "item:order_events:ack";
    let mut raw = server.raw();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", key, "lockctl", "0"])
        .query(&mut raw)
        .unwrap();
    // A consumer takes two entries and acknowledges them without writing anything.
    let read: redis::streams::StreamReadReply = raw
        .xread_options(
            &[key],
            &[">"],
            &redis::streams::StreamReadOptions::default()
                .group("lockctl", "rogue")
                .count(2),
        )
        .unwrap();
    let taken = &read.keys[0].ids;
    let ids: Vec<&str> = taken.iter().map(|e| e.id.as_str()).collect();
    let _: u64 = raw.xack(key, "lockctl", &ids).unwrap();
    let out = lockctl(&server.url(), &["status", "ack", "--db", &db.url]);
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    for e in taken {
        let order: String = e.get("order_id").unwrap();
        assert!(stdout(&out).contains(&order), "{order}: {}", stdout(&out));
    }
}

#[test]
fn the_trim_keeps_every_entry_still_pending_or_undelivered() {
    let server = RedisServer::start();
    queue_orders(&server, "tr", "10");
    let key = "item:order_events:tr";
    let mut raw = server.raw();
    let _: () = redis::cmd("XGROUP")
        .arg(&["CREATE", key, "lockctl", "0"])
        .query(&mut raw)
        .unwrap();
    let read = |raw: &mut redis::Connection, who: &str, n: usize| -> Vec<String> {
        let r: redis::streams::StreamReadReply = raw
            .xread_options(
                &[key],
                &[">"],
                &redis::streams::StreamReadOptions::default()
                    .group("lockctl", who)
                    .count(n),
            )
            .unwrap();
        r.keys[0].ids.iter().map(|e| e.id.clone()).collect()
    };
    let done = read(&mut raw, "w", 3);
    let _: u64 = raw.xack(key, "lockctl", &done).unwrap();
    let held = read(&mut raw, "slow", 3);
    let done2 = read(&mut raw, "w", 2);
    let _: u64 = raw.xack(key, "lockctl", &done2).unwrap();
    let sku: lockctl_core::sku::Sku = "tr".parse().unwrap();
    let floor = lockctl_core::orders::trim_acknowledged(
        &mut server.conn(),
        &lockctl_core::keys::StockKeys::new(&sku),
    )
    .unwrap();
    assert_eq!(floor.as_deref(), Some(held[0].as_str()));
    let left: redis::streams::StreamRangeReply = raw.xrange_all(key).unwrap();
    let left: Vec<String> = left.ids.into_iter().map(|e| e.id).collect();
    assert_eq!(
        left.len(),
        7,
        "3 pending, 2 acked after them, 2 undelivered"
    );
    assert_eq!(&left[..3], &held[..]);
    let _: u64 = raw.xack(key, "lockctl", &held).unwrap();
    let _ = read(&mut raw, "w", 2);
    lockctl_core::orders::trim_acknowledged(
        &mut server.conn(),
        &lockctl_core::keys::StockKeys::new(&sku),
    )
    .unwrap();
    let pending_one: u64 = raw.xlen(key).unwrap();
    assert_eq!(
        pending_one, 2,
        "only the two delivered last and still pending remain"
    );
}

#[test]
fn a_dropped_table_is_made_again_by_db_init_and_ends_a_worker_with_what_to_run() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    let worker = spawn_lockctl_with(
        &server.url(),
        &["worker", "--db", &db.url, "--sku", "dt"],
        Streams::Capture,
    );
    // The worker is running (its group exists) when the table goes.
    assert!(crate::support::eventually(Duration::from_secs(20), || {
        server
            .raw()
            .exists::<_, bool>("item:order_events:dt")
            .unwrap()
    }));
    db.client()
        .batch_execute("DROP TABLE lockctl_orders")
        .unwrap();
    xadd(&server, "dt", &[("order_id", "d1")]);
    let out = finish_within(
        worker,
        Duration::from_secs(30),
        "the worker on a dropped table",
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("lockctl db init"), "{}", stderr(&out));
    let out = once(&server, &db, "dt");
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("lockctl db init"), "{}", stderr(&out));
    let out = lockctl(&server.url(), &["db", "init", "--db", &db.url]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("lockctl_orders"), "{}", stdout(&out));
    drain(&server, &db, "dt");
    assert_eq!(rows(&db, "dt"), (1, 1, 1));
}

#[test]
fn a_db_password_never_shows_and_a_bad_db_url_names_db_not_redis() {
    let server = RedisServer::start();
    let kv = "host=127.0.0.1 password=s3cret user=u port=1 connect_timeout=2";
    for args in [
        vec!["status", "p1", "--db", kv],
        vec!["worker", "--db", kv, "--sku", "p1", "--once"],
        vec![
            "db",
            "init",
            "--db",
            "postgres://u:s3cret@127.0.0.1:1/x?password=s3cret",
        ],
    ] {
        let out = lockctl(&server.url(), &args);
        assert_eq!(code(&out), 1, "{args:?}: {}", stderr(&out));
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!all.contains("s3cret"), "{args:?}: {all}");
        assert!(all.contains("***"), "{args:?}: {all}");
    }
    let out = lockctl(
        &server.url(),
        &[
            "status",
            "p1",
            "--db",
            "postgres://u:s3cret@127.0.0.1:notaport/x",
        ],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("PostgreSQL URL") && err.contains("--db") && !err.contains("Redis"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
}

/// Issue 25. A queued hammer's reports carry the command line, and the command line carried
/// `--db` verbatim: only arguments with `://` or `@` were redacted, by the Redis URL rule, so
/// a key=value string's `password=` and a URL's `?password=` went into every report.
#[test]
fn a_db_password_shows_in_no_report_stdout_or_stderr_of_a_queued_hammer() {
    let server = RedisServer::start();
    let db = TestDb::create();
    init(&server.url(), &db);
    // Trust authentication takes any password; the reports must show none of them.
    let secret = "PW123secret";
    let config: postgres::Config = db.url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        postgres::config::Host::Tcp(h) => h.clone(),
        other => panic!("a TCP host for the test database, not {other:?}"),
    };
    let (port, user) = (
        config.get_ports()[0],
        config.get_user().unwrap_or("postgres"),
    );
    let key_value = format!(
        "host={host} port={port} user={user} password={secret} dbname={}",
        db.name
    );
    let url = format!(
        "postgres://{user}@{host}:{port}/{}?password={secret}",
        db.name
    );
    let dir = tempfile::tempdir().unwrap();
    let mut leaks = Vec::new();
    for (i, db_arg) in [key_value, url].iter().enumerate() {
        let sku = format!("redact{i}");
        let files = ["json", "md", "html"].map(|ext| dir.path().join(format!("{sku}.{ext}")));
        let [json_file, md_file, html_file] = files.each_ref().map(|f| f.to_str().unwrap());
        let out = lockctl(
            &server.url(),
            &[
                "--json",
                "hammer",
                "--sku",
                &sku,
                "-n",
                "20",
                "--stock",
                "10",
                "--strategy",
                "atomic",
                "--queue",
                "--db",
                db_arg,
                "--export-json",
                json_file,
                "--export-markdown",
                md_file,
                "--export-html",
                html_file,
            ],
        );
        assert_eq!(code(&out), 0, "{db_arg}: {}", stderr(&out));
        assert_eq!(json(&out)["pipeline"]["rows"], 10, "{db_arg}");
        let mut seen = vec![
            ("stdout".to_string(), stdout(&out)),
            ("stderr".to_string(), stderr(&out)),
        ];
        for f in &files {
            seen.push((f.display().to_string(), std::fs::read_to_string(f).unwrap()));
        }
        for (place, text) in &seen {
            if let Some(at) = text.find(secret) {
                let from = text[..at]
                    .char_indices()
                    .rev()
                    .nth(60)
                    .map_or(0, |(i, _)| i);
                let to = (at + secret.len() + 30).min(text.len());
                let to = (to..=text.len())
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap();
                leaks.push(format!(
                    "--db '{db_arg}': in {place}: ...{}...",
                    &text[from..to]
                ));
            }
        }
        // The command line is still there, with the password's place marked.
        let line = json(&out)["context"]["command_line"].to_string();
        if !line.contains("password=***") {
            leaks.push(format!("--db '{db_arg}': no password=*** in {line}"));
        }
    }
    assert!(
        leaks.is_empty(),
        "the password was shown:\n{}",
        leaks.join("\n")
    );
}
