//! One purchase under each strategy (see the module documentation of [`crate::stock`]).
//!
//! The purchase path is one function per step, and one path for a lone purchase and a group
//! commit alike:
//! - **meter** ([`Buyer::buy_since`], [`Buyer::batch`]): each answer counted once;
//! - **route** ([`Buyer::route`]): the SKU's own stock, or its buckets (`bucketed`);
//! - **confirm** ([`Buyer::confirmed`]): the wait for replicas after a deduction;
//! - **decide** ([`Buyer::decided`]): the strategy's own steps, in `lockless` (naive, atomic,
//!   batch) and `locked` (lock, fenced), built from the steps of `steps`: read the stock,
//!   decide, the caller's work ([`Buyer::with_work`]), deduct, release.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Buy, BuyOptions, Purchase};
use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::lock::Lock;
use crate::metrics::AcquireResult;
use crate::redlock::Quorum;
use crate::sku::Sku;

mod answers;
mod atomic;
pub use atomic::{AtomicAttempt, AtomicNext};
mod bucketed;
mod locked;
#[cfg(feature = "tokio")]
mod locked_native;
mod lockless;
mod meters;
mod steps;

pub(super) use lockless::busy_pause;
use meters::Meters;
use steps::Work;

/// One purchase: its order id, and its user when the per-user limit should apply.
pub(super) type Order<'a> = (&'a str, Option<&'a str>);

/// Whom the strategy's step decides for.
#[derive(Clone, Copy, Debug)]
enum Turn {
    /// One purchase, begun at this instant, by its strategy: with the caller's work, and
    /// tried again while a lock user holds the lock and its wait lasts.
    Alone(Instant),
    /// A group commit: one call of the batch script for all of them; the caller tries busy
    /// answers again itself.
    Group,
}

/// Buys one SKU with fixed options. Cheap to create; use one per thread or share it.
#[derive(Clone, Debug)]
pub struct Buyer {
    sku: Sku,
    keys: StockKeys,
    lock: Lock,
    options: BuyOptions,
    meters: Option<Meters>,
    /// The caller's work inside each purchase (see [`Buyer::with_work`]).
    work: Option<Work>,
    /// The SKU's buckets, once a purchase found it bucketed (see [`crate::stock::buckets`]);
    /// shared by the clones of this buyer.
    buckets: Arc<std::sync::RwLock<Option<Arc<bucketed::Bucketed>>>>,
    /// This buyer buys one bucket of a bucketed SKU: it never looks for buckets itself.
    in_bucket: bool,
}

impl Buyer {
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
            work: None,
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

    /// Runs `work` inside each purchase that has found enough stock, before its deduction:
    /// under the lock for `lock` and `fenced` (a lease shorter than the work runs out there),
    /// between the read and the write for `naive`, and before the script for `atomic` and
    /// `batch` (its time is not counted against the wait for a held lock). Not run for a
    /// group commit ([`Buyer::batch`]): its caller works before submitting. Default: none.
    pub fn with_work(mut self, work: impl Fn() + Send + Sync + 'static) -> Buyer {
        self.work = Some(Work::new(work));
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
        let answer = self.route(conn, &[(order_id, user)], Turn::Alone(started));
        let answer = answer.and_then(only);
        self.meter(answer.as_ref().map(|p| &p.outcome).map_err(|_| ()));
        answer
    }

    /// One group-commit call: `purchases` (order id, user) decided in order by one script
    /// (see `lua/batch.lua`), each answered on its own and counted in the metrics like
    /// [`Buyer::buy`]. The outer error is the call's: then no purchase is known, and each is
    /// as indeterminate as the error says.
    pub fn batch(
        &self,
        conn: &mut Conn,
        purchases: &[(&str, Option<&str>)],
    ) -> Result<Vec<Result<Purchase>>> {
        let answers = self.route(conn, purchases, Turn::Group);
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

    /// The meter step: counts one purchase in the target's metrics, if it has any.
    fn meter(&self, result: std::result::Result<&Buy, ()>) {
        if let Some(m) = &self.meters {
            m.record(result);
        }
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

    /// The route step: the purchases made at the SKU's own stock, or at its buckets when a
    /// purchase has found it bucketed (or finds it so now: its own stock key is missing).
    fn route(
        &self,
        conn: &mut Conn,
        purchases: &[Order<'_>],
        turn: Turn,
    ) -> Result<Vec<Result<Purchase>>> {
        if let Some(b) = self.bucketed() {
            return self.in_buckets(&b, conn, purchases, turn);
        }
        let answers = self.confirmed(conn, purchases, turn)?;
        let unseeded = |a: &Result<Purchase>| matches!(a, Err(Error::Unseeded { .. }));
        if !self.in_bucket
            && !answers.is_empty()
            && answers.iter().all(unseeded)
            && let Some(b) = self.find_buckets(conn)?
        {
            return self.in_buckets(&b, conn, purchases, turn);
        }
        Ok(answers)
    }

    /// The confirm step: the purchases decided at this buyer's stock, and one wait for
    /// replicas after them when the options ask for one and anything was bought. A wait that
    /// fails makes each bought answer its error.
    fn confirmed(
        &self,
        conn: &mut Conn,
        purchases: &[Order<'_>],
        turn: Turn,
    ) -> Result<Vec<Result<Purchase>>> {
        let mut answers = self.decided(conn, purchases, turn)?;
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

    /// The decide step: a lone purchase by its strategy, or a group by one script call.
    fn decided(
        &self,
        conn: &mut Conn,
        purchases: &[Order<'_>],
        turn: Turn,
    ) -> Result<Vec<Result<Purchase>>> {
        match (turn, purchases) {
            (Turn::Group, _) => self.group_commit(conn, purchases),
            (Turn::Alone(started), [(order_id, user)]) => {
                Ok(vec![self.alone(conn, order_id, *user, started)])
            }
            (Turn::Alone(_), _) => Err(Error::internal(format!(
                "a lone purchase was given {} orders",
                purchases.len()
            ))),
        }
    }
}

/// The one answer of a lone purchase.
fn only(mut answers: Vec<Result<Purchase>>) -> Result<Purchase> {
    match (answers.pop(), answers.is_empty()) {
        (Some(answer), true) => answer,
        _ => Err(Error::internal("a lone purchase was not answered once")),
    }
}
