//! `lockctl status SKU`: the books and the lock of one SKU, reconciled.

use lockctl::sku::Sku;
use lockctl::{render, status};

use super::{Ctx, Exit, output};

pub fn run(ctx: &Ctx, sku: &Sku) -> anyhow::Result<Exit> {
    let st = status::status(&mut ctx.target.connect()?, &ctx.target, sku)?;
    output(
        ctx,
        || render::status_text(&st),
        || render::status_json(&st),
    )?;
    Ok(match st.reconciled {
        Some(false) => Exit::Refused,
        _ => Exit::Ok,
    })
}
