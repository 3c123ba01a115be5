//! One purchase under each strategy (see the module documentation of [`crate::stock`]).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::calls::{Batch, Decided, Deduct, Write};
use super::script::{FENCED_RELEASE, FORGET_FENCE, WRITE_RELEASE};
use super::{Buy, BuyOptions, Purchase, Strategy, read_stock, stock_value};
use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::lock::{Acquire, Guard, Lock, Release};
use crate::metrics::AcquireResult;
use crate::redlock::Quorum;
use crate::sku::Sku;

/// Where a purchase stands once the stock has been read.
enum Step {
    /// Decided without a write.
    Done(Buy),
    /// Enough stock and nothing against it: deduct.
    Deduct,
}

/// Buys one SKU with fixed options. Cheap to create; use one per thread or share it.
#[derive(Clone, Debug)]
pub struct Buyer {
    sku: Sku,
    keys: StockKeys,
    lock: Lock,
    options: BuyOptions,
    meters: Option<Meters>,
    /// The SKU's buckets, once a purchase found it bucketed (see [`crate::stock::buckets`]);
    /// shared by the clones of this buyer.
    buckets: Arc<std::sync::RwLock<Option<Arc<bucketed::Bucketed>>>>,
    /// This buyer buys one bucket of a bucketed SKU: it never looks for buckets itself.
    in_bucket: bool,
}

mod answers;
mod atomic;
mod bucketed;
mod meters;

use meters::Meters;

impl Buyer {
    /// Counts one purchase in the target's metrics, if it has any.
    fn meter(&self, result: std::result::Result<&Buy, ()>) {
        if let Some(m) = &self.meters {
            m.record(result);
        }
    }

    /// A buyer of `sku` at `target`, buying as `options` say.
    pub fn new(target: &Target, sku: &Sku, options: BuyOptions) -> Buyer {
        let keys = StockKeys::new(sku);
        Buyer {
            sku: sku.clone(),
            // The grant carries the stock: a buyer that gets the lock knows it at once.
            lock: Lock::new(target, sku.as_str(), options.lock.clone()).carrying(&keys.stock),
            keys,
            options,
            meters: target.metrics().map(|m| Meters::new(m, sku)),
            buckets: Arc::default(),
            in_bucket: false,
        }
    }

    /// The options it buys with.
    pub fn options(&self) -> &BuyOptions {
        &self.options
    }

    /// Takes the lock by Redlock quorum on `quorum`'s masters; the stock stays where it is.
    pub fn with_quorum(mut self, quorum: Arc<Quorum>) -> Buyer {
        self.lock = self.lock.with_quorum(quorum);
        self
    }

    /// One purchase under `order_id`, by `user` when the per-user limit should apply.
    pub fn buy(&self, conn: &mut Conn, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        self.buy_since(conn, order_id, user, Instant::now())
    }

    /// [`Buyer::buy`] for a purchase that began at `started`, before this call (it waited for
    /// its turn in this process, say): the lock's wait (`LockOptions::wait`) is counted from
    /// then, and so is [`Purchase::lock_wait`].
    pub fn buy_since(
        &self,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let result = self.buy_unmetered(conn, order_id, user, started);
        self.meter(result.as_ref().map(|p| &p.outcome).map_err(|_| ()));
        result
    }

    /// The answer to a purchase that waited `waited` for its turn in this process, as long as
    /// the lock's wait allows, and never reached Redis: busy, counted in the metrics as one.
    pub fn busy_after(&self, order_id: &str, waited: Duration) -> Purchase {
        let mut p = self.new_purchase(order_id);
        p.lock_wait = Some(waited);
        self.meter(Ok(&p.outcome));
        if let Some(m) = self.lock.target().metrics() {
            m.observe_wait(waited, AcquireResult::Busy);
        }
        p
    }

