//! Every strategy's purchase on each transport: the blocking one (`Buyer::buy` on a `Conn`) and
//! the async one (`AsyncBuyer`). An atomic purchase is native async there (the redis crate's
//! multiplexed tokio connection): both transports send `Buyer::atomic_command` and do what
//! `Buyer::atomic_next` says. The lock strategies' purchases are native async too (the lock's
//! calls and the write awaited, each decided by the blocking path's functions), and batch's go
//! to a group committer. The same test bodies hold for each
//! safe strategy on both; what is checked is Redis's own state, not only the answers.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

use lockctl_core::aio::AsyncBuyer;
use lockctl_core::conn::Target;
use lockctl_core::sku::Sku;
use lockctl_core::stock::{self, Buy, BuyOptions, Buyer, Purchase, Strategy};
use lockctl_core::{Error, Result};

use crate::aio::{runtime, sku};
use crate::support::{RedisServer, accounted, code, json, lockctl};

/// How the purchases of a test are made.
#[derive(Clone, Copy, Debug)]
enum Transport {
    /// Threads, each with a connection of its own, calling `Buyer::buy`.
    Blocking,
    /// Tokio tasks on one `AsyncBuyer`, all spawned before any is awaited.
    Async,
}

const BOTH: [Transport; 2] = [Transport::Blocking, Transport::Async];

/// Every safe strategy on every transport.
fn every() -> impl Iterator<Item = (Strategy, Transport)> {
    SAFE.into_iter()
        .flat_map(|st| BOTH.into_iter().map(move |t| (st, t)))
}

/// One purchase to make: order id and user.
type Order = (String, Option<String>);

impl Transport {
    /// Makes `orders` at once (as many in flight as the transport allows) and answers each, in
    /// the order given.
    fn buy_all(
        self,
        target: &Target,
        s: &Sku,
        options: &BuyOptions,
        orders: &[Order],
    ) -> Vec<Result<Purchase>> {
        match self {
            Transport::Blocking => {
                let buyer = Buyer::new(target, s, options.clone());
                let threads = 8.min(orders.len().max(1));
                std::thread::scope(|scope| {
                    let each: Vec<_> = (0..threads)
                        .map(|t| {
                            let buyer = &buyer;
                            scope.spawn(move || {
                                let mut conn = target.connect().unwrap();
                                orders
                                    .iter()
                                    .enumerate()
                                    .filter(|(i, _)| i % threads == t)
                                    .map(|(i, (order, user))| {
                                        (i, buyer.buy(&mut conn, order, user.as_deref()))
                                    })
                                    .collect::<Vec<_>>()
                            })
                        })
                        .collect();
                    let mut answers: Vec<_> =
                        each.into_iter().flat_map(|h| h.join().unwrap()).collect();
                    answers.sort_by_key(|(i, _)| *i);
                    answers.into_iter().map(|(_, a)| a).collect()
                })
            }
            Transport::Async => {
                let buyer = AsyncBuyer::new(target, s, options.clone());
                runtime().block_on(async {
                    let tasks: Vec<_> = orders
                        .iter()
                        .cloned()
                        .map(|(order, user)| {
                            let buyer = buyer.clone();
                            tokio::spawn(async move { buyer.buy(&order, user.as_deref()).await })
                        })
                        .collect();
                    let mut answers = Vec::new();
                    for t in tasks {
                        answers.push(t.await.unwrap());
                    }
                    answers
                })
            }
        }
    }

    fn buy_one(
        self,
        target: &Target,
        s: &Sku,
        options: &BuyOptions,
        order: &str,
    ) -> Result<Purchase> {
        let mut answers = self.buy_all(target, s, options, &[(order.to_string(), None)]);
        answers.pop().unwrap()
    }
}

/// The strategies that keep the books under concurrency (naive, the negative control, does
/// not): each test body holds for each of them on each transport.
const SAFE: [Strategy; 4] = [
    Strategy::Lock,
    Strategy::Fenced,
    Strategy::Atomic,
    Strategy::Batch,
];

