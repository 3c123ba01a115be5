//! The atomic strategy's driver: a few threads keep one purchase in flight on every
//! connection, as redis-benchmark does.

use std::thread;
use std::time::Instant;

use crate::fan_out::{Began, done, failed, fan_out, user_of};
use crate::options::HammerOptions;
use crate::report::Sample;
use crate::tally::Tally;
use crate::threads::one_purchase;
use lockctl_core::conn::{Conn, Target};
use lockctl_core::error::Result;
use lockctl_core::stock::Buyer;

/// The atomic strategy on one server: a purchase is a single command, so a few threads can
/// drive all the connections, like redis-benchmark: each connection always has one purchase in
/// flight, and a thread goes round its connections reading the reply and sending the next. On
/// a 2-core machine a thread per buyer competes with Redis for its core; measured with `-c 50`,
/// pinning Redis to one core and the threads to the other brought the threads from about 0.8
/// to 0.9-1.0 of redis-benchmark's rate. A reply that needs the ordinary path (a flushed script
/// cache, a held lock with a wait to spend) is bought again that way on the same connection.
pub(super) fn run_multiplexed(
    target: &Target,
    opts: &HammerOptions,
    run_id: &str,
) -> Result<Tally> {
    let buyer = Buyer::new(target, &opts.load.sku, opts.buy.clone());
    buyer.load_scripts(&mut target.connect()?)?;
    let cores = thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let concurrency = opts.load.in_flight();
    let workers = cores.saturating_sub(1).clamp(1, concurrency);
    let per_round = concurrency.div_ceil(workers);
    let start = Instant::now();
    let receive = |slot: &mut Slot| -> Option<Sample> {
        let (i, t, order_id, user) = slot.in_flight.take()?;
        let conn = slot.conn.as_mut()?;
        let reply = conn.recv::<(String, i64, String)>();
        let broken = matches!(&reply, Err(e) if e.is_indeterminate());
        let sample = match buyer.atomic_reply(conn, reply, &order_id, user.as_deref()) {
            Ok(Some(p)) => done(i, t, &p),
            Ok(None) => one_purchase(target, &buyer, &mut slot.conn, i, run_id, opts, t),
            Err(e) => failed(i, t, &e),
        };
        if broken {
            slot.conn = None;
        }
        Some(sample)
    };
    fan_out(
        opts,
        start,
        workers,
        per_round,
        || (0..per_round).map(|_| Slot::default()).collect::<Vec<_>>(),
        |slots, batch| {
            let mut samples = Vec::with_capacity(batch.len());
            for (slot, &i) in slots.iter_mut().zip(batch) {
                samples.extend(receive(slot));
                let t = Began::now(start);
                let order_id = format!("{run_id}-{i}");
                let user = user_of(opts, i);
                let conn = match &mut slot.conn {
                    Some(c) => c,
                    None => match target.connect() {
                        Ok(c) => slot.conn.insert(c),
                        Err(e) => {
                            samples.push(failed(i, t, &e));
                            continue;
                        }
                    },
                };
                match conn.send(&buyer.atomic_command(&order_id, user.as_deref())) {
                    Ok(()) => slot.in_flight = Some((i, t, order_id, user)),
                    Err(e) => {
                        slot.conn = None;
                        samples.push(failed(i, t, &e));
                    }
                }
            }
            // A short last batch: the slots it did not reach still have replies to read.
            for slot in slots.iter_mut().skip(batch.len()) {
                samples.extend(receive(slot));
            }
            samples
        },
        |slots| slots.iter_mut().filter_map(&receive).collect(),
    )
}

/// One connection of [`run_multiplexed`] and the purchase in flight on it.
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    in_flight: Option<(u64, Began, String, Option<String>)>,
}