    /// A purchase not yet made (busy until something better is known).
    fn new_purchase(&self, order_id: &str) -> Purchase {
        Purchase {
            outcome: Buy::Busy,
            order_id: order_id.to_string(),
            qty: self.options.qty,
            replayed: None,
            fence: None,
            overran_lease: false,
            lock_wait: None,
            lock_hold: None,
            renewals: 0,
        }
    }

    fn buy_unmetered(
        &self,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        if let Some(b) = self.bucketed() {
            return self.buy_bucketed(&b, conn, order_id, user, started);
        }
        match self.buy_plain(conn, order_id, user, started) {
            Err(Error::Unseeded { .. }) if !self.in_bucket => match self.find_buckets(conn)? {
                Some(b) => self.buy_bucketed(&b, conn, order_id, user, started),
                None => Err(Error::Unseeded {
                    sku: self.sku.to_string(),
                }),
            },
            other => other,
        }
    }

    /// One purchase of an unbucketed SKU (or of one bucket), and the wait for replicas when
    /// the options ask for one.
    fn buy_plain(
        &self,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let p = self.buy_once(conn, order_id, user, started)?;
        if let Buy::Bought { .. } = p.outcome {
            self.replicated(conn)?;
        }
        Ok(p)
    }

    fn buy_once(
        &self,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let user_limit = user.zip(self.options.limit);
        let mut p = self.new_purchase(order_id);
        match self.options.strategy {
            Strategy::Naive => {
                p.outcome = match self.read_and_decide(conn, user_limit, None)? {
                    Step::Done(b) => b,
                    Step::Deduct => self.deduct_unlocked(conn, order_id, user_limit)?,
                };
            }
            Strategy::Atomic => {
                thread::sleep(self.options.work);
                self.while_busy(&mut p, started + self.options.work, |p| {
                    p.outcome = self.deduct_script(conn, "", user_limit, p)?;
                    Ok(())
                })?;
            }
            Strategy::Lock | Strategy::Fenced => self.locked(conn, user_limit, &mut p, started)?,
            // A batch of one: what a process that buys once (`lockctl buy`) can coalesce.
            Strategy::Batch => {
                thread::sleep(self.options.work);
                self.while_busy(&mut p, started + self.options.work, |p| {
                    let reply = self.batch_once(conn, &[(order_id, user)])?.pop();
                    *p = reply.ok_or_else(|| conn.unexpected("an empty batch reply".into()))??;
                    Ok(())
                })?;
            }
        }
        Ok(p)
    }

    /// Makes a lockless purchase (`attempt`) again while it answers busy (a lock user holds
    /// the lock) and the lock's wait, counted from `started` (the simulated work is not part of
    /// it), is not spent, after a short random pause each time.
    fn while_busy(
        &self,
        p: &mut Purchase,
        started: Instant,
        mut attempt: impl FnMut(&mut Purchase) -> Result<()>,
    ) -> Result<()> {
        loop {
            attempt(p)?;
            let left = self.options.lock.wait.saturating_sub(started.elapsed());
            if p.outcome != Buy::Busy || left.is_zero() {
                return Ok(());
            }
            thread::sleep(busy_pause().min(left));
        }
    }

    /// One group-commit call: `purchases` (order id, user) decided in order by one script
    /// (see `BATCH_BODY`), each answered on its own and counted in the metrics like
    /// [`Buyer::buy`]. The outer error is the call's: then no purchase is known, and each is
    /// as indeterminate as the error says.
    pub fn batch(
        &self,
        conn: &mut Conn,
        purchases: &[(&str, Option<&str>)],
    ) -> Result<Vec<Result<Purchase>>> {
        let answers = self.batch_unmetered(conn, purchases);
        match &answers {
            Ok(each) => {
                for p in each {
                    self.meter(p.as_ref().map(|p| &p.outcome).map_err(|_| ()));
                }
            }
            Err(_) => {
                for _ in purchases {
                    self.meter(Err(()));
                }
            }
        }
        answers
    }

