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
//! Layout: stream operations here; the table in `db`; the loop in `worker`.

pub mod db;
pub mod dburl;
pub mod worker;

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
    /// The stream entry's id (`<ms>-<seq>`).
    pub stream_id: String,
    pub order_id: String,
    pub sku: String,
    pub qty: i64,
    pub user: Option<String>,
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
        Ok(OrderEvent {
            stream_id: stream_id.to_string(),
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

/// Trims the stream `KEYS[1]` to what its consumer groups still need, in one atomic step:
/// for each group the bound is its oldest pending entry or, with nothing pending, its last
/// delivered one, and every entry older than the smallest bound goes. Being one script, no
/// worker can read a batch between the reading of the bounds and the trim (a batch read
/// there would be trimmed while still pending: paid orders lost). Returns the MINID it
/// trimmed to, or false when the stream or its groups do not exist.
const TRIM_LUA: &str = r"
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return false end
local function less(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local floor = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  local bound = f['last-delivered-id']
  local pending = redis.call('XPENDING', KEYS[1], f['name'])
  if pending[2] then bound = pending[2] end
  if floor == nil or less(bound, floor) then floor = bound end
end
if floor == nil then return false end
redis.call('XTRIM', KEYS[1], 'MINID', floor)
return floor
";

static TRIM: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(TRIM_LUA));

/// Removes the entries of `keys`'s stream that every consumer has acknowledged (see
/// [`TRIM_LUA`]); returns the id it trimmed to, if it trimmed.
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
        Err(e) => Err(e),
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

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// How far behind the pipeline is for one SKU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueState {
    /// Entries in the stream (acknowledged ones stay until trimmed).
    pub length: u64,
    /// Entries delivered to a worker and not yet acknowledged.
    pub pending: u64,
    /// Entries not yet delivered to any worker.
    pub undelivered: u64,
    /// Server ms of the oldest entry not yet acknowledged, if any.
    pub oldest_unacked_ms: Option<i64>,
}

impl QueueState {
    /// Entries not yet persisted: pending plus undelivered.
    pub fn backlog(&self) -> u64 {
        self.pending + self.undelivered
    }
}

/// The stream's length, pending and undelivered entries, from XINFO GROUPS and XPENDING.
pub fn queue_state(conn: &mut Conn, keys: &StockKeys) -> Result<QueueState> {
    let length: u64 = conn.query(redis::cmd("XLEN").arg(&keys.events))?;
    let groups: Value = match conn.query(redis::cmd("XINFO").arg("GROUPS").arg(&keys.events)) {
        Ok(v) => v,
        Err(Error::Redis { code: Some(c), .. }) if c == "ERR" => Value::Array(vec![]),
        Err(e) => return Err(e),
    };
    let mut state = QueueState {
        length,
        ..QueueState::default()
    };
    let Some(g) = lockctl_group(&groups) else {
        // No group yet: nothing was ever delivered.
        state.undelivered = length;
        state.oldest_unacked_ms = first_entry_ms(conn, keys, "-")?;
        return Ok(state);
    };
    let int = |k: &str| match g.get(k) {
        Some(Value::Int(n)) => Some(*n),
        _ => None,
    };
    state.pending = int("pending").unwrap_or(0).max(0) as u64;
    state.undelivered = int("lag").unwrap_or(0).max(0) as u64;
    let last = g
        .get("last-delivered-id")
        .and_then(text)
        .unwrap_or_default();
    let oldest_pending: Value = conn.query(
        redis::cmd("XPENDING")
            .arg(&keys.events)
            .arg(GROUP)
            .arg("-")
            .arg("+")
            .arg(1),
    )?;
    state.oldest_unacked_ms = match &oldest_pending {
        Value::Array(rows) if !rows.is_empty() => match &rows[0] {
            Value::Array(r) => r.first().and_then(text).and_then(|id| id_ms(&id)),
            _ => None,
        },
        _ if state.undelivered > 0 => first_entry_ms(conn, keys, &format!("({last}"))?,
        _ => None,
    };
    Ok(state)
}

/// The group `lockctl` in an XINFO GROUPS reply, as field -> value.
fn lockctl_group(groups: &Value) -> Option<HashMap<String, Value>> {
    match groups {
        Value::Array(gs) => gs.iter().find_map(|g| {
            let m = field_map(g);
            (m.get("name").and_then(text).as_deref() == Some(GROUP)).then_some(m)
        }),
        _ => None,
    }
}

/// Which entries of the stream some worker will still persist: those pending in the group,
/// and those after its last delivered id (all of them when there is no group yet). An entry
/// delivered and acknowledged is done with: if its order is not in PostgreSQL, it is lost.
struct Unacked {
    last_delivered: Option<(u64, u64)>,
    pending: std::collections::HashSet<String>,
}

impl Unacked {
    fn read(conn: &mut Conn, keys: &StockKeys) -> Result<Unacked> {
        let groups: Value = match conn.query(redis::cmd("XINFO").arg("GROUPS").arg(&keys.events)) {
            Ok(v) => v,
            Err(Error::Redis { code: Some(c), .. }) if c == "ERR" => Value::Array(vec![]),
            Err(e) => return Err(e),
        };
        let last_delivered = lockctl_group(&groups)
            .and_then(|g| g.get("last-delivered-id").and_then(text))
            .and_then(|id| id_parts(&id));
        let mut pending = std::collections::HashSet::new();
        let mut from = "-".to_string();
        while last_delivered.is_some() {
            let v: Value = conn.query(
                redis::cmd("XPENDING")
                    .arg(&keys.events)
                    .arg(GROUP)
                    .arg(&from)
                    .arg("+")
                    .arg(1000),
            )?;
            let Value::Array(rows) = v else { break };
            let ids: Vec<String> = rows
                .iter()
                .filter_map(|r| match r {
                    Value::Array(f) => f.first().and_then(text),
                    _ => None,
                })
                .collect();
            let Some(last) = ids.last() else { break };
            from = format!("({last}");
            pending.extend(ids);
        }
        Ok(Unacked {
            last_delivered,
            pending,
        })
    }

    fn holds(&self, id: &str) -> bool {
        match self.last_delivered {
            None => true,
            Some(last) => self.pending.contains(id) || id_parts(id).is_none_or(|p| p > last),
        }
    }
}

/// A stream id as (ms, seq), which orders as the stream does.
fn id_parts(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

fn first_entry_ms(conn: &mut Conn, keys: &StockKeys, from: &str) -> Result<Option<i64>> {
    let v: Value = conn.query(
        redis::cmd("XRANGE")
            .arg(&keys.events)
            .arg(from)
            .arg("+")
            .arg("COUNT")
            .arg(1),
    )?;
    Ok(entries(&v).first().and_then(|(id, _)| id_ms(id)))
}

/// The ms part of a stream id.
pub fn id_ms(id: &str) -> Option<i64> {
    id.split('-').next()?.parse().ok()
}

/// A RESP2 flat map (`[k, v, k, v...]`) or a RESP3 map, as key -> value.
fn field_map(v: &Value) -> HashMap<String, Value> {
    match v {
        Value::Array(kv) => kv
            .chunks(2)
            .filter_map(|c| Some((text(c.first()?)?, c.get(1)?.clone())))
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v.clone())))
            .collect(),
        _ => HashMap::new(),
    }
}

