//! Reads the books of [`super::books`]: the ledger, the group, the dead letters, the stream and
//! PostgreSQL, in the order orders move (see that module's doc for why).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::books::PipelineBooks;
use super::db::{self, SkuRow};
use super::queue::Unacked;
use super::{dead, id_parts, stream_orders};
use crate::conn::Conn;
use crate::error::Result;
use crate::keys::StockKeys;
use crate::sku::Sku;
use crate::stock::buckets::Buckets;

/// How long to wait before reading a discrepancy a second time.
const SECOND_LOOK: Duration = Duration::from_millis(250);

/// Reads the books (see the module's doc), a second time when the first reading found
/// something lost or unknown, and reports what both readings found. Of a bucketed SKU, the
/// books of each bucket (a SKU of its own, whose orders and rows name it), added up.
pub fn pipeline_books(
    conn: &mut Conn,
    db: &mut db::Db,
    db_url: &str,
    sku: &Sku,
) -> Result<PipelineBooks> {
    let Some(b) = Buckets::read(conn, sku)? else {
        return one_sku(conn, db, db_url, sku);
    };
    let mut total: Option<PipelineBooks> = None;
    for bucket in &b.skus {
        let books = one_sku(conn, db, db_url, bucket)?;
        match &mut total {
            Some(t) => t.add(books),
            None => total = Some(books),
        }
    }
    Ok(total.unwrap_or_default())
}

fn one_sku(conn: &mut Conn, db: &mut db::Db, db_url: &str, sku: &Sku) -> Result<PipelineBooks> {
    let first = read(conn, db, db_url, sku)?;
    if first.lost.is_empty() && first.unknown.is_empty() && first.overcounted.is_empty() {
        return Ok(first.books());
    }
    std::thread::sleep(SECOND_LOOK);
    let mut second = read(conn, db, db_url, sku)?;
    second.lost.retain(|o| first.lost.contains(o));
    second.unknown.retain(|o| first.unknown.contains(o));
    second.overcounted.retain(|o| first.overcounted.contains(o));
    Ok(second.books())
}

/// One reading of the books.
struct Reading {
    books: PipelineBooks,
    lost: HashSet<String>,
    overcounted: HashSet<String>,
    unknown: HashSet<String>,
}

impl Reading {
    fn books(self) -> PipelineBooks {
        let mut lost_orders: Vec<String> = self.lost.iter().cloned().collect();
        lost_orders.sort();
        lost_orders.truncate(10);
        PipelineBooks {
            lost: self.lost.len() as u64,
            lost_orders,
            unknown: self.unknown.len() as u64,
            overcounted: self.overcounted.len() as u64,
            ..self.books
        }
    }
}

/// Where each ledger order's units are, per order id.
#[derive(Default)]
struct Found {
    /// The row in PostgreSQL: units and the entry it came from.
    row: Option<(i64, String)>,
    /// Entries still queued, dead-lettered, or recorded as conflicts: units and entry ids.
    queued: Vec<(i64, String)>,
    dead: i64,
    conflicts: Vec<(i64, String)>,
}

