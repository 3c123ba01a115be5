//! Per-SKU state read fresh from Redis on every scrape: what `lockctl exporter` serves.
//!
//! Unlike the in-process metrics (which count what this process did), everything here is read
//! fresh from Redis at scrape time, without taking any lock, so any number of buying processes
//! (lockctl, the tutorial's PHP code) show up. Reads are O(1) per SKU (per bucket of a bucketed
//! SKU, whose rows carry a `bucket` label): the sold counter stands in for the ledger, whose
//! full check is `status`'s job; the orders queue is read from the stream's consumer group
//! (length, orders not yet persisted, age of the oldest).

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use lockctl_core::conn::{Conn, Target};
use lockctl_core::keys::StockKeys;
use lockctl_core::lock::{Lock, LockOptions};
use lockctl_core::sku::Sku;
use lockctl_core::stock::buckets::{BucketBooks, Buckets};

/// The exported gauges, in the order [`read_one`] returns their values, with their help text.
const GAUGES: [(&str, &str); 10] = [
    ("lockctl_stock", "Stock now, per SKU"),
    ("lockctl_sold", "Units sold since the last seed, per SKU"),
    ("lockctl_seeded", "Stock given to the last seed, per SKU"),
    (
        "lockctl_reconciled",
        "1 when stock + sold == seeded, 0 when not (missing or edited sales)",
    ),
    ("lockctl_lock_held", "1 while someone holds the SKU's lock"),
    (
        "lockctl_lock_ttl_seconds",
        "Remaining lease of the lock holder (0 when free)",
    ),
    (
        "lockctl_lock_waiters",
        "Clients waiting for the lock right now (the wait-queue length)",
    ),
    (
        "lockctl_queue_length",
        "Entries in the SKU's order events stream (acknowledged ones stay until trimmed)",
    ),
    (
        "lockctl_queue_pending",
        "Orders queued and not yet persisted: delivered to a worker and not acknowledged, or not yet delivered",
    ),
    (
        "lockctl_queue_lag_seconds",
        "Age of the oldest order not yet persisted (0 when none)",
    ),
];

/// One scrape on a connection of its own, opened for it (so a scrape never waits on another's
/// reads, and each is bounded by the connect and call timeouts). When Redis cannot be reached
/// every SKU reports `lockctl_scrape_error 1`: the endpoint still answers, so the alert on it
/// can fire.
pub fn scrape_fresh(target: &Target, skus: &[Sku]) -> String {
    let mut conn = target.connect().ok();
    scrape(&mut conn, target, skus)
}

/// One scrape in the OpenMetrics text format, encoded by prometheus-client from a registry made
/// for this scrape (the values are Redis's now, not this process's). A connection that fails
/// in a way that may have left it in any state (a timeout, an I/O error) is dropped, and the
/// SKUs after it are reported unreadable rather than each waiting out its own timeout.
pub fn scrape(conn: &mut Option<Conn>, target: &Target, skus: &[Sku]) -> String {
    let families: Vec<Family<SkuLabel, Gauge<f64, AtomicU64>>> =
        GAUGES.iter().map(|_| Family::default()).collect();
    let errors = Family::<SkuLabel, Gauge>::default();
    for sku in skus {
        let label = SkuLabel {
            sku: sku.to_string(),
            bucket: None,
        };
        let rows = match conn.as_mut() {
            Some(c) => read_sku(c, target, sku),
            None => Err(lockctl_core::Error::internal("Redis could not be reached")),
        };
        if let Err(e) = &rows
            && (e.is_indeterminate() || e.kind().is_outage())
        {
            *conn = None;
        }
        errors.get_or_create(&label).set(i64::from(rows.is_err()));
        for (bucket, values) in rows.into_iter().flatten() {
            let label = SkuLabel {
                bucket,
                ..label.clone()
            };
            for (family, v) in families.iter().zip(values) {
                if let Some(v) = v {
                    family.get_or_create(&label).set(v);
                }
            }
        }
    }
    let mut registry = Registry::default();
    for ((name, help), family) in GAUGES.iter().zip(families) {
        registry.register(*name, *help, family);
    }
    registry.register(
        "lockctl_scrape_error",
        "1 when the SKU's state could not be read",
        errors,
    );
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out = "# encoding failed\n# EOF\n".into();
    }
    out
}

