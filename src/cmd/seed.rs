//! `lockctl seed SKU COUNT`: set the stock and clear the ledger.

use anyhow::Context;
use serde_json::json;

use lockctl_core::sku::Sku;
use lockctl_core::stock;

use super::{Ctx, Exit, output};

pub fn run(ctx: &Ctx, sku: &Sku, count: u64) -> anyhow::Result<Exit> {
    stock::seed(&mut ctx.target.connect()?, sku, count)
        .with_context(|| format!("could not seed '{sku}'"))?;
    output(
        ctx,
        || format!("seeded {sku}: stock {count}, ledger cleared\n"),
        || json!({ "sku": sku.as_str(), "stock": count, "ledger_cleared": true }),
    )?;
    Ok(Exit::Ok)
}
