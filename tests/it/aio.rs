//! `lockctl_core::aio`: the library from tokio tasks, on real Redis.

use std::time::{Duration, Instant};

use lockctl_core::aio::{AsyncBatch, AsyncBuyer, using};
use lockctl_core::lock::{Lock, LockOptions, Release};
use lockctl_core::sku::Sku;
use lockctl_core::status;
use lockctl_core::stock::{self, Buy, BuyOptions, Strategy};

use crate::support::RedisServer;

/// A current-thread runtime with I/O and time, as a service's handler has.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub(crate) fn sku(name: &str) -> Sku {
    name.parse().unwrap()
}

type Answer = lockctl_core::Result<lockctl_core::stock::Purchase>;

/// Runs `n` buys as tokio tasks, all spawned before any is awaited, and collects their answers.
fn in_tasks<F, Fut>(n: usize, buy: F) -> Vec<Answer>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Answer> + Send + 'static,
{
    runtime().block_on(async {
        let tasks: Vec<_> = (0..n).map(|i| tokio::spawn(buy(i))).collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    })
}

/// The SKU is sold out and its books reconcile.
fn assert_sold_out_and_reconciled(redis: &RedisServer, s: &Sku) {
    let st = status::status(&mut redis.conn(), &redis.target(), s).unwrap();
    assert_eq!(
        (st.stock, st.reconciled),
        (Some(0), Some(true)),
        "{:?}",
        st.problems
    );
}

/// Counts the answers; the books must reconcile afterwards.
fn tally(answers: Vec<Answer>) -> (u64, u64) {
    let bought = answers
        .iter()
        .filter(|a| matches!(a, Ok(p) if matches!(p.outcome, Buy::Bought { .. })))
        .count() as u64;
    let sold_out = answers
        .iter()
        .filter(|a| matches!(a, Ok(p) if matches!(p.outcome, Buy::SoldOut { .. })))
        .count() as u64;
    (bought, sold_out)
}

#[test]
fn five_hundred_async_buyers_sell_exactly_the_stock() {
    let redis = RedisServer::start();
    let target = redis.target();
    let s = sku("aio_fenced");
    stock::seed(&mut redis.conn(), &s, 100).unwrap();
    let options = BuyOptions {
        strategy: Strategy::Fenced,
        lock: LockOptions {
            wait: Duration::from_secs(30),
            ..LockOptions::default()
        },
        ..BuyOptions::default()
    };
    let buyer = AsyncBuyer::new(&target, &s, options);
    let answers = in_tasks(500, |i| {
        let b = buyer.clone();
        async move { b.buy(&format!("o{i}"), None).await }
    });
    assert_eq!(tally(answers), (100, 400));
    assert_sold_out_and_reconciled(&redis, &s);
}

/// Ten thousand tasks buy through one cloneable batch handle, no thread waiting for any of
/// them: exactly the stock is sold.
#[test]
fn ten_thousand_tasks_share_one_group_committer() {
    let redis = RedisServer::start();
    let target = redis.target();
    let s = sku("aio_batch");
    stock::seed(&mut redis.conn(), &s, 3000).unwrap();
    let batch = AsyncBatch::start(
        &target,
        &s,
        BuyOptions {
            strategy: Strategy::Batch,
            ..BuyOptions::default()
        },
    )
    .unwrap();
    let answers = in_tasks(10_000, |i| {
        let b = batch.clone();
        async move { b.buy(&format!("o{i}"), None).await }
    });
    assert_eq!(tally(answers), (3000, 7000));
    drop(batch);
    assert_sold_out_and_reconciled(&redis, &s);
}

