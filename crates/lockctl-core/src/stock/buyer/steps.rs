//! The steps the strategies are made of: read the stock, decide, the caller's work, and the
//! calls that deduct. Each does one thing; the strategies (`lockless`, `locked`) put them in
//! their order. The decisions themselves ([`Buyer::enough`], [`Buyer::limit_reached`]) are
//! pure: what a read found goes in, an outcome or "go on" comes out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Buyer;
use crate::conn::Conn;
use crate::error::Result;
use crate::lock::Guard;
use crate::stock::calls::{Deduct, Write};
use crate::stock::{Buy, read_stock, stock_value};

/// Where a purchase stands once the stock has been read.
pub(super) enum Step {
    /// Decided without a write.
    Done(Buy),
    /// Enough stock and nothing against it: deduct.
    Deduct,
}

/// The caller's work inside a purchase (see [`Buyer::with_work`]); cloning shares it.
#[derive(Clone)]
pub(super) struct Work(Arc<dyn Fn() + Send + Sync>);

impl Work {
    pub(super) fn new(work: impl Fn() + Send + Sync + 'static) -> Work {
        Work(Arc::new(work))
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Work")
    }
}

/// The units a ledger read ([`Buyer::ledger_read`]) found, when the order bought before.
pub(super) fn units(had: Option<i64>) -> Option<u64> {
    had.map(|u| u.max(0) as u64)
}

impl Buyer {
    /// The work step: the caller's work, if any, and how long it took.
    pub(super) fn work(&self) -> Duration {
        let Some(Work(work)) = &self.work else {
            return Duration::ZERO;
        };
        let began = Instant::now();
        work();
        began.elapsed()
    }

    /// The read step, the tutorial's `GET`: the stock. Under the lock the grant has already read
    /// it (see [`crate::lock::Lock::carrying`]): the same value a `GET` would find, one round
    /// trip sooner.
    pub(super) fn read(&self, conn: &mut Conn, guard: Option<&Guard>) -> Result<i64> {
        match guard.and_then(|g| self.carried_stock(g)) {
            Some(stock) => stock,
            None => read_stock(conn, &self.sku, &self.keys)?.ok_or_else(|| self.unseeded()),
        }
    }

    /// The stock the grant of `guard` carried, when it carried one.
    pub(super) fn carried_stock(&self, guard: &Guard) -> Option<Result<i64>> {
        let carried = guard.carried()?.clone();
        let stock = stock_value(&self.sku, &self.keys.stock, carried);
        Some(stock.and_then(|s| s.ok_or_else(|| self.unseeded())))
    }

    /// The read of what `user` has bought, for the per-user limit.
    pub(super) fn user_read(&self, user: &str) -> redis::Cmd {
        redis::cmd("HGET").arg(&self.keys.buyers).arg(user).clone()
    }

    /// The read of what `order_id` bought before, from the ledger.
    pub(super) fn ledger_read(&self, order_id: &str) -> redis::Cmd {
        redis::cmd("HGET")
            .arg(&self.keys.ledger)
            .arg(order_id)
            .clone()
    }

    /// The stock decision: `Some(SoldOut)` when `stock` is not enough for this purchase.
    pub(super) fn enough(&self, stock: i64) -> Option<Buy> {
        (stock < self.options.qty as i64).then_some(Buy::SoldOut { remaining: stock })
    }

    /// The limit decision: `Some(LimitReached)` when a user who `had` units may not buy this
    /// purchase's under `limit`.
    pub(super) fn limit_reached(&self, had: u64, limit: u64) -> Option<Buy> {
        (had.saturating_add(self.options.qty) > limit)
            .then_some(Buy::LimitReached { bought: had, limit })
    }

    /// The tutorial's flow up to the write: read, and if there is enough, the caller's work, then
    /// the checks that may still refuse. Under a lock when `guard` is given, with no
    /// protection at all when not. Nothing here checks that the stock read is still current:
    /// that is the lock's job.
    pub(super) fn read_and_decide(
        &self,
        conn: &mut Conn,
        ul: Option<(&str, u64)>,
        guard: Option<&Guard>,
    ) -> Result<Step> {
        if let Some(sold_out) = self.enough(self.read(conn, guard)?) {
            return Ok(Step::Done(sold_out));
        }
        self.work();
        if guard.is_some_and(Guard::lease_lost) {
            return Ok(Step::Done(Buy::LeaseLost));
        }
        if let Some((user, limit)) = ul {
            let had: Option<u64> = conn.query(&self.user_read(user))?;
            if let Some(refused) = self.limit_reached(had.unwrap_or(0), limit) {
                return Ok(Step::Done(refused));
            }
        }
        Ok(Step::Deduct)
    }

    /// The units the ledger has for `order_id`, when it bought before.
    pub(super) fn replayed_units(&self, conn: &mut Conn, order_id: &str) -> Result<Option<u64>> {
        Ok(units(conn.query(&self.ledger_read(order_id))?))
    }

    /// The write script's call (see `lua/write.lua`): the tutorial's DECR, with the order
    /// recorded, all or nothing. Its reply is the stock left.
    pub(super) fn write_call<'a>(
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

    /// The naive strategy's deduct step: the write script's transaction, with no lock
    /// around it.
    pub(super) fn deduct_unlocked(
        &self,
        conn: &mut Conn,
        order_id: &str,
        ul: Option<(&str, u64)>,
    ) -> Result<Buy> {
        let eval = self.write_call(order_id, ul, None).eval();
        let (replies, _): (Vec<redis::Value>, _) = conn.transaction(&[eval], None)?;
        self.bought(&conn.endpoint(), &replies)
    }

    /// The deduct script's call (see `lua/deduct.lua`): `holder` is the lock's token, ''
    /// when the buyer holds no lock.
    pub(super) fn deduct_call<'a>(
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