    fn batch_unmetered(
        &self,
        conn: &mut Conn,
        purchases: &[(&str, Option<&str>)],
    ) -> Result<Vec<Result<Purchase>>> {
        if let Some(b) = self.bucketed() {
            return self.batch_bucketed(&b, conn, purchases);
        }
        let answers = self.batch_plain(conn, purchases)?;
        let unseeded = |a: &Result<Purchase>| matches!(a, Err(Error::Unseeded { .. }));
        if !self.in_bucket
            && !answers.is_empty()
            && answers.iter().all(unseeded)
            && let Some(b) = self.find_buckets(conn)?
        {
            return self.batch_bucketed(&b, conn, purchases);
        }
        Ok(answers)
    }

    /// One group-commit call of an unbucketed SKU (or of one bucket), and one wait for
    /// replicas after it when the options ask for one and anything was bought.
    fn batch_plain(
        &self,
        conn: &mut Conn,
        purchases: &[(&str, Option<&str>)],
    ) -> Result<Vec<Result<Purchase>>> {
        let mut answers = self.batch_once(conn, purchases)?;
        let bought =
            |a: &Result<Purchase>| matches!(a, Ok(p) if matches!(p.outcome, Buy::Bought { .. }));
        if answers.iter().any(bought)
            && let Err(e) = self.replicated(conn)
        {
            for a in answers.iter_mut().filter(|a| bought(a)) {
                *a = Err(e.clone());
            }
        }
        Ok(answers)
    }

