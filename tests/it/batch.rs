//! Group commit (`batch`): each purchase of a batch decided as atomic decides it, every
//! purchase of a failed batch indeterminate, and the hammer's verdict holding at any
//! concurrency.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use crate::support::{RedisServer, json, lockctl};
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::Sku;
use lockctl_core::stock::{self, BatchOptions, Batcher, Buy, BuyOptions, Buyer, Strategy};
use redis::Commands;

fn sku(s: &str) -> Sku {
    s.parse().unwrap()
}

fn options(strategy: Strategy) -> BuyOptions {
    BuyOptions {
        strategy,
        limit: Some(2),
        queue: true,
        ..BuyOptions::default()
    }
}

/// Everything a purchase can leave behind: stock, ledger, users' totals, sold counter, and
/// the events stream's (order id, user) in order (ids and times differ by nature).
type Books = (
    Option<String>,
    HashMap<String, String>,
    HashMap<String, String>,
    Option<String>,
    Vec<(String, String)>,
);

fn books(server: &RedisServer, s: &str) -> Books {
    let mut r = server.raw();
    let stock: Option<String> = r.get(format!("item:stock:{s}")).unwrap();
    let ledger: HashMap<String, String> = r.hgetall(format!("item:orders:{s}")).unwrap();
    let buyers: HashMap<String, String> = r.hgetall(format!("item:buyers:{s}")).unwrap();
    let sold: Option<String> = r.get(format!("item:sold:{s}")).unwrap();
    let events = events(&mut r, &format!("item:order_events:{s}"));
    (stock, ledger, buyers, sold, events)
}

/// The events stream: order ids and users, in order (ids and times differ by nature).
fn events(r: &mut redis::Connection, key: &str) -> Vec<(String, String)> {
    let entries: redis::streams::StreamRangeReply = r.xrange_all(key).unwrap();
    entries
        .ids
        .iter()
        .map(|e| {
            let get = |f: &str| e.get::<String>(f).unwrap_or_default();
            (get("order_id"), get("user"))
        })
        .collect()
}

#[test]
fn a_batch_decides_every_purchase_as_atomic_does_one_by_one() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    // Stock runs out mid-batch; an order id twice in one batch and once more in the next; a
    // user over the limit within the batch; a user whose total is not a number; an order
    // whose ledger field is not a number.
    let first: Vec<(&str, Option<&str>)> = vec![
        ("a", Some("u1")),
        ("b", Some("u1")),
        ("c", Some("u1")),
        ("a", Some("u1")),
        ("d", Some("u2")),
        ("e", Some("bad")),
        ("f", Some("u3")),
        ("hostile", Some("u3")),
        ("g", Some("u4")),
        ("h", Some("u5")),
    ];
    let second: Vec<(&str, Option<&str>)> = vec![("a", Some("u1")), ("i", None), ("d", Some("u2"))];
    let mut answers: HashMap<Strategy, Vec<String>> = HashMap::new();
    for strategy in [Strategy::Atomic, Strategy::Batch] {
        let name = format!("twin_{strategy}");
        let s = sku(&name);
        stock::seed(&mut conn, &s, 5).unwrap();
        let mut raw = server.raw();
        let _: () = raw
            .hset(format!("item:buyers:{name}"), "bad", "lots")
            .unwrap();
        let _: () = raw
            .hset(format!("item:orders:{name}"), "hostile", "1e3")
            .unwrap();
        let buyer = Buyer::new(&target, &s, options(strategy));
        let shown = |r: &lockctl_core::Result<stock::Purchase>| match r {
            Ok(p) => format!("{:?} replayed {:?}", p.outcome, p.replayed),
            Err(e) => format!("error {}: {e}", e.kind()),
        };
        let mut got = Vec::new();
        for round in [&first, &second] {
            match strategy {
                Strategy::Batch => {
                    for r in buyer.batch(&mut conn, round).unwrap() {
                        got.push(shown(&r).replace(&name, "SKU"));
                    }
                }
                _ => {
                    for &(o, u) in round.iter() {
                        got.push(shown(&buyer.buy(&mut conn, o, u)).replace(&name, "SKU"));
                    }
                }
            }
        }
        answers.insert(strategy, got);
    }
    assert_eq!(answers[&Strategy::Batch], answers[&Strategy::Atomic]);
    let batch = &answers[&Strategy::Batch];
    // The cases the test means to cover did occur.
    assert!(batch[0].starts_with("Bought { remaining: 4 }"), "{batch:?}");
    assert!(batch[2].starts_with("LimitReached"), "{batch:?}");
    assert!(batch[3].contains("replayed Some(1)"), "{batch:?}");
    assert!(batch[5].starts_with("error bad_data"), "{batch:?}");
    assert!(batch[7].starts_with("error bad_data"), "{batch:?}");
    assert!(batch.iter().any(|a| a.starts_with("SoldOut")), "{batch:?}");
    let (a, b) = (books(&server, "twin_atomic"), books(&server, "twin_batch"));
    assert_eq!(a, b, "the books differ");
    assert_eq!(a.0.as_deref(), Some("0"));
}

