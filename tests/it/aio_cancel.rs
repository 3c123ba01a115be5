//! `lockctl_core::aio` dropped at every await point: each call cut at each of its await points
//! in turn (`cut_at_await`), under `tokio::time::timeout`, and with the runtime shut down while
//! calls are in flight. Afterwards the lock is free within its lease
//! (nothing renews it any more), nobody is left waiting, and the books reconcile; a second
//! sale of what is left sells exactly the stock.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lockctl_core::aio::{AsyncBatch, AsyncBuyer, AsyncLock, using};
use lockctl_core::lock::{Lock, LockOptions, Release};
use lockctl_core::sku::Sku;
use lockctl_core::status;
use lockctl_core::stock::{self, Buy, BuyOptions, Strategy};

use crate::support::{RedisServer, eventually, signal};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `f` on `rt`, given up after `limit`.
fn cut<F: Future>(
    rt: &tokio::runtime::Runtime,
    limit: Duration,
    f: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    rt.block_on(async { tokio::time::timeout(limit, f).await })
}

fn lock_options(ttl_ms: u64, wait_ms: u64) -> LockOptions {
    LockOptions {
        ttl: Duration::from_millis(ttl_ms),
        wait: Duration::from_millis(wait_ms),
        ..LockOptions::default()
    }
}

fn key_exists(redis: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut redis.raw())
        .unwrap()
        == 1
}

/// The lock `name` is free within `limit`, and stays free (no watchdog renews a key that
/// comes back), with nobody left in its queue.
fn assert_freed_within(redis: &RedisServer, name: &str, limit: Duration) {
    let key = format!("dist_lock:{name}");
    assert!(
        eventually(limit, || !key_exists(redis, &key)),
        "{key} still held {limit:?} after its holder was dropped (PTTL {})",
        redis::cmd("PTTL")
            .arg(&key)
            .query::<i64>(&mut redis.raw())
            .unwrap()
    );
    let lock = Lock::new(&redis.target(), name, LockOptions::default());
    assert!(
        eventually(Duration::from_secs(2), || {
            lock.waiters(&mut redis.conn()).unwrap() == 0
        }),
        "waiters left in the queue of {name}"
    );
    // Anyone can take it now (within the same limit: a cut acquire may still be granted the
    // lock on its way out, and gives it back at once).
    let guard = AsyncLock::new(Lock::new(
        &redis.target(),
        name,
        LockOptions {
            wait: limit,
            ..LockOptions::default()
        },
    ));
    let rt = runtime();
    let g = rt
        .block_on(guard.acquire())
        .unwrap()
        .unwrap_or_else(|| panic!("{name} was taken again after it was freed"));
    assert_eq!(rt.block_on(guard.release(g)).unwrap(), Release::Released);
}

/// Attack 1 of the fourth trust round: a `using` scope dropped by a request timeout kept its
/// lock renewed for ever (its watcher task owned the guard), so every other holder was refused
/// until the process ended. Dropped in its body, it gives the lock back at once.
#[test]
fn a_using_scope_dropped_by_a_timeout_gives_its_lock_back_at_once() {
    let redis = RedisServer::start();
    let rt = runtime();
    let lock = Lock::new(&redis.target(), "scope_timeout", lock_options(1000, 0));
    let was_cut = cut(
        &rt,
        Duration::from_millis(300),
        using(lock, |_held| tokio::time::sleep(Duration::from_secs(60))),
    );
    assert!(was_cut.is_err(), "the body was not cut by the timeout");
    // Given back, not left to its lease: well within the 1 s lease.
    assert_freed_within(&redis, "scope_timeout", Duration::from_millis(700));
}

