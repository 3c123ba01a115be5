//! One thread and one connection per buyer: every strategy, every kind of server.

use std::time::Instant;

use crate::fan_out::{Began, done, failed, fan_out, user_of};
use crate::options::HammerOptions;
use crate::report::Sample;
use crate::tally::Tally;
use lockctl_core::conn::{Conn, Target};
use lockctl_core::error::Result;
use lockctl_core::stock::Buyer;

/// One purchase through `buyer` on `conn` (opened if needed; dropped after an error, since it
/// may be in any state), begun at `began`, as a sample.
pub(super) fn one_purchase(
    target: &Target,
    buyer: &Buyer,
    conn: &mut Option<Conn>,
    i: u64,
    run_id: &str,
    opts: &HammerOptions,
    began: Began,
) -> Sample {
    let order_id = format!("{run_id}-{i}");
    let user = user_of(opts, i);
    let result = match conn {
        Some(c) => Ok(c),
        None => target.connect().map(|c| conn.insert(c)),
    }
    .and_then(|c| buyer.buy(c, &order_id, user.as_deref()));
    match result {
        Ok(p) => done(i, began, &p),
        Err(e) => {
            *conn = None;
            failed(i, began, &e)
        }
    }
}

/// The run's buyer: its options, its Redlock quorum if any, and the simulated work
/// ([`HammerOptions::work`]) as a sleep inside each purchase.
pub(super) fn buyer(target: &Target, opts: &HammerOptions) -> Buyer {
    let mut buyer = Buyer::new(target, &opts.load.sku, opts.buy.clone());
    if let Some(q) = &opts.quorum {
        buyer = buyer.with_quorum(q.clone());
    }
    let work = opts.work;
    if !work.is_zero() {
        buyer = buyer.with_work(move || std::thread::sleep(work));
    }
    buyer
}

/// One thread and one connection per buyer: every strategy, every kind of server.
pub(super) fn run_threads(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Tally> {
    let buyer = buyer(target, opts);
    let workers = opts.load.in_flight();
    let start = Instant::now();
    fan_out(
        opts,
        start,
        workers,
        1,
        || None::<Conn>,
        |conn, batch| {
            batch
                .iter()
                .map(|&i| one_purchase(target, &buyer, conn, i, run_id, opts, Began::now(start)))
                .collect()
        },
        |_| Vec::new(),
    )
}
