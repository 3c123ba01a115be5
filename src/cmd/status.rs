//! `lockctl status SKU`: the books and the lock of one SKU, reconciled (with `--db`, against
//! the orders in PostgreSQL and in the stream too).

use lockctl::advice::CliAdvice;
use lockctl_core::orders::{self, db::Db};
use lockctl_core::sku::Sku;
use lockctl_core::status;
use lockctl_render as render;

use super::{Ctx, Exit, output};

pub fn run(ctx: &Ctx, sku: &Sku, db: Option<String>) -> anyhow::Result<Exit> {
    let mut conn = ctx.target.connect()?;
    let mut st = status::status(&mut conn, &ctx.target, sku)?;
    if let Some(url) = db {
        let mut db = Db::connect(&url, ctx.options.connect_timeout)?;
        db.require_schema(&url)?;
        let books = orders::pipeline_books(&mut conn, &mut db, &url, sku)?;
        status::with_orders(&mut st, books);
    }
    output(
        ctx,
        || render::status_text(&st, &CliAdvice),
        || render::status_json(&st, &CliAdvice),
    )?;
    Ok(match st.reconciled {
        Some(false) => Exit::Refused,
        _ => Exit::Ok,
    })
}