/// A `using` scope dropped while it waits in the lock's queue leaves it: when the holder
/// releases, the lock is not granted to a waiter nobody listens to for a lease.
#[test]
fn a_using_scope_dropped_while_it_waits_leaves_the_queue() {
    let redis = RedisServer::start();
    let rt = runtime();
    let target = redis.target();
    let holder = AsyncLock::new(Lock::new(&target, "scope_wait", lock_options(10_000, 0)));
    let held = rt.block_on(holder.acquire()).unwrap().unwrap();
    let lock = Lock::new(&target, "scope_wait", lock_options(10_000, 30_000));
    let was_cut = cut(
        &rt,
        Duration::from_millis(300),
        using(lock, |_held| async {}),
    );
    assert!(was_cut.is_err(), "the scope got a held lock");
    rt.block_on(holder.release(held)).unwrap();
    // Without leaving, the waiter would be granted the lock and hold it for its 10 s lease.
    assert_freed_within(&redis, "scope_wait", Duration::from_secs(2));
}

/// Many scopes on one lock and on locks of their own, cut at random points (waiting, in the
/// body, releasing) by timeouts, and then the runtime shut down with the rest in flight: every
/// lock is free within its lease and stays free.
#[test]
fn scopes_cut_at_any_point_or_by_a_runtime_shutdown_free_every_lock() {
    let redis = RedisServer::start();
    let target = redis.target();
    for round in 0..3u64 {
        let rt = runtime();
        for i in 0..30u64 {
            let (shared, own) = (
                Lock::new(&target, "scopes_shared", lock_options(1000, 5000)),
                Lock::new(&target, &format!("scopes_{i}"), lock_options(1000, 0)),
            );
            // Timeouts of 0-59 ms around bodies of 0-29 ms: some cut, some not.
            let (cut, work) = (
                Duration::from_millis((i * 7 + round * 13) % 60),
                Duration::from_millis((i * 11 + round) % 30),
            );
            rt.spawn(async move {
                let body = |_held| tokio::time::sleep(work);
                let _ = tokio::time::timeout(cut, using(shared, body)).await;
                let _ = tokio::time::timeout(cut, using(own, body)).await;
            });
        }
        // Let them run a while, then shut the runtime down with the rest in flight. Freed well
        // within the 1 s lease: given back, not left to run out.
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(40 + round * 30)).await });
        drop(rt);
        assert_freed_within(&redis, "scopes_shared", Duration::from_millis(600));
        for i in 0..30 {
            assert_freed_within(&redis, &format!("scopes_{i}"), Duration::from_millis(600));
        }
    }
}

/// An `AsyncLock::acquire` dropped while it waits, and one dropped once the lock was granted
/// (its answer never taken): neither leaves the lock held.
#[test]
fn an_acquire_dropped_while_waiting_or_granted_leaves_the_lock_free() {
    let redis = RedisServer::start();
    let target = redis.target();
    let rt = runtime();
    let holder = AsyncLock::new(Lock::new(&target, "acq_drop", lock_options(10_000, 0)));
    let held = rt.block_on(holder.acquire()).unwrap().unwrap();
    let waiter = AsyncLock::new(Lock::new(&target, "acq_drop", lock_options(10_000, 30_000)));
    let was_cut = cut(&rt, Duration::from_millis(200), waiter.acquire());
    assert!(was_cut.is_err());
    rt.block_on(holder.release(held)).unwrap();
    assert_freed_within(&redis, "acq_drop", Duration::from_secs(2));

    // Cut after 0-3 ms: on its way, granted on the blocking pool with the answer never taken,
    // or taken in time (then released here). Never left held.
    for round in 0..20u64 {
        let lock = AsyncLock::new(Lock::new(&target, "acq_drop", lock_options(10_000, 0)));
        let limit = Duration::from_micros(round * 150);
        if let Ok(Ok(Some(g))) = cut(&rt, limit, lock.acquire()) {
            rt.block_on(lock.release(g)).unwrap();
        }
        assert_freed_within(&redis, "acq_drop", Duration::from_secs(2));
    }
    // The runtime shut down with acquires and releases in flight: a grant whose answer was
    // never taken is given back; a guard the task held is dropped with it, and its lock runs
    // out with its lease (1 s here), as a dropped guard's does.
    for round in 0..20u64 {
        let rt = runtime();
        let lock = AsyncLock::new(Lock::new(&target, "acq_drop", lock_options(1000, 0)));
        rt.spawn(async move {
            if let Ok(Some(g)) = lock.acquire().await {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _ = lock.release(g).await;
            }
        });
        rt.block_on(async { tokio::time::sleep(Duration::from_micros(round * 150)).await });
        drop(rt);
        assert_freed_within(&redis, "acq_drop", Duration::from_millis(1500));
    }
}

