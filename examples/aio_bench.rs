//! The async API against the blocking one, side by side in one run: the same purchases of the
//! `batch` strategy through the blocking `Batcher` (one thread a buyer) and through the async
//! `AsyncBatch` handle (one tokio task a buyer), alternating rounds so that a slow minute falls
//! on both. Prints purchases/s per round and the medians.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --release --example aio_bench -- 20000 64 5
//! ```
//! (purchases a round, buyers at once, rounds)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use lockctl_core::aio::AsyncBatch;
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::sku::Sku;
use lockctl_core::stock::{self, Batcher, BuyOptions, Strategy};

fn options() -> BuyOptions {
    BuyOptions {
        strategy: Strategy::Batch,
        ..BuyOptions::default()
    }
}

/// `n` purchases by `c` threads on the blocking batcher; purchases a second.
fn blocking(target: &Target, sku: &Sku, n: u64, c: u64) -> Result<f64, Box<dyn std::error::Error>> {
    let batcher = Arc::new(Batcher::start(target, sku, options())?);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..c)
        .map(|_| {
            let (b, next) = (batcher.clone(), next.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        return;
                    }
                    let _ = b.buy(&format!("b{i}"), None);
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// `n` purchases by `c` tasks on the async handle; purchases a second.
fn asynchronous(
    target: &Target,
    sku: &Sku,
    n: u64,
    c: u64,
) -> Result<f64, Box<dyn std::error::Error>> {
    let batch = AsyncBatch::start(target, sku, options())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..c)
            .map(|_| {
                let (b, next) = (batch.clone(), next.clone());
                tokio::spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return;
                        }
                        let _ = b.buy(&format!("a{i}"), None).await;
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    let (mut b, mut a) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let sku: Sku = format!("aio_bench_{round}").parse()?;
        // Alternate which goes first.
        for first_blocking in [round % 2 == 0, round % 2 != 0] {
            stock::seed(&mut conn, &sku, n)?;
            if first_blocking {
                b.push(blocking(&target, &sku, n, c)?);
            } else {
                a.push(asynchronous(&target, &sku, n, c)?);
            }
        }
        println!(
            "round {round}: blocking {:.0}/s, async {:.0}/s",
            b.last().copied().unwrap_or(0.0),
            a.last().copied().unwrap_or(0.0)
        );
    }
    let (mb, ma) = (median(b), median(a));
    println!(
        "median: blocking {mb:.0}/s, async {ma:.0}/s, async/blocking {:.2}",
        ma / mb
    );
    Ok(())
}
