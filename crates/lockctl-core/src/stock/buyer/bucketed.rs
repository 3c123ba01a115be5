//! A purchase of a bucketed SKU (see [`crate::stock::buckets`]): at the home bucket, exactly
//! as an unbucketed purchase, and when the home is short, after borrowing from the others.

use std::sync::Arc;
use std::time::Instant;

use super::{Buyer, Order, Turn, only};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::lock::Acquire;
use crate::stock::buckets::{Borrowed, Buckets};
use crate::stock::{Buy, Purchase};

/// The most times one purchase buys at home and borrows again: each time units were moved
/// (by it or by another buyer), so the stock is on its way down; far more than any sale needs.
const MAX_ROUNDS: usize = 10_000;

/// A bucketed SKU's map and a buyer for each bucket.
#[derive(Debug)]
pub(crate) struct Bucketed {
    pub(crate) map: Buckets,
    pub(crate) buyers: Vec<Buyer>,
}

impl Buyer {
    /// The buckets, when a purchase has found the SKU bucketed.
    pub(super) fn bucketed(&self) -> Option<Arc<Bucketed>> {
        if self.in_bucket {
            return None;
        }
        self.buckets.read().ok()?.clone()
    }

    /// The home bucket of a purchase, once a purchase has found the SKU bucketed.
    pub(crate) fn home_bucket(&self, order_id: &str, user: Option<&str>) -> Option<usize> {
        self.bucketed().map(|b| b.map.home(user, order_id))
    }

    /// Reads the SKU's bucket map (after its own stock key was found missing), and keeps it.
    pub(super) fn find_buckets(&self, conn: &mut Conn) -> Result<Option<Arc<Bucketed>>> {
        let Some(map) = Buckets::read(conn, &self.sku)? else {
            return Ok(None);
        };
        let target = self.lock.target();
        let buyers = map
            .skus
            .iter()
            .map(|b| {
                let mut buyer = Buyer::new(target, b, self.options.clone());
                // The purchase is counted once, by this buyer.
                buyer.meters = None;
                buyer.in_bucket = true;
                buyer.work = self.work.clone();
                buyer
            })
            .collect();
        let found = Arc::new(Bucketed { map, buyers });
        if let Ok(mut slot) = self.buckets.write() {
            *slot = Some(found.clone());
        }
        Ok(Some(found))
    }

    /// The route step's way for a bucketed SKU: a lone purchase at its home bucket,
    /// borrowing while the home is short; a group commit by bucket.
    pub(super) fn in_buckets(
        &self,
        b: &Arc<Bucketed>,
        conn: &mut Conn,
        purchases: &[Order<'_>],
        turn: Turn,
    ) -> Result<Vec<Result<Purchase>>> {
        match (turn, purchases) {
            (Turn::Alone(started), [(order_id, user)]) => {
                Ok(vec![self.buy_bucketed(b, conn, order_id, *user, started)])
            }
            _ => self.batch_bucketed(b, conn, purchases),
        }
    }

    /// A lone purchase at this buyer's own stock (of the SKU, or of one bucket), confirmed.
    fn at_own_stock(
        &self,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        only(self.confirmed(conn, &[(order_id, user)], Turn::Alone(started))?)
    }

    /// Buys at the home bucket, borrowing from the others while it is short.
    fn buy_bucketed(
        &self,
        b: &Arc<Bucketed>,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
        started: Instant,
    ) -> Result<Purchase> {
        let mut b = b.clone();
        for _ in 0..MAX_ROUNDS {
            let home = b.map.home(user, order_id);
            let bought = b.buyers[home].at_own_stock(conn, order_id, user, started);
            let p = match bought {
                Err(Error::Unseeded { .. }) => match self.buckets_again(conn, &b.map, home)? {
                    Some(again) => {
                        b = again;
                        continue;
                    }
                    // Seeded again without buckets: the SKU's own stock is the sale now.
                    None => return self.as_sku(self.at_own_stock(conn, order_id, user, started)),
                },
                other => self.as_sku(other)?,
            };
            if p.replayed.is_some() || !matches!(p.outcome, Buy::SoldOut { .. }) {
                return Ok(p);
            }
            match self.borrow_for(&b, conn, home, started)? {
                Borrowed::Moved => {}
                Borrowed::Unsettled => std::thread::sleep(super::busy_pause()),
                // A lock holder keeps a donor: busy once the purchase's wait is over, as a
                // purchase that finds its own bucket's lock held is.
                Borrowed::Locked => {
                    let left = self.options.lock.wait.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Ok(Purchase {
                            outcome: Buy::Busy,
                            ..p
                        });
                    }
                    std::thread::sleep(super::busy_pause().min(left));
                }
                Borrowed::Stale => match self.buckets_again(conn, &b.map, home)? {
                    Some(again) => b = again,
                    None => return self.as_sku(self.at_own_stock(conn, order_id, user, started)),
                },
                Borrowed::SoldOut { remaining } => {
                    return Ok(Purchase {
                        outcome: Buy::SoldOut { remaining },
                        ..p
                    });
                }
            }
        }
        Err(Error::internal(format!(
            "a purchase of '{}' found its bucket short {MAX_ROUNDS} times over",
            self.sku
        )))
    }

