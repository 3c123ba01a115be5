//! The async API against the blocking one, side by side in one run: the same purchases through
//! the blocking calls (one thread a buyer) and through `lockctl_core::aio` (one tokio task a
//! buyer, on a current-thread runtime), for the `batch` group committer (`Batcher` against
//! `AsyncBatch`) and one purchase at a time under `atomic` and `fenced` (`Buyer::buy` against
//! `AsyncBuyer::buy`), alternating which goes first so that a slow minute falls on both. Prints
//! purchases/s per round and the medians.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example aio_bench -- 20000 64 5
//! ```
//! (purchases a round, buyers at once, rounds; `atomic`, `fenced` and `lock` run a tenth as
//! many). A fourth argument names the strategies to run, comma-separated (default
//! `batch,atomic,fenced`): `aio_bench 200000 50 3 atomic`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockctl_core::aio::{AsyncBatch, AsyncBuyer};
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::Sku;
use lockctl_core::stock::{self, Batcher, BuyOptions, Buyer, Strategy};

type Error = Box<dyn std::error::Error>;

fn options(strategy: Strategy) -> BuyOptions {
    BuyOptions {
        strategy,
        lock: LockOptions {
            wait: Duration::from_secs(60),
            ..LockOptions::default()
        },
        ..BuyOptions::default()
    }
}

/// Purchases `0..n` by `c` threads, each with its own state from `init` (a connection) and
/// calling `buy(state, i)`; purchases a second.
fn on_threads<S>(
    n: u64,
    c: u64,
    init: impl Fn() -> S + Sync,
    buy: impl Fn(&mut S, u64) + Sync,
) -> f64 {
    let next = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..c {
            s.spawn(|| {
                let mut state = init();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    buy(&mut state, i);
                }
            });
        }
    });
    n as f64 / started.elapsed().as_secs_f64()
}

type AsyncBuy = Arc<dyn Fn(u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Purchases `0..n` by `c` tasks, each awaiting `buy(i)`; purchases a second.
fn in_tasks(n: u64, c: u64, buy: AsyncBuy) -> Result<f64, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..c)
            .map(|_| {
                let (buy, next) = (buy.clone(), next.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return;
                        }
                        buy(i).await;
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    });
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// One side of one comparison: the blocking or the async way, `n` purchases by `c` buyers.
fn run(
    target: &Target,
    sku: &Sku,
    strategy: Strategy,
    asynchronous: bool,
    n: u64,
    c: u64,
) -> Result<f64, Error> {
    let opts = options(strategy);
    Ok(match (strategy, asynchronous) {
        (Strategy::Batch, false) => {
            let batcher = Batcher::start(target, sku, opts)?;
            on_threads(
                n,
                c,
                || (),
                |_, i| {
                    let _ = batcher.buy(&format!("b{i}"), None);
                },
            )
        }
        (Strategy::Batch, true) => {
            let batch = AsyncBatch::start(target, sku, opts)?;
            in_tasks(
                n,
                c,
                Arc::new(move |i| {
                    let b = batch.clone();
                    Box::pin(async move {
                        let _ = b.buy(&format!("a{i}"), None).await;
                    })
                }),
            )?
        }
        (_, false) => {
            let buyer = Buyer::new(target, sku, opts);
            on_threads(
                n,
                c,
                || target.connect().ok(),
                |conn, i| {
                    if let Some(c) = conn {
                        let _ = buyer.buy(c, &format!("b{i}"), None);
                    }
                },
            )
        }
        (_, true) => {
            let buyer = AsyncBuyer::new(target, sku, opts);
            in_tasks(
                n,
                c,
                Arc::new(move |i| {
                    let b = buyer.clone();
                    Box::pin(async move {
                        let _ = b.buy(&format!("a{i}"), None).await;
                    })
                }),
            )?
        }
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let arg = |i: usize, d: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (n, c, rounds) = (arg(1, 20_000), arg(2, 64), arg(3, 5));
    let target = Target::open(&url, ConnectOptions::default())?;
    let mut conn = target.connect()?;
    let strategies: Vec<Strategy> = match std::env::args().nth(4) {
        Some(list) => list
            .split(',')
            .map(|s| s.parse().map_err(|e| format!("{s}: {e}")))
            .collect::<Result<_, _>>()?,
        None => vec![Strategy::Batch, Strategy::Atomic, Strategy::Fenced],
    };
    for strategy in strategies {
        // One purchase at a time is slower: a tenth as many, so a round stays short.
        let n = if strategy == Strategy::Batch {
            n
        } else {
            n / 10
        };
        let (mut b, mut a) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let sku: Sku = format!("aio_bench_{strategy}_{round}").parse()?;
            // Alternate which goes first.
            for asynchronous in [round % 2 != 0, round % 2 == 0] {
                stock::seed(&mut conn, &sku, n)?;
                let rate = run(&target, &sku, strategy, asynchronous, n, c)?;
                if asynchronous {
                    a.push(rate)
                } else {
                    b.push(rate)
                }
            }
            println!(
                "{strategy} round {round}: blocking {:.0}/s, async {:.0}/s",
                b.last().copied().unwrap_or(0.0),
                a.last().copied().unwrap_or(0.0)
            );
        }
        let ratios = median(a.iter().zip(&b).map(|(a, b)| a / b).collect());
        println!(
            "{strategy} median: blocking {:.0}/s, async {:.0}/s, async/blocking {ratios:.2} (median of the rounds' ratios)",
            median(b),
            median(a),
        );
    }
    Ok(())
}