/// Every entry still in the stream, as orders (the unparsable ones left out): for `status`
/// and the hammer to see what is queued but not yet persisted.
pub fn stream_orders(conn: &mut Conn, keys: &StockKeys) -> Result<Vec<OrderEvent>> {
    let mut out = Vec::new();
    let mut from = "-".to_string();
    loop {
        let v: Value = conn.query(
            redis::cmd("XRANGE")
                .arg(&keys.events)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(1000),
        )?;
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

/// The books of a SKU against its orders pipeline, for `status SKU --db`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PipelineBooks {
    /// Orders and units of the SKU in PostgreSQL.
    pub persisted_orders: u64,
    pub persisted_units: i64,
    /// Orders and units that a worker will still persist (pending in the group, or not yet
    /// delivered) and that are not yet in PostgreSQL.
    pub queued_orders: u64,
    pub queued_units: i64,
    /// Conflicts recorded by the workers.
    pub conflicts: u64,
    /// Ledger orders neither in PostgreSQL nor queued: lost on the way (acknowledged without
    /// a row, trimmed, dead-lettered).
    pub lost: u64,
    /// The first few of them, by order id.
    pub lost_orders: Vec<String>,
    /// Orders in PostgreSQL that the ledger does not have.
    pub unknown: u64,
}

/// Reads the SKU's persisted orders, its stream and its ledger, and holds them against each
/// other: every ledger order is persisted or still queued, with the same units, and nothing
/// is persisted that the ledger lacks. An entry still in the stream but already acknowledged
/// is not queued: no worker will read it again.
pub fn pipeline_books(
    conn: &mut Conn,
    db: &mut db::Db,
    db_url: &str,
    sku: &crate::sku::Sku,
) -> Result<PipelineBooks> {
    let keys = StockKeys::new(sku);
    let (rows, conflicts) = db.orders(db_url, sku.as_str(), "")?;
    let persisted: HashMap<String, i64> = rows.into_iter().collect();
    let unacked = Unacked::read(conn, &keys)?;
    let queued: HashMap<String, i64> = stream_orders(conn, &keys)?
        .into_iter()
        .filter(|o| unacked.holds(&o.stream_id) && !persisted.contains_key(&o.order_id))
        .map(|o| (o.order_id, o.qty))
        .collect();
    let ledger = crate::stock::ledger(conn, sku)?;
    let mut lost_orders: Vec<String> = ledger
        .iter()
        .filter(|(o, u)| persisted.get(*o).or_else(|| queued.get(*o)) != Some(*u))
        .map(|(o, _)| o.clone())
        .collect();
    lost_orders.sort();
    let lost = lost_orders.len() as u64;
    lost_orders.truncate(10);
    let unknown = persisted
        .keys()
        .filter(|o| !ledger.contains_key(*o))
        .count() as u64;
    Ok(PipelineBooks {
        persisted_orders: persisted.len() as u64,
        // Saturating: rows written by anyone may hold any quantity; a sum never wraps round to
        // a value that could look reconciled.
        persisted_units: persisted.values().fold(0i64, |a, q| a.saturating_add(*q)),
        queued_orders: queued.len() as u64,
        queued_units: queued.values().fold(0i64, |a, q| a.saturating_add(*q)),
        conflicts,
        lost,
        lost_orders,
        unknown,
    })
}