/// `strategy` as a service buys with it: a buyer that finds the lock held waits its turn (up
/// to 5 s) rather than being answered busy, so concurrent buyers all get an answer on the
/// books.
fn options(strategy: Strategy) -> BuyOptions {
    BuyOptions::for_service(strategy)
}

fn orders(n: usize, prefix: &str) -> Vec<Order> {
    (0..n).map(|i| (format!("{prefix}{i}"), None)).collect()
}

/// The stock key's value, as Redis holds it.
fn raw_stock(redis: &RedisServer, s: &Sku) -> Option<String> {
    redis::cmd("GET")
        .arg(format!("item:stock:{s}"))
        .query(&mut redis.raw())
        .unwrap()
}

/// The order ledger, as Redis holds it: order id to units.
fn ledger(redis: &RedisServer, s: &Sku) -> HashMap<String, i64> {
    redis::cmd("HGETALL")
        .arg(format!("item:orders:{s}"))
        .query(&mut redis.raw())
        .unwrap()
}

fn bought(a: &Result<Purchase>) -> bool {
    matches!(a, Ok(p) if matches!(p.outcome, Buy::Bought { .. }) && p.replayed.is_none())
}

fn count(answers: &[Result<Purchase>], f: impl Fn(&Result<Purchase>) -> bool) -> usize {
    answers.iter().filter(|a| f(a)).count()
}

/// Stock and ledger agree with each other and with the answers: every order answered bought is
/// in the ledger, and the units in the ledger plus the stock left are what was seeded.
fn assert_books(redis: &RedisServer, s: &Sku, seeded: i64, answers: &[Result<Purchase>]) {
    let ledger = ledger(redis, s);
    let stock: i64 = raw_stock(redis, s).unwrap().parse().unwrap();
    assert_eq!(
        stock + ledger.values().sum::<i64>(),
        seeded,
        "{s}: stock {stock}, ledger {ledger:?}"
    );
    for a in answers.iter().filter(|a| bought(a)) {
        let p = a.as_ref().unwrap();
        assert_eq!(
            ledger.get(&p.order_id),
            Some(&(p.qty as i64)),
            "{}",
            p.order_id
        );
    }
}

#[test]
fn each_transport_sells_exactly_the_stock_and_then_answers_sold_out() {
    let redis = RedisServer::start();
    let target = redis.target();
    for (st, t) in every() {
        let s = sku(&format!("exact_{st}_{t:?}"));
        stock::seed(&mut redis.conn(), &s, 100).unwrap();
        let answers = t.buy_all(&target, &s, &options(st), &orders(300, "o"));
        let sold_out =
            |a: &Result<Purchase>| matches!(a, Ok(p) if matches!(p.outcome, Buy::SoldOut { .. }));
        assert_eq!(
            (count(&answers, bought), count(&answers, sold_out)),
            (100, 200),
            "{st} {t:?}"
        );
        assert_eq!(raw_stock(&redis, &s).as_deref(), Some("0"), "{st} {t:?}");
        assert_eq!(ledger(&redis, &s).len(), 100, "{st} {t:?}");
        assert_books(&redis, &s, 100, &answers);
        let after = t.buy_one(&target, &s, &options(st), "late").unwrap();
        assert_eq!(after.outcome, Buy::SoldOut { remaining: 0 }, "{st} {t:?}");
    }
}