    /// Moves units into bucket `home` (see [`Buckets::borrow`]), taking each donor's lock
    /// first for the lock strategies when a holder is there.
    fn borrow_for(
        &self,
        b: &Bucketed,
        conn: &mut Conn,
        home: usize,
        started: Instant,
    ) -> Result<Borrowed> {
        let locks = self.options.strategy.locks();
        // Each donor's lock within what is left of the purchase's one wait.
        let mut lock_for = |c: &mut Conn, d: usize| -> Result<Option<crate::lock::Guard>> {
            if !locks {
                return Ok(None);
            }
            Ok(match b.buyers[d].lock.acquire_since(c, started)? {
                Acquire::Acquired(g) => Some(g),
                Acquire::Busy => None,
            })
        };
        b.map.borrow(conn, home, self.options.qty, &mut lock_for)
    }

    /// The map read again (the SKU was seeded again since it was read); `None` when the SKU
    /// is no longer bucketed.
    fn buckets_again(
        &self,
        conn: &mut Conn,
        was: &Buckets,
        home: usize,
    ) -> Result<Option<Arc<Bucketed>>> {
        if let Ok(mut slot) = self.buckets.write() {
            *slot = None;
        }
        // A seed in progress replaces the map last: wait for it (about a second at most). A
        // map that still names the same sale then has a bucket without stock: damaged books,
        // not a purchase to try again for ever.
        match Buckets::settled(conn, &self.sku, &was.nonce)? {
            Some(m) if m == *was => Err(Error::BadData {
                sku: self.sku.to_string(),
                reason: format!(
                    "{} is missing, but bucket {home} is in the map of the sale",
                    crate::keys::StockKeys::new(&was.skus[home]).stock
                ),
            }),
            _ => self.find_buckets(conn),
        }
    }

    /// A bucket's answer as the SKU's: its errors name the SKU the buyer asked for.
    fn as_sku(&self, r: Result<Purchase>) -> Result<Purchase> {
        r.map_err(|e| match e {
            Error::Unseeded { .. } => Error::Unseeded {
                sku: self.sku.to_string(),
            },
            other => other,
        })
    }

    /// A group commit over buckets: each bucket's purchases in one script call there, then
    /// each purchase its bucket could not serve bought again on its own, borrowing.
    fn batch_bucketed(
        &self,
        b: &Arc<Bucketed>,
        conn: &mut Conn,
        purchases: &[Order<'_>],
    ) -> Result<Vec<Result<Purchase>>> {
        let mut answers: Vec<Option<Result<Purchase>>> = vec![None; purchases.len()];
        let mut failed: Option<Error> = None;
        for (home, buyer) in b.buyers.iter().enumerate() {
            let mine: Vec<usize> = (0..purchases.len())
                .filter(|&i| b.map.home(purchases[i].1, purchases[i].0) == home)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let group: Vec<(&str, Option<&str>)> = mine.iter().map(|&i| purchases[i]).collect();
            // A failed call answers its own bucket's purchases and the ones not yet sent (on a
            // connection that may be broken); what the buckets before it decided (bought,
            // perhaps) stands.
            let each = match &failed {
                Some(e) => Err(e.clone()),
                None => buyer.confirmed(conn, &group, Turn::Group),
            };
            match each {
                Ok(each) => {
                    for (i, a) in mine.into_iter().zip(each) {
                        answers[i] = Some(a);
                    }
                }
                Err(e) => {
                    for i in mine {
                        answers[i] = Some(Err(e.clone()));
                    }
                    // Only a connection that may be broken stops the buckets after it.
                    if e.is_indeterminate() || e.kind().is_outage() {
                        failed = Some(e);
                    }
                }
            }
        }
        let started = Instant::now();
        Ok(answers
            .into_iter()
            .zip(purchases)
            .map(|(a, (order_id, user))| match a {
                Some(Ok(p)) if p.replayed.is_none() && matches!(p.outcome, Buy::SoldOut { .. }) => {
                    match &failed {
                        Some(e) => Err(e.clone()),
                        None => self.buy_bucketed(b, conn, order_id, *user, started),
                    }
                }
                Some(Err(Error::Unseeded { .. })) if failed.is_none() => {
                    self.buy_bucketed(b, conn, order_id, *user, started)
                }
                Some(other) => self.as_sku(other),
                None => Err(Error::internal("a purchase of the batch found no bucket")),
            })
            .collect())
    }

    /// With `--require-replicas N`: waits until N replicas have what this connection wrote to
    /// the server of this buyer's stock key, for at most the call limit.
    pub(super) fn replicated(&self, conn: &mut Conn) -> Result<()> {
        let want = self.options.require_replicas;
        if want == 0 {
            return Ok(());
        }
        let limit = conn.call_timeout();
        let acked = conn.wait_replicas(&self.keys.stock, want, limit)?;
        if acked >= want {
            return Ok(());
        }
        Err(Error::Redis {
            addr: conn.addr().to_string(),
            reason: format!(
                "the deduction was made, but only {acked} of the {want} replicas required acknowledged it within {} ms: a failover now may lose it",
                limit.as_millis()
            ),
            code: Some("NOREPLICAS".into()),
            indeterminate: true,
            hint: None,
        })
    }
}
