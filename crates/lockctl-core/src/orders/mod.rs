//! The orders pipeline, the tutorial's last step: each deduction made with `--queue` appends
//! its order to the SKU's stream `item:order_events:<SKU>` in the same script, and workers move
//! the orders into PostgreSQL at their own pace.
//!
//! The idea that loses and doubles nothing: an order leaves the stream only after PostgreSQL
//! has committed it. A worker reads a batch through the consumer group `lockctl`, inserts it in
//! one transaction keyed by order id, commits, and only then acknowledges; a worker that dies
//! before its acknowledgement leaves the batch pending, another worker claims it after
//! `--claim-idle-ms`, and the insert, being idempotent, adds nothing the second time.
//!
//! Layout: stream entries and trimming here; the queue's depth in `queue`; the books against
//! PostgreSQL in `books` and `reconcile`; dead letters and their requeue in `dead`; the table in `db`; the
//! loop in `worker`, and the points of it a caller may step in at in `checkpoint`.

pub mod books;
#[cfg(feature = "postgres")]
pub mod checkpoint;
#[cfg(feature = "postgres")]
pub mod db;
pub mod dead;
#[cfg(feature = "postgres")]
pub mod events;
#[cfg(feature = "postgres")]
mod failure;
pub mod queue;
#[cfg(feature = "postgres")]
mod reconcile;
#[cfg(feature = "postgres")]
pub mod worker;

pub use books::PipelineBooks;
pub use queue::{QueueState, id_ms, queue_state};
#[cfg(feature = "postgres")]
pub use reconcile::pipeline_books;

use std::collections::HashMap;

use redis::Value;

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::StockKeys;

/// The consumer group every worker reads through.
pub const GROUP: &str = "lockctl";

/// One order as the deduction appended it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderEvent {
    /// The stream entry's id (`<ms>-<seq>`): what the worker acknowledges.
    pub stream_id: String,
    /// The id of the entry the deduction appended: `stream_id`, or for an order put back on
    /// the queue from the dead letters, its first entry's id (field `requeued_from`). This is
    /// what PostgreSQL keeps, so a redelivery is told from a second deduction, and the sale an
    /// order belongs to from its id.
    pub origin: String,
    /// The order id (the idempotency key).
    pub order_id: String,
    /// The SKU.
    pub sku: String,
    /// Units.
    pub qty: i64,
    /// The user it was bought for, when one was named.
    pub user: Option<String>,
    /// The fencing token the purchase held, for the fenced strategy.
    pub fence: Option<i64>,
    /// Server time of the deduction, in Unix ms.
    pub at_ms: i64,
}

/// The range of a sane deduction time, in Unix ms: from 1970 to the end of year 9999.
/// PostgreSQL refuses a timestamp far outside it, and no Redis clock is there.
const AT_MS: std::ops::RangeInclusive<i64> = 0..=253_402_300_799_999;

impl OrderEvent {
    /// Reads an entry's fields; `Err` says what is wrong with one that is not an order. Names
    /// follow the rule of the command line (1 to 200 bytes, no whitespace or control
    /// characters), so that nothing reaches PostgreSQL that it would refuse: a row it refuses
    /// would block the batch it is in.
    pub fn parse(stream_id: &str, fields: &HashMap<String, String>) -> Result<OrderEvent, String> {
        let get = |k: &str| fields.get(k).ok_or_else(|| format!("no field '{k}'"));
        let name = |k: &str, example: &str| -> Result<String, String> {
            let v = get(k)?;
            crate::sku::check_name(&format!("field '{k}'"), example, v)?;
            Ok(v.clone())
        };
        let order_id = name("order_id", "ord-1")?;
        let sku = name("sku", "sku_886")?;
        let user = match fields.get("user").map(String::as_str) {
            None | Some("") => None,
            Some(_) => Some(name("user", "u1")?),
        };
        let qty = get("qty")?
            .parse::<i64>()
            .ok()
            .filter(|q| *q > 0 && *q as u64 <= crate::stock::MAX_STOCK)
            .ok_or_else(|| {
                format!(
                    "qty '{}' is not a whole number from 1 to 10^15 (the largest stock)",
                    short(&fields["qty"])
                )
            })?;
        let at_ms = get("at")?
            .parse::<i64>()
            .ok()
            .filter(|a| AT_MS.contains(a))
            .ok_or_else(|| {
                format!(
                    "at '{}' is not a time in ms between 1970 and 9999",
                    short(&fields["at"])
                )
            })?;
        let fence = match get("fence")?.as_str() {
            "" => None,
            f => Some(
                f.parse::<i64>()
                    .map_err(|_| format!("fence '{}' is not a number", short(f)))?,
            ),
        };
        let origin = match fields.get("requeued_from") {
            None => stream_id,
            Some(id) if id_parts(id).is_some() => id.as_str(),
            Some(id) => return Err(format!("requeued_from '{}' is not a stream id", short(id))),
        };
        Ok(OrderEvent {
            stream_id: stream_id.to_string(),
            origin: origin.to_string(),
            order_id,
            sku,
            qty,
            user,
            fence,
            at_ms,
        })
    }
}

