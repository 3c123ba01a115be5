//! The orders worker as a library call: drain a SKU's queued orders (bought with `--queue`)
//! into PostgreSQL once, and say what it did.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 DATABASE_URL=postgres://postgres@127.0.0.1/shop \
//!     cargo run --example orders_worker -- sku_886
//! ```

use lockctl_core::conn::{ConnectOptions, Target};
use lockctl_core::orders::db::Db;
use lockctl_core::orders::worker::{self, WorkerOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let db_url = std::env::var("DATABASE_URL")?;
    let sku = std::env::args().nth(1).unwrap_or_else(|| "sku_886".into());
    let target = Target::open(&url, ConnectOptions::default())?;
    // The schema first (idempotent), as `lockctl db init` does.
    Db::connect(&db_url, target.options().connect_timeout)?.init(&db_url)?;
    let mut options = WorkerOptions::new(vec![sku.parse()?]);
    options.once = true;
    let stats = worker::run(&target, &db_url, &options)?;
    println!(
        "{sku}: {} persisted, {} redelivered, {} conflicts, {} dead letters",
        stats.persisted, stats.redelivered, stats.conflicts, stats.dead_letters
    );
    Ok(())
}
