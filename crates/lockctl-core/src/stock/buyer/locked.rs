//! The lock strategies, one function per step: lock, read and decide (with the caller's work)
//! under the lock, then deduct and release in one script, or release alone.

use std::time::Instant;

use super::Buyer;
use super::steps::Step;
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::lock::{Acquire, Guard, Release};
use crate::stock::script::{FENCED_RELEASE, FORGET_FENCE, WRITE_RELEASE};
use crate::stock::{Buy, Purchase, Strategy};

impl Buyer {
    /// One purchase under the lock: `lock` (the tutorial's flow) or `fenced`.
    pub(super) fn locked(
        &self,
        conn: &mut Conn,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
        started: Instant,
    ) -> Result<()> {
        let Some(guard) = self.take_lock(conn, p, started)? else {
            return Ok(());
        };
        let step = self.under_lock(conn, ul, &guard, p);
        p.renewals = guard.renewals();
        let hold_started = Instant::now() - guard.held_for();
        let (outcome, released) = self.deduct_or_release(conn, guard, step, ul, p);
        p.lock_hold = Some(hold_started.elapsed());
        if let (Err(Error::Unseeded { .. }), Some(fence)) = (&outcome, p.fence) {
            // Best effort: the error stands whatever this finds.
            let _ = self.forget_fence(conn, fence);
        }
        p.outcome = outcome?;
        if let (Buy::Bought { .. }, Some(Release::NotOwner | Release::Expired)) =
            (p.outcome, released)
        {
            p.overran_lease = p.replayed.is_none();
        }
        Ok(())
    }

    /// The lock step: the guard, or `None` (and the purchase left busy) when the lock stayed
    /// held by another for the whole wait.
    fn take_lock(
        &self,
        conn: &mut Conn,
        p: &mut Purchase,
        started: Instant,
    ) -> Result<Option<Guard>> {
        match self.lock.acquire_since(conn, started)? {
            Acquire::Acquired(guard) => {
                p.lock_wait = Some(guard.waited());
                p.fence = Some(guard.fence());
                Ok(Some(guard))
            }
            Acquire::Busy => {
                p.lock_wait = Some(started.elapsed());
                Ok(None)
            }
        }
    }

    /// The read and decide steps under the lock, with the caller's work between them.
    fn under_lock(
        &self,
        conn: &mut Conn,
        ul: Option<(&str, u64)>,
        guard: &Guard,
        p: &mut Purchase,
    ) -> Result<Step> {
        let step = match self.options.strategy {
            // The tutorial's read (carried by the grant), then a write that checks the lease itself.
            Strategy::Fenced => match self.enough(self.read(conn, Some(guard))?) {
                Some(sold_out) => Step::Done(sold_out),
                None => {
                    self.work();
                    Step::Deduct
                }
            },
            _ => self.read_and_decide(conn, ul, Some(guard))?,
        };
        // An order that bought before is answered as it was, even once the stock has run out
        // since: a client's retry must not be told "sold out" for what it bought.
        let Step::Done(Buy::SoldOut { remaining }) = step else {
            return Ok(step);
        };
        Ok(match self.replayed_units(conn, &p.order_id)? {
            Some(units) => {
                p.replayed = Some(units);
                Step::Done(Buy::Bought { remaining })
            }
            None => Step::Done(Buy::SoldOut { remaining }),
        })
    }

    /// The deduct and release steps, the tutorial's `finally`: release whatever happened in
    /// between. A failed release leaves the lock to expire by its TTL; the purchase itself
    /// stands.
    fn deduct_or_release(
        &self,
        conn: &mut Conn,
        guard: Guard,
        step: Result<Step>,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
    ) -> (Result<Buy>, Option<Release>) {
        match step {
            // With the watchdog, the holder knows its lease by its own clock: one that may
            // have run out (a pause, a renewal that never came back) writes nothing.
            Ok(Step::Deduct) if self.options.lock.watchdog && !guard.lease_valid() => {
                (Ok(Buy::LeaseLost), guard.release(conn).ok())
            }
            // The write, the release and the hand-off to the next waiter: one script.
            Ok(Step::Deduct) => match self.write_and_release(conn, guard, ul, p) {
                Ok((outcome, released)) => (outcome, released),
                Err(e) => (Err(e), None),
            },
            Ok(Step::Done(b)) => (Ok(b), guard.release(conn).ok()),
            Err(e) => (Err(e), guard.release(conn).ok()),
        }
    }

    /// The holder's write and its release in one script: the tutorial's unchecked write for
    /// `lock`, the fenced deduct script for `fenced`. The outer error is the call's (its effect
    /// unknown); the inner one what the script reported having written nothing.
    fn write_and_release(
        &self,
        conn: &mut Conn,
        guard: Guard,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
    ) -> Result<(Result<Buy>, Option<Release>)> {
        if self.options.strategy == Strategy::Fenced {
            let token = guard.token().to_string();
            let call = self.deduct_call(&token, &p.order_id, ul.map(|(u, _)| u), p.fence);
            let (keys, args) = (call.keys(), call.args());
            let limit = ul.map_or(0, |(_, l)| l);
            let (reply, released) = guard.release_inside(conn, &FENCED_RELEASE, &keys, &args)?;
            let reply = redis::from_redis_value(reply)
                .map_err(|e| conn.unexpected(format!("the fenced deduct script answered {e}")));
            let outcome = reply.and_then(|r| self.deduct_outcome(conn, r, limit, p));
            return Ok((outcome, released));
        }
        let call = self.write_call(&p.order_id, ul, p.fence);
        let (keys, args) = (call.keys(), call.args());
        let (reply, released) = guard.release_inside(conn, &WRITE_RELEASE, &keys, &args)?;
        Ok((self.bought(conn, &[reply]), released))
    }

    /// After a purchase of an unseeded SKU: its grant's fencing counter, forgotten when nothing
    /// can need it (see `FORGET_FENCE`).
    fn forget_fence(&self, conn: &mut Conn, fence: u64) -> Result<i64> {
        let keys = self.lock.keys();
        conn.script(
            FORGET_FENCE
                .key(&keys.fence)
                .key(&self.keys.stock)
                .key(&keys.lock)
                .arg(fence),
        )
    }
}
