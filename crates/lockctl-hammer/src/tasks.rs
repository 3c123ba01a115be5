//! The lock strategies' buyers as tasks: any number of buyers waiting for the lock, a few of
//! them in Redis.

use std::time::Instant;

use crate::fan_out::{done, failed, fan_out_tasks, not_sent, user_of};
use crate::options::HammerOptions;
use crate::tally::Tally;
use lockctl_core::aio::AsyncBuyer;
use lockctl_core::conn::Target;
use lockctl_core::error::Result;

/// `lock` and `fenced` with more buyers than [`AsyncBuyer`]'s waiting room: every buyer is a
/// task, the room's few wait for the lock in Redis (each on a connection and a blocking
/// thread of its own), the others wait for a place, in order, within `--wait-ms`. A thread per
/// buyer would put every buyer in the lock's queue in Redis, where each refreshes its place
/// three times a second: measured here, 5,000 such buyers fell to 92 purchases/s, 12,087 of
/// 20,000 turned away busy with a minute to wait.
pub(super) fn run_tasks(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Tally> {
    let buyer = AsyncBuyer::from_buyer(target, crate::threads::buyer(target, opts));
    let start = Instant::now();
    // Ctrl-C: the buyers still waiting for a place give up unsent; those in Redis finish.
    fan_out_tasks(opts, start, opts.load.in_flight(), |i, began, mut stop| {
        let (buyer, order_id, user) = (&buyer, format!("{run_id}-{i}"), user_of(opts, i));
        let stop = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        async move {
            match buyer.buy_unless(&order_id, user.as_deref(), stop).await {
                Some(Ok(p)) => done(i, began, &p),
                Some(Err(e)) => failed(i, began, &e),
                None => not_sent(
                    i,
                    "the run was stopped before it had a place to wait for the lock",
                ),
            }
        }
    })
}