#[test]
fn an_order_id_bought_again_is_a_replay_that_deducts_nothing_on_each_transport() {
    let redis = RedisServer::start();
    let target = redis.target();
    // `lock` keeps the tutorial's unconditional write (docs/strategies.md, "Idempotency and per-user
    // limits"): a repeated order id deducts again there, by design.
    for (st, t) in every().filter(|(st, _)| *st != Strategy::Lock) {
        let s = sku(&format!("again_{st}_{t:?}"));
        stock::seed(&mut redis.conn(), &s, 10).unwrap();
        let first = t.buy_one(&target, &s, &options(st), "o1").unwrap();
        assert_eq!(
            (first.outcome, first.replayed),
            (Buy::Bought { remaining: 9 }, None),
            "{st} {t:?}"
        );
        // The same order id, sent again at once, many times over: one deduction in all.
        let answers = t.buy_all(
            &target,
            &s,
            &options(st),
            &vec![("o1".to_string(), None); 20],
        );
        for a in &answers {
            let p = a.as_ref().unwrap();
            assert_eq!(
                (p.outcome, p.replayed),
                (Buy::Bought { remaining: 9 }, Some(1)),
                "{st} {t:?}"
            );
        }
        assert_eq!(raw_stock(&redis, &s).as_deref(), Some("9"), "{st} {t:?}");
        assert_eq!(
            ledger(&redis, &s),
            HashMap::from([("o1".to_string(), 1)]),
            "{st} {t:?}"
        );
    }
}

#[test]
fn a_user_gets_no_more_than_the_limit_on_each_transport() {
    let redis = RedisServer::start();
    let target = redis.target();
    for (st, t) in every() {
        let s = sku(&format!("limit_{st}_{t:?}"));
        stock::seed(&mut redis.conn(), &s, 50).unwrap();
        let options = BuyOptions {
            limit: Some(2),
            ..options(st)
        };
        // Two users, ten orders each, all at once.
        let orders: Vec<Order> = (0..20)
            .map(|i| (format!("o{i}"), Some(format!("u{}", i % 2))))
            .collect();
        let answers = t.buy_all(&target, &s, &options, &orders);
        let limited = |a: &Result<Purchase>| matches!(a, Ok(p) if p.outcome == Buy::LimitReached { bought: 2, limit: 2 });
        assert_eq!(
            (count(&answers, bought), count(&answers, limited)),
            (4, 16),
            "{st} {t:?}"
        );
        assert_eq!(raw_stock(&redis, &s).as_deref(), Some("46"), "{st} {t:?}");
        let per_user: HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(format!("item:buyers:{s}"))
            .query(&mut redis.raw())
            .unwrap();
        assert_eq!(
            per_user,
            HashMap::from([("u0".into(), 2), ("u1".into(), 2)]),
            "{st} {t:?}"
        );
        assert_books(&redis, &s, 50, &answers);
    }
}

#[test]
fn an_unseeded_sku_is_an_error_that_writes_nothing_on_each_transport() {
    let redis = RedisServer::start();
    let target = redis.target();
    for (st, t) in every() {
        let s = sku(&format!("never_seeded_{st}_{t:?}"));
        let e = t.buy_one(&target, &s, &options(st), "o1").unwrap_err();
        assert!(
            matches!(&e, Error::Unseeded { sku } if *sku == s.to_string()),
            "{st} {t:?}: {e:?}"
        );
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*{s}*"))
            .query(&mut redis.raw())
            .unwrap();
        assert_eq!(keys, Vec::<String>::new(), "{st} {t:?}");
    }
}

#[test]
fn a_stock_that_is_not_a_number_is_an_error_that_changes_nothing_on_each_transport() {
    let redis = RedisServer::start();
    let target = redis.target();
    for (st, t) in every() {
        let s = sku(&format!("garbage_{st}_{t:?}"));
        let _: () = redis::cmd("SET")
            .arg(format!("item:stock:{s}"))
            .arg("12abc")
            .query(&mut redis.raw())
            .unwrap();
        let e = t.buy_one(&target, &s, &options(st), "o1").unwrap_err();
        assert!(
            matches!(&e, Error::BadStock { value, .. } if value.contains("12abc")),
            "{st} {t:?}: {e:?}"
        );
        assert_eq!(
            raw_stock(&redis, &s).as_deref(),
            Some("12abc"),
            "{st} {t:?}"
        );
        assert!(ledger(&redis, &s).is_empty(), "{st} {t:?}");
    }
}