/// `using` renews the lease while its body outlives it, and its lease-loss signal fires, before
/// the lease runs out, when renewals stop getting through.
#[test]
fn using_renews_the_lease_and_signals_its_loss_in_time() {
    let redis = RedisServer::start();
    let target = redis.target();
    let ttl = Duration::from_millis(600);
    let options = LockOptions {
        ttl,
        ..LockOptions::default()
    };
    let rt = runtime();
    // A body three leases long: renewed, never lost, released.
    let lock = Lock::new(&target, "aio_long", options.clone());
    let (lost, release) = rt
        .block_on(using(lock, |held| async move {
            tokio::time::sleep(ttl * 3).await;
            held.lost.is_lost()
        }))
        .unwrap()
        .expect("the lock was free");
    assert!(!lost, "the lease was lost although renewals got through");
    assert_eq!(release, Release::Released);

    // Renewals blocked (writes paused longer than the lease): the signal fires before the
    // lease can have run out.
    let lock = Lock::new(&target, "aio_lost", options);
    let fired = rt
        .block_on(using(lock, |mut held| {
            let mut raw = redis.raw();
            async move {
                let _: () = redis::cmd("CLIENT")
                    .arg("PAUSE")
                    .arg(3000)
                    .arg("WRITE")
                    .query(&mut raw)
                    .unwrap();
                let paused = Instant::now();
                let fired = tokio::time::timeout(ttl * 2, held.lost.lost())
                    .await
                    .is_ok();
                let after = paused.elapsed();
                // Reads go on during a write pause: the lease, as Redis holds it, had not run
                // out when the signal fired.
                let left: i64 = redis::cmd("PTTL")
                    .arg("dist_lock:aio_lost")
                    .query(&mut raw)
                    .unwrap();
                let _: () = redis::cmd("CLIENT").arg("UNPAUSE").query(&mut raw).unwrap();
                (fired, after, left)
            }
        }))
        .unwrap()
        .expect("the lock was free")
        .0;
    assert!(fired.0, "the lease-loss signal never fired");
    assert!(
        fired.2 > 0,
        "the signal fired {:?} after renewals stopped, when the lock key had {} ms left",
        fired.1,
        fired.2
    );
}

/// Connections the server has accepted so far.
fn connections_received(redis: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut redis.raw())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// Under the lock strategies, waiting buyers are tasks: only the waiting room's places wait in
/// Redis (a connection each), the others wait for a place, and that wait is counted against
/// the lock's wait, so a buyer is answered busy when its wait is spent, not a wait later.
#[test]
fn waiting_buyers_are_tasks_in_a_room_with_a_few_places_in_redis() {
    let redis = RedisServer::start();
    let target = redis.target();
    let s = sku("aio_room");
    stock::seed(&mut redis.conn(), &s, 100).unwrap();
    let options = |wait_ms| BuyOptions {
        strategy: Strategy::Lock,
        lock: LockOptions {
            wait: Duration::from_millis(wait_ms),
            ..LockOptions::default()
        },
        ..BuyOptions::default()
    };
    // Someone else holds the lock for longer than anybody waits.
    redis.hold_lock("aio_room", "someone-else", 3000);
    let before = connections_received(&redis);
    let buyer = AsyncBuyer::new(&target, &s, options(300)).with_room(2);
    let t = Instant::now();
    let answers = in_tasks(50, |i| {
        let b = buyer.clone();
        async move { b.buy(&format!("b{i}"), None).await }
    });
    let took = t.elapsed();
    let opened = connections_received(&redis) - before;
    for a in &answers {
        let p = a.as_ref().unwrap();
        assert_eq!(p.outcome, Buy::Busy, "{p:?}");
        assert!(p.lock_wait.unwrap() >= Duration::from_millis(290), "{p:?}");
    }
    // Each waited its 300 ms at once, not two at a time in turn (25 turns would be 7.5 s).
    assert!(took < Duration::from_millis(2500), "50 waits took {took:?}");
    // The room's two places, and the expiry poker's connection.
    assert!(opened <= 3, "{opened} connections for 2 places");

    // Once the lock is free, 200 buyers through the same two places sell exactly the stock.
    let _: () = redis::cmd("DEL")
        .arg("dist_lock:aio_room")
        .query(&mut redis.raw())
        .unwrap();
    let before = connections_received(&redis);
    let buyer = AsyncBuyer::new(&target, &s, options(60_000)).with_room(2);
    let answers = in_tasks(200, |i| {
        let b = buyer.clone();
        async move { b.buy(&format!("o{i}"), None).await }
    });
    assert_eq!(tally(answers), (100, 100));
    assert!(connections_received(&redis) - before <= 3);
    assert_sold_out_and_reconciled(&redis, &s);
}