#[test]
fn a_batch_yields_to_a_held_lock_and_buys_once_it_is_released() {
    let server = RedisServer::start();
    let target = server.target();
    let s = sku("held");
    stock::seed(&mut server.conn(), &s, 10).unwrap();
    server.hold_lock("held", "php-token", 300);
    let waiting = BuyOptions {
        strategy: Strategy::Batch,
        lock: LockOptions {
            wait: Duration::from_secs(5),
            ..LockOptions::default()
        },
        ..BuyOptions::default()
    };
    let batcher = Batcher::start(&target, &s, waiting).unwrap();
    let now = Buyer::new(&target, &s, options(Strategy::Batch));
    let busy = now.buy(&mut server.conn(), "x", None).unwrap();
    assert_eq!(
        busy.outcome,
        Buy::Busy,
        "no wait: busy while the lock is held"
    );
    let p = batcher.buy("y", None).unwrap();
    assert!(matches!(p.outcome, Buy::Bought { remaining: 9 }), "{p:?}");
    batcher.close();
}

#[test]
fn a_batch_that_fails_mid_way_answers_every_purchase_indeterminate() {
    let server = RedisServer::start();
    let target = server.target();
    let s = sku("cut");
    stock::seed(&mut server.conn(), &s, 100).unwrap();
    let batch = BuyOptions {
        strategy: Strategy::Batch,
        batch: BatchOptions {
            window: Duration::from_millis(1),
            max: 64,
        },
        ..BuyOptions::default()
    };
    let batcher = Batcher::start(&target, &s, batch).unwrap();
    assert!(matches!(
        batcher.buy("warm", None).unwrap().outcome,
        Buy::Bought { .. }
    ));
    // The server stops with the batch on its way, then dies: the connection drops mid-call.
    server.signal("STOP");
    let (tx, rx) = mpsc::channel();
    for i in 0..30 {
        let tx = tx.clone();
        batcher.submit(
            format!("o{i}"),
            None,
            Box::new(move |r| tx.send(r).unwrap()),
        );
    }
    drop(tx);
    thread::sleep(Duration::from_millis(300));
    server.signal("KILL");
    let answers: Vec<_> = rx.iter().collect();
    assert_eq!(answers.len(), 30, "every purchase is answered");
    // The batches on their way when the server died are indeterminate; purchases still waiting
    // then went to a dead server and were never sent (refused): determinate, and true.
    let mut cut = 0;
    for a in &answers {
        match a {
            Err(e) if e.is_indeterminate() => cut += 1,
            Err(e) => assert_eq!(e.kind().to_string(), "refused", "never sent, yet: {e}"),
            Ok(p) => panic!("a purchase of a failed batch was answered {:?}", p.outcome),
        }
    }
    assert!(cut > 0, "no batch was on its way when the server died");
    batcher.close();
}

#[test]
fn one_batch_call_cut_mid_way_fails_whole_and_indeterminate() {
    // The call itself: the Batcher answers each purchase of a failed call with its error.
    let server = RedisServer::start();
    let s = sku("cut_call");
    stock::seed(&mut server.conn(), &s, 100).unwrap();
    let buyer = Buyer::new(&server.target(), &s, options(Strategy::Batch));
    let mut conn = server.conn();
    server.signal("STOP");
    let call = thread::spawn(move || {
        let ids: Vec<String> = (0..30).map(|i| format!("o{i}")).collect();
        let thirty: Vec<(&str, Option<&str>)> = ids.iter().map(|o| (o.as_str(), None)).collect();
        buyer.batch(&mut conn, &thirty)
    });
    thread::sleep(Duration::from_millis(300));
    server.signal("KILL");
    match call.join().unwrap() {
        Err(e) => assert!(e.is_indeterminate(), "{e} ({})", e.kind()),
        Ok(answers) => panic!(
            "a call to a dead server answered {} purchases",
            answers.len()
        ),
    }
}

