use std::time::Duration;
use lockctl_core::aio::AsyncBuyer;
use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::lock::LockOptions;
use lockctl_core::stock::{self, Buy, BuyOptions, Strategy};

/// 100 buyers, each a tokio task, on a stock of 10 at the Redis at `url`
/// ("redis://127.0.0.1:6379", say).
async fn many_buyers(url: &str) -> Result<(), lockctl_core::Error> {
    let target = Target::open(url, ConnectOptions::default())?;
    let sku = "sku_886".parse().unwrap();
    stock::seed(&mut target.connect()?, &sku, 10)?;
    let options = BuyOptions {
        strategy: Strategy::Fenced,
        lock: LockOptions { wait: Duration::from_secs(5), ..LockOptions::default() },
        ..BuyOptions::default()
    };
    let buyer = AsyncBuyer::new(&target, &sku, options);
    // 100 buyers, each a task: 10 buy, 90 are told it is sold out; nobody is turned away busy.
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let buyer = buyer.clone();
            tokio::spawn(async move { buyer.buy(&format!("order-{i}"), None).await })
        })
        .collect();
    let mut bought = 0;
    for t in tasks {
        let purchase = t.await.unwrap()?;
        assert!(!matches!(purchase.outcome, Buy::Busy));
        bought += matches!(purchase.outcome, Buy::Bought { .. }) as u32;
    }
    assert_eq!(bought, 10);
    Ok(())
}
