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
use crate::hint::{Finding, Hint};
use crate::keys::StockKeys;
use crate::lock::{Carried, Lock, LockOptions};
use crate::sku::Sku;
use crate::stock;
use crate::stock::buckets::{self, BucketBooks, Buckets};

mod bucketed;
use bucketed::bucketed;

/// Who holds the lock.
#[derive(Clone, Debug, Serialize)]
pub struct Holder {
    /// The holder's token (the lock key's value).
    pub token: String,
    /// Remaining lease in milliseconds.
    pub ttl_ms: u64,
    /// The fencing token of this grant (when lockctl made it).
    pub fence: Option<u64>,
    /// How long this holder has held the lock, in milliseconds (when lockctl made the grant).
    pub held_ms: Option<u64>,
}

/// What `status` found.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    /// The SKU.
    pub sku: String,
    /// The stock; `None` for a name with no stock (a `lockctl run` lock, an unseeded SKU).
    pub stock: Option<i64>,
    /// The count last given to `seed`; `None` when the stock was set some other way.
    pub seeded: Option<i64>,
    /// Units sold since the seed, by the sold counter.
    pub sold: i64,
    /// Orders in the ledger and their units.
    pub ledger_orders: u64,
    /// Units in the ledger.
    pub ledger_qty: i64,
    /// `Some(true)` when every check holds, `Some(false)` when one fails, `None` when there is
    /// no seed record to check against.
    pub reconciled: Option<bool>,
    /// Every check that failed, in words.
    pub problems: Vec<Finding>,
    /// What the books cannot show but may have happened: a failover since the seed (the
    /// purchases its old master acknowledged last may be lost, with their stock, sold count
    /// and ledger entries together, so the books still add up).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Finding>,
    /// The lock holder, if any.
    pub lock: Option<Holder>,
    /// The last fencing token handed out.
    pub fence: u64,
    /// Clients waiting for the lock now.
    pub waiters: u64,
    /// Queue entries lockctl did not write (0 for a healthy queue).
    pub queue_damaged: u64,
    /// With `--db`: the orders in PostgreSQL and in the stream, against the books.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orders: Option<crate::orders::PipelineBooks>,
    /// Of a bucketed SKU (`seed --buckets K`): each bucket's books; the totals above add
    /// them up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub buckets: Option<Vec<BucketBooks>>,
    /// Of a bucketed SKU: units moved out of a bucket and not (yet) into another.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_transit: Option<i64>,
}

/// Reads one SKU's state and checks its books. Damaged data (a counter that is not an
/// integer, a key of the wrong type, queue entries lockctl did not write) is reported as a
/// problem, not an error, so `status` can say what is wrong.
pub fn status(conn: &mut Conn, target: &Target, sku: &Sku) -> Result<Status> {
    match Buckets::read(conn, sku) {
        Ok(Some(b)) => bucketed(conn, target, &b),
        Ok(None) => one(conn, target, sku, 0),
        Err(Error::BadData { reason, .. }) => {
            let mut st = one(conn, target, sku, 0)?;
            st.problems.push(Finding::from(reason));
            st.reconciled = Some(false);
            Ok(st)
        }
        Err(e) => Err(e),
    }
}

/// A failover (or a restart) of the master serving `keys` since the seed: the replication id
/// the seed recorded is not the one serving now.
fn failover(conn: &mut Conn, keys: &StockKeys) -> Result<Option<Finding>> {
    let recorded: Option<String> = match conn.query(redis::cmd("GET").arg(&keys.origin)) {
        Ok(v) => v,
        Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
            Some("a value that is not a string".into())
        }
        Err(e) => return Err(e),
    };
    let Some(recorded) = recorded else {
        return Ok(None);
    };
    if recorded.len() != 40 || !recorded.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Some(Finding::from(format!(
            "{} holds '{}', not a replication id: whether a failover happened since the seed cannot be told",
            keys.origin,
            recorded.chars().take(60).collect::<String>().escape_debug()
        ))));
    }
    let Some(now) = conn.master_replid(&keys.stock)? else {
        return Ok(None);
    };
    if now == recorded {
        return Ok(None);
    }
    // A slot migration moves the keys to another master and leaves the old one a master, with
    // its replication id: then nothing acknowledged was lost by the change.
    if let Some((from, to)) = migrated(conn, &keys.stock, &recorded)? {
        return Ok(Some(Finding::from(format!(
            "its slot moved since the seed, from {from} to {to}: a slot migration ({from} is still a master, with the replication id recorded at the seed, {}), which loses no purchase; a failover of {to} since then cannot be told from it",
            short(&recorded)
        ))));
    }
    Ok(Some(Finding::from(format!(
        "its master changed since the seed (replication id {} then, {} now, and no master has the old one: a failover or a restart, perhaps after a slot migration): purchases the old master acknowledged just before may be lost, and the books cannot show it (the stock, sold count and ledger entry went together); hold the orders your buyers were told bought against the ledger",
        short(&recorded),
        short(&now)
    ))))
}