    fn batch_once(
        &self,
        conn: &mut Conn,
        purchases: &[(&str, Option<&str>)],
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
                let decided =
                    Decided::parse_batch(&reply).map_err(|e| answers::unknown(conn, e))?;
                p.outcome = self.outcome_of(decided, limit, &mut p)?;
                Ok(p)
            })
            .collect())
    }

    fn locked(
        &self,
        conn: &mut Conn,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
        started: Instant,
    ) -> Result<()> {
        let guard = match self.lock.acquire_since(conn, started)? {
            Acquire::Acquired(g) => g,
            Acquire::Busy => {
                p.lock_wait = Some(started.elapsed());
                return Ok(());
            }
        };
        p.lock_wait = Some(guard.waited());
        p.fence = Some(guard.fence());
        let step = match self.options.strategy {
            // The seed's read (carried by the grant), then a write that checks the lease itself.
            Strategy::Fenced => self
                .in_stock(conn, Some(&guard))
                .map(|enough| match enough {
                    Some(sold_out) => Step::Done(sold_out),
                    None => {
                        thread::sleep(self.options.work);
                        Step::Deduct
                    }
                }),
            _ => self.read_and_decide(conn, ul, Some(&guard)),
        };
        // An order that bought before is answered as it was, even once the stock has run out
        // since: a client's retry must not be told "sold out" for what it bought.
        let step = match step {
            Ok(Step::Done(Buy::SoldOut { remaining })) => {
                self.replayed_units(conn, &p.order_id).map(|had| match had {
                    Some(units) => {
                        p.replayed = Some(units);
                        Step::Done(Buy::Bought { remaining })
                    }
                    None => Step::Done(Buy::SoldOut { remaining }),
                })
            }
            other => other,
        };
        p.renewals = guard.renewals();
        // The seed's `finally`: release whatever happened in between. A failed release leaves
        // the lock to expire by its TTL; the purchase itself stands.
        let hold_started = Instant::now() - guard.held_for();
        let (outcome, released) = match step {
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
        };
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

    /// The units the ledger has for `order_id`, when it bought before.
    fn replayed_units(&self, conn: &mut Conn, order_id: &str) -> Result<Option<u64>> {
        let had: Option<i64> =
            conn.query(redis::cmd("HGET").arg(&self.keys.ledger).arg(order_id))?;
        Ok(had.map(|u| u.max(0) as u64))
    }

    /// The seed's `GET`: `Some(SoldOut)` when there is not enough for this purchase, `None`
    /// when there is. Under the lock the grant has already read it (see [`Lock::carrying`]):
    /// the same value a `GET` would find, one round trip sooner.
    fn in_stock(&self, conn: &mut Conn, guard: Option<&Guard>) -> Result<Option<Buy>> {
        let stock = match guard.and_then(Guard::carried) {
            Some(c) => stock_value(&self.sku, &self.keys.stock, c.clone())?,
            None => read_stock(conn, &self.sku, &self.keys)?,
        };
        let stock = stock.ok_or_else(|| Error::Unseeded {
            sku: self.sku.to_string(),
        })?;
        Ok((stock < self.options.qty as i64).then_some(Buy::SoldOut { remaining: stock }))
    }

    /// The seed's flow up to the write: GET, and if there is enough, work, then the checks
    /// that may still refuse. Under a lock when `guard` is given, with no protection at all
    /// when not. Nothing here checks that the stock read is still current: that is the lock's
    /// job.
    fn read_and_decide(
        &self,
        conn: &mut Conn,
        ul: Option<(&str, u64)>,
        guard: Option<&Guard>,
    ) -> Result<Step> {
        if let Some(sold_out) = self.in_stock(conn, guard)? {
            return Ok(Step::Done(sold_out));
        }
        thread::sleep(self.options.work);
        if guard.is_some_and(Guard::lease_lost) {
            return Ok(Step::Done(Buy::LeaseLost));
        }
        if let Some((user, limit)) = ul {
            let had: Option<u64> =
                conn.query(redis::cmd("HGET").arg(&self.keys.buyers).arg(user))?;
            let had = had.unwrap_or(0);
            if had.saturating_add(self.options.qty) > limit {
                return Ok(Step::Done(Buy::LimitReached { bought: had, limit }));
            }
        }
        Ok(Step::Deduct)
    }

    /// The write script's call (see `lua/write.lua`): the tutorial's DECR, with the order
    /// recorded, all or nothing. Its reply is the stock left.
    fn write_call<'a>(
        &'a self,
        order: &'a str,
        ul: Option<(&'a str, u64)>,
        fence: Option<u64>,
    ) -> Write<'a> {
        Write {
            keys: &self.keys,
            qty: self.options.qty,
            order,
            user: ul.map(|(user, _)| user),
            queue: self.options.queue,
            fence,
            sku: self.sku.as_str(),
        }
    }

    /// The naive strategy's write: the same transaction, with no lock around it.
    fn deduct_unlocked(
        &self,
        conn: &mut Conn,
        order_id: &str,
        ul: Option<(&str, u64)>,
    ) -> Result<Buy> {
        let eval = self.write_call(order_id, ul, None).eval();
        let (replies, _): (Vec<redis::Value>, _) = conn.transaction(&[eval], None)?;
        self.bought(conn, &replies)
    }

    fn deduct_script(
        &self,
        conn: &mut Conn,
        token: &str,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
    ) -> Result<Buy> {
        let limit = ul.map_or(0, |(_, l)| l);
        let call = self.deduct_call(token, &p.order_id, ul.map(|(u, _)| u), p.fence);
        let reply: (String, i64, String) = conn.script(&call.invocation())?;
        self.deduct_outcome(conn, reply, limit, p)
    }

    /// The deduct script's call (see `lua/deduct.lua`): `holder` is the lock's token, ''
    /// when the buyer holds no lock.
    fn deduct_call<'a>(
        &'a self,
        holder: &'a str,
        order: &'a str,
        user: Option<&'a str>,
        fence: Option<u64>,
    ) -> Deduct<'a> {
        Deduct {
            keys: &self.keys,
            lock: &self.lock.keys().lock,
            holder,
            qty: self.options.qty,
            order,
            user_limit: user.zip(self.options.limit),
            queue: self.options.queue,
            fence,
            sku: self.sku.as_str(),
        }
    }
}

/// How long a lockless purchase that found the lock held waits before it tries again: random,
/// so that buyers turned away together do not come back together.
pub(super) fn busy_pause() -> Duration {
    Duration::from_micros(rand::random_range(500..5_000))
}
