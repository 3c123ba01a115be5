//! What each purchase sends, watched with MONITOR: the round trips on the critical path are
//! the currency of a serialized sale, so a change that adds one fails here, not only in a
//! benchmark.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread;

use std::time::Duration;

use crate::support::{RedisServer, eventually, lock_options, take};
use lockctl_core::Error;
use lockctl_core::lock::{Lock, LockOptions};
use lockctl_core::sku::Sku;
use lockctl_core::stock::{self, Buy, BuyOptions, Buyer, Strategy};
use redis::Commands;

/// The commands clients sent (not those scripts ran) while `work` ran, by name, with their
/// keys: `(command, first argument after the script's sha/key count when a script)`.
fn monitored(server: &RedisServer, work: impl FnOnce()) -> Vec<(String, Vec<String>)> {
    let mut mon = server.raw();
    redis::cmd("MONITOR").exec(&mut mon).unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        loop {
            let line = match mon.recv_response() {
                Ok(redis::Value::SimpleString(s)) => s,
                Ok(redis::Value::Okay) => continue,
                other => panic!("MONITOR sent {other:?}"),
            };
            if line.contains("\"ECHO\" \"monitor-done\"") {
                return;
            }
            tx.send(line).unwrap();
        }
    });
    work();
    let _: String = redis::cmd("ECHO")
        .arg("monitor-done")
        .query(&mut server.raw())
        .unwrap();
    reader.join().unwrap();
    rx.into_iter()
        // `<time> [<db> <client>] "CMD" "arg"...`; a script's own calls show `[0 lua]`.
        .filter(|l| !l.contains(" lua] "))
        .filter_map(|l| {
            let words: Vec<String> = l
                .split('"')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            let (name, args) = words.split_first()?;
            Some((name.to_ascii_uppercase(), args.to_vec()))
        })
        .collect()
}

fn counts(sent: &[(String, Vec<String>)]) -> HashMap<String, usize> {
    let mut by = HashMap::new();
    for (name, _) in sent {
        *by.entry(name.clone()).or_default() += 1;
    }
    by
}

/// `n` purchases of one SKU by `buyers` threads, each with its own connection.
fn contend(server: &RedisServer, sku: &Sku, strategy: Strategy, buyers: usize, n: usize) {
    let options = BuyOptions {
        strategy,
        lock: LockOptions {
            ttl: Duration::from_secs(10),
            wait: Duration::from_secs(30),
            watchdog: false,
        },
        ..BuyOptions::default()
    };
    let buyer = Buyer::new(&server.target(), sku, options);
    thread::scope(|s| {
        for t in 0..buyers {
            let buyer = buyer.clone();
            let mut conn = server.conn();
            s.spawn(move || {
                for i in 0..n / buyers {
                    let p = buyer.buy(&mut conn, &format!("o{t}-{i}"), None).unwrap();
                    assert!(matches!(p.outcome, Buy::Bought { .. }), "{:?}", p.outcome);
                }
            });
        }
    });
}

#[test]
fn a_locked_purchase_is_one_grant_and_one_script_with_no_read_of_its_own() {
    for strategy in [Strategy::Lock, Strategy::Fenced] {
        let server = RedisServer::start();
        let s: Sku = format!("rt_{strategy}").parse().unwrap();
        stock::seed(&mut server.conn(), &s, 1000).unwrap();
        let (buyers, n) = (4, 80);
        let sent = monitored(&server, || contend(&server, &s, strategy, buyers, n));
        let by = counts(&sent);
        let stock_key = format!("item:stock:{s}");
        // The grant carried the stock: nobody read it with a GET, and no transaction wrapped
        // the write (it travels in one script with the release and the hand-off).
        let gets: Vec<_> = sent
            .iter()
            .filter(|(c, a)| c == "GET" && a.first() == Some(&stock_key))
            .collect();
        assert!(
            gets.is_empty(),
            "{strategy}: the stock was read {} times",
            gets.len()
        );
        assert_eq!(by.get("MULTI"), None, "{strategy}: {by:?}");
        // Per purchase: one ACQUIRE and one write-and-release script (plus, per connection,
        // the first EVALSHA of each script answered NOSCRIPT, a SCRIPT LOAD and the retry).
        let scripts =
            by.get("EVALSHA").copied().unwrap_or(0) + by.get("EVAL").copied().unwrap_or(0);
        assert!(
            scripts <= 2 * n + 2 * 2 * buyers,
            "{strategy}: {scripts} script calls for {n} purchases: {by:?}"
        );
        // A waiter blocks once per wait, and only a waiter does: at most one BLPOP each.
        let blpops = by.get("BLPOP").copied().unwrap_or(0);
        assert!(blpops <= n, "{strategy}: {blpops} BLPOPs for {n} purchases");
        assert!(
            blpops > 0,
            "{strategy}: nobody waited; the test did not contend"
        );
        let left: String = redis::cmd("GET")
            .arg(&stock_key)
            .query(&mut server.raw())
            .unwrap();
        assert_eq!(left, (1000 - n).to_string(), "{strategy}");
    }
}