/// An unseeded SKU under `lock` and `fenced`: the lock is taken once on each transport (the
/// SKU's buckets looked for after it, as the blocking route does), and the answer is unseeded.
/// Before, the async purchase was made again the whole way: the lock taken twice, its wait
/// counted twice, and with the first wait spent a second try could be answered busy.
#[test]
fn an_unseeded_sku_takes_the_lock_once_on_each_transport() {
    let redis = RedisServer::start();
    for strategy in [Strategy::Lock, Strategy::Fenced] {
        for t in BOTH {
            let metrics = std::sync::Arc::new(lockctl_core::metrics::Metrics::new());
            let target = redis.target().with_metrics(metrics.clone());
            let s = sku(&format!("never_seeded_{strategy}_{t:?}"));
            let answer = t.buy_one(&target, &s, &options(strategy), "o1");
            assert!(
                matches!(answer, Err(Error::Unseeded { .. })),
                "{strategy} {t:?}: {answer:?}"
            );
            let text = metrics.encode();
            let acquired: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("lockctl_lock_acquire_total{") && l.contains("acquired"))
                .collect();
            assert_eq!(
                acquired,
                vec!["lockctl_lock_acquire_total{result=\"acquired\"} 1"],
                "{strategy} {t:?}"
            );
        }
    }
}

/// An async purchase under `atomic`, `lock` and `fenced` is requests on async connections: no
/// blocking thread makes it. Here the runtime's one blocking thread is kept busy until the
/// purchases are done; a purchase that needed it (`spawn_blocking`, as the async API's paths
/// did before the native transport) would wait for it for ever, and the deadline says so.
#[test]
fn an_async_purchase_needs_no_blocking_thread() {
    let redis = RedisServer::start();
    let target = redis.target();
    for strategy in [Strategy::Atomic, Strategy::Lock, Strategy::Fenced] {
        let s = sku(&format!("no_blocking_{strategy}"));
        stock::seed(&mut redis.conn(), &s, 40).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(1)
            .build()
            .unwrap();
        let answers = rt.block_on(async {
            let (done, wait) = mpsc::channel::<()>();
            let busy = tokio::task::spawn_blocking(move || {
                let _ = wait.recv_timeout(Duration::from_secs(120));
            });
            let buyer = AsyncBuyer::new(&target, &s, options(strategy));
            let tasks: Vec<_> = (0..50)
                .map(|i| {
                    let buyer = buyer.clone();
                    tokio::spawn(async move { buyer.buy(&format!("o{i}"), None).await })
                })
                .collect();
            let all = async {
                let mut answers = Vec::new();
                for t in tasks {
                    answers.push(t.await.unwrap());
                }
                answers
            };
            // A deadline for a deadlock, not a measure of speed.
            let answers = tokio::time::timeout(Duration::from_secs(30), all).await;
            let _ = done.send(());
            busy.await.unwrap();
            answers
        });
        let answers =
            answers.unwrap_or_else(|_| panic!("{strategy}: waited for the busy blocking thread"));
        assert_eq!(count(&answers, bought), 40, "{strategy}");
        assert_books(&redis, &s, 40, &answers);
    }
}