/// Attack 2 of the fourth trust round: a process stopped 2.5 s inside a scope with a 1 s lease
/// resumed with `is_lost()` still false, and its body wrote once while the lock key was gone.
/// The signal now reads the clock on every call. The scope runs in a child (this test binary
/// again), so that SIGSTOP stops its watchdog thread too, as it stops a real service.
#[test]
fn a_scope_stopped_past_its_lease_knows_it_lost_the_lease_the_moment_it_resumes() {
    if let Ok(url) = std::env::var("LOCKCTL_TEST_PAUSED_SCOPE") {
        return paused_scope_child(&url);
    }
    let redis = RedisServer::start();
    for attempt in 0..3 {
        let _: () = redis::cmd("DEL")
            .arg("paused:safe")
            .arg("paused:unsafe")
            .query(&mut redis.raw())
            .unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "aio_cancel::a_scope_stopped_past_its_lease_knows_it_lost_the_lease_the_moment_it_resumes",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("LOCKCTL_TEST_PAUSED_SCOPE", redis.url())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let holding = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.ends_with("holding"));
        assert!(holding, "the child never took the lock");
        std::thread::sleep(Duration::from_millis(300));
        signal(child.id(), "STOP");
        // The lease (1 s) runs out while the child, its watchdog with it, is stopped.
        assert!(
            eventually(Duration::from_secs(5), || !key_exists(
                &redis,
                "dist_lock:paused"
            )),
            "the lock key outlived its lease"
        );
        std::thread::sleep(Duration::from_millis(500));
        // A write checked before the stop may land after it: the window between a check and
        // its write that only a fenced write closes. A write checked after the resume may not.
        let resumed = unix_ms();
        signal(child.id(), "CONT");
        let said: Vec<String> = lines.map_while(Result::ok).collect();
        let status = child.wait().unwrap();
        assert!(
            status.success(),
            "attempt {attempt}: the child failed: {said:?}"
        );
        let count = |k: &str| -> i64 {
            redis::cmd("GET")
                .arg(k)
                .query::<Option<i64>>(&mut redis.raw())
                .unwrap()
                .unwrap_or(0)
        };
        assert!(count("paused:safe") > 0, "the body never wrote: {said:?}");
        let unsafe_checks: Vec<u128> = redis::cmd("LRANGE")
            .arg("paused:unsafe")
            .arg(0)
            .arg(-1)
            .query(&mut redis.raw())
            .unwrap();
        assert!(
            unsafe_checks.iter().all(|&at| at < resumed),
            "attempt {attempt}: the body checked its lease after it resumed, was told it held, \
             and wrote with the lock key gone (checks at {unsafe_checks:?}, resumed at \
             {resumed}): {said:?}"
        );
        assert!(unsafe_checks.len() <= 1, "{unsafe_checks:?}");
        assert!(said.iter().any(|l| l == "lost"), "{said:?}");
    }
}

