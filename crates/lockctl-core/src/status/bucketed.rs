//! The status of a bucketed SKU (`seed --buckets K`): each bucket's own status (its seed
//! record held against what moved in and out of it), added up, and the units over all buckets
//! held against the count seeded. The map's own keys of each bucket (moves out in flight, the
//! sale's id, the sold-out mark) are read too: a failover can damage them without touching
//! the bucket's counters.

use super::{Status, one, read_counter};
use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::hint::Finding;
use crate::keys::StockKeys;
use crate::sku::Sku;
use crate::stock;
use crate::stock::buckets::{self, Buckets};

/// The status of the bucketed SKU `b`.
pub(super) fn bucketed(conn: &mut Conn, target: &Target, b: &Buckets) -> Result<Status> {
    let (books, transit) = buckets::books(conn, b)?;
    let mut t = Totals::default();
    let seeded = read_counter(conn, &StockKeys::new(&b.sku).seeded, &mut t.problems)?;
    for (i, (bucket, bb)) in b.skus.iter().zip(&books).enumerate() {
        t.add(
            one(conn, target, bucket, bb.moved_in - bb.moved_out)?,
            i,
            bucket,
        );
        t.map_keys(conn, b, i, bucket)?;
    }
    t.reconcile(seeded, transit);
    let reconciled = match t.problems.is_empty() {
        false => Some(false),
        true => seeded.map(|_| true),
    };
    Ok(Status {
        sku: b.sku.to_string(),
        stock: Some(t.stock),
        seeded,
        sold: t.sold,
        ledger_orders: t.orders,
        ledger_qty: t.qty,
        reconciled,
        problems: t.problems,
        warnings: t.warnings,
        lock: None,
        fence: 0,
        waiters: t.waiters,
        queue_damaged: 0,
        orders: None,
        buckets: Some(books),
        in_transit: Some(transit),
    })
}

/// The buckets' books added up, and what was found on the way.
#[derive(Default)]
struct Totals {
    stock: i64,
    sold: i64,
    orders: u64,
    qty: i64,
    waiters: u64,
    /// Moves out of a bucket begun and not finished.
    unfinished: u64,
    /// The fewest units a sold-out pass of this sale left.
    marked: Option<i64>,
    problems: Vec<Finding>,
    warnings: Vec<Finding>,
}

impl Totals {
    /// Adds bucket `i`'s own status `st`, its findings named by the bucket.
    fn add(&mut self, st: Status, i: usize, bucket: &Sku) {
        for w in st.warnings {
            self.warnings
                .push(Finding::from(format!("bucket {i} ({bucket}): {}", w.text)));
        }
        // A bucket of the map always has a stock key (a missing one with a seed record is
        // named by `one`): one missing counts 0, and the units it held show as unaccounted.
        if st.stock.is_none() && st.seeded.is_none() {
            self.problems.push(Finding::from(format!(
                "bucket {i} ({bucket}): {} is missing, and so is its seed record: a bucket of the map with no stock (damaged books)",
                StockKeys::new(bucket).stock
            )));
        }
        // Its seed record gone and its stock key kept: its own books cannot be checked (the
        // totals still hold against the SKU's record, which would hide it).
        if st.stock.is_some() && st.seeded.is_none() {
            self.problems.push(Finding::from(format!(
                "bucket {i} ({bucket}): its seed record {} is missing, though its stock key is there: its books cannot be checked (damaged books)",
                StockKeys::new(bucket).seeded
            )));
        }
        self.stock += st.stock.unwrap_or(0);
        self.sold += st.sold;
        self.orders += st.ledger_orders;
        self.qty += st.ledger_qty;
        self.waiters += st.waiters;
        for p in st.problems {
            self.problems
                .push(Finding::from(format!("bucket {i} ({bucket}): {}", p.text)));
        }
    }

    /// Reads the map's own keys of bucket `i`: its moves out in flight, the sale it belongs
    /// to, and the mark a sold-out pass left.
    fn map_keys(&mut self, conn: &mut Conn, b: &Buckets, i: usize, bucket: &Sku) -> Result<()> {
        let bk = StockKeys::new(bucket);
        match conn.query::<u64>(redis::cmd("HLEN").arg(&bk.moving)) {
            Ok(n) => self.unfinished += n,
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
                self.problems.push(Finding::from(format!(
                    "bucket {i}: {} is not a hash (moves out of the bucket cannot be read)",
                    bk.moving
                )));
            }
            Err(e) => return Err(e),
        }
        // The bucket's sale: every move and purchase by the map checks it.
        let sale: Option<String> = conn
            .query(redis::cmd("GET").arg(&bk.bucket_sale))
            .unwrap_or_else(|_| Some("a value that is not a string".into()));
        if sale.as_deref() != Some(b.nonce.as_str()) {
            self.problems.push(Finding::from(format!(
                "bucket {i}: {} holds '{}', not the id of this sale ('{}'): moves into and out of the bucket stop",
                bk.bucket_sale,
                sale.unwrap_or_default().escape_debug(),
                b.nonce
            )));
        }
        // The fewest units a sold-out pass of this sale left (a later pass marks fewer).
        let mark: Option<String> = conn
            .query(redis::cmd("GET").arg(&bk.drained))
            .unwrap_or(None);
        if let Some(units) = mark
            .as_deref()
            .and_then(|m| m.strip_prefix(&format!("{}:", b.nonce)))
            .and_then(stock::parse_stock)
        {
            self.marked = Some(self.marked.map_or(units, |m| m.min(units)));
        }
        Ok(())
    }

    /// Holds the totals against the count `seeded`, the units in `transit` and the sold-out
    /// mark: units stranded, created, lost in transit or unaccounted for are problems.
    fn reconcile(&mut self, seeded: Option<i64>, transit: i64) {
        let (s, sold) = (self.stock, self.sold);
        if let Some(left) = self.marked
            && s + transit > left
        {
            self.problems.push(Finding::from(format!(
                "the sale was found sold out with {} left, and the buckets hold {} now: stranded (did a failover bring back units the old master had sold?)",
                crate::units::count(left, "unit", "units"),
                s + transit
            )));
        }
        if transit < 0 {
            self.problems.push(Finding::from(format!(
                "{} moved into buckets that no bucket moved out: created (a failover lost a donor's record of a move)",
                crate::units::count(-transit, "unit was", "units were")
            )));
        } else if transit > 0 && self.unfinished == 0 {
            self.problems.push(Finding::from(format!(
                "{} moved out of a bucket and never delivered: lost in transit (a failover lost the delivery)",
                crate::units::count(transit, "unit was", "units were")
            )));
        }
        if let Some(n) = seeded
            && s + sold + transit != n
        {
            self.problems.push(Finding::from(format!(
                "over the buckets, stock {s} + sold {sold} + in transit {transit} = {} but {n} was seeded: {} unaccounted for",
                s + sold + transit,
                crate::units::count(n - s - sold - transit, "unit", "units")
            )));
        }
    }
}