#[test]
fn hammer_batch_sells_exactly_the_stock_at_every_concurrency() {
    let server = RedisServer::start();
    for c in ["1", "50", "1000"] {
        let s = format!("h{c}");
        let out = lockctl(
            &server.url(),
            &[
                "--json",
                "hammer",
                "--sku",
                &s,
                "--strategy",
                "batch",
                "-n",
                "1200",
                "-c",
                c,
                "--stock",
                "700",
                "--users",
                "300",
                "--limit",
                "3",
                "--queue",
            ],
        );
        let v = json(&out);
        assert_eq!(v["verdict"], "pass", "c={c}: {v}");
        assert_eq!(v["strategy"], "batch");
        assert_eq!(v["bought"], 700, "c={c}: {v}");
        assert_eq!(v["final_stock"], 0, "c={c}");
        assert_eq!(v["ledger_orders"], 700, "c={c}");
        assert_eq!(v["errors"], 0, "c={c}");
        let events: u64 = server.raw().xlen(format!("item:order_events:{s}")).unwrap();
        assert_eq!(events, 700, "c={c}: one event per order bought");
    }
}

/// The answers to purchases `o0`..`o{n-1}` (no user): one by one for atomic, one call for
/// batch; each an outcome or an error kind.
fn shown_answers(
    buyer: &Buyer,
    conn: &mut lockctl_core::conn::Conn,
    strategy: Strategy,
    n: usize,
) -> Vec<String> {
    let ids: Vec<String> = (0..n).map(|i| format!("o{i}")).collect();
    let orders: Vec<(&str, Option<&str>)> = ids.iter().map(|o| (o.as_str(), None)).collect();
    let answers = match strategy {
        Strategy::Batch => buyer.batch(conn, &orders).unwrap(),
        _ => orders
            .iter()
            .map(|&(o, _)| buyer.buy(conn, o, None))
            .collect(),
    };
    answers
        .into_iter()
        .map(|a| match a {
            Ok(p) => format!("{:?}", p.outcome),
            Err(e) => e.kind().to_string(),
        })
        .collect()
}

/// The books of `s` as a tuple that shows any write: stock, ledger, sold, events.
fn untouched(server: &RedisServer, s: &str) -> (Option<String>, usize, Option<String>, usize) {
    let mut r = server.raw();
    let stock: Option<String> = r.get(format!("item:stock:{s}")).unwrap();
    let ledger: usize = r.hlen(format!("item:orders:{s}")).unwrap();
    let sold: Option<String> = r.get(format!("item:sold:{s}")).unwrap();
    let events: usize = r.xlen(format!("item:order_events:{s}")).unwrap();
    (stock, ledger, sold, events)
}

#[test]
fn an_events_stream_that_refuses_orders_is_bad_data_and_nothing_is_written() {
    // A stream whose last id is the largest there is passes a type check, then refuses XADD:
    // the sale must not happen without its event (and must not be reported failed after it).
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in [
        Strategy::Lock,
        Strategy::Fenced,
        Strategy::Atomic,
        Strategy::Batch,
    ] {
        let name = format!("full_{strategy}");
        let s = sku(&name);
        stock::seed(&mut conn, &s, 10).unwrap();
        let _: String = redis::cmd("XADD")
            .arg(format!("item:order_events:{name}"))
            .arg("18446744073709551615-18446744073709551615")
            .arg("x")
            .arg("1")
            .query(&mut server.raw())
            .unwrap();
        let before = untouched(&server, &name);
        let buyer = Buyer::new(&target, &s, options(strategy));
        let answers = match strategy {
            Strategy::Batch => buyer
                .batch(&mut conn, &[("a", None), ("b", None), ("a", None)])
                .unwrap(),
            _ => vec![buyer.buy(&mut conn, "a", None)],
        };
        for a in &answers {
            match a {
                Err(e) => {
                    assert_eq!(e.kind().to_string(), "bad_data", "{strategy}: {e}");
                    assert!(!e.is_indeterminate(), "{strategy}: {e}");
                }
                Ok(p) => panic!(
                    "{strategy}: answered {:?} with a stream that refuses",
                    p.outcome
                ),
            }
        }
        assert_eq!(
            untouched(&server, &name),
            before,
            "{strategy} wrote something"
        );
        let lock: bool = server.raw().exists(format!("dist_lock:{name}")).unwrap();
        assert!(!lock, "{strategy} left its lock held");
    }
}