/// What the stock key holds when the lock is handed over, and what a purchase must make of it.
#[derive(Debug)]
enum Handed {
    Count(&'static str),
    Hostile(&'static str),
    List,
    Missing,
}

#[test]
fn a_grant_carries_exactly_what_a_get_would_have_read() {
    let server = RedisServer::start();
    let target = server.target();
    for strategy in [Strategy::Lock, Strategy::Fenced] {
        for (i, handed) in [
            Handed::Count("3"),
            Handed::Count("0"),
            Handed::Hostile("1e3"),
            Handed::List,
            Handed::Missing,
        ]
        .into_iter()
        .enumerate()
        {
            let name = format!("carry_{strategy}_{i}");
            let s: Sku = name.parse().unwrap();
            let key = format!("item:stock:{name}");
            stock::seed(&mut server.conn(), &s, 5).unwrap();
            // A holder whose release hands the lock over carrying the stock, as buyers do.
            let holder = Lock::new(&target, &name, lock_options(10_000, 0)).carrying(&key);
            let guard = take(&holder, &mut server.conn());
            let waiter = {
                let target = target.clone();
                let s = s.clone();
                thread::spawn(move || {
                    let options = BuyOptions {
                        strategy,
                        lock: lock_options(10_000, 20_000),
                        ..BuyOptions::default()
                    };
                    Buyer::new(&target, &s, options).buy(&mut target.connect().unwrap(), "w", None)
                })
            };
            let queue = format!("dist_lock_queue:{name}");
            assert!(eventually(Duration::from_secs(30), || {
                server.raw().zcard::<_, u64>(&queue).unwrap() == 1
            }));
            // Changed while the waiter waits: the hand-off must carry the new value.
            let mut raw = server.raw();
            let _: () = match handed {
                Handed::Count(v) | Handed::Hostile(v) => raw.set(&key, v).unwrap(),
                Handed::List => {
                    let _: () = raw.del(&key).unwrap();
                    raw.rpush(&key, "x").unwrap()
                }
                Handed::Missing => raw.del(&key).unwrap(),
            };
            let mut got = None;
            let sent = monitored(&server, || {
                guard.release(&mut server.conn()).unwrap();
                got = Some(waiter.join().unwrap());
            });
            let got = got.unwrap();
            let what = format!("{strategy} {handed:?}: {got:?}");
            let read = sent
                .iter()
                .any(|(c, a)| c == "GET" && a.first() == Some(&key));
            assert!(
                !read,
                "{what}: the waiter read the stock itself instead of the grant's"
            );
            match handed {
                Handed::Count("3") => {
                    assert_eq!(got.unwrap().outcome, Buy::Bought { remaining: 2 }, "{what}")
                }
                Handed::Count(_) => {
                    assert_eq!(
                        got.unwrap().outcome,
                        Buy::SoldOut { remaining: 0 },
                        "{what}"
                    )
                }
                Handed::Hostile(_) | Handed::List => {
                    assert!(matches!(got, Err(Error::BadStock { .. })), "{what}")
                }
                Handed::Missing => assert!(matches!(got, Err(Error::Unseeded { .. })), "{what}"),
            }
            // Nothing else was written, and the lock was given back.
            let ledger: u64 = raw.hlen(format!("item:orders:{name}")).unwrap();
            let bought = matches!(handed, Handed::Count("3"));
            assert_eq!(ledger, u64::from(bought), "{what}");
            let lock: bool = raw.exists(format!("dist_lock:{name}")).unwrap();
            assert!(!lock, "{what}: the lock was left held");
        }
    }
}

#[test]
fn a_grant_that_carries_nothing_has_the_buyer_read_the_stock_itself() {
    // A holder that knows nothing of lockctl (the tutorial's PHP: SET NX PX): its lock expires,
    // and lockctl's expiry thread hands it to the waiter with no stock attached.
    let server = RedisServer::start();
    let s: Sku = "foreign".parse().unwrap();
    stock::seed(&mut server.conn(), &s, 4).unwrap();
    server.hold_lock("foreign", "php-token", 300);
    let mut got = None;
    let sent = monitored(&server, || {
        let options = BuyOptions {
            strategy: Strategy::Lock,
            lock: lock_options(10_000, 5_000),
            ..BuyOptions::default()
        };
        let buyer = Buyer::new(&server.target(), &s, options);
        got = Some(buyer.buy(&mut server.conn(), "o", None));
    });
    let p = got.unwrap().unwrap();
    assert_eq!(p.outcome, Buy::Bought { remaining: 3 });
    let read = sent
        .iter()
        .any(|(c, a)| c == "GET" && a.first().map(String::as_str) == Some("item:stock:foreign"));
    assert!(read, "the holder decided without reading the stock");
}

#[test]
fn a_release_that_fails_inside_the_write_script_leaves_the_purchase_standing() {
    // The queue made a string while the buyer works: the write goes through, the hand-off
    // cannot; the buyer must be told it bought (the sale is in the books), not an error.
    let server = RedisServer::start();
    for strategy in [Strategy::Lock, Strategy::Fenced] {
        let name = format!("rel_{strategy}");
        let s: Sku = name.parse().unwrap();
        stock::seed(&mut server.conn(), &s, 5).unwrap();
        let options = BuyOptions {
            strategy,
            lock: lock_options(2_000, 0),
            ..BuyOptions::default()
        };
        let buyer = Buyer::new(&server.target(), &s, options)
            .with_work(|| thread::sleep(Duration::from_millis(300)));
        let mut conn = server.conn();
        let working = thread::spawn(move || buyer.buy(&mut conn, "o", None));
        thread::sleep(Duration::from_millis(100));
        let _: () = redis::cmd("SET")
            .arg(format!("dist_lock_queue:{name}"))
            .arg("garbage")
            .query(&mut server.raw())
            .unwrap();
        let got = working.join().unwrap();
        let p = got.unwrap_or_else(|e| panic!("{strategy}: the purchase became an error: {e}"));
        assert_eq!(p.outcome, Buy::Bought { remaining: 4 }, "{strategy}");
        let ledger: Option<String> = redis::cmd("HGET")
            .arg(format!("item:orders:{name}"))
            .arg("o")
            .query(&mut server.raw())
            .unwrap();
        assert_eq!(ledger.as_deref(), Some("1"), "{strategy}");
    }
}