/// Pauses the server for `pause_ms`, then makes 100 purchases `cut0`..`cut99` each under a
/// timeout of `after`: the answers of those answered in time (none should be, paused); the
/// others are dropped mid-flight.
async fn cut_while_paused(
    redis: &RedisServer,
    buyer: &AsyncBuyer,
    pause_ms: u64,
    after: Duration,
) -> Vec<Result<Purchase>> {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(pause_ms)
        .arg("ALL")
        .query(&mut redis.raw())
        .unwrap();
    let cut: Vec<_> = (0..100)
        .map(|i| {
            let buyer = buyer.clone();
            tokio::spawn(async move {
                tokio::time::timeout(after, buyer.buy(&format!("cut{i}"), None)).await
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in cut {
        if let Ok(answer) = t.await.unwrap() {
            answers.push(answer);
        }
    }
    answers
}

/// Purchases dropped mid-flight, twice over: by timeouts while the server is paused (each
/// command written, its reply not yet come), and by the runtime shut down with purchases in
/// flight. Each dropped purchase ran whole or not at all; stock and ledger agree with each
/// other and with every answer given; and the same buyer, on a new runtime, sells exactly
/// what is left.
#[test]
fn async_purchases_dropped_mid_flight_leave_the_books_agreeing_with_the_answers() {
    let redis = RedisServer::start();
    let target = redis.target();
    let s = sku("dropped");
    stock::seed(&mut redis.conn(), &s, 300).unwrap();
    let buyer = AsyncBuyer::new(&target, &s, options(Strategy::Atomic));
    let mut answers = Vec::new();
    let rt = runtime();
    rt.block_on(async {
        // Connected first, so the pause holds the purchases' commands, not a handshake.
        answers.push(buyer.buy("warm", None).await);
        answers.extend(cut_while_paused(&redis, &buyer, 400, Duration::from_millis(50)).await);
        // The connections stay open past the pause: what was written runs now, unanswered.
        tokio::time::sleep(Duration::from_millis(600)).await;
    });
    // The runtime's end cuts the next ones wherever they are.
    for i in 0..100 {
        let buyer = buyer.clone();
        rt.spawn(async move { buyer.buy(&format!("ended{i}"), None).await });
    }
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(2)).await });
    drop(rt);
    assert_books(&redis, &s, 300, &answers);
    let left: i64 = raw_stock(&redis, &s).unwrap().parse().unwrap();
    // The same buyer, on a runtime of its own: its connections of the old runtime are gone
    // with it, and it opens others.
    let rt = runtime();
    let rest = rt.block_on(async {
        let mut rest = Vec::new();
        for i in 0..left + 5 {
            rest.push(buyer.buy(&format!("rest{i}"), None).await);
        }
        rest
    });
    let errors: Vec<_> = rest.iter().filter_map(|a| a.as_ref().err()).collect();
    assert!(
        errors.is_empty(),
        "{} errors: {:?}",
        errors.len(),
        errors.first()
    );
    assert_eq!(count(&rest, bought) as i64, left);
    assert_eq!(raw_stock(&redis, &s).as_deref(), Some("0"));
    let ledger = ledger(&redis, &s);
    let ran_uncut = |prefix: &str| ledger.keys().filter(|k| k.starts_with(prefix)).count();
    eprintln!(
        "dropped purchases that ran whole: {} of 100 cut by timeouts, {} of 100 by the runtime's end",
        ran_uncut("cut"),
        ran_uncut("ended")
    );
    answers.extend(rest);
    assert_books(&redis, &s, 300, &answers);
}

/// A lock purchase dropped mid-flight: by a timeout it goes on in a task of its own and ends
/// whole (the lock released by the code that took it); by its runtime shutting down with it
/// waiting for or holding the lock, it gives the lock and its place back on a thread of its
/// own. With a lease of 60 s, a lock left to its lease would keep every later buyer out for
/// longer than their 5 s wait, and they would be answered busy: here the same buyer, on a new
/// runtime, sells exactly what is left, and the books agree with every answer.
#[test]
fn async_lock_purchases_dropped_mid_flight_leave_no_lock_behind() {
    let redis = RedisServer::start();
    let target = redis.target();
    for strategy in [Strategy::Lock, Strategy::Fenced] {
        let s = sku(&format!("dropped_{strategy}"));
        stock::seed(&mut redis.conn(), &s, 300).unwrap();
        let mut opts = options(strategy);
        opts.lock.ttl = Duration::from_secs(60);
        let buyer = AsyncBuyer::new(&target, &s, opts);
        let mut answers = Vec::new();
        let rt = runtime();
        rt.block_on(async {
            // Connected first; then the server is paused so that nothing ends before the
            // timeouts: the purchases that had a place in the room are each mid-flight when
            // dropped, the others never sent (see `AsyncBuyer::buy_unless`).
            answers.push(buyer.buy("warm", None).await);
            answers.extend(cut_while_paused(&redis, &buyer, 300, Duration::from_millis(5)).await);
            // The runtime runs on past the pause: the dropped purchases' tasks end now.
            tokio::time::sleep(Duration::from_millis(1000)).await;
        });
        // The runtime's end cuts the next ones wherever they are: most wait in the queue or
        // for a place, one may hold the lock.
        for i in 0..100 {
            let buyer = buyer.clone();
            rt.spawn(async move { buyer.buy(&format!("ended{i}"), None).await });
        }
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
        drop(rt);
        let rt = runtime();
        let rest = rt.block_on(async {
            let mut rest = Vec::new();
            for i in 0..310 {
                rest.push(buyer.buy(&format!("rest{i}"), None).await);
            }
            rest
        });
        let not_answered: Vec<_> = rest
            .iter()
            .filter(|a| !matches!(a, Ok(p) if matches!(p.outcome, Buy::Bought { .. } | Buy::SoldOut { .. })))
            .collect();
        assert!(
            not_answered.is_empty(),
            "{strategy}: {} not bought or sold out, the first: {:?}",
            not_answered.len(),
            not_answered.first()
        );
        assert_eq!(raw_stock(&redis, &s).as_deref(), Some("0"), "{strategy}");
        let ledger = ledger(&redis, &s);
        let ran = |prefix: &str| ledger.keys().filter(|k| k.starts_with(prefix)).count();
        assert_eq!(
            ran("cut"),
            lockctl_core::aio::DEFAULT_ROOM,
            "{strategy}: each purchase with a place ends, dropped or not; the others never start"
        );
        eprintln!(
            "{strategy}: {} of 100 cut by the runtime's end had bought",
            ran("ended")
        );
        answers.extend(rest);
        assert_books(&redis, &s, 300, &answers);
    }
}

/// `hammer --json` on `server` with `args`: its exit code and report.
fn hammer(server: &RedisServer, args: &[&str]) -> (i32, serde_json::Value) {
    let mut all = vec!["hammer", "--json"];
    all.extend_from_slice(args);
    let out = lockctl(&server.url(), &all);
    (code(&out), json(&out))
}

fn connections_received(server: &RedisServer) -> u64 {
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("stats")
        .query(&mut server.raw())
        .unwrap();
    info.get("total_connections_received").unwrap()
}

/// A thousand buyers as tasks under `atomic`: exactly the stock sold, checked in Redis, on a
/// few multiplexed connections rather than a connection per buyer.
#[test]
fn hammer_in_tasks_mode_sells_exactly_the_stock_to_a_thousand_buyers_on_a_few_connections() {
    let server = RedisServer::start();
    let before = connections_received(&server);
    let (code, v) = hammer(
        &server,
        &[
            "--mode",
            "tasks",
            "--strategy",
            "atomic",
            "-n",
            "2000",
            "-c",
            "1000",
            "--stock",
            "1000",
        ],
    );
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (&v["verdict"], &v["mode"]),
        (&"pass".into(), &"tasks".into()),
        "{v}"
    );
    assert_eq!(
        (&v["bought"], &v["sold_out"], &v["errors"]),
        (&1000.into(), &1000.into(), &0.into()),
        "{v}"
    );
    assert_eq!(accounted(&v), 2000, "{v}");
    let s = sku("sku_886");
    assert_eq!(raw_stock(&server, &s).as_deref(), Some("0"));
    assert_eq!(ledger(&server, &s).len(), 1000);
    // Seeding's, the checks', the read-back's, and the buyers' few: not a thousand.
    let opened = connections_received(&server) - before;
    assert!(opened <= 20, "{opened} connections for 1000 buyers");
}