/// A field's value for a message: escaped, and cut short when it is long.
fn short(v: &str) -> String {
    let cut: String = v.chars().take(40).collect();
    let more = if cut.len() < v.len() { "..." } else { "" };
    format!("{}{more}", cut.escape_debug())
}

/// One entry as the stream holds it: its id and fields (`None` when they are not all strings).
pub type Entry = (String, Option<HashMap<String, String>>);

/// What it takes and answers: the header comment of `lua/trim.lua`.
const TRIM_LUA: &str = include_str!("lua/trim.lua");

static TRIM: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(TRIM_LUA));

/// Removes the entries of `keys`'s stream that every consumer has acknowledged (see
/// `TRIM_LUA`); returns the id it trimmed to, if it trimmed.
pub fn trim_acknowledged(conn: &mut Conn, keys: &StockKeys) -> Result<Option<String>> {
    let mut inv = TRIM.prepare_invoke();
    inv.key(&keys.events);
    conn.script(&inv)
}

/// Creates the consumer group on `keys`'s stream (from the stream's start), if it is not there.
pub fn ensure_group(conn: &mut Conn, keys: &StockKeys) -> Result<()> {
    let r: Result<String> = conn.query(
        redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&keys.events)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM"),
    );
    match r {
        Ok(_) => Ok(()),
        Err(Error::Redis { code: Some(c), .. }) if c == "BUSYGROUP" => Ok(()),
        Err(e) => Err(not_a_stream(conn, keys, e)),
    }
}

/// A WRONGTYPE on the SKU's events stream as the key it is about: waiting will not change a
/// key's type, so the worker says which key and what to do, instead of retrying for ever.
pub(crate) fn not_a_stream(conn: &mut Conn, keys: &StockKeys, e: Error) -> Error {
    if !matches!(&e, Error::Redis { code: Some(c), .. } if c == "WRONGTYPE") {
        return e;
    }
    let found: String = conn
        .query(redis::cmd("TYPE").arg(&keys.events))
        .unwrap_or_else(|_| "value of another type".into());
    Error::WrongTypeKey {
        key: keys.events.clone(),
        found,
        what: "no order queued there can be read".into(),
    }
}

/// Entries from an XREADGROUP / XRANGE / XAUTOCLAIM reply's list of `[id, [field, value...]]`.
pub fn entries(list: &Value) -> Vec<Entry> {
    let Value::Array(items) = list else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let Value::Array(pair) = item else {
                return None;
            };
            let id = text(pair.first()?)?;
            let fields = match pair.get(1) {
                Some(Value::Array(kv)) => kv
                    .chunks(2)
                    .map(|c| Some((text(c.first()?)?, text(c.get(1)?)?)))
                    .collect::<Option<HashMap<_, _>>>(),
                _ => None,
            };
            Some((id, fields))
        })
        .collect()
}

/// A stream id as (ms, seq), which orders as the stream does.
pub(crate) fn id_parts(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Every entry still in the stream, as orders (the unparsable ones left out): for `status`
/// and the hammer to see what is queued but not yet persisted.
pub fn stream_orders(conn: &mut Conn, keys: &StockKeys) -> Result<Vec<OrderEvent>> {
    let mut out = Vec::new();
    let mut from = "-".to_string();
    loop {
        let v: Result<Value> = conn.query(
            redis::cmd("XRANGE")
                .arg(&keys.events)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(1000),
        );
        let v = v.map_err(|e| not_a_stream(conn, keys, e))?;
        let page = entries(&v);
        let Some((last, _)) = page.last().cloned() else {
            return Ok(out);
        };
        out.extend(
            page.iter()
                .filter_map(|(id, f)| OrderEvent::parse(id, f.as_ref()?).ok()),
        );
        from = format!("({last}");
    }
}
