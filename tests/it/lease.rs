//! The tutorial's homework and its fixes, through the real binary: a lease shorter than the
//! work oversells and is caught; fencing, the watchdog and the atomic script survive it; a
//! killed holder blocks others only until its lease runs out.

use std::time::Duration;

use crate::support::{RedisServer, code, eventually, json, lockctl, spawn_lockctl, stdout};
use redis::Commands;

/// The homework: a 100 ms lease, 150 ms of work, and a wait long enough to queue for the lock.
const HOMEWORK: [&str; 6] = ["--ttl-ms", "100", "--work-ms", "150", "--wait-ms", "5000"];

/// The homework's load: 40 purchases, 8 at a time, 10 in stock.
fn hammer(server: &RedisServer, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["hammer", "-n", "40", "-c", "8", "--stock", "10", "--json"];
    args.extend_from_slice(extra);
    let out = lockctl(&server.url(), &args);
    (code(&out), json(&out))
}

#[test]
fn the_naive_strategy_is_caught_overselling() {
    let server = RedisServer::start();
    let (code, v) = hammer(&server, &["--strategy", "naive", "--work-ms", "20"]);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["verdict"], "fail");
    assert!(v["oversold"].as_u64().unwrap() > 0, "{v}");
    assert!(v["final_stock"].as_i64().unwrap() < 0, "{v}");
}