/// Every public async entry point of `lockctl_core::aio`, and the hammer with its orders
/// pipeline, called from inside a tokio runtime as a service would: nothing starts a runtime
/// inside its runtime (before, the hammer's PostgreSQL read-back panicked there, "Cannot start
/// a runtime from within a runtime"), and every answer is the right one.
#[test]
fn every_async_entry_point_runs_inside_a_runtime() {
    use lockctl_core::aio::{AsyncLock, worker};
    use lockctl_core::conn::ConnectOptions;
    use lockctl_core::orders::db::Db;
    use lockctl_core::orders::worker::WorkerOptions;
    use lockctl_hammer::{HammerOptions, LoadOptions, PipelineOptions, Verdict};

    let redis = RedisServer::start();
    let db = crate::support::TestDb::create();
    Db::connect(&db.url, Duration::from_secs(5))
        .unwrap()
        .init(&db.url)
        .unwrap();
    let target = redis.target();
    runtime().block_on(async {
        // A purchase under every strategy, its order queued for the worker.
        let mut skus = Vec::new();
        for strategy in Strategy::ALL {
            let s = sku(&format!("every_{strategy}"));
            stock::seed(&mut redis.conn(), &s, 2).unwrap();
            let options = BuyOptions {
                strategy,
                queue: true,
                ..BuyOptions::default()
            };
            // (Order ids are unique across SKUs: the orders table's key.)
            let order = format!("o-{strategy}");
            let p = AsyncBuyer::new(&target, &s, options)
                .buy(&order, None)
                .await;
            assert_eq!(
                p.unwrap().outcome,
                Buy::Bought { remaining: 1 },
                "{strategy}"
            );
            skus.push(s);
        }
        // The group committer's handle.
        let s = sku("every_handle");
        stock::seed(&mut redis.conn(), &s, 1).unwrap();
        let batch = AsyncBatch::start(
            &target,
            &s,
            BuyOptions {
                strategy: Strategy::Batch,
                ..BuyOptions::default()
            },
        )
        .unwrap();
        let p = batch.buy("o1", None).await.unwrap();
        assert_eq!(p.outcome, Buy::Bought { remaining: 0 });
        // The lock: acquire, a second acquire that finds it held, release.
        let lock = AsyncLock::new(Lock::new(&target, "every", LockOptions::default()));
        let guard = lock.acquire().await.unwrap().expect("a free lock");
        assert!(lock.acquire().await.unwrap().is_none());
        assert_eq!(lock.release(guard).await.unwrap(), Release::Released);
        // A body under `using`, its lease-loss signal quiet.
        let held = using(lock.lock().clone(), |held| async move {
            (held.fence, held.lost.is_lost())
        })
        .await
        .unwrap();
        let ((fence, lost), release) = held.expect("a free lock");
        assert!(fence > 0 && !lost);
        assert_eq!(release, Release::Released);
        // The orders worker, one pass: every queued order into PostgreSQL.
        let options = WorkerOptions {
            once: true,
            ..WorkerOptions::new(skus.clone())
        };
        let stats = worker(&target, &db.url, options).await.unwrap();
        assert_eq!(stats.persisted, skus.len() as u64, "{stats:?}");
        // The hammer with its orders pipeline.
        let mut options = HammerOptions {
            load: LoadOptions {
                sku: "async_pipe".parse().unwrap(),
                requests: 200,
                concurrency: 8,
                stock: Some(50),
                ..LoadOptions::default()
            },
            pipeline: Some(PipelineOptions::new(db.url.clone())),
            ..HammerOptions::default()
        };
        options.buy.strategy = Strategy::Atomic;
        options.buy.queue = true;
        let target =
            lockctl_core::conn::Target::open(&redis.url(), ConnectOptions::default()).unwrap();
        let report = lockctl_hammer::run(&target, &options).expect("the hammer runs in a task");
        assert_eq!(report.verdict, Verdict::Pass, "{:?}", report.violations);
        assert_eq!(report.pipeline.as_ref().map(|p| p.row_units), Some(50));
    });
}