/// The child of the test above: holds `dist_lock:paused` (1 s lease) and writes every 2 ms
/// while the lease holds; each write counts whether the lock key still existed.
fn paused_scope_child(url: &str) {
    let target =
        lockctl_core::conn::Target::open(url, lockctl_core::conn::ConnectOptions::default())
            .unwrap();
    let mut raw = redis::Client::open(url).unwrap().get_connection().unwrap();
    let write = redis::Script::new(
        "if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCR', KEYS[2]) \
         else return redis.call('RPUSH', KEYS[3], ARGV[1]) end",
    );
    let lock = Lock::new(&target, "paused", lock_options(1000, 0));
    let started = Instant::now();
    runtime()
        .block_on(using(lock, |held| async move {
            println!("holding");
            while started.elapsed() < Duration::from_secs(20) {
                // Read before the check: a stop between the two dates the check before it.
                let checked = unix_ms();
                if held.lost.is_lost() {
                    println!("lost");
                    return;
                }
                let _: i64 = write
                    .key("dist_lock:paused")
                    .key("paused:safe")
                    .key("paused:unsafe")
                    .arg(checked.to_string())
                    .invoke(&mut raw)
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            println!("never lost");
        }))
        .unwrap()
        .expect("the lock was free");
}

/// Now, in milliseconds since the Unix epoch: a clock both processes read alike.
fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

fn sku(name: &str) -> Sku {
    name.parse().unwrap()
}

/// The books of `s` reconcile (every unit seeded is in stock or sold, the ledger agrees),
/// once purchases still running on the blocking pool have ended.
fn assert_reconciled(redis: &RedisServer, s: &Sku) -> i64 {
    let mut last = None;
    let ok = eventually(Duration::from_secs(5), || {
        let st = status::status(&mut redis.conn(), &redis.target(), s).unwrap();
        let ok = st.reconciled == Some(true) && st.lock.is_none() && st.waiters == 0;
        last = Some(st);
        ok
    });
    let st = last.unwrap();
    assert!(ok, "{s}: not reconciled or still locked: {st:?}");
    st.stock.unwrap()
}

/// Purchases under every strategy (and through the group committer) cut by timeouts of 0-30
/// ms and then by a runtime shut down with the rest in flight: each purchase was made or not,
/// never half; the books reconcile, the lock is free, and what is left sells exactly.
#[test]
fn purchases_cut_at_any_point_leave_the_books_reconciled_and_the_lock_free() {
    let redis = RedisServer::start();
    let target = redis.target();
    for strategy in [
        Strategy::Lock,
        Strategy::Fenced,
        Strategy::Atomic,
        Strategy::Batch,
    ] {
        let s = sku(&format!("cut_{strategy}"));
        stock::seed(&mut redis.conn(), &s, 100).unwrap();
        let options = BuyOptions {
            strategy,
            lock: lock_options(2000, 5000),
            ..BuyOptions::default()
        };
        let rt = runtime();
        let batch = AsyncBatch::start(&target, &s, options.clone()).unwrap();
        let buyer = AsyncBuyer::new(&target, &s, options.clone());
        for i in 0..300u64 {
            let (buyer, batch) = (buyer.clone(), batch.clone());
            let cut = Duration::from_micros((i * 997) % 30_000);
            rt.spawn(async move {
                let order = format!("o{i}");
                if strategy == Strategy::Batch {
                    let _ = tokio::time::timeout(cut, batch.buy(&order, None)).await;
                } else {
                    let _ = tokio::time::timeout(cut, buyer.buy(&order, None)).await;
                }
                // The survivors buy again, and are cut by the runtime's end.
                let _ = buyer.buy(&format!("{order}-again"), None).await;
            });
        }
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(50)).await });
        drop(rt);
        drop((buyer, batch));
        let left = assert_reconciled(&redis, &s);
        // The rest sells exactly, to zero.
        let rt = runtime();
        let buyer = AsyncBuyer::new(&target, &s, options);
        let mut bought = 0;
        for i in 0..left + 5 {
            let p = rt.block_on(buyer.buy(&format!("rest{i}"), None)).unwrap();
            bought += matches!(p.outcome, Buy::Bought { .. }) as i64;
        }
        assert_eq!(bought, left, "{strategy}");
        assert_eq!(assert_reconciled(&redis, &s), 0, "{strategy}");
    }
}

