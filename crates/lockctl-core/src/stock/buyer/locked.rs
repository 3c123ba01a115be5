//! The lock strategies, one function per step: lock, read and decide (with the caller's work)
//! under the lock, then deduct and release in one script, or release alone.

use std::time::Instant;

use super::Buyer;
use super::steps::Step;
use crate::conn::{Conn, Endpoint};
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
        let Some(guard) = took(p, self.lock.acquire_since(conn, started)?, started) else {
            return Ok(());
        };
        let step = self.under_lock(conn, ul, &guard, p);
        p.renewals = guard.renewals();
        let hold_started = Instant::now() - guard.held_for();
        let (outcome, released) = self.deduct_or_release(conn, guard, step, ul, p);
        p.lock_hold = Some(hold_started.elapsed());
        if let Some(fence) = fence_to_forget(&outcome, p) {
            // Best effort: the error stands whatever this finds.
            let _ = conn.script::<i64>(&self.forget_fence(fence));
        }
        settled(p, outcome, released)
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
        if !asks_for_replay(&step) {
            return Ok(step);
        }
        Ok(replayed(step, self.replayed_units(conn, &p.order_id)?, p))
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

    /// The holder's write and its release in one script (see [`Buyer::release_write`]). The
    /// outer error is the call's (its effect unknown); the inner one what the script reported
    /// having written nothing.
    fn write_and_release(
        &self,
        conn: &mut Conn,
        guard: Guard,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
    ) -> Result<(Result<Buy>, Option<Release>)> {
        let (script, keys, args) = self.release_write(guard.token(), ul, p);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let (reply, released) = guard.release_inside(conn, script, &keys, &args)?;
        Ok((self.written(&conn.endpoint(), reply, ul, p), released))
    }

    /// The holder's write and its release in one script: the tutorial's unchecked write for
    /// `lock`, the fenced deduct script for `fenced`. The script, its keys and its arguments
    /// (the guard's own keys follow them, see [`Guard::release_inside`]).
    pub(super) fn release_write(
        &self,
        token: &str,
        ul: Option<(&str, u64)>,
        p: &Purchase,
    ) -> (&'static redis::Script, Vec<String>, Vec<String>) {
        if self.options.strategy == Strategy::Fenced {
            let call = self.deduct_call(token, &p.order_id, ul.map(|(u, _)| u), p.fence);
            let keys = call.keys().map(str::to_string).to_vec();
            return (&FENCED_RELEASE, keys, call.args().to_vec());
        }
        let call = self.write_call(&p.order_id, ul, p.fence);
        let keys = call.keys().map(str::to_string).to_vec();
        (&WRITE_RELEASE, keys, call.args().to_vec())
    }

    /// What the write of [`Buyer::release_write`] answered. The error is what the script
    /// reported having written nothing, or a reply this code does not know.
    pub(super) fn written(
        &self,
        at: &Endpoint<'_>,
        reply: redis::Value,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
    ) -> Result<Buy> {
        if self.options.strategy != Strategy::Fenced {
            return self.bought(at, &[reply]);
        }
        let limit = ul.map_or(0, |(_, l)| l);
        let reply = redis::from_redis_value(reply)
            .map_err(|e| at.unexpected(format!("the fenced deduct script answered {e}")));
        reply.and_then(|r| self.deduct_outcome(at, r, limit, p))
    }

    /// After a purchase of an unseeded SKU: the call that forgets its grant's fencing counter
    /// when nothing can need it (see `FORGET_FENCE`).
    pub(super) fn forget_fence(&self, fence: u64) -> redis::ScriptInvocation<'static> {
        let keys = self.lock.keys();
        let mut inv = FORGET_FENCE.prepare_invoke();
        inv.key(&keys.fence)
            .key(&self.keys.stock)
            .key(&keys.lock)
            .arg(fence);
        inv
    }
}

/// The lock step's answer for `p`: the guard, or `None` (and the purchase left busy) when the
/// lock stayed held by another for the whole wait.
pub(super) fn took(p: &mut Purchase, acquired: Acquire, started: Instant) -> Option<Guard> {
    match acquired {
        Acquire::Acquired(guard) => {
            p.lock_wait = Some(guard.waited());
            p.fence = Some(guard.fence());
            Some(guard)
        }
        Acquire::Busy => {
            p.lock_wait = Some(started.elapsed());
            None
        }
    }
}

/// Whether a step asks whether the order bought before: an order that bought before is
/// answered as it was, even once the stock has run out since (a client's retry must not be
/// told "sold out" for what it bought).
pub(super) fn asks_for_replay(step: &Step) -> bool {
    matches!(step, Step::Done(Buy::SoldOut { .. }))
}

/// A sold-out step, once the ledger said what the order bought before (`units`, if it did).
pub(super) fn replayed(step: Step, units: Option<u64>, p: &mut Purchase) -> Step {
    match (step, units) {
        (Step::Done(Buy::SoldOut { remaining }), Some(units)) => {
            p.replayed = Some(units);
            Step::Done(Buy::Bought { remaining })
        }
        (step, _) => step,
    }
}

/// The fence whose counter to forget after `outcome`: an unseeded SKU's.
pub(super) fn fence_to_forget(outcome: &Result<Buy>, p: &Purchase) -> Option<u64> {
    match (outcome, p.fence) {
        (Err(Error::Unseeded { .. }), Some(fence)) => Some(fence),
        _ => None,
    }
}

/// The purchase's outcome, and whether it overran its lease: bought while the release found
/// the lock another's or nobody's.
pub(super) fn settled(
    p: &mut Purchase,
    outcome: Result<Buy>,
    released: Option<Release>,
) -> Result<()> {
    p.outcome = outcome?;
    if let (Buy::Bought { .. }, Some(Release::NotOwner | Release::Expired)) = (p.outcome, released)
    {
        p.overran_lease = p.replayed.is_none();
    }
    Ok(())
}