#[test]
fn the_homework_a_lease_shorter_than_the_work_oversells_and_is_caught() {
    let server = RedisServer::start();
    let (code, v) = hammer(&server, &HOMEWORK);
    assert_eq!(code, 3, "{v}");
    assert_eq!(v["verdict"], "fail");
    assert!(v["lease_overrun"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["notes"].to_string().contains("worked past their lease"),
        "{v}"
    );
    let stock: i64 = server.raw().get("item:stock:sku_886").unwrap();
    assert!(
        stock < 0,
        "the homework should have oversold: stock {stock}"
    );
}

/// Fencing is safe under the homework: every holder's lease runs out in its work, and none
/// deducts late. It is also no sale: nobody bought while 10 were in stock, and that is not a
/// PASS beside a strategy that sells (issue 50, item 5), but "unknown", exit 1, saying so.
#[test]
fn fencing_survives_the_homework_by_deducting_nothing_late() {
    let server = RedisServer::start();
    let (code, v) = hammer(
        &server,
        &[&HOMEWORK[..], &["--strategy", "fenced"]].concat(),
    );
    assert!(v["lease_lost"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["oversold"], 0);
    assert!(v["final_stock"].as_i64().unwrap() >= 0);
    match v["bought"].as_u64().unwrap() {
        0 => {
            assert_eq!(code, 1, "{v}");
            assert_eq!(v["verdict"], "unknown", "{v}");
            let why = v["unknown_because"].as_str().unwrap_or_default();
            assert!(
                why.starts_with("nothing was sold: 40 requests met a stock of 10 and none bought"),
                "{v}"
            );
            assert_eq!(v["final_stock"], 10, "{v}");
        }
        // A holder scheduled fast enough to finish 150 ms of work inside 100 ms cannot be,
        // but a sale would be judged as any other.
        _ => assert_eq!(
            (code, &v["verdict"]),
            (0, &serde_json::json!("pass")),
            "{v}"
        ),
    }
}

#[test]
fn the_watchdog_survives_the_homework_and_sells_everything() {
    let server = RedisServer::start();
    let (code, v) = hammer(&server, &[&HOMEWORK[..], &["--watchdog"]].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["verdict"], "pass");
    assert_eq!(v["lease_lost"], 0);
    assert_eq!(v["lease_overrun"], 0);
    assert_eq!(v["bought"], 10);
    assert_eq!(v["final_stock"], 0);
}

#[test]
fn the_atomic_strategy_sells_exactly_the_stock() {
    let server = RedisServer::start();
    let (code, v) = hammer(&server, &["--strategy", "atomic", "--work-ms", "150"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["bought"], 10);
    assert_eq!(v["sold_out"], 30);
    assert_eq!(v["final_stock"], 0);
}

/// Starts a `buy` that holds the lock for 30 s of work, and waits until it holds it.
fn start_holder(server: &RedisServer, sku: &str, extra: &[&str]) -> (std::process::Child, String) {
    lockctl(&server.url(), &["seed", sku, "5"]);
    let mut args = vec!["buy", sku, "--work-ms", "30000"];
    args.extend_from_slice(extra);
    let child = spawn_lockctl(&server.url(), &args);
    let mut raw = server.raw();
    let key = format!("dist_lock:{sku}");
    let mut token = None;
    assert!(
        eventually(Duration::from_secs(30), || {
            token = raw.get::<_, Option<String>>(&key).unwrap();
            token.is_some()
        }),
        "the holder never took the lock"
    );
    (child, token.unwrap())
}

#[test]
fn a_holder_killed_mid_work_blocks_others_only_until_its_ttl() {
    let server = RedisServer::start();
    let (mut child, _) = start_holder(&server, "killed", &["--ttl-ms", "1000"]);
    child.kill().unwrap(); // SIGKILL: no release runs
    child.wait().unwrap();
    // Dead, its lease can only run out: at most the 1000 ms it was given are left (-2 when
    // already gone), read without a clock of the test's own, which a slow machine would skew.
    let left: i64 = server.raw().pttl("dist_lock:killed").unwrap();
    // -1 would be a lock with no expiry at all.
    assert!(
        left == -2 || (0..=1000).contains(&left),
        "{left} ms left on a 1000 ms lease"
    );
    let out = lockctl(
        &server.url(),
        &["buy", "killed", "--json", "--wait-ms", "30000"],
    );
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(json(&out)["outcome"], "bought");
}

#[test]
fn with_a_watchdog_the_lock_outlives_its_ttl_while_the_holder_lives_and_frees_after_death() {
    let server = RedisServer::start();
    let (mut child, token) = start_holder(&server, "dog", &["--ttl-ms", "300", "--watchdog"]);
    std::thread::sleep(Duration::from_millis(1200)); // four leases
    let mut raw = server.raw();
    let holder: Option<String> = raw.get("dist_lock:dog").unwrap();
    assert_eq!(
        holder.as_ref(),
        Some(&token),
        "the watchdog did not keep the lease"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // With its watchdog dead, no more than one 300 ms lease is left, and then it is gone.
    let left: i64 = raw.pttl("dist_lock:dog").unwrap();
    assert!(
        left == -2 || (0..=300).contains(&left),
        "{left} ms left on a 300 ms lease"
    );
    assert!(
        eventually(Duration::from_secs(30), || !raw
            .exists::<_, bool>("dist_lock:dog")
            .unwrap()),
        "the lock outlived its dead holder"
    );
}

#[test]
fn a_repeated_order_id_deducts_once() {
    let server = RedisServer::start();
    let url = server.url();
    lockctl(&url, &["seed", "idem", "5"]);
    for strategy in ["fenced", "atomic"] {
        let args = [
            "buy",
            "idem",
            "--json",
            "--strategy",
            strategy,
            "--order-id",
            strategy,
        ];
        let first = json(&lockctl(&url, &args));
        let again = lockctl(&url, &args);
        assert_eq!(code(&again), 0);
        let again = json(&again);
        assert_eq!(first["replayed"], false);
        assert_eq!(again["outcome"], "bought");
        assert_eq!(again["replayed"], true, "{strategy}");
        assert_eq!(again["remaining"], first["remaining"], "{strategy}");
    }
    let stock: i64 = server.raw().get("item:stock:idem").unwrap();
    assert_eq!(stock, 3);
    let text = stdout(&lockctl(
        &url,
        &[
            "buy",
            "idem",
            "--strategy",
            "atomic",
            "--order-id",
            "atomic",
        ],
    ));
    assert!(text.starts_with("already bought"), "{text}");
}

#[test]
fn a_user_over_the_limit_is_refused_and_nothing_is_consumed() {
    let server = RedisServer::start();
    let url = server.url();
    lockctl(&url, &["seed", "limited", "5"]);
    let args = [
        "buy",
        "limited",
        "--json",
        "--user",
        "alice",
        "--limit",
        "1",
        "--strategy",
        "atomic",
    ];
    assert_eq!(code(&lockctl(&url, &args)), 0);
    let refused = lockctl(&url, &args);
    assert_eq!(code(&refused), 3);
    let v = json(&refused);
    assert_eq!(v["outcome"], "limit_reached");
    assert_eq!(v["limit"], 1);
    let stock: i64 = server.raw().get("item:stock:limited").unwrap();
    assert_eq!(stock, 4);
}

#[test]
fn the_hammer_spreads_purchases_over_users_within_their_limit() {
    let server = RedisServer::start();
    let out = lockctl(
        &server.url(),
        &[
            "hammer",
            "-n",
            "30",
            "-c",
            "5",
            "--stock",
            "100",
            "--users",
            "3",
            "--limit",
            "2",
            "--strategy",
            "atomic",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let v = json(&out);
    assert_eq!(v["bought"], 6);
    assert_eq!(v["limit_reached"], 24);
    assert_eq!(v["final_stock"], 94);
}
