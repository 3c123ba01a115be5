//! Purchases on a real Redis, through the library: outcomes, the ledger, bad data, and each
//! strategy's promise.

use std::collections::HashMap;
use std::thread;
use std::time::Duration;

use crate::support::RedisServer;
use lockctl_core::Error;
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::Sku;
use lockctl_core::stock::{self, Buy, BuyOptions, Buyer, Purchase, Strategy};
use redis::Commands;

fn sku(s: &str) -> Sku {
    s.parse().unwrap()
}

fn with(strategy: Strategy) -> BuyOptions {
    BuyOptions {
        strategy,
        ..BuyOptions::default()
    }
}

fn raw_stock(server: &RedisServer, s: &str) -> Option<String> {
    server.raw().get(format!("item:stock:{s}")).unwrap()
}

const ALL: [Strategy; 5] = [
    Strategy::Lock,
    Strategy::Fenced,
    Strategy::Atomic,
    Strategy::Naive,
    Strategy::Batch,
];

#[test]
fn every_strategy_buys_until_sold_out_and_records_each_order() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in ALL {
        let s = sku(&format!("one_{strategy}"));
        stock::seed(&mut conn, &s, 2).unwrap();
        let buyer = Buyer::new(&target, &s, with(strategy));
        let a = buyer.buy(&mut conn, "a", None).unwrap();
        let b = buyer.buy(&mut conn, "b", None).unwrap();
        let c = buyer.buy(&mut conn, "c", None).unwrap();
        assert_eq!(a.outcome, Buy::Bought { remaining: 1 }, "{strategy}");
        assert_eq!(b.outcome, Buy::Bought { remaining: 0 }, "{strategy}");
        assert_eq!(c.outcome, Buy::SoldOut { remaining: 0 }, "{strategy}");
        let ledger = stock::ledger(&mut conn, &s).unwrap();
        assert_eq!(ledger, HashMap::from([("a".into(), 1), ("b".into(), 1)]));
        assert_eq!(raw_stock(&server, s.as_str()).as_deref(), Some("0"));
        let lock: bool = server.raw().exists(format!("dist_lock:{s}")).unwrap();
        assert!(!lock, "{strategy} left its lock behind");
    }
}

#[test]
fn a_held_lock_makes_lock_strategies_busy_and_atomic_yield() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    let s = sku("held");
    stock::seed(&mut conn, &s, 5).unwrap();
    // A foreign holder, such as the tutorial's PHP client.
    server.hold_lock("held", "php-token", 5000);
    for strategy in [
        Strategy::Lock,
        Strategy::Fenced,
        Strategy::Atomic,
        Strategy::Batch,
    ] {
        let p = Buyer::new(&target, &s, with(strategy))
            .buy(&mut conn, "x", None)
            .unwrap();
        assert_eq!(p.outcome, Buy::Busy, "{strategy}");
    }
    assert_eq!(raw_stock(&server, "held").as_deref(), Some("5"));
    let holder: String = server.raw().get("dist_lock:held").unwrap();
    assert_eq!(holder, "php-token", "someone else's lock was touched");
}