/// The group committer (`AsyncBatch`) with its purchases in flight when the runtime is shut
/// down, on a current-thread and on a multi-thread runtime, a millisecond or two in (while the
/// submissions wait for their batch, and while batches are in Redis): the test above cuts
/// `AsyncBatch::buy` by timeouts only. Every purchase was made or not, never half: the books
/// reconcile, an order asked again is a replay exactly when it had bought, and the rest sells
/// exactly, to zero.
#[test]
fn the_batcher_shut_down_with_purchases_in_flight_leaves_the_books_reconciled() {
    // More stock than orders, so that how many were made shows where the shutdown cut them.
    const STOCK: i64 = 5000;
    const ORDERS: u64 = 2000;
    let redis = RedisServer::start();
    let target = redis.target();
    let options = BuyOptions {
        strategy: Strategy::Batch,
        ..BuyOptions::default()
    };
    for round in 0..6u64 {
        let s = sku(&format!("batch_shutdown_{round}"));
        stock::seed(&mut redis.conn(), &s, STOCK as u64).unwrap();
        let rt = if round % 2 == 0 {
            runtime()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        };
        let batch = AsyncBatch::start(&target, &s, options.clone()).unwrap();
        for i in 0..ORDERS {
            let batch = batch.clone();
            rt.spawn(async move {
                let _ = batch.buy(&format!("o{i}"), None).await;
            });
        }
        // Shut down 0-2 ms in, with purchases still to submit, waiting for their batch or in
        // Redis (one run: 305 to 1,989 of 2,000 made before the shutdown, by the round).
        rt.block_on(async { tokio::time::sleep(Duration::from_micros(round * 400)).await });
        drop(rt);
        drop(batch);
        let left = assert_reconciled(&redis, &s);
        // Each order asked again: a replay exactly for the ones made before the shutdown.
        let rt = runtime();
        let batch = AsyncBatch::start(&target, &s, options.clone()).unwrap();
        let (mut made, mut bought) = (0, 0);
        for i in 0..ORDERS {
            let p = rt.block_on(batch.buy(&format!("o{i}"), None)).unwrap();
            made += p.replayed.is_some() as i64;
            bought += (p.replayed.is_none() && matches!(p.outcome, Buy::Bought { .. })) as i64;
        }
        assert_eq!(
            made,
            STOCK - left,
            "round {round}: replays against units gone"
        );
        assert_eq!(
            bought,
            left.min(ORDERS as i64 - made),
            "round {round}: the rest"
        );
        assert_eq!(assert_reconciled(&redis, &s), STOCK - made - bought);
    }
}

/// A `using` scope cut by a timeout or a runtime shutdown while its body makes fenced writes
/// (`Held::fenced`, on the blocking pool): the lock is free within its lease, and no fenced
/// write lands after the scope was cut and another holder took the lock.
#[test]
fn a_scope_cut_during_its_fenced_writes_frees_the_lock_and_writes_nothing_after() {
    let redis = RedisServer::start();
    let target = redis.target();
    for round in 0..10u64 {
        let rt = runtime();
        for i in 0..10u64 {
            let lock = Lock::new(&target, "fenced_cut", lock_options(1000, 5000));
            let cut = Duration::from_millis((i * 3 + round * 7) % 25);
            rt.spawn(async move {
                let body = |held: lockctl_core::aio::Held| async move {
                    let mut incr = redis::cmd("INCR");
                    incr.arg("fenced_cut:writes");
                    loop {
                        let _ = held.fenced(&incr).await;
                    }
                };
                let _ = tokio::time::timeout(cut, using(lock, body)).await;
            });
        }
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(5 + round * 4)).await });
        drop(rt);
        assert_freed_within(&redis, "fenced_cut", Duration::from_millis(600));
    }
    // Held by another holder now: nothing of the cut scopes writes any more.
    let rt = runtime();
    let holder = AsyncLock::new(Lock::new(&target, "fenced_cut", lock_options(5000, 0)));
    let g = rt.block_on(holder.acquire()).unwrap().unwrap();
    let count = || {
        redis::cmd("GET")
            .arg("fenced_cut:writes")
            .query::<Option<i64>>(&mut redis.raw())
            .unwrap()
    };
    let before = count();
    assert!(before.unwrap_or(0) > 0, "the scopes never wrote");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        count(),
        before,
        "a cut scope wrote while another held the lock"
    );
    rt.block_on(holder.release(g)).unwrap();
}

/// `f`, dropped at its `k`-th await point: polled until it has answered `Pending` `k` times,
/// then dropped; `Some` when it finished before that (`k` was past its last await point).
async fn cut_at_await<F: Future>(f: F, k: usize) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut pending = 0;
    std::future::poll_fn(move |cx| {
        if pending == k {
            return std::task::Poll::Ready(None);
        }
        match f.as_mut().poll(cx) {
            std::task::Poll::Ready(v) => std::task::Poll::Ready(Some(v)),
            std::task::Poll::Pending => {
                pending += 1;
                match pending == k {
                    true => std::task::Poll::Ready(None),
                    false => std::task::Poll::Pending,
                }
            }
        }
    })
    .await
}

