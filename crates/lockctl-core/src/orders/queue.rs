//! How far behind the pipeline is, from what the stream and its group really hold.
//!
//! Redis's own `lag` of a group cannot be trusted for this: it is nil after an `XDEL` ahead of
//! the group (read as 0, an alert on it never fires) and stale after an `XTRIM` of entries not
//! yet delivered (it counts them for ever). So the entries not yet delivered are found by
//! looking: none when the stream's last entry is at or before the group's last delivered id
//! (the healthy case, one call), otherwise counted after that id a page at a time. Pending
//! entries are the group's pending list. The hammer's drain, the exporter and `status` all
//! read the queue here.

use std::collections::HashMap;
#[cfg(feature = "postgres")]
use std::collections::HashSet;

use redis::Value;

use super::{GROUP, entries, id_parts, text};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::StockKeys;

/// How far behind the pipeline is for one SKU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueState {
    /// Entries in the stream (acknowledged ones stay until trimmed).
    pub length: u64,
    /// Entries delivered to a worker and not yet acknowledged.
    pub pending: u64,
    /// Entries not yet delivered to any worker (at least [`COUNT_CAP`] when the count stopped
    /// there).
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

/// Undelivered entries are counted up to this many (100 pages); a backlog that long is
/// reported as this many, a lower bound, rather than read whole on every scrape.
pub const COUNT_CAP: u64 = 100_000;

/// The group `lockctl` of a stream, as XINFO GROUPS says it.
struct Group {
    pending: u64,
    last_delivered: String,
}

impl Group {
    /// The group, or `None` when the stream or the group does not exist yet.
    fn read(conn: &mut Conn, keys: &StockKeys) -> Result<Option<Group>> {
        let groups: Value = match conn.query(redis::cmd("XINFO").arg("GROUPS").arg(&keys.events)) {
            Ok(v) => v,
            // No such key: no stream, so no group.
            Err(Error::Redis { code: Some(c), .. }) if c == "ERR" => return Ok(None),
            Err(e) => return Err(super::not_a_stream(conn, keys, e)),
        };
        let Value::Array(gs) = groups else {
            return Ok(None);
        };
        Ok(gs.iter().map(field_map).find_map(|g| {
            (g.get("name").and_then(text).as_deref() == Some(GROUP)).then(|| Group {
                pending: match g.get("pending") {
                    Some(Value::Int(n)) => (*n).max(0) as u64,
                    _ => 0,
                },
                last_delivered: g
                    .get("last-delivered-id")
                    .and_then(text)
                    .unwrap_or_else(|| "0-0".into()),
            })
        }))
    }
}

/// The stream's length, pending and undelivered entries, and the age of the oldest of them.
pub fn queue_state(conn: &mut Conn, keys: &StockKeys) -> Result<QueueState> {
    let length: u64 = conn.query(redis::cmd("XLEN").arg(&keys.events))?;
    let mut state = QueueState {
        length,
        ..QueueState::default()
    };
    let Some(g) = Group::read(conn, keys)? else {
        // No group yet: nothing was ever delivered.
        state.undelivered = length;
        state.oldest_unacked_ms = first_entry_ms(conn, keys, "-")?;
        return Ok(state);
    };
    state.pending = g.pending;
    state.undelivered = count_after(conn, keys, &g.last_delivered)?;
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
        _ if state.undelivered > 0 => {
            first_entry_ms(conn, keys, &format!("({}", g.last_delivered))?
        }
        _ => None,
    };
    Ok(state)
}

/// Entries after `last` (exclusive), up to [`COUNT_CAP`].
fn count_after(conn: &mut Conn, keys: &StockKeys, last: &str) -> Result<u64> {
    let newest: Value = conn.query(
        redis::cmd("XREVRANGE")
            .arg(&keys.events)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1),
    )?;
    let after = |id: &str| id_parts(id).is_some_and(|p| id_parts(last).is_none_or(|l| p > l));
    if !entries(&newest).first().is_some_and(|(id, _)| after(id)) {
        return Ok(0);
    }
    let mut counted = 0u64;
    let mut from = format!("({last}");
    while counted < COUNT_CAP {
        let mut inv = COUNT_PAGE.prepare_invoke();
        inv.key(&keys.events).arg(&from).arg(COUNT_PAGE_SIZE);
        let (n, newest): (u64, String) = conn.script(&inv)?;
        if n == 0 {
            break;
        }
        counted += n;
        from = format!("({newest}");
    }
    Ok(counted.min(COUNT_CAP))
}

/// What it takes and answers: the header comment of `lua/count_page.lua`.
const COUNT_PAGE_LUA: &str = include_str!("lua/count_page.lua");

static COUNT_PAGE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(COUNT_PAGE_LUA));

/// Entries counted per call of [`COUNT_PAGE_LUA`].
const COUNT_PAGE_SIZE: u64 = 10_000;

/// Which entries of the stream some worker will still persist: those pending in the group,
/// and those after its last delivered id (all of them when there is no group yet). An entry
/// delivered and acknowledged is done with: if its order is not in PostgreSQL, it is lost.
#[cfg(feature = "postgres")]
pub(super) struct Unacked {
    last_delivered: Option<(u64, u64)>,
    pending: HashSet<String>,
}

#[cfg(feature = "postgres")]
impl Unacked {
    pub(super) fn read(conn: &mut Conn, keys: &StockKeys) -> Result<Unacked> {
        let last_delivered = Group::read(conn, keys)?.and_then(|g| id_parts(&g.last_delivered));
        let mut pending = HashSet::new();
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

    pub(super) fn holds(&self, id: &str) -> bool {
        match self.last_delivered {
            None => true,
            Some(last) => self.pending.contains(id) || id_parts(id).is_none_or(|p| p > last),
        }
    }
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
