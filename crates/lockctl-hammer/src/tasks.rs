//! Buyers as tokio tasks, any number of them on one thread: `--mode tasks` for every
//! strategy, and the lock strategies' many buyers under `--mode threads`.
//!
//! Under `atomic` a purchase is natively async ([`AsyncBuyer`] on the redis crate's
//! multiplexed connection): every buyer's purchase in flight is pipelined on a few
//! connections, and no thread waits for any of them. Under `batch` the tasks submit to one
//! group committer ([`AsyncBatch`]). Under `lock` and `fenced` a few buyers wait for the lock
//! in Redis, natively async on a connection each, and the others as tasks (see below); under
//! `naive`, and for the lock strategies with a watchdog, Redlock or `--work-ms`, each purchase
//! is a blocking call on the runtime's blocking pool.

use std::time::Instant;

use crate::fan_out::{done, failed, fan_out_tasks, not_sent, user_of};
use crate::options::HammerOptions;
use crate::tally::Tally;
use lockctl_core::aio::{AsyncBatch, AsyncBuyer};
use lockctl_core::conn::Target;
use lockctl_core::error::Result;
use lockctl_core::stock::Strategy;

/// Every buyer a task. Under `lock` and `fenced` the [`AsyncBuyer`]'s waiting room's few wait
/// for the lock in Redis (each on a connection of its own), the others
/// wait for a place, in order, within `--wait-ms`. A thread per buyer would put every buyer in
/// the lock's queue in Redis, where each refreshes its place three times a second: measured
/// here, 5,000 such buyers fell to 92 purchases/s, 12,087 of 20,000 turned away busy with a
/// minute to wait.
pub(super) fn run_tasks(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Tally> {
    let buyer = crate::threads::buyer(target, opts);
    let batch = match opts.buy.strategy {
        Strategy::Batch => Some(AsyncBatch::from_buyer(target, buyer.clone())?),
        _ => None,
    };
    let buyer = AsyncBuyer::from_buyer(target, buyer);
    let start = Instant::now();
    // Ctrl-C: the buyers still waiting for a place give up unsent; those in Redis finish.
    fan_out_tasks(opts, start, opts.load.in_flight(), |i, began, mut stop| {
        let (buyer, batch) = (&buyer, &batch);
        let (order_id, user) = (format!("{run_id}-{i}"), user_of(opts, i));
        let stop = async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        };
        async move {
            let answer = match batch {
                Some(batch) => Some(batch.buy(&order_id, user.as_deref()).await),
                None => buyer.buy_unless(&order_id, user.as_deref(), stop).await,
            };
            match answer {
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