/// Cuts `call()` at its first await point, then its second, and so on, until one run of it
/// finishes before the cut: every await point it reaches is a place it was dropped at once.
/// `check` runs after each cut; the number of await points is returned.
fn sweep_await_points<F: Future>(
    rt: &tokio::runtime::Runtime,
    mut call: impl FnMut(usize) -> F,
    mut check: impl FnMut(usize),
) -> usize {
    for k in 1..=500 {
        let finished = rt.block_on(cut_at_await(call(k), k)).is_some();
        check(k);
        if finished {
            return k - 1;
        }
    }
    panic!("still not finished after 500 await points")
}

/// Every `aio` call dropped at each of its await points in turn, not at random ones: a `using`
/// scope whose body sleeps and makes a fenced write, `AsyncLock::acquire`, and a purchase
/// under each strategy (the group committer's too). After each cut the lock is free within
/// its lease and the books reconcile; the rest sells exactly.
#[test]
fn every_aio_call_dropped_at_each_of_its_await_points_leaves_the_lock_free_and_the_books_whole() {
    let redis = RedisServer::start();
    let target = redis.target();
    let rt = runtime();
    // Freed well within the 2 s lease: given back, not left to run out.
    let within = Duration::from_millis(1500);
    let points = sweep_await_points(
        &rt,
        |k| {
            let lock = Lock::new(&target, "sweep_scope", lock_options(2000, 1000));
            using(lock, move |held| async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                let write = redis::cmd("SET").arg("sweep_scope:note").arg(k).to_owned();
                let _ = held.fenced(&write).await;
            })
        },
        |_| assert_freed_within(&redis, "sweep_scope", within),
    );
    assert!(points >= 3, "a scope with only {points} await points");
    let lock = AsyncLock::new(Lock::new(&target, "sweep_acquire", lock_options(2000, 0)));
    let points = sweep_await_points(
        &rt,
        // Taken and given back: the sweep covers both calls' await points.
        |_| async {
            if let Ok(Some(g)) = lock.acquire().await {
                let _ = lock.release(g).await;
            }
        },
        |_| assert_freed_within(&redis, "sweep_acquire", within),
    );
    assert!(points >= 1, "an acquire with no await point");
    for strategy in [
        Strategy::Lock,
        Strategy::Fenced,
        Strategy::Atomic,
        Strategy::Batch,
    ] {
        let s = sku(&format!("sweep_{strategy}"));
        stock::seed(&mut redis.conn(), &s, 1000).unwrap();
        let options = BuyOptions {
            strategy,
            lock: lock_options(2000, 5000),
            ..BuyOptions::default()
        };
        let buyer = AsyncBuyer::new(&target, &s, options.clone());
        let batch = AsyncBatch::start(&target, &s, options.clone()).unwrap();
        let points = sweep_await_points(
            &rt,
            |k| {
                let (buyer, batch) = (buyer.clone(), batch.clone());
                async move {
                    let order = format!("o{k}");
                    match strategy {
                        Strategy::Batch => batch.buy(&order, None).await,
                        _ => buyer.buy(&order, None).await,
                    }
                }
            },
            |_| {
                assert_reconciled(&redis, &s);
            },
        );
        assert!(points >= 1, "{strategy}: a purchase with no await point");
        // Every cut purchase was made or not, never half (reconciled after each), and nobody
        // was left in the lock's queue; the rest sells exactly, to zero.
        let left = assert_reconciled(&redis, &s);
        let mut bought = 0;
        for i in 0..left + 3 {
            let p = rt.block_on(buyer.buy(&format!("rest{i}"), None)).unwrap();
            bought += matches!(p.outcome, Buy::Bought { .. }) as i64;
        }
        assert_eq!(bought, left, "{strategy}");
        drop((buyer, batch));
    }
}