/// A Redis restart under an async buyer: the connections it kept are dead; a purchase that
/// meets one fails (its outcome said), the connection is dropped, not kept, and the next
/// purchases reconnect and sell as before. At most one failure per connection kept: the pool's
/// one under `fenced`, the two pipelining committers' under `atomic`.
#[test]
fn async_buyers_reconnect_after_redis_restarts() {
    let mut redis = RedisServer::start();
    let target = redis.target();
    let s = sku("aio_restart");
    let rt = runtime();
    for (strategy, kept) in [(Strategy::Fenced, 1), (Strategy::Atomic, 2)] {
        stock::seed(&mut redis.conn(), &s, 10).unwrap();
        let options = BuyOptions {
            strategy,
            ..BuyOptions::default()
        };
        let buyer = AsyncBuyer::new(&target, &s, options);
        let p = rt
            .block_on(buyer.buy(&format!("{strategy}-a"), None))
            .unwrap();
        assert_eq!(p.outcome, Buy::Bought { remaining: 9 });
        // Nothing is kept on disk: the stock is seeded again after the restart.
        redis.restart();
        stock::seed(&mut redis.conn(), &s, 10).unwrap();
        let mut failed = 0;
        let mut answer = None;
        for i in 0..kept + 2 {
            match rt.block_on(buyer.buy(&format!("{strategy}-b{i}"), None)) {
                Ok(p) => {
                    answer = Some(p.outcome);
                    break;
                }
                Err(_) => failed += 1,
            }
        }
        assert_eq!(answer, Some(Buy::Bought { remaining: 9 }), "{strategy}");
        assert!(
            failed <= kept,
            "{strategy}: {failed} purchases failed after the restart"
        );
    }
}

/// `atomic` from tasks goes through pipelining committers: each purchase its own script (the
/// per-user limit holds per purchase), a held lock answered busy and tried again while the
/// wait lasts, exactly the stock sold, on a couple of connections.
#[test]
fn atomic_async_purchases_are_pipelined_each_its_own_script() {
    let redis = RedisServer::start();
    let target = redis.target();
    let s = sku("aio_atomic");
    stock::seed(&mut redis.conn(), &s, 300).unwrap();
    let options = BuyOptions {
        strategy: Strategy::Atomic,
        limit: Some(2),
        lock: LockOptions {
            wait: Duration::from_secs(10),
            ..LockOptions::default()
        },
        ..BuyOptions::default()
    };
    // A lock user (the tutorial's PHP) holds the SKU's lock for the first 300 ms.
    redis.hold_lock("aio_atomic", "php-holder", 300);
    let before = connections_received(&redis);
    let buyer = AsyncBuyer::new(&target, &s, options);
    let t = Instant::now();
    let answers = in_tasks(1000, |i| {
        let b = buyer.clone();
        async move {
            b.buy(&format!("o{i}"), Some(&format!("u{}", i % 200)))
                .await
        }
    });
    let limited = answers
        .iter()
        .filter(|a| matches!(a, Ok(p) if matches!(p.outcome, Buy::LimitReached { .. })))
        .count();
    let busy = answers
        .iter()
        .filter(|a| matches!(a, Ok(p) if p.outcome == Buy::Busy))
        .count();
    let (bought, sold_out) = tally(answers);
    assert_eq!((bought, busy), (300, 0));
    assert_eq!(bought + sold_out + limited as u64, 1000);
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "nothing waited for the lock"
    );
    // The two committers' connections, and a spare.
    let opened = connections_received(&redis) - before;
    assert!(opened <= 3, "{opened} connections");
    assert_sold_out_and_reconciled(&redis, &s);
}