#[test]
fn a_replay_of_an_order_on_a_damaged_stock_is_bad_stock_for_atomic_and_batch_alike() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    for strategy in [Strategy::Atomic, Strategy::Batch] {
        let name = format!("replay_{strategy}");
        let s = sku(&name);
        stock::seed(&mut conn, &s, 3).unwrap();
        let buyer = Buyer::new(&target, &s, options(strategy));
        assert!(matches!(
            buyer.buy(&mut conn, "o1", None).unwrap().outcome,
            Buy::Bought { .. }
        ));
        let mut raw = server.raw();
        let _: () = raw.del(format!("item:stock:{name}")).unwrap();
        let _: () = raw.hset(format!("item:stock:{name}"), "a", "1").unwrap();
        let got = buyer.buy(&mut conn, "o1", None);
        assert!(
            matches!(&got, Err(lockctl_core::Error::BadStock { .. })),
            "{strategy}: {got:?}"
        );
    }
}

#[test]
fn a_sold_counter_at_the_edge_of_exact_numbers_stops_atomic_and_batch_at_the_same_purchase() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    let mut seen = Vec::new();
    for strategy in [Strategy::Atomic, Strategy::Batch] {
        let name = format!("edge_{strategy}");
        let s = sku(&name);
        stock::seed(&mut conn, &s, 8).unwrap();
        // 2^53 - 3: two more units and the counter is past what Lua counts exactly.
        let _: () = server
            .raw()
            .set(format!("item:sold:{name}"), "9007199254740989")
            .unwrap();
        let buyer = Buyer::new(&target, &s, options(strategy));
        let answers = shown_answers(&buyer, &mut conn, strategy, 4);
        seen.push(answers);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(
        seen[0],
        [
            "Bought { remaining: 7 }",
            "Bought { remaining: 6 }",
            "Bought { remaining: 5 }",
            "bad_data"
        ]
    );
}

#[test]
fn a_stream_with_room_for_two_more_events_takes_the_same_two_purchases_in_batch_and_atomic() {
    let server = RedisServer::start();
    let target = server.target();
    let mut conn = server.conn();
    let mut seen = Vec::new();
    for strategy in [Strategy::Atomic, Strategy::Batch] {
        let name = format!("room_{strategy}");
        let s = sku(&name);
        stock::seed(&mut conn, &s, 10).unwrap();
        let _: String = redis::cmd("XADD")
            .arg(format!("item:order_events:{name}"))
            .arg("18446744073709551615-18446744073709551613")
            .arg("x")
            .arg("1")
            .query(&mut server.raw())
            .unwrap();
        let buyer = Buyer::new(&target, &s, options(strategy));
        let answers = shown_answers(&buyer, &mut conn, strategy, 5);
        let (stock, ledger, sold, events) = untouched(&server, &name);
        seen.push((answers, stock, ledger, sold, events));
    }
    assert_eq!(seen[0], seen[1]);
    let (answers, stock, ledger, _, events) = &seen[0];
    assert_eq!(
        answers,
        &[
            "Bought { remaining: 9 }",
            "Bought { remaining: 8 }",
            "bad_data",
            "bad_data",
            "bad_data"
        ]
    );
    assert_eq!((stock.as_deref(), *ledger, *events), (Some("8"), 2, 3));
}

/// What one key of a purchase's books holds, whatever its type: enough to tell any write (a
/// stream by its entries' order ids and users: its ids and times differ by nature).
fn key_state(r: &mut redis::Connection, key: &str) -> String {
    let t: String = redis::cmd("TYPE").arg(key).query(r).unwrap();
    match t.as_str() {
        "string" => format!("string {:?}", r.get::<_, String>(key).unwrap()),
        "hash" => {
            let mut h: Vec<(String, String)> = r.hgetall(key).unwrap();
            h.sort();
            format!("hash {h:?}")
        }
        "list" => format!("list {:?}", r.lrange::<_, Vec<String>>(key, 0, -1).unwrap()),
        "stream" => format!("stream {:?}", events(r, key)),
        other => other.to_string(),
    }
}

