use lockctl_core::aio::AsyncBatch;
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::stock::{self, Buy, BuyOptions, Strategy};

/// Three concurrent purchases on a stock of 2, group-committed, at the Redis at `url`
/// ("redis://127.0.0.1:6379", say).
async fn batched(url: &str) -> Result<(), lockctl_core::Error> {
    let target = Target::open(url, ConnectOptions::default())?;
    let sku = "sku_886".parse().unwrap();
    stock::seed(&mut target.connect()?, &sku, 2)?;
    let batch = AsyncBatch::start(
        &target,
        &sku,
        BuyOptions { strategy: Strategy::Batch, ..BuyOptions::default() },
    )?;
    let (a, b, c) = tokio::join!(
        batch.buy("order-1", None),
        batch.buy("order-2", None),
        batch.buy("order-3", None),
    );
    let bought = [a?, b?, c?]
        .iter()
        .filter(|p| matches!(p.outcome, Buy::Bought { .. }))
        .count();
    assert_eq!(bought, 2);
    Ok(())
}