/// On a cluster, the master that has the replication id `recorded` (the one that served `key`
/// at the seed) and the one serving `key` now, when they differ: the slot migrated. `None`
/// when no master has that id (on one server, always).
fn migrated(conn: &mut Conn, key: &str, recorded: &str) -> Result<Option<(String, String)>> {
    if !conn.is_cluster() {
        return Ok(None);
    }
    let masters = buckets::masters(conn)?;
    let Some(serving) = buckets::master_of(&masters, crate::keys::key_slot(key)) else {
        return Ok(None);
    };
    for (addr, ranges) in &masters {
        let Some(&(first, _)) = ranges.first() else {
            continue;
        };
        if *addr != serving && conn.master_replid_at(first)?.as_deref() == Some(recorded) {
            return Ok(Some((addr.clone(), serving)));
        }
    }
    Ok(None)
}

/// A SKU (or bucket) with a seed record and no stock key: the key was deleted since the seed
/// (no seed, sale or retirement leaves one without the other), and the units it held are gone
/// from the books. `seeded` is what it should hold with what it sold (with what moved in and
/// out, for a bucket).
fn missing_stock(keys: &StockKeys, seeded: i64, sold: i64) -> Finding {
    Finding::from(format!(
        "{} is missing, though the seed record {} is there and {sold} sold since: the stock key was deleted (damaged books), {} unaccounted for",
        keys.stock,
        keys.seeded,
        crate::units::count(seeded - sold, "unit", "units")
    ))
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// The status of one SKU (or one bucket, whose seed record is held against `moved`, the units
/// that moved in less those that moved out).
fn one(conn: &mut Conn, target: &Target, sku: &Sku, moved: i64) -> Result<Status> {
    let keys = StockKeys::new(sku);
    let mut problems = Vec::new();
    // The ledger is scanned a page at a time (a large one must not stall a live sale), so
    // purchases may land while it is read: the counters are read in one MULTI before and after
    // the scan, and a ledger read in motion is held to the sold counter's two readings.
    let sold_before = match snapshot(conn, &keys)? {
        [_, _, Carried::Value(v)] => stock::parse_stock(&v),
        _ => None,
    };
    let (mut ledger_orders, mut ledger_qty) = (0u64, 0i64);
    let scanned = stock::scan_ledger(conn, sku, |_, units| {
        ledger_orders += 1;
        ledger_qty += units;
    });
    let ledger_ok = match scanned {
        Ok(()) => true,
        Err(Error::BadData { reason, .. }) => {
            problems.push(Finding::from(reason));
            false
        }
        Err(e) => return Err(e),
    };
    let [stock_read, seeded_read, sold_read] = snapshot(conn, &keys)?;
    let stock = stock::stock_value(sku, &keys.stock, stock_read)?;
    let seeded = counter(&keys.seeded, seeded_read, &mut problems);
    let sold = counter(&keys.sold, sold_read, &mut problems).unwrap_or(0);
    // In motion, a ledger between the two readings of the sold counter is as it should be;
    // the other checks then hold the after-reading to itself (stock + sold == seeded).
    let ledger_units = match sold_before {
        Some(before) if before != sold && (before..=sold).contains(&ledger_qty) => sold,
        _ => ledger_qty,
    };
    let (holder, fence, queue) = lock_state(conn, target, sku, &mut problems)?;
    let warnings = failover(conn, &keys)?.into_iter().collect();
    let ledger = ledger_ok.then_some((ledger_orders, ledger_units));
    if let (None, Some(n)) = (stock, seeded) {
        problems.push(missing_stock(&keys, n + moved, sold));
    }
    problems.extend(book_problems(
        stock,
        seeded.map(|n| n + moved),
        sold,
        ledger,
    ));
    let reconciled = if !problems.is_empty() {
        Some(false)
    } else {
        seeded.and(stock).map(|_| true)
    };
    Ok(Status {
        sku: sku.to_string(),
        stock,
        seeded,
        sold,
        ledger_orders,
        ledger_qty,
        reconciled,
        problems,
        warnings,
        lock: holder.map(|h| Holder {
            token: h.token,
            ttl_ms: h.ttl.as_millis() as u64,
            fence: h.fence,
            held_ms: h.held_for.map(|d| d.as_millis() as u64),
        }),
        fence: fence.max(0) as u64,
        waiters: queue.live,
        queue_damaged: queue.damaged + u64::from(queue.wrong_type),
        orders: None,
        buckets: None,
        in_transit: None,
    })
}

/// The lock's holder, fencing counter and queue; damage to them is added to `problems`.
fn lock_state(
    conn: &mut Conn,
    target: &Target,
    sku: &Sku,
    problems: &mut Vec<Finding>,
) -> Result<(
    Option<crate::lock::HolderInfo>,
    i64,
    crate::lock::QueueHealth,
)> {
    let lock = Lock::new(target, sku.as_str(), LockOptions::default());
    let holder = match lock.holder_info(conn) {
        Ok(h) => h,
        Err(e @ Error::DamagedLock { .. }) => {
            problems.push(Finding::from(&e));
            None
        }
        Err(e) => return Err(e),
    };
    let fence = read_counter(conn, &lock.keys().fence, problems)?.unwrap_or(0);
    let queue = lock.queue_health(conn)?;
    if queue.wrong_type || queue.damaged > 0 {
        problems.push(
            Finding::from(format!(
                "the lock's queue is damaged ({})",
                if queue.wrong_type {
                    "its keys are not sorted sets".to_string()
                } else {
                    format!("{} entries lockctl did not write", queue.damaged)
                }
            ))
            .with_hint(Hint::ForceUnlock {
                name: sku.to_string(),
            }),
        );
    }
    Ok((holder, fence, queue))
}

/// Adds the orders pipeline to a status: every ledger order persisted, queued or set aside
/// with its units, nothing persisted that the ledger lacks, no conflicts. With the status's
/// own check (stock + ledger == seeded) this is seeded == stock + persisted + queued, held
/// order by order, so that it holds during a live sale too (see [`crate::orders::books`]).
pub fn with_orders(st: &mut Status, books: crate::orders::PipelineBooks) {
    let sku = &st.sku;
    if books.lost > 0 {
        let more = if books.lost > books.lost_orders.len() as u64 {
            ", ..."
        } else {
            ""
        };
        st.problems.push(Finding::from(format!(
            "{} lost: neither in PostgreSQL, queued for a worker, nor in the dead letters (acknowledged or trimmed without a row): {}{more}",
            crate::units::count(books.lost, "ledger order is", "ledger orders are"),
            books.lost_orders.join(", ")
        )));
    }
    if books.dead_orders > 0 {
        st.problems.push(
            Finding::from(format!(
                "{} ({}) set aside in {}: PostgreSQL refused their rows",
                crate::units::count(books.dead_orders, "order is", "orders are"),
                crate::units::count(books.dead_units, "unit", "units"),
                if st.buckets.is_some() {
                    format!("the dead letters of {sku}'s buckets (item:order_dead:<bucket>)")
                } else {
                    format!("item:order_dead:{sku}")
                },
            ))
            .with_hint(Hint::RequeueDead { sku: sku.clone() }),
        );
    }
    if books.doubled > 0 {
        st.problems.push(Finding::from(format!(
            "{} deducted more than once under one order id: PostgreSQL holds the first deduction, lockctl_order_conflicts the others",
            crate::units::count(books.doubled, "ledger order was", "ledger orders were"),
        )));
    }
    if books.overcounted > 0 {
        st.problems.push(Finding::from(format!(
            "{} more units in PostgreSQL, the queue and the dead letters than in the ledger (an order counted twice: a forged entry or row?)",
            crate::units::count(books.overcounted, "ledger order has", "ledger orders have"),
        )));
    }
    if books.unknown > 0 {
        st.problems.push(Finding::from(format!(
            "{} of the current sale in PostgreSQL or queued for a worker, not in the ledger",
            crate::units::count(books.unknown, "order", "orders")
        )));
    }
    if let Some(held) = &books.sale_unreadable {
        let shown: String = held.chars().take(40).collect();
        st.problems.push(Finding::from(format!(
            "item:sale:{sku} holds '{}', not a stream id: every row of the SKU was held against this sale's ledger (seeding the SKU starts a sale again)",
            shown.escape_debug()
        )));
    }
    if books.conflicts > 0 && books.doubled == 0 {
        st.problems.push(Finding::from(format!(
            "{} recorded in lockctl_order_conflicts: an order id that arrived again with another SKU, quantity or user",
            crate::units::count(books.conflicts, "conflict", "conflicts")
        )));
    }
    if !st.problems.is_empty() {
        st.reconciled = Some(false);
    }
    st.orders = Some(books);
}

/// The three records of the sales against each other: the stock never negative, the sold
/// counter equal to the ledger, and stock + ledger equal to the seed. `ledger` is (orders,
/// units), `None` when it could not be read.
fn book_problems(
    stock: Option<i64>,
    seeded: Option<i64>,
    sold: i64,
    ledger: Option<(u64, i64)>,
) -> Vec<Finding> {
    let mut problems = Vec::new();
    if let Some(stock) = stock
        && stock < 0
    {
        problems.push(Finding::from(format!(
            "the stock is negative: {stock} (oversold)"
        )));
    }
    let Some((orders, units)) = ledger else {
        return problems;
    };
    if sold != units {
        problems.push(Finding::from(format!(
            "the sold counter says {sold} but the ledger holds {} in {}",
            crate::units::count(units, "unit", "units"),
            crate::units::count(orders, "order", "orders")
        )));
    }
    if let (Some(n), Some(stock)) = (seeded, stock)
        && stock + units != n
    {
        problems.push(Finding::from(format!(
            "stock {stock} + ledger {units} = {} but {n} was seeded: {} unaccounted for",
            stock + units,
            crate::units::count(n - stock - units, "unit", "units")
        )));
    }
    problems
}

/// The stock, the seed record and the sold counter, read in one MULTI: one moment of the books,
/// since every purchase changes the stock and the sold counter in one script.
fn snapshot(conn: &mut Conn, keys: &StockKeys) -> Result<[Carried; 3]> {
    let gets = [&keys.stock, &keys.seeded, &keys.sold].map(|k| redis::cmd("GET").arg(k).clone());
    let (values, _): (Vec<redis::Value>, _) = conn.transaction(&gets, None)?;
    let read = |v: Option<&redis::Value>| match v {
        Some(redis::Value::BulkString(b)) => Ok(Carried::Value(String::from_utf8_lossy(b).into())),
        Some(redis::Value::Nil) => Ok(Carried::Missing),
        Some(redis::Value::ServerError(e)) if e.code() == "WRONGTYPE" => Ok(Carried::WrongType),
        other => Err(conn.unexpected(format!("a GET in MULTI answered {other:?}"))),
    };
    Ok([
        read(values.first())?,
        read(values.get(1))?,
        read(values.get(2))?,
    ])
}

/// An integer kept in a string key (the seed record, the sold counter, the fencing counter):
/// `None` when absent; a value that is not an integer, or a key of another type, is added to
/// `problems` and read as absent.
fn read_counter(conn: &mut Conn, key: &str, problems: &mut Vec<Finding>) -> Result<Option<i64>> {
    let read = match conn.query(redis::cmd("GET").arg(key)) {
        Ok(Some(v)) => Carried::Value(v),
        Ok(None) => Carried::Missing,
        Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => Carried::WrongType,
        Err(e) => return Err(e),
    };
    Ok(counter(key, read, problems))
}

/// A counter's value as read (see [`read_counter`]).
fn counter(key: &str, read: Carried, problems: &mut Vec<Finding>) -> Option<i64> {
    let raw = match read {
        Carried::Value(v) => Some(v),
        Carried::Missing => None,
        Carried::WrongType => {
            problems.push(Finding::from(format!("{key} is not a string (wrong type)")));
            return None;
        }
    };
    raw.and_then(|v| {
        let n = stock::parse_stock(&v);
        if n.is_none() {
            let shown: String = v.chars().take(40).collect();
            problems.push(Finding::from(format!(
                "{key} holds '{}', not a count (an integer no larger than 9007199254740991 either side of zero)",
                shown.escape_debug()
            )));
        }
        n
    })
}