/// Sets `key` to one of the states a purchase can find it in (`n` picks which), hostile ones
/// included: absent, an integer, a value that is not one, a value of another type.
fn put(r: &mut redis::Connection, key: &str, field: &str, hash: bool, n: u8) {
    let _: () = r.del(key).unwrap();
    let _: () = match (n, hash) {
        (0, _) => (),
        (1, false) => r.set(key, "3").unwrap(),
        (2, false) => r.set(key, "0").unwrap(),
        (1, true) => r.hset(key, field, "1").unwrap(),
        (2, true) => r.hset(key, "someone-else", "1").unwrap(),
        (3, false) => r.set(key, "1e3").unwrap(),
        (3, true) => r.hset(key, field, "x").unwrap(),
        (4, false) => r.hset(key, "f", "v").unwrap(),
        (4, true) => r.set(key, "a string").unwrap(),
        (5, false) => r.set(key, "9007199254740991").unwrap(),
        (5, true) => r.hset(key, field, "2").unwrap(),
        _ => unreachable!(),
    };
}

/// One purchase, whatever its keys hold (the lock held or not; the stock, the ledger's entry
/// for its order id, the sold counter and the user's total each absent, an integer, not one,
/// or of another type; the events stream absent, of another type or full), with or without a
/// user and a limit and the orders queue: group commit answers it and writes exactly as the
/// deduct script does, as batch.lua promises. This is what holds the two scripts to one
/// decision when either changes (issue 44's slimmer deduct script moved its checks: a
/// purchase reads only what its answer needs). 300 cases drawn by proptest on one server.
#[test]
fn a_purchase_finds_the_same_answer_in_batch_and_atomic_whatever_its_keys_hold() {
    use proptest::arbitrary::any;
    let server = RedisServer::start();
    let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config {
        failure_persistence: None,
        ..proptest::test_runner::Config::with_cases(300)
    });
    let cases = (
        (any::<bool>(), 0u8..6, 0u8..6, 0u8..6, 0u8..6),
        (0u8..3, any::<bool>(), 1u64..4, any::<bool>()),
    );
    let outcome = runner.run(
        &cases,
        |((lock, stock, ledger, sold, buyers), (events, user, limit, queue))| {
            let target = server.target();
            let mut r = server.raw();
            let mut seen = Vec::new();
            for strategy in [Strategy::Atomic, Strategy::Batch] {
                let name = format!("same_{}", rand::random::<u32>());
                let s = sku(&name);
                let k = lockctl_core::keys::StockKeys::new(&s);
                put(&mut r, &k.stock, "", false, stock.min(5));
                put(&mut r, &k.ledger, "o1", true, ledger.min(5));
                put(&mut r, &k.sold, "", false, sold.min(5));
                put(&mut r, &k.buyers, "u", true, buyers.min(5));
                match events {
                    1 => {
                        let _: () = r.set(&k.events, "not a stream").unwrap();
                    }
                    2 => {
                        let _: String = redis::cmd("XADD")
                            .arg(&k.events)
                            .arg("18446744073709551615-18446744073709551615")
                            .arg("x")
                            .arg("1")
                            .query(&mut r)
                            .unwrap();
                    }
                    _ => {}
                }
                let lock_key = format!("dist_lock:{name}");
                if lock {
                    let _: () = r.set(&lock_key, "someone").unwrap();
                }
                let options = BuyOptions {
                    strategy,
                    limit: user.then_some(limit),
                    queue,
                    lock: LockOptions {
                        wait: Duration::ZERO,
                        ..LockOptions::default()
                    },
                    ..BuyOptions::default()
                };
                let buyer = Buyer::new(&target, &s, options);
                let u = user.then_some("u");
                let mut conn = server.conn();
                let answer = match strategy {
                    Strategy::Batch => buyer
                        .batch(&mut conn, &[("o1", u)])
                        .map(|mut a| a.remove(0)),
                    _ => Ok(buyer.buy(&mut conn, "o1", u)),
                };
                let shown = match answer {
                    Ok(Ok(p)) => format!("{:?} replayed {:?}", p.outcome, p.replayed),
                    Ok(Err(e)) | Err(e) => format!("{}: {e}", e.kind()),
                };
                let state: Vec<String> = [
                    &k.stock, &k.ledger, &k.sold, &k.buyers, &k.events, &lock_key,
                ]
                .iter()
                .map(|key| key_state(&mut r, key))
                .collect();
                seen.push((shown.replace(&name, "S"), state));
            }
            proptest::prop_assert_eq!(&seen[0], &seen[1]);
            Ok(())
        },
    );
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
