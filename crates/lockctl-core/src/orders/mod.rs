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
    pub fn parse(
        stream_id: &str,
        fields: &HashMap<String, String>,
    ) -> Result<OrderEvent, BadOrderEvent> {
        let get = |k: &'static str| fields.get(k).ok_or(BadOrderEvent::NoField { field: k });
        let name = |k: &'static str, example: &str| -> Result<String, BadOrderEvent> {
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
        let qty = get("qty")?;
        let qty = qty
            .parse::<i64>()
            .ok()
            .filter(|q| *q > 0 && *q as u64 <= crate::stock::MAX_STOCK)
            .ok_or_else(|| BadOrderEvent::Qty { value: qty.clone() })?;
        let at = get("at")?;
        let at_ms = at
            .parse::<i64>()
            .ok()
            .filter(|a| AT_MS.contains(a))
            .ok_or_else(|| BadOrderEvent::At { value: at.clone() })?;
        let fence = match get("fence")?.as_str() {
            "" => None,
            f => Some(f.parse::<i64>().map_err(|_| BadOrderEvent::Fence {
                value: f.to_string(),
            })?),
        };
        let origin = match fields.get("requeued_from") {
            None => stream_id,
            Some(id) if id_parts(id).is_some() => id.as_str(),
            Some(id) => return Err(BadOrderEvent::RequeuedFrom { value: id.clone() }),
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

/// Why a stream entry is not an order ([`OrderEvent::parse`]). Values are kept whole; the
/// message escapes them and cuts them short.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadOrderEvent {
    /// A field every order has is missing.
    #[error("no field '{field}'")]
    NoField {
        /// The field's name.
        field: &'static str,
    },
    /// A name (order id, SKU, user) that the rule for names refuses; its `what` is
    /// "field 'order_id'".
    #[error(transparent)]
    Name(#[from] crate::sku::BadName),
    /// `qty` is not a whole number from 1 to [`crate::stock::MAX_STOCK`].
    #[error("qty '{}' is not a whole number from 1 to 10^15 (the largest stock)", short(.value))]
    Qty {
        /// The field's value.
        value: String,
    },
    /// `at` is not a time in ms between 1970 and 9999.
    #[error("at '{}' is not a time in ms between 1970 and 9999", short(.value))]
    At {
        /// The field's value.
        value: String,
    },
    /// `fence` is neither empty nor a number.
    #[error("fence '{}' is not a number", short(.value))]
    Fence {
        /// The field's value.
        value: String,
    },
    /// `requeued_from` is not a stream id.
    #[error("requeued_from '{}' is not a stream id", short(.value))]
    RequeuedFrom {
        /// The field's value.
        value: String,
    },
    /// The entry's fields are not all text, so there is nothing to parse (the worker's finding
    /// about an entry as the stream holds it, an [`Entry`] with `None`).
    #[error("fields that are not text")]
    NotText,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sku::NameProblem;

    fn entry(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn order() -> HashMap<String, String> {
        entry(&[
            ("order_id", "o1"),
            ("sku", "s1"),
            ("qty", "2"),
            ("at", "5"),
            ("fence", ""),
        ])
    }

    fn with(field: &str, value: &str) -> HashMap<String, String> {
        let mut f = order();
        f.insert(field.into(), value.into());
        f
    }

    #[test]
    fn an_entry_that_is_not_an_order_says_which_field_and_keeps_its_value_whole() {
        let mut missing = order();
        missing.remove("at");
        assert_eq!(
            OrderEvent::parse("1-0", &missing),
            Err(BadOrderEvent::NoField { field: "at" })
        );
        let long = "9".repeat(60);
        let err = OrderEvent::parse("1-0", &with("qty", &long)).unwrap_err();
        assert_eq!(
            err,
            BadOrderEvent::Qty {
                value: long.clone()
            }
        );
        assert!(err.to_string().contains("9999..."), "cut short: {err}");
        assert!(!err.to_string().contains(&long), "cut short: {err}");
        assert_eq!(
            OrderEvent::parse("1-0", &with("fence", "x")),
            Err(BadOrderEvent::Fence { value: "x".into() })
        );
        assert_eq!(
            OrderEvent::parse("1-0", &with("requeued_from", "7")),
            Err(BadOrderEvent::RequeuedFrom { value: "7".into() })
        );
        assert_eq!(
            OrderEvent::parse("1-0", &with("at", "-1")),
            Err(BadOrderEvent::At { value: "-1".into() })
        );
    }

    #[test]
    fn a_bad_name_in_an_entry_is_said_of_its_field() {
        let Err(BadOrderEvent::Name(bad)) = OrderEvent::parse("1-0", &with("user", "a b")) else {
            panic!("a user with a space was taken");
        };
        assert_eq!(bad.what, "field 'user'");
        assert_eq!(bad.problem, NameProblem::Blank(' '));
        let ok = OrderEvent::parse("3-1", &with("requeued_from", "2-0")).unwrap();
        assert_eq!((ok.origin.as_str(), ok.qty), ("2-0", 2));
    }
}
