//! One fenced purchase, the shortest program on lockctl-core: seed a SKU, buy one unit under
//! the lock with the deduction fenced by the lease, and print what it came to.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example fenced_purchase
//! ```

use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::sku::Sku;
use lockctl_core::stock::{self, Buy, BuyOptions, Buyer, Strategy};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let target = Target::open(&url, ConnectOptions::default())?;
    let mut conn = target.connect()?;
    let sku: Sku = "example_sku".parse()?;
    stock::seed(&mut conn, &sku, 3)?;
    let options = BuyOptions {
        strategy: Strategy::Fenced,
        ..BuyOptions::default()
    };
    let buyer = Buyer::new(&target, &sku, options);
    let purchase = buyer.buy(&mut conn, "order-1", None)?;
    match purchase.outcome {
        Buy::Bought { remaining } => println!("bought order-1, {remaining} left"),
        other => println!("order-1: {other:?}"),
    }
    // The same order id again deducts nothing: the ledger remembers it.
    let again = buyer.buy(&mut conn, "order-1", None)?;
    match again.replayed {
        Some(units) => println!("order-1 again: already bought {units} unit(s), nothing deducted"),
        None => println!("order-1 again: {:?}", again.outcome),
    }
    Ok(())
}