fn read(conn: &mut Conn, db: &mut db::Db, url: &str, sku: &Sku) -> Result<Reading> {
    let keys = StockKeys::new(sku);
    // A sale record that is not a stream id (hand-written, or not a string) is reported, and
    // every row then counts, as for a SKU seeded before sales were recorded.
    let sale_after: Option<String> = conn
        .query(redis::cmd("GET").arg(&keys.sale))
        .unwrap_or_else(|_| Some(format!("a value that is not a string ({})", keys.sale)));
    let after = sale_after.as_deref().and_then(id_parts);
    let sale_unreadable = sale_after.clone().filter(|_| after.is_none());
    let in_sale = |id: &str| after.is_none_or(|a| id_parts(id).is_none_or(|p| p > a));
    // The order matters: see the module's doc.
    let ledger = crate::stock::ledger(conn, sku)?;
    let unacked = Unacked::read(conn, &keys)?;
    let dead_letters = dead::read(conn, &keys)?;
    let queued: Vec<super::OrderEvent> = stream_orders(conn, &keys)?
        .into_iter()
        .filter(|o| in_sale(&o.origin) && unacked.holds(&o.stream_id))
        .collect();
    let (rows, conflicts) = db.sku_rows(url, sku.as_str())?;
    let rows: Vec<SkuRow> = rows.into_iter().filter(|r| in_sale(&r.stream_id)).collect();
    let conflicts: Vec<SkuRow> = conflicts
        .into_iter()
        .filter(|r| in_sale(&r.stream_id))
        .collect();

    let mut found: HashMap<&str, Found> = HashMap::new();
    for r in &rows {
        found.entry(&r.order_id).or_default().row = Some((r.qty, r.stream_id.clone()));
    }
    let mut books = PipelineBooks {
        sale_after,
        sale_unreadable,
        persisted_orders: rows.len() as u64,
        // Saturating: rows written by anyone may hold any quantity; a sum never wraps round
        // to a value that could look reconciled.
        persisted_units: rows.iter().fold(0i64, |a, r| a.saturating_add(r.qty)),
        conflicts: conflicts.len() as u64,
        ..PipelineBooks::default()
    };
    gather_queued(&queued, &mut found, &mut books);
    for letter in &dead_letters {
        let Some(o) = letter.order.as_ref().filter(|o| in_sale(&o.origin)) else {
            continue;
        };
        found.entry(&o.order_id).or_default().dead += o.qty;
        books.dead_orders += 1;
        books.dead_units = books.dead_units.saturating_add(o.qty);
    }
    for c in &conflicts {
        let f = found.entry(&c.order_id).or_default();
        if f.row.as_ref().is_none_or(|(_, id)| *id != c.stream_id) {
            f.conflicts.push((c.qty, c.stream_id.clone()));
        }
    }
    let (lost, overcounted) = held_against_ledger(&ledger, &found, &mut books);
    // Rows and queued entries the ledger read first lacks may be purchases made since: ask the
    // ledger again.
    let candidates: Vec<&str> = rows
        .iter()
        .map(|r| r.order_id.as_str())
        .chain(queued.iter().map(|o| o.order_id.as_str()))
        .filter(|o| !ledger.contains_key(*o))
        .collect::<HashSet<&str>>()
        .into_iter()
        .collect();
    let unknown = not_in_ledger(conn, &keys, &candidates)?;
    Ok(Reading {
        books,
        lost,
        overcounted,
        unknown,
    })
}

/// The queued entries into `found` and the books' queued counts. An entry committed and not
/// yet acknowledged is its row, not more units.
fn gather_queued<'a>(
    queued: &'a [super::OrderEvent],
    found: &mut HashMap<&'a str, Found>,
    books: &mut PipelineBooks,
) {
    let mut queued_ids = HashSet::new();
    for o in queued {
        let f = found.entry(&o.order_id).or_default();
        if f.row.as_ref().is_some_and(|(_, id)| *id == o.origin) {
            continue;
        }
        f.queued.push((o.qty, o.origin.clone()));
        queued_ids.insert(o.order_id.as_str());
        books.queued_units = books.queued_units.saturating_add(o.qty);
    }
    books.queued_orders = queued_ids.len() as u64;
}

/// Each ledger order's units against where they were found: fewer is lost, more is counted
/// twice, and the right number with conflicts among them is an order deducted more than once
/// (counted in `books.doubled`). Returns (lost, overcounted).
fn held_against_ledger(
    ledger: &HashMap<String, i64>,
    found: &HashMap<&str, Found>,
    books: &mut PipelineBooks,
) -> (HashSet<String>, HashSet<String>) {
    let (mut lost, mut overcounted) = (HashSet::new(), HashSet::new());
    for (order, units) in ledger {
        let (row, queued, dead, conflicted) = found
            .get(order.as_str())
            .map(Found::parts)
            .unwrap_or_default();
        let accounted = row + queued + dead + conflicted;
        if accounted < *units {
            lost.insert(order.clone());
        } else if accounted > *units {
            overcounted.insert(order.clone());
        } else if conflicted > 0 {
            books.doubled += 1;
        }
    }
    (lost, overcounted)
}

impl Found {
    /// Units in PostgreSQL, queued, set aside and in conflicts.
    fn parts(&self) -> (i64, i64, i64, i64) {
        let queued: i64 = self.queued.iter().map(|(q, _)| q).sum();
        let conflicted: i64 = self.conflicts.iter().map(|(q, _)| q).sum();
        (
            self.row.as_ref().map_or(0, |(q, _)| *q),
            queued,
            self.dead,
            conflicted,
        )
    }
}

/// Which of `ids` the ledger does not hold now.
fn not_in_ledger(conn: &mut Conn, keys: &StockKeys, ids: &[&str]) -> Result<HashSet<String>> {
    let mut out = HashSet::new();
    for chunk in ids.chunks(1000) {
        let units: Vec<Option<String>> =
            conn.query(redis::cmd("HMGET").arg(&keys.ledger).arg(chunk))?;
        out.extend(
            chunk
                .iter()
                .zip(units)
                .filter(|(_, u)| u.is_none())
                .map(|(id, _)| id.to_string()),
        );
    }
    Ok(out)
}