/// `sku`, and `bucket` on the rows of a bucketed SKU's buckets (one row per bucket, so that
/// `sum by (sku)` is the SKU's). Written by hand because the derive writes `bucket=""` for a
/// `None`, which would put an empty label on every unbucketed SKU's rows.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct SkuLabel {
    sku: String,
    bucket: Option<String>,
}

impl EncodeLabelSet for SkuLabel {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let mut labels = vec![("sku", self.sku.as_str())];
        if let Some(b) = &self.bucket {
            labels.push(("bucket", b.as_str()));
        }
        labels.encode(encoder)
    }
}

/// One row of values (in the order of [`GAUGES`]) and its bucket label, if any.
type Row = (Option<String>, [Option<f64>; 10]);

/// The rows of one SKU: its own (no bucket label), or, of a bucketed SKU, one per bucket,
/// whose `seeded` is what the bucket was given (seeded, plus moved in, less moved out), so
/// that each bucket reconciles on its own and the buckets add up to the SKU less what is in
/// transit between them.
fn read_sku(conn: &mut Conn, target: &Target, sku: &Sku) -> lockctl_core::Result<Vec<Row>> {
    let Some(b) = Buckets::read(conn, sku)? else {
        return Ok(vec![(None, read_one(conn, target, sku)?)]);
    };
    let mut rows = Vec::with_capacity(b.len());
    for (i, bucket) in b.skus.iter().enumerate() {
        let books = BucketBooks::read(conn, bucket)?;
        let mut values = read_one(conn, target, bucket)?;
        let given = books.seeded + books.moved_in - books.moved_out;
        values[2] = Some(given as f64);
        values[3] = Some(if books.stock + books.sold == given {
            1.0
        } else {
            0.0
        });
        rows.push((Some(i.to_string()), values));
    }
    Ok(rows)
}

/// stock, sold, seeded, reconciled, held, ttl, waiters (in the order of `scrape`'s rows).
fn read_one(
    conn: &mut Conn,
    target: &Target,
    sku: &Sku,
) -> lockctl_core::Result<[Option<f64>; 10]> {
    let keys = StockKeys::new(sku);
    let ((stock, sold, seeded), _): ((Option<i64>, Option<i64>, Option<i64>), _) = conn
        .transaction(
            &[
                redis::Cmd::get(&keys.stock),
                redis::Cmd::get(&keys.sold),
                redis::Cmd::get(&keys.seeded),
            ],
            None,
        )?;
    let lock = Lock::new(target, sku.as_str(), LockOptions::default());
    let holder = lock.holder(conn)?;
    let waiters = lock.waiters(conn)?;
    let queue = lockctl_core::orders::queue_state(conn, &keys)?;
    let (secs, micros): (i64, i64) = conn.query(&redis::cmd("TIME"))?;
    let now_ms = secs * 1000 + micros / 1000;
    let lag = queue
        .oldest_unacked_ms
        .map_or(0.0, |at| (now_ms - at).max(0) as f64 / 1000.0);
    let reconciled = match (stock, seeded) {
        (Some(st), Some(se)) => Some(if st + sold.unwrap_or(0) == se {
            1.0
        } else {
            0.0
        }),
        _ => None,
    };
    Ok([
        stock.map(|v| v as f64),
        sold.map(|v| v as f64),
        seeded.map(|v| v as f64),
        reconciled,
        Some(if holder.is_some() { 1.0 } else { 0.0 }),
        Some(holder.map_or(0.0, |(_, ttl)| ttl.as_secs_f64())),
        Some(waiters as f64),
        Some(queue.length as f64),
        Some(queue.backlog() as f64),
        Some(lag),
    ])
}
