//! The books of a SKU against its orders pipeline, for `status SKU --db`: every order of the
//! ledger is in PostgreSQL, still queued for a worker, or set aside in the dead letters, with
//! its units, and nothing of the current sale is in PostgreSQL that the ledger lacks.
//!
//! Two ideas keep it from crying wolf during a live sale and after a re-seed:
//! - **The order of the readings.** Orders move one way: deducted (ledger and stream entry in
//!   one script), delivered, committed to PostgreSQL, acknowledged, trimmed. Reading the ledger
//!   first, then what the group still holds, then the dead letters, then the stream, then
//!   PostgreSQL, an order of the ledger that a worker acknowledged before it was looked for in
//!   the stream was committed before PostgreSQL is read: it is found. An order in PostgreSQL
//!   and not in the ledger read first may have been bought since: the ledger is asked again
//!   for those ids. A discrepancy left is read once more, and only what persists is reported.
//! - **The sale.** `seed` records in `item:sale:<SKU>` the stream id its sale starts after;
//!   every entry of the new sale is appended later, so has a larger id, and PostgreSQL keeps
//!   each order's entry id. The books of the current sale are the rows, entries, dead letters
//!   and conflicts after it; an earlier sale's rows stay in the table, out of these books.
//!
//! The reading itself is in `reconcile` (with the `postgres` feature).

/// The books of a SKU against its orders pipeline.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PipelineBooks {
    /// The stream id the current sale starts after (`None`: no sale recorded, every row
    /// counts).
    pub sale_after: Option<String>,
    /// Orders and units of the current sale in PostgreSQL.
    pub persisted_orders: u64,
    /// Units of this sale's orders persisted in PostgreSQL.
    pub persisted_units: i64,
    /// Orders and units that a worker will still persist (pending in the group, or not yet
    /// delivered) and that are not yet in PostgreSQL.
    pub queued_orders: u64,
    /// Units of the orders still queued.
    pub queued_units: i64,
    /// Orders of the ledger set aside in the dead letters (PostgreSQL refused their rows):
    /// not lost, but not persisted either until `lockctl worker --requeue-dead` after a fix.
    pub dead_orders: u64,
    /// Units of the orders set aside.
    pub dead_units: i64,
    /// Conflicts the workers recorded for the current sale (an order id from a second
    /// deduction, or with another SKU, quantity or user).
    pub conflicts: u64,
    /// Ledger orders deducted more than once (the lock strategy with a reused order id): the
    /// first deduction is in PostgreSQL, the others in `lockctl_order_conflicts`.
    pub doubled: u64,
    /// Ledger orders whose units are neither persisted, queued, dead-lettered nor recorded as
    /// conflicts: lost on the way (acknowledged or trimmed without a row).
    pub lost: u64,
    /// The first few of them, by order id.
    pub lost_orders: Vec<String>,
    /// Ledger orders with more units persisted, queued and set aside than the ledger holds
    /// (the same order counted twice: a forged entry, a row written by hand).
    pub overcounted: u64,
    /// Orders of the current sale in PostgreSQL, or queued, that the ledger does not have.
    pub unknown: u64,
    /// What `item:sale:<SKU>` holds when it is not a stream id (then every row counts).
    pub sale_unreadable: Option<String>,
}

impl PipelineBooks {
    /// Adds the books of another SKU (a bucket of the same sale) to these: counts add up, the
    /// first few lost orders are kept, and a sale record is kept only when both have the same.
    pub fn add(&mut self, other: PipelineBooks) {
        if self.sale_after != other.sale_after {
            self.sale_after = None;
        }
        self.persisted_orders += other.persisted_orders;
        self.persisted_units += other.persisted_units;
        self.queued_orders += other.queued_orders;
        self.queued_units += other.queued_units;
        self.dead_orders += other.dead_orders;
        self.dead_units += other.dead_units;
        self.conflicts += other.conflicts;
        self.doubled += other.doubled;
        self.lost += other.lost;
        self.lost_orders.extend(other.lost_orders);
        self.lost_orders.sort();
        self.lost_orders.truncate(10);
        self.overcounted += other.overcounted;
        self.unknown += other.unknown;
        if self.sale_unreadable.is_none() {
            self.sale_unreadable = other.sale_unreadable;
        }
    }
}