/// A private Redis and database, the schema made, and `orders` atomic purchases of `name`
/// queued for the orders worker.
fn queued_orders(name: &str, orders: usize) -> (RedisServer, crate::support::TestDb, Sku) {
    let redis = RedisServer::start();
    let db = crate::support::TestDb::create();
    lockctl_core::orders::db::Db::connect(&db.url, Duration::from_secs(5))
        .unwrap()
        .init(&db.url)
        .unwrap();
    let s: Sku = name.parse().unwrap();
    stock::seed(&mut redis.conn(), &s, orders as u64 + 5).unwrap();
    let queued = BuyOptions {
        strategy: Strategy::Atomic,
        queue: true,
        ..BuyOptions::default()
    };
    let (mut conn, target) = (redis.conn(), redis.target());
    let buyer = stock::Buyer::new(&target, &s, queued);
    for i in 0..orders {
        buyer.buy(&mut conn, &format!("o{i}"), None).unwrap();
    }
    (redis, db, s)
}

/// The database's order rows of `s`.
fn order_rows(db: &crate::support::TestDb, s: &Sku) -> i64 {
    db.client()
        .query_one(
            "SELECT count(*) FROM lockctl_orders WHERE sku = $1",
            &[&s.as_str()],
        )
        .unwrap()
        .get(0)
}

/// A worker that ended by itself (`once`, its orders drained) while nobody polled its future,
/// which is then dropped (a `select!` whose other branch won in the same tick): the caller's
/// stop flag stays as it was. It was set, since the future learned of the end only when
/// polled (found by an attack round).
#[test]
fn a_worker_that_ended_by_itself_leaves_the_callers_stop_flag_alone_when_dropped() {
    use lockctl_core::aio::worker;
    use lockctl_core::orders::worker::WorkerOptions;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (redis, db, s) = queued_orders("ended_by_itself", 3);
    let target = redis.target();
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let options = WorkerOptions {
        once: true,
        claim_idle: Duration::ZERO,
        stop: Some(stop.clone()),
        ..WorkerOptions::new(vec![s.clone()])
    };
    let url = db.url.clone();
    let mut f = Box::pin(worker(&target, &url, options));
    // Polled once: the blocking worker starts.
    rt.block_on(async {
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(f.as_mut().poll(cx))).await;
        assert!(first.is_pending());
    });
    // It drains its 3 orders and returns, unseen; then the future is dropped.
    let drained = eventually(Duration::from_secs(30), || order_rows(&db, &s) == 3);
    assert!(drained, "the worker did not drain by itself");
    std::thread::sleep(Duration::from_secs(1));
    drop(f);
    assert!(
        !stop.load(Ordering::SeqCst),
        "the worker ended by itself, yet its stop flag was set by the drop"
    );
}

/// The orders worker's future dropped while it runs (here by a timeout): its worker stops, so
/// the runtime that ran it shuts down within seconds. Before, the worker ran on in the
/// blocking pool with nobody awaiting it, and the runtime's shutdown waited on it for ever.
/// An order queued before is still there for the next worker (the dropped one took it, or
/// left it pending), and a worker run to the end writes it once.
#[test]
fn a_dropped_worker_future_stops_its_worker_and_the_runtime_shuts_down() {
    use lockctl_core::aio::worker;
    use lockctl_core::orders::worker::WorkerOptions;
    let (redis, db, s) = queued_orders("dropped_worker", 1);
    let target = redis.target();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = db.url.clone();
    let (t, skus) = (target.clone(), vec![s.clone()]);
    let ran = rt.block_on(async move {
        tokio::time::timeout(
            Duration::from_millis(800),
            worker(&t, &url, WorkerOptions::new(skus)),
        )
        .await
    });
    assert!(ran.is_err(), "the worker ended by itself: {ran:?}");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(rt);
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the runtime's shutdown still waits on a worker nobody awaits"
    );
    // The order is written once, by the dropped worker or the next.
    let options = WorkerOptions {
        once: true,
        claim_idle: Duration::ZERO,
        ..WorkerOptions::new(vec![s.clone()])
    };
    lockctl_core::orders::worker::run(&target, &db.url, &options).unwrap();
    assert_eq!(order_rows(&db, &s), 1);
}