/// Every strategy runs in tasks mode and is judged: the four safe ones pass with exactly the
/// stock sold, and the naive one, the negative control, is caught overselling.
#[test]
fn every_strategy_runs_in_tasks_mode_and_naive_is_still_caught() {
    let server = RedisServer::start();
    for strategy in ["atomic", "batch", "lock", "fenced"] {
        let (code, v) = hammer(
            &server,
            &[
                "--mode",
                "tasks",
                "--strategy",
                strategy,
                "-n",
                "300",
                "-c",
                "100",
                "--stock",
                "100",
            ],
        );
        assert_eq!(code, 0, "{strategy}: {v}");
        assert_eq!(
            (&v["mode"], &v["strategy"]),
            (&"tasks".into(), &strategy.into()),
            "{v}"
        );
        assert_eq!(
            (&v["bought"], &v["final_stock"]),
            (&100.into(), &0.into()),
            "{strategy}: {v}"
        );
        assert_eq!(accounted(&v), 300, "{strategy}: {v}");
    }
    let (code, v) = hammer(
        &server,
        &[
            "--mode",
            "tasks",
            "--strategy",
            "naive",
            "--work-ms",
            "20",
            "-n",
            "40",
            "-c",
            "40",
            "--stock",
            "10",
        ],
    );
    assert_eq!(
        (code, &v["verdict"], &v["mode"]),
        (3, &"fail".into(), &"tasks".into()),
        "{v}"
    );
    assert!(v["oversold"].as_u64().unwrap() > 0, "{v}");
}

