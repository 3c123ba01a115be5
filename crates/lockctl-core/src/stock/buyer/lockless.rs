//! The strategies without a lock of their own: `naive` (read, work, write), and `atomic` and
//! `batch` (the caller's work, then one script that decides and deducts), which yield to a
//! lock another client holds and try again while their wait lasts.

use std::thread;
use std::time::{Duration, Instant};

use super::steps::Step;
use super::{Buyer, Order, answers, only};
use crate::conn::Conn;
use crate::error::Result;
use crate::stock::calls::{Batch, Decided};
use crate::stock::{Purchase, Strategy};

impl Buyer {
    /// One purchase by its strategy, begun at `started`.
    pub(super) fn alone(
        &self,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let ul = user.zip(self.options.limit);
        let mut p = self.new_purchase(order_id);
        match self.options.strategy {
            Strategy::Naive => {
                p.outcome = match self.read_and_decide(conn, ul, None)? {
                    Step::Done(b) => b,
                    Step::Deduct => self.deduct_unlocked(conn, order_id, ul)?,
                };
            }
            // The caller's work, then the sans-IO purchase on this connection (see
            // `atomic`): its wait for a held lock is counted from after the work.
            Strategy::Atomic => {
                let started = started + self.work();
                return self.atomic_on(conn, self.atomic_attempt(order_id, user, started));
            }
            Strategy::Lock | Strategy::Fenced => self.locked(conn, ul, &mut p, started)?,
            // A batch of one: what a process that buys once (`lockctl buy`) can coalesce.
            Strategy::Batch => self.lockless(&mut p, started, |p| {
                *p = only(self.group_commit(conn, &[(order_id, user)])?)?;
                Ok(())
            })?,
        }
        Ok(p)
    }

    /// The caller's work, then a lockless purchase (`attempt`), made again while it answers
    /// busy (a lock user holds the lock) and the lock's wait, counted from `started` (the
    /// work is not part of it), is not spent, after a short random pause each time.
    fn lockless(
        &self,
        p: &mut Purchase,
        started: Instant,
        mut attempt: impl FnMut(&mut Purchase) -> Result<()>,
    ) -> Result<()> {
        let started = started + self.work();
        loop {
            attempt(p)?;
            let left = self.options.lock.wait.saturating_sub(started.elapsed());
            if p.outcome != crate::stock::Buy::Busy || left.is_zero() {
                return Ok(());
            }
            thread::sleep(busy_pause().min(left));
        }
    }

    /// The batch strategy's decide-and-deduct step: `purchases` decided in order by one
    /// script call, each answered on its own. The outer error is the call's.
    pub(super) fn group_commit(
        &self,
        conn: &mut Conn,
        purchases: &[Order<'_>],
    ) -> Result<Vec<Result<Purchase>>> {
        let call = Batch {
            keys: &self.keys,
            lock: &self.lock.keys().lock,
            qty: self.options.qty,
            limit: self.options.limit.unwrap_or(0),
            queue: self.options.queue,
            sku: self.sku.as_str(),
        };
        // As for one purchase: the user counts only under a per-user limit.
        let each: Vec<(&str, &str)> = purchases
            .iter()
            .map(|(order, user)| {
                (
                    *order,
                    user.filter(|_| self.options.limit.is_some()).unwrap_or(""),
                )
            })
            .collect();
        let replies: Vec<String> = conn.script(&call.invocation(&each))?;
        if replies.len() != purchases.len() {
            return Err(conn.unexpected(format!(
                "the batch script answered {} purchases of {}",
                replies.len(),
                purchases.len()
            )));
        }
        Ok(replies
            .into_iter()
            .zip(purchases)
            .map(|(reply, (order_id, user))| {
                let mut p = self.new_purchase(order_id);
                let limit = user.and(self.options.limit).unwrap_or(0);
                let decided = Decided::parse_batch(&reply)
                    .map_err(|e| answers::unknown(&conn.endpoint(), e))?;
                p.outcome = self.outcome_of(decided, limit, &mut p)?;
                Ok(p)
            })
            .collect())
    }
}

/// How long a lockless purchase that found the lock held waits before it tries again: random,
/// so that buyers turned away together do not come back together.
pub(in crate::stock) fn busy_pause() -> Duration {
    Duration::from_micros(rand::random_range(500..5_000))
}