#[test]
fn contended_buyers_leave_stock_and_ledger_in_agreement() {
    let server = RedisServer::start();
    let target = server.target();
    let s = sku("contended");
    stock::seed(&mut server.conn(), &s, 50).unwrap();
    for strategy in [Strategy::Lock, Strategy::Fenced, Strategy::Atomic] {
        stock::seed(&mut server.conn(), &s, 50).unwrap();
        let buyer = Buyer::new(
            &target,
            &s,
            BuyOptions {
                strategy,
                lock: LockOptions {
                    wait: Duration::from_secs(10),
                    ..LockOptions::default()
                },
                ..BuyOptions::default()
            },
        );
        let bought: u64 = thread::scope(|sc| {
            let handles: Vec<_> = (0..6)
                .map(|t| {
                    let (buyer, target) = (&buyer, &target);
                    sc.spawn(move || {
                        let mut conn = target.connect().unwrap();
                        (0..20)
                            .filter(|i| {
                                let p = buyer.buy(&mut conn, &format!("{t}-{i}"), None).unwrap();
                                matches!(p.outcome, Buy::Bought { .. })
                            })
                            .count() as u64
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(bought, 50, "{strategy}");
        let ledger = stock::ledger(&mut server.conn(), &s).unwrap();
        assert_eq!(ledger.len(), 50, "{strategy}");
        assert!(ledger.values().all(|&q| q == 1), "{strategy}");
        assert_eq!(raw_stock(&server, "contended").as_deref(), Some("0"));
    }
}

#[test]
fn unseeded_stock_is_an_error_for_every_strategy_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in ALL {
        let err = Buyer::new(&target, &sku("ghost"), with(strategy))
            .buy(&mut conn, "o", None)
            .unwrap_err();
        assert!(matches!(err, Error::Unseeded { .. }), "{strategy}: {err}");
        // The library names the fix as data, for the caller to word.
        assert_eq!(
            err.hint(),
            Some(lockctl_core::Hint::Seed {
                sku: "ghost".into()
            }),
            "{err}"
        );
    }
    let keys: Vec<String> = server.raw().keys("*").unwrap();
    // Only the fencing counter and the last grant's record may exist: no stock, no ledger,
    // no lock.
    assert!(
        keys.iter()
            .all(|k| k == "dist_lock_fence:ghost" || k == "dist_lock_grant:ghost"),
        "{keys:?}"
    );
}

#[test]
fn a_non_integer_or_wrong_type_stock_is_an_error_that_changes_nothing() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    let mut raw = server.raw();
    let _: () = raw.set("item:stock:text", "ten").unwrap();
    let _: () = raw.set("item:stock:float", "1e3").unwrap();
    let _: () = raw.hset("item:stock:hash", "f", "1").unwrap();
    for name in ["text", "float", "hash"] {
        for strategy in ALL {
            let err = Buyer::new(&target, &sku(name), with(strategy))
                .buy(&mut conn, "o", None)
                .unwrap_err();
            assert!(
                matches!(err, Error::BadStock { .. }),
                "{name}/{strategy}: {err}"
            );
            assert!(
                matches!(err.hint(), Some(lockctl_core::Hint::Reseed { .. })),
                "{err}"
            );
        }
        let ledger: bool = raw.exists(format!("item:orders:{name}")).unwrap();
        let lock: bool = raw.exists(format!("dist_lock:{name}")).unwrap();
        assert!(!ledger && !lock, "{name}: something was written");
    }
    let text: String = raw.get("item:stock:text").unwrap();
    assert_eq!(text, "ten");
}

#[test]
fn seeding_sets_the_stock_and_clears_the_ledger() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    let s = sku("reseed");
    stock::seed(&mut conn, &s, 3).unwrap();
    Buyer::new(&target, &s, BuyOptions::default())
        .buy(&mut conn, "o1", None)
        .unwrap();
    assert_eq!(stock::ledger(&mut conn, &s).unwrap().len(), 1);
    stock::seed(&mut conn, &s, 7).unwrap();
    assert!(stock::ledger(&mut conn, &s).unwrap().is_empty());
    assert_eq!(raw_stock(&server, "reseed").as_deref(), Some("7"));
}

/// What the caller's work saw of Redis while it ran: the lock held, and the stock.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(bool, Option<String>)>>>;

#[test]
fn the_callers_work_runs_once_before_the_deduction_and_under_the_lock_for_lock_strategies() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in ALL {
        let s = sku(&format!("work_{strategy}"));
        stock::seed(&mut conn, &s, 2).unwrap();
        let seen = Seen::default();
        let (url, log, key) = (server.url(), seen.clone(), s.to_string());
        let buyer = Buyer::new(&target, &s, with(strategy)).with_work(move || {
            let mut raw = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let held: bool = raw.exists(format!("dist_lock:{key}")).unwrap();
            let stock: Option<String> = raw.get(format!("item:stock:{key}")).unwrap();
            log.lock().unwrap().push((held, stock));
        });
        let p = buyer.buy(&mut conn, "a", None).unwrap();
        assert_eq!(p.outcome, Buy::Bought { remaining: 1 }, "{strategy}");
        let locks = matches!(strategy, Strategy::Lock | Strategy::Fenced);
        assert_eq!(
            *seen.lock().unwrap(),
            [(locks, Some("2".to_string()))],
            "{strategy}: the work ran once, before the deduction, under the lock if any"
        );
        // A purchase that finds no stock for it does no work.
        stock::seed(&mut conn, &s, 0).unwrap();
        let p = buyer.buy(&mut conn, "b", None).unwrap();
        assert_eq!(p.outcome, Buy::SoldOut { remaining: 0 }, "{strategy}");
        if !matches!(strategy, Strategy::Atomic | Strategy::Batch) {
            assert_eq!(
                seen.lock().unwrap().len(),
                1,
                "{strategy} worked for nothing"
            );
        }
    }
}

/// Seeds `name` with 5 and buys one ("late") with 150 ms of work on a 50 ms lease: the lease
/// runs out mid-work.
fn buy_outliving_the_lease(server: &RedisServer, name: &str, strategy: Strategy) -> Purchase {
    let options = BuyOptions {
        strategy,
        lock: LockOptions {
            ttl: Duration::from_millis(50),
            ..LockOptions::default()
        },
        ..BuyOptions::default()
    };
    let mut conn = server.conn();
    let s = sku(name);
    stock::seed(&mut conn, &s, 5).unwrap();
    Buyer::new(&server.target(), &s, options)
        .with_work(|| thread::sleep(Duration::from_millis(150)))
        .buy(&mut conn, "late", None)
        .unwrap()
}

#[test]
fn the_fenced_strategy_deducts_nothing_once_the_lease_ran_out() {
    let server = RedisServer::start();
    let p = buy_outliving_the_lease(&server, "fenced", Strategy::Fenced);
    assert_eq!(p.outcome, Buy::LeaseLost);
    assert!(p.fence.is_some());
    assert_eq!(raw_stock(&server, "fenced").as_deref(), Some("5"));
    let ledger = stock::ledger(&mut server.conn(), &sku("fenced")).unwrap();
    assert!(ledger.is_empty());
}

#[test]
fn the_lock_strategy_reports_a_deduction_made_past_its_lease() {
    let server = RedisServer::start();
    let p = buy_outliving_the_lease(&server, "overrun", Strategy::Lock);
    assert_eq!(p.outcome, Buy::Bought { remaining: 4 });
    assert!(p.overran_lease);
}

#[test]
fn a_repeated_order_id_deducts_once_with_fenced_and_atomic() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in [Strategy::Fenced, Strategy::Atomic] {
        let s = sku(&format!("idem_{strategy}"));
        stock::seed(&mut conn, &s, 5).unwrap();
        let buyer = Buyer::new(
            &target,
            &s,
            BuyOptions {
                strategy,
                qty: 2,
                ..BuyOptions::default()
            },
        );
        let first = buyer.buy(&mut conn, "order-1", None).unwrap();
        let again = buyer.buy(&mut conn, "order-1", None).unwrap();
        assert_eq!(first.outcome, Buy::Bought { remaining: 3 });
        assert_eq!(first.replayed, None);
        assert_eq!(again.outcome, Buy::Bought { remaining: 3 }, "{strategy}");
        assert_eq!(again.replayed, Some(2), "{strategy}");
        assert_eq!(raw_stock(&server, s.as_str()).as_deref(), Some("3"));
    }
}

#[test]
fn a_user_over_the_limit_is_refused_and_consumes_no_stock() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in [Strategy::Lock, Strategy::Fenced, Strategy::Atomic] {
        let s = sku(&format!("limit_{strategy}"));
        stock::seed(&mut conn, &s, 10).unwrap();
        let buyer = Buyer::new(
            &target,
            &s,
            BuyOptions {
                strategy,
                limit: Some(2),
                ..BuyOptions::default()
            },
        );
        for o in ["a", "b"] {
            let p = buyer.buy(&mut conn, o, Some("alice")).unwrap();
            assert!(matches!(p.outcome, Buy::Bought { .. }), "{strategy}");
        }
        let refused = buyer.buy(&mut conn, "c", Some("alice")).unwrap();
        assert_eq!(
            refused.outcome,
            Buy::LimitReached {
                bought: 2,
                limit: 2
            },
            "{strategy}"
        );
        assert_eq!(raw_stock(&server, s.as_str()).as_deref(), Some("8"));
        let bob = buyer.buy(&mut conn, "d", Some("bob")).unwrap();
        assert_eq!(bob.outcome, Buy::Bought { remaining: 7 }, "{strategy}");
    }
}

/// A retry of an order that bought is answered "bought" (a replay, nothing deducted) by every
/// strategy, also once the stock has run out since: never "sold out" for what it bought.
#[test]
fn a_retry_after_the_stock_ran_out_is_a_replay_not_a_sold_out() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in ALL.into_iter().filter(|s| *s != Strategy::Naive) {
        let s = sku(&format!("replay_{}", strategy.name()));
        stock::seed(&mut conn, &s, 1).unwrap();
        let buyer = Buyer::new(&target, &s, with(strategy));
        let first = buyer.buy(&mut conn, "o1", None).unwrap();
        assert_eq!(first.outcome, Buy::Bought { remaining: 0 }, "{strategy}");
        let again = buyer.buy(&mut conn, "o1", None).unwrap();
        assert!(
            matches!(again.outcome, Buy::Bought { .. }) && again.replayed == Some(1),
            "{strategy}: {again:?}"
        );
        let other = buyer.buy(&mut conn, "o2", None).unwrap();
        assert!(
            matches!(other.outcome, Buy::SoldOut { .. }),
            "{strategy}: {other:?}"
        );
    }
}
