use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::stock::{self, Buy, BuyOptions, Buyer, Strategy};

/// One fenced purchase at the Redis at `url` ("redis://127.0.0.1:6379", say).
fn fenced_purchase(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let target = Target::open(url, ConnectOptions::default())?;
    let mut conn = target.connect()?;
    let sku = "sku_886".parse()?;
    stock::seed(&mut conn, &sku, 1)?;

    let fenced = BuyOptions { strategy: Strategy::Fenced, ..BuyOptions::default() };
    let buyer = Buyer::new(&target, &sku, fenced);
    assert!(matches!(buyer.buy(&mut conn, "order-1", None)?.outcome, Buy::Bought { remaining: 0 }));
    assert!(matches!(buyer.buy(&mut conn, "order-2", None)?.outcome, Buy::SoldOut { .. }));
    // The first order id again deducts nothing: the ledger remembers it.
    assert_eq!(buyer.buy(&mut conn, "order-1", None)?.replayed, Some(1));
    Ok(())
}