/// A runtime built without I/O cannot carry the native transport's sockets: the purchase is
/// an error that says what to enable, not a panic in the caller's task, and nothing is
/// bought.
#[test]
fn an_async_atomic_purchase_on_a_runtime_without_io_is_an_error_not_a_panic() {
    let redis = RedisServer::start();
    let s = sku("no_io");
    stock::seed(&mut redis.conn(), &s, 5).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let buyer = AsyncBuyer::new(&redis.target(), &s, options(Strategy::Atomic));
    let e = rt.block_on(buyer.buy("o1", None)).unwrap_err();
    assert!(e.to_string().contains("enable_io"), "{e}");
    assert_eq!(raw_stock(&redis, &s).as_deref(), Some("5"));
    assert!(ledger(&redis, &s).is_empty());
}

/// An async buyer's connections name themselves as the target's blocking ones do
/// (`Target::with_client_name`): the server's client list shows the name on each, so a tool
/// that kills clients by name (the hunt's client-kill spares lockctl's own) sees them too.
#[test]
fn an_async_buyers_connections_carry_the_targets_client_name() {
    let redis = RedisServer::start();
    let s = sku("named");
    stock::seed(&mut redis.conn(), &s, 10).unwrap();
    let target = redis.target().with_client_name("lockctl-named-test");
    let buyer = AsyncBuyer::new(&target, &s, options(Strategy::Atomic));
    runtime().block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let buyer = buyer.clone();
                tokio::spawn(async move { buyer.buy(&format!("o{i}"), None).await })
            })
            .collect();
        for t in tasks {
            assert!(bought(&t.await.unwrap()));
        }
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query(&mut redis.raw())
            .unwrap();
        let named = list
            .lines()
            .filter(|l| l.contains(" name=lockctl-named-test "))
            .count();
        assert!(named >= 1, "{list}");
        let unnamed_cmds = list
            .lines()
            .filter(|l| l.contains(" name= ") && l.contains("cmd=evalsha"))
            .count();
        assert_eq!(unnamed_cmds, 0, "{list}");
    });
}
