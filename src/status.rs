//! `status`: one SKU's books and lock, and whether the books reconcile.
//!
//! Three records of the same sales are kept in step by every deduction (they are written in
//! one transaction or script): the stock, the sold counter, and the ledger of orders. After a
//! seed of N, `stock + sold == N` and `sold == sum(ledger)` must hold whatever happened; a
//! difference means something deducted outside lockctl (the tutorial's PHP code keeps no
//! ledger) or the data was edited by hand. Status reads everything without taking the lock.

use serde::Serialize;

use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::lock::{Lock, LockOptions};
use crate::sku::Sku;
use crate::stock;

/// Who holds the lock.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    pub token: String,
    /// Remaining lease in milliseconds.
    pub ttl_ms: u64,
}

/// What `status` found.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub sku: String,
    pub stock: i64,
    /// The count last given to `seed`; `None` when the stock was set some other way.
    pub seeded: Option<i64>,
    /// Units sold since the seed, by the sold counter.
    pub sold: i64,
    /// Orders in the ledger and their units.
    pub ledger_orders: u64,
    pub ledger_qty: i64,
    /// `Some(true)` when every check holds, `Some(false)` when one fails, `None` when there is
    /// no seed record to check against.
    pub reconciled: Option<bool>,
    /// Every check that failed, in words.
    pub problems: Vec<String>,
    /// The lock holder, if any.
    pub lock: Option<Holder>,
    /// The last fencing token handed out.
    pub fence: u64,
    /// Clients waiting for the lock now.
    pub waiters: u64,
}

/// Reads one SKU's state and checks its books.
pub fn status(conn: &mut Conn, target: &Target, sku: &Sku) -> Result<Status> {
    let keys = StockKeys::new(sku);
    let stock = stock::read_stock(conn, sku, &keys)?.ok_or_else(|| Error::Unseeded {
        sku: sku.to_string(),
    })?;
    let ((seeded, sold), _): ((Option<i64>, Option<i64>), _) = conn.transaction(
        &[redis::Cmd::get(&keys.seeded), redis::Cmd::get(&keys.sold)],
        None,
    )?;
    let sold = sold.unwrap_or(0);
    let ledger = stock::ledger(conn, sku)?;
    let ledger_qty: i64 = ledger.values().sum();
    let lock = Lock::new(target, sku.as_str(), LockOptions::default());
    let holder = lock.holder(conn)?;
    let fence = lock.last_fence(conn)?;
    let waiters = lock.waiters(conn)?;

    let mut problems = Vec::new();
    if stock < 0 {
        problems.push(format!("the stock is negative: {stock} (oversold)"));
    }
    if sold != ledger_qty {
        problems.push(format!(
            "the sold counter says {sold} but the ledger holds {ledger_qty} units in {} orders",
            ledger.len()
        ));
    }
    if let Some(n) = seeded
        && stock + ledger_qty != n
    {
        problems.push(format!(
            "stock {stock} + ledger {ledger_qty} = {} but {n} was seeded: {} units unaccounted for",
            stock + ledger_qty,
            n - stock - ledger_qty
        ));
    }
    let reconciled = if !problems.is_empty() {
        Some(false)
    } else {
        seeded.map(|_| true)
    };
    Ok(Status {
        sku: sku.to_string(),
        stock,
        seeded,
        sold,
        ledger_orders: ledger.len() as u64,
        ledger_qty,
        reconciled,
        problems,
        lock: holder.map(|(token, ttl)| Holder {
            token,
            ttl_ms: ttl.as_millis() as u64,
        }),
        fence,
        waiters,
    })
}