/// A fenced write (the caller's own command, `Guard::fenced` and `Held::fenced`) runs while
/// the lock holds the holder's token, and is refused, nothing written, once another holder
/// has the lock: here the lease ran out and a second holder took it.
#[test]
fn a_fenced_write_runs_only_while_the_lock_holds_the_holders_token() {
    use lockctl_core::lock::{Acquire, Fenced};
    use redis::Commands;
    let redis = RedisServer::start();
    let target = redis.target();
    let mut conn = redis.conn();
    let get = |key: &str| -> Option<String> {
        redis::cmd("GET").arg(key).query(&mut redis.raw()).unwrap()
    };
    // Blocking: written while held, refused after the lease ran out and another took it.
    let lock = Lock::new(&target, "fw", crate::support::lock_options(300, 0));
    let Acquire::Acquired(guard) = lock.acquire(&mut conn).unwrap() else {
        panic!("the lock was free")
    };
    let set = |v: &str| redis::cmd("SET").arg("fw:note").arg(v).clone();
    assert_eq!(
        guard.fenced(&mut conn, &set("first")).unwrap(),
        Fenced::Written(redis::Value::Okay)
    );
    assert!(
        crate::support::eventually(Duration::from_secs(10), || !redis
            .raw()
            .exists::<_, bool>("dist_lock:fw")
            .unwrap()),
        "the lease never ran out"
    );
    redis.hold_lock("fw", "another-holder", 5000);
    assert_eq!(
        guard.fenced(&mut conn, &set("late")).unwrap(),
        Fenced::LeaseLost
    );
    assert_eq!(get("fw:note").as_deref(), Some("first"));
    // A nil reply is a reply.
    let _: () = redis::cmd("DEL")
        .arg("dist_lock:fw")
        .query(&mut redis.raw())
        .unwrap();
    let Acquire::Acquired(guard) = lock.acquire(&mut conn).unwrap() else {
        panic!("the lock was free")
    };
    assert_eq!(
        guard
            .fenced(&mut conn, redis::cmd("GET").arg("fw:missing"))
            .unwrap(),
        Fenced::Written(redis::Value::Nil)
    );
    guard.release(&mut conn).unwrap();

    // Async, under `using`: the lock taken over mid-body, the write refused.
    let lock = Lock::new(&target, "fw_async", LockOptions::default());
    let (answers, _) = runtime()
        .block_on(using(lock, |held| {
            let mut raw = redis.raw();
            async move {
                let first = held.fenced(&set("async-first")).await.unwrap();
                let _: () = redis::cmd("SET")
                    .arg("dist_lock:fw_async")
                    .arg("another-holder")
                    .query(&mut raw)
                    .unwrap();
                let late = held.fenced(&set("async-late")).await.unwrap();
                (first, late)
            }
        }))
        .unwrap()
        .expect("the lock was free");
    assert_eq!(
        answers,
        (Fenced::Written(redis::Value::Okay), Fenced::LeaseLost)
    );
    assert_eq!(get("fw:note").as_deref(), Some("async-first"));
}

/// `BuyOptions::for_service` suits a service: under the tutorial's lock, 1,000 concurrent
/// buyers of a stock of 300 take turns in the lock's queue, so all 300 sell and nobody is
/// turned away busy (with `BuyOptions::default()`, one try each, a first user's service sold
/// 253 of 300 and turned 747 away).
#[test]
fn service_options_queue_buyers_so_nobody_is_turned_away_busy() {
    let redis = RedisServer::start();
    let target = redis.target();
    let s = sku("aio_service");
    stock::seed(&mut redis.conn(), &s, 300).unwrap();
    let buyer = AsyncBuyer::new(&target, &s, BuyOptions::for_service(Strategy::Lock));
    let answers = in_tasks(1000, |i| {
        let b = buyer.clone();
        async move { b.buy(&format!("o{i}"), None).await }
    });
    assert_eq!(tally(answers), (300, 700));
    assert_sold_out_and_reconciled(&redis, &s);
}
