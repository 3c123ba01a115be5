//! The atomic purchase natively async: the sans-IO purchase ([`Buyer::atomic_command`],
//! [`Buyer::atomic_next`]) on the redis crate's multiplexed tokio connection. No thread waits
//! for a purchase: each is a request on a shared connection whose replies a driver task reads,
//! so a purchase costs a task, not a thread and a hand-off.
//!
//! Cancellation-safe by construction: a purchase keeps no state between its command and its
//! reply but the reply's slot in the connection. Dropped before the command was written, it
//! never reaches Redis; dropped after, the script runs whole (a script is atomic) and its
//! reply is read and thrown away by the connection's driver, which stays in step for the
//! next purchase. Either way nothing is half done, and no answer is given for it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use redis::aio::MultiplexedConnection;

use crate::conn::{AsyncConn, Target, within};
use crate::error::Result;
use crate::stock::{AtomicNext, Buyer, Purchase};

/// How many multiplexed connections an [`super::AsyncBuyer`] opens by default: one can carry
/// every purchase in flight (they are pipelined on it), a second keeps a stalled reply read or
/// a reconnect from holding up all of them.
pub const DEFAULT_CONNECTIONS: usize = 2;

/// A few multiplexed connections to one server, opened on first use and opened again after a
/// failure that may have broken one.
pub(super) struct Native {
    target: Target,
    /// Each connection, behind an async lock held while one is opened, so that the purchases
    /// that find a slot empty together wait for one connection rather than each opening its own.
    slots: Vec<tokio::sync::Mutex<Option<AsyncConn>>>,
    turn: AtomicUsize,
}

/// What a purchase made on the native transport came to.
pub(super) enum Made {
    /// Answered, and counted in the metrics.
    Answered(Result<Purchase>),
    /// Only the whole path can finish it (see [`Buyer::needs_whole_path`]).
    WholePath,
}

impl Native {
    /// The native transport to `target`, when it is a single server (not a cluster).
    pub(super) fn new(target: &Target, connections: usize) -> Option<Native> {
        target.single_client()?;
        Some(Native {
            target: target.clone(),
            slots: (0..connections.max(1))
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            turn: AtomicUsize::new(0),
        })
    }

    /// The connection of slot `i`, opened first if it has none (by one purchase; the others
    /// that want it meanwhile wait for that one).
    async fn conn(&self, i: usize) -> Result<MultiplexedConnection> {
        let mut slot = self.slots[i].lock().await;
        if let Some(open) = slot.as_ref()
            && open.usable()
        {
            return Ok(open.conn.clone());
        }
        let open = AsyncConn::open(&self.target).await?;
        let conn = open.conn.clone();
        *slot = Some(open);
        Ok(conn)
    }

    /// Forgets slot `i`'s connection after a failure that may have broken it (its driver
    /// stopped with the runtime that ran it, or the socket failed): the next use opens another.
    async fn forget(&self, i: usize) {
        *self.slots[i].lock().await = None;
    }

    /// One request on slot `i`, its failure in the library's terms.
    async fn query(&self, i: usize, cmd: &redis::Cmd) -> Result<redis::Value> {
        let mut conn = self.conn(i).await?;
        let limit = self.target.options().call_timeout;
        let reply = match within(limit, cmd.query_async::<redis::Value>(&mut conn)).await {
            Some(reply) => reply.map_err(|e| {
                let broken = e.is_io_error() || e.is_unrecoverable_error();
                (broken, self.target.endpoint().map_err(e))
            }),
            // A connection that did not answer in time may be stalled: the next use opens
            // another.
            None => Err((true, self.target.timed_out())),
        };
        match reply {
            Ok(v) => Ok(v),
            Err((broken, e)) => {
                if broken {
                    self.forget(i).await;
                }
                Err(e)
            }
        }
    }

    /// One atomic purchase by `buyer`, begun at `started`: the transport of the sans-IO
    /// purchase, doing what [`Buyer::atomic_next`] says after each reply.
    pub(super) async fn buy(
        &self,
        buyer: &Buyer,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Made {
        let i = self.turn.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let mut attempt = buyer.atomic_attempt(order_id, user, started);
        let cmd = buyer.atomic_command(order_id, user);
        loop {
            let reply = self.query(i, &cmd).await;
            match buyer.atomic_next(&mut attempt, reply) {
                AtomicNext::Done(answer) => {
                    if buyer.needs_whole_path(&answer) {
                        return Made::WholePath;
                    }
                    buyer.metered(&answer);
                    return Made::Answered(answer);
                }
                AtomicNext::Again(pause) => tokio::time::sleep(pause).await,
                AtomicNext::Load => {
                    if let Err(e) = self.query(i, &Buyer::load_command()).await {
                        let answer = Err(e);
                        buyer.metered(&answer);
                        return Made::Answered(answer);
                    }
                }
            }
        }
    }
}
