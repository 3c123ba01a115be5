//! Dead letters: stream entries the worker set aside, kept whole so they can be put back.
//!
//! An entry goes to `item:order_dead:<SKU>` when it is not an order, or when PostgreSQL refuses
//! its row for the row's own data (SQLSTATE classes 22, 23, 54). The dead letter keeps the
//! entry's id, the reason and every field of the entry (each as `entry.<name>`), and the move
//! and the acknowledgement are one script: a crash leaves the entry either pending or
//! dead-lettered, never both and never neither. After a fix (a constraint dropped, a column
//! widened) [`requeue`] puts the orders back on the queue, each in one script that adds it
//! and deletes its dead letter, so running it twice, or twice at once, queues each once.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{Script, Value};

use super::{Entry, GROUP, OrderEvent, entries};
use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::StockKeys;

/// A dead letter's own fields; the entry's fields follow as `entry.<name>`.
const ENTRY_PREFIX: &str = "entry.";

/// What it takes and answers: the header comment of `lua/dead_move.lua`.
const MOVE_LUA: &str = include_str!("lua/dead_move.lua");

/// What it takes and answers: the header comment of `lua/dead_requeue.lua`.
const REQUEUE_LUA: &str = include_str!("lua/dead_requeue.lua");

static MOVE: LazyLock<Script> = LazyLock::new(|| Script::new(MOVE_LUA));
static REQUEUE: LazyLock<Script> = LazyLock::new(|| Script::new(REQUEUE_LUA));

/// Moves entry `id` of `keys`'s stream to its dead letters with `why`, and acknowledges it.
pub fn move_to_dead_letters(conn: &mut Conn, keys: &StockKeys, id: &str, why: &str) -> Result<()> {
    let mut inv = MOVE.prepare_invoke();
    inv.key(&keys.events)
        .key(&keys.dead_letters)
        .arg(GROUP)
        .arg(id)
        .arg(why);
    let reply: Value = conn.script(&inv)?;
    match reply {
        Value::Array(a) => {
            let found = a.get(1).and_then(super::text).unwrap_or_default();
            Err(Error::WrongTypeKey {
                key: keys.dead_letters.clone(),
                found,
                what: format!(
                    "entry {id} of {} ({why}) cannot be moved there",
                    keys.events
                ),
            })
        }
        _ => Ok(()),
    }
}

/// One dead letter as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The dead letter's own id in the dead-letter stream.
    pub id: String,
    /// The id the entry had in the events stream.
    pub stream_id: String,
    /// Why the worker set it aside.
    pub reason: String,
    /// The order it holds, when its fields make one (`None` for an entry that was not an
    /// order, or a dead letter written before lockctl kept the entry).
    pub order: Option<OrderEvent>,
    /// Whether it kept its entry's fields (dead letters written before lockctl did have only
    /// the id and the reason).
    pub kept_entry: bool,
}

/// Every dead letter of `keys`'s SKU, oldest first (none when the key is missing).
pub fn read(conn: &mut Conn, keys: &StockKeys) -> Result<Vec<DeadLetter>> {
    let mut out = Vec::new();
    let mut from = "-".to_string();
    loop {
        let v: Value = match conn.query(
            redis::cmd("XRANGE")
                .arg(&keys.dead_letters)
                .arg(&from)
                .arg("+")
                .arg("COUNT")
                .arg(1000),
        ) {
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
                let found: String = conn.query(redis::cmd("TYPE").arg(&keys.dead_letters))?;
                return Err(Error::WrongTypeKey {
                    key: keys.dead_letters.clone(),
                    found,
                    what: "its dead letters cannot be read".into(),
                });
            }
            r => r?,
        };
        let page = entries(&v);
        let Some((last, _)) = page.last().cloned() else {
            return Ok(out);
        };
        out.extend(page.into_iter().map(dead_letter));
        from = format!("({last}");
    }
}

fn dead_letter((id, fields): Entry) -> DeadLetter {
    let fields = fields.unwrap_or_default();
    let stream_id = fields.get("stream_id").cloned().unwrap_or_default();
    let entry: HashMap<String, String> = fields
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(ENTRY_PREFIX)?.to_string(), v.clone())))
        .collect();
    let order = (!entry.is_empty())
        .then(|| OrderEvent::parse(&stream_id, &entry).ok())
        .flatten();
    DeadLetter {
        id,
        stream_id,
        reason: fields.get("reason").cloned().unwrap_or_default(),
        order,
        kept_entry: !entry.is_empty(),
    }
}

/// What [`requeue`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Requeued {
    /// Orders put back on the queue.
    pub requeued: u64,
    /// Dead letters left where they are: not orders (a worker would only set them aside
    /// again), or kept from before lockctl kept entries whole, with their entry gone.
    pub left: u64,
}

/// Puts every dead letter of `keys`'s SKU that holds an order back on the queue, for a worker
/// to persist again; the others stay. Each is one script (see `REQUEUE_LUA`), so a requeue
/// run twice, or two at once, queues each order once.
pub fn requeue(conn: &mut Conn, keys: &StockKeys) -> Result<Requeued> {
    let mut done = Requeued::default();
    for letter in read(conn, keys)? {
        // One that kept its entry is requeued when the entry is an order; one written before
        // dead letters kept entries is tried, as its entry may still be in the stream.
        if letter.kept_entry && letter.order.is_none() {
            done.left += 1;
            continue;
        }
        let mut inv = REQUEUE.prepare_invoke();
        inv.key(&keys.dead_letters)
            .key(&keys.events)
            .arg(&letter.id);
        // One dead letter the server refuses to put back (a field Redis will not take) is
        // left, and the others go on.
        let reply: Result<String> = conn.script(&inv);
        match reply {
            Ok(r) if r == "gone" => {}
            Ok(r) if r == "no_entry" => done.left += 1,
            Ok(_) => done.requeued += 1,
            Err(e) if e.is_indeterminate() || e.kind().is_outage() => return Err(e),
            Err(_) => done.left += 1,
        }
    }
    Ok(done)
}
