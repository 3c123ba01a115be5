//! `lockctl buy SKU`: one purchase, the tutorial's flow (or a safer strategy).

use lockctl_core::stock::{self, Buy, Buyer};
use lockctl_render as render;

use super::{Ctx, Exit, UsageError, output};
use crate::cli::BuyArgs;
use crate::signals;

pub fn run(ctx: &Ctx, args: BuyArgs) -> anyhow::Result<Exit> {
    // A signal during a purchase gives back the lock (or the place in its queue) and exits.
    let _signals = signals::listen(signals::First::Quit);
    if args.purchase.limit.is_some() && args.user.is_none() {
        return Err(UsageError(
            "--limit needs --user: a per-user limit is enforced for a named user (e.g. --user alice --limit 2)".into(),
        )
        .into());
    }
    if args.purchase.queue && args.strategy == crate::cli::StrategyArg::Naive {
        return Err(UsageError(
            "--queue works with lock, fenced, atomic and batch; naive is the negative control and records no order events".into(),
        )
        .into());
    }
    let options = args.buy_options();
    let strategy = options.strategy;
    let wait = options.lock.wait;
    let mut buyer = Buyer::new(&ctx.target, &args.sku, options);
    if let Some(q) = &ctx.quorum {
        buyer = buyer.with_quorum(q.clone());
    }
    // The simulated business time, inside the purchase (under the lock, for the lock
    // strategies), as the hammer's buyers do it.
    let work = args.purchase.work();
    if !work.is_zero() {
        buyer = buyer.with_work(move || std::thread::sleep(work));
    }
    let order_id = args.order_id.unwrap_or_else(stock::new_order_id);
    let purchase = buyer.buy(&mut ctx.target.connect()?, &order_id, args.user.as_deref())?;
    let sku = args.sku.as_str();
    output(
        ctx,
        || render::buy_text(sku, &purchase, wait),
        || render::buy_json(sku, strategy, &purchase),
    )?;
    Ok(match purchase.outcome {
        Buy::Bought { .. } => Exit::Ok,
        Buy::SoldOut { .. } | Buy::LimitReached { .. } => Exit::Refused,
        Buy::Busy => Exit::Busy,
        Buy::LeaseLost => Exit::LeaseLost,
    })
}
