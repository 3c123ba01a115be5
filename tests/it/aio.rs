//! `lockctl_core::aio`: the library from tokio tasks, on real Redis.

use std::time::{Duration, Instant};

use lockctl_core::aio::{AsyncBatch, AsyncBuyer, using};
use lockctl_core::lock::{Lock, LockOptions, Release};
use lockctl_core::sku::Sku;
use lockctl_core::status;
use lockctl_core::stock::{self, Buy, BuyOptions, Strategy};

use crate::support::RedisServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn sku(name: &str) -> Sku {
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
