//! The lock strategies on the native async transport ([`crate::aio`]): the steps of `locked`
//! in the same order, each call awaited on an [`AsyncConn`] instead of blocking. Every
//! decision is the blocking path's own function (`took`, [`Buyer::carried_stock`],
//! [`Buyer::enough`], [`Buyer::limit_reached`], `asks_for_replay`, `replayed`,
//! [`Buyer::release_write`], [`Buyer::written`], `fence_to_forget`, `settled`); what this file
//! holds is the order of the calls.
//!
//! For the purchases [`Buyer::locks_natively`] says it can make: a lock of one server without a
//! watchdog, no caller's work, no buckets, no replicas to wait for. The others are made the
//! blocking way.

use std::time::Instant;

use super::Buyer;
use super::locked::{asks_for_replay, fence_to_forget, replayed, settled, took};
use super::steps::Step;
use crate::conn::{AsyncConn, Conn};
use crate::error::Result;
use crate::lock::{Guard, Release, Token};
use crate::stock::{Buy, Purchase, Strategy, got_stock, stock_value};

impl Buyer {
    /// Whether [`Buyer::locked_async`] can make this buyer's purchases whole: `lock` or
    /// `fenced`, the lock taken natively ([`crate::lock::Lock::is_native`]: one server, no
    /// watchdog), no caller's work to run (a blocking call), no buckets and no replicas to
    /// wait for. A purchase it answers may still need the whole path (an unseeded SKU found
    /// bucketed): see [`Buyer::needs_whole_path`].
    pub(crate) fn locks_natively(&self) -> bool {
        matches!(self.options.strategy, Strategy::Lock | Strategy::Fenced)
            && self.lock.is_native()
            && self.work.is_none()
            && !self.in_bucket
            && self.bucketed().is_none()
            && self.options.require_replicas == 0
    }

    /// After a purchase here found the SKU unseeded: whether it is bucketed (its buckets are
    /// read and kept, so that the whole path buys from them), as the blocking route asks once
    /// its purchase under the lock was unseeded. A purchase made again the whole way without
    /// this would take the lock a second time for nothing, its wait mostly spent.
    pub(crate) fn finds_buckets(&self, conn: &mut Conn) -> Result<bool> {
        Ok(!self.in_bucket && self.find_buckets(conn)?.is_some())
    }

    /// One purchase under the lock on `conn`: [`Buyer::locked`], step for step. Not counted
    /// in the metrics (the caller meters the answer it keeps, see [`Buyer::metered`]).
    ///
    /// Dropped before it ends (its runtime shut down), it gives back the lock or its place in
    /// the queue (`GiveBackOnDrop` in `lock::native`) instead of leaving it to its lease.
    pub(crate) async fn locked_async(
        &self,
        conn: &mut AsyncConn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let token = Token::random();
        let give_back = self.lock.give_back_on_drop(&token);
        let answer = self
            .locked_steps(conn, token, order_id, user, started)
            .await;
        give_back.done();
        answer
    }

    /// The steps of [`Buyer::locked_async`].
    async fn locked_steps(
        &self,
        conn: &mut AsyncConn,
        token: Token,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let ul = user.zip(self.options.limit);
        let mut p = self.new_purchase(order_id);
        let acquired = self.lock.acquire_async(conn, token, started).await?;
        let Some(guard) = took(&mut p, acquired, started) else {
            return Ok(p);
        };
        let step = self.under_lock_async(conn, ul, &guard, &mut p).await;
        let hold_started = Instant::now() - guard.held_for();
        let (outcome, released) = self
            .deduct_or_release_async(conn, guard, step, ul, &mut p)
            .await;
        p.lock_hold = Some(hold_started.elapsed());
        if let Some(fence) = fence_to_forget(&outcome, &p) {
            // Best effort: the error stands whatever this finds.
            let _ = conn.script::<i64>(&self.forget_fence(fence)).await;
        }
        settled(&mut p, outcome, released)?;
        Ok(p)
    }

    /// [`Buyer::under_lock`] with no work and no watchdog: the stock the grant carried (or a
    /// `GET`), the decision, the user's units under `lock`, the ledger for a sold-out answer.
    async fn under_lock_async(
        &self,
        conn: &mut AsyncConn,
        ul: Option<(&str, u64)>,
        guard: &Guard,
        p: &mut Purchase,
    ) -> Result<Step> {
        let stock = match self.carried_stock(guard) {
            Some(stock) => stock?,
            None => {
                let got = conn.query(redis::cmd("GET").arg(&self.keys.stock)).await;
                let read = stock_value(&self.sku, &self.keys.stock, got_stock(got)?)?;
                read.ok_or_else(|| self.unseeded())?
            }
        };
        let mut step = match self.enough(stock) {
            Some(sold_out) => Step::Done(sold_out),
            None => Step::Deduct,
        };
        // `fenced` checks the limit in its write script; `lock` reads it here, as the
        // tutorial's flow does.
        if let (Step::Deduct, Strategy::Lock, Some((user, limit))) =
            (&step, self.options.strategy, ul)
        {
            let had: Option<u64> = conn.query(&self.user_read(user)).await?;
            if let Some(refused) = self.limit_reached(had.unwrap_or(0), limit) {
                step = Step::Done(refused);
            }
        }
        if !asks_for_replay(&step) {
            return Ok(step);
        }
        let had: Option<i64> = conn.query(&self.ledger_read(&p.order_id)).await?;
        Ok(replayed(step, super::steps::units(had), p))
    }

    /// [`Buyer::deduct_or_release`] without a watchdog: the write and the release in one
    /// script, or the release alone.
    async fn deduct_or_release_async(
        &self,
        conn: &mut AsyncConn,
        guard: Guard,
        step: Result<Step>,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
    ) -> (Result<Buy>, Option<Release>) {
        match step {
            Ok(Step::Deduct) => {
                let (script, keys, args) = self.release_write(guard.token(), ul, p);
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                match guard.release_inside_async(conn, script, &keys, &args).await {
                    Ok((reply, released)) => {
                        let at = conn.target.endpoint();
                        (self.written(&at, reply, ul, p), released)
                    }
                    Err(e) => (Err(e), None),
                }
            }
            Ok(Step::Done(b)) => (Ok(b), guard.release_async(conn).await.ok()),
            Err(e) => (Err(e), guard.release_async(conn).await.ok()),
        }
    }
}
