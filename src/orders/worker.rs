//! `lockctl worker`: moves orders from the SKUs' streams into PostgreSQL.
//!
//! Each round: claim what dead consumers left pending too long (XAUTOCLAIM), else read new
//! entries (XREADGROUP), move entries that are not orders to the dead-letter stream, persist
//! the rest in one transaction, commit, acknowledge, and now and then trim what every consumer
//! has acknowledged. A failure of PostgreSQL or Redis keeps the batch in hand and retries with
//! a backoff; a stop request finishes the batch in hand first.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use super::db::Db;
use super::{Entry, GROUP, OrderEvent, ensure_group, entries};
use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::metrics;
use crate::sku::Sku;

/// How a worker runs.
#[derive(Clone, Debug)]
pub struct WorkerOptions {
    /// The SKUs whose streams it drains.
    pub skus: Vec<Sku>,
    /// Entries per batch (per SKU and round). Default: 1000.
    pub batch: usize,
    /// Entries pending this long with another consumer are taken over. Default: 30 s.
    pub claim_idle: Duration,
    /// How long a read waits for new entries. Default: 200 ms.
    pub block: Duration,
    /// Drain what is there and return, instead of running until stopped. Default: off.
    pub once: bool,
    /// This consumer's name in the group. Default: `<host>-<pid>-<random>`.
    pub consumer: String,
    /// Once set, the worker finishes the batch in hand and returns. Default: none.
    pub stop: Option<Arc<AtomicBool>>,
}

impl WorkerOptions {
    pub fn new(skus: Vec<Sku>) -> WorkerOptions {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_else(|_| "host".into());
        WorkerOptions {
            skus,
            batch: 1000,
            claim_idle: Duration::from_secs(30),
            block: Duration::from_millis(200),
            once: false,
            consumer: format!(
                "{}-{}-{}",
                host.trim(),
                std::process::id(),
                hex::encode(rand::random::<[u8; 3]>())
            ),
            stop: None,
        }
    }

    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
    }
}

/// What a worker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub persisted: u64,
    pub redelivered: u64,
    pub conflicts: u64,
    pub dead_letters: u64,
    pub batches: u64,
}

/// Runs until stopped (or, with `once`, until nothing is left). Fails at once, saying what to
/// run, when the orders table does not exist.
pub fn run(target: &Target, db_url: &str, opts: &WorkerOptions) -> Result<WorkerStats> {
    let timeout = target.options().connect_timeout;
    let mut db = Db::connect(db_url, timeout)?;
    db.require_schema(db_url)?;
    let keys: Vec<StockKeys> = opts.skus.iter().map(StockKeys::new).collect();
    let mut conn = target.connect()?;
    for k in &keys {
        ensure_group(&mut conn, k)?;
    }
    let mut w = Worker {
        target,
        db_url,
        db: Some(db),
        conn: Some(conn),
        opts,
        keys,
        stats: WorkerStats::default(),
        backoff: Duration::from_millis(50),
    };
    w.run_rounds()?;
    Ok(w.stats)
}

struct Worker<'a> {
    target: &'a Target,
    db_url: &'a str,
    db: Option<Db>,
    conn: Option<Conn>,
    opts: &'a WorkerOptions,
    keys: Vec<StockKeys>,
    stats: WorkerStats,
    backoff: Duration,
}

impl Worker<'_> {
    fn run_rounds(&mut self) -> Result<()> {
        // Failed rounds since the last one that moved entries: `once` gives up after a few,
        // rather than report a drain that did not happen.
        let mut failures = 0;
        while !self.opts.stopped() {
            let (mut got, mut failed) = (0, false);
            for i in 0..self.keys.len() {
                match self.round(i) {
                    Ok(n) => {
                        self.backoff = Duration::from_millis(50);
                        got += n;
                    }
                    Err(e) => {
                        failed = true;
                        failures += 1;
                        self.failed(e, failures)?;
                    }
                }
            }
            if got > 0 {
                failures = 0;
            }
            if got == 0 && !failed && self.opts.once {
                return Ok(());
            }
        }
        Ok(())
    }

    /// A failed round: wait and reconnect (Redis restarting, PostgreSQL restarting); an error
    /// that waiting cannot fix (a table gone, a dead-letter key of another type) ends the
    /// worker, and so does a `--once` run that keeps failing.
    fn failed(&mut self, e: Error, failures: u32) -> Result<()> {
        if matches!(classify(&e), Failure::Fatal) || (self.opts.once && failures >= ONCE_TRIES) {
            return Err(e);
        }
        eprintln!(
            "lockctl worker: {e}; retrying in {} ms",
            self.backoff.as_millis()
        );
        thread::sleep(self.backoff);
        self.backoff = (self.backoff * 2).min(Duration::from_secs(2));
        self.conn = None;
        self.db = None;
        Ok(())
    }

    fn conn(&mut self) -> Result<&mut Conn> {
        if self.conn.is_none() {
            let mut c = self.target.connect()?;
            for k in &self.keys {
                ensure_group(&mut c, k)?;
            }
            self.conn = Some(c);
        }
        self.conn
            .as_mut()
            .ok_or_else(|| Error::internal("no Redis connection"))
    }

    fn db(&mut self) -> Result<&mut Db> {
        if self.db.is_none() {
            let timeout = self.target.options().connect_timeout;
            self.db = Some(Db::connect(self.db_url, timeout)?);
        }
        self.db
            .as_mut()
            .ok_or_else(|| Error::internal("no database connection"))
    }

    /// One batch of SKU `i`'s stream: returns how many entries it handled.
    fn round(&mut self, i: usize) -> Result<usize> {
        let keys = self.keys[i].clone();
        let mut batch = self.claim(&keys)?;
        if batch.is_empty() {
            batch = self.read(&keys)?;
        }
        if batch.is_empty() {
            return Ok(0);
        }
        let (orders, dead) = split(batch);
        // The orders first: a dead-letter key that cannot be written holds back only the
        // entries that are not orders.
        if !orders.is_empty() {
            self.persist(&keys, &orders)?;
            crash_point("after_commit");
            let ids: Vec<&str> = orders.iter().map(|o| o.stream_id.as_str()).collect();
            self.ack(&keys, &ids)?;
        }
        for (id, why) in &dead {
            self.dead_letter(&keys, id, why)?;
        }
        self.stats.batches += 1;
        if self.stats.batches.is_multiple_of(16) {
            super::trim_acknowledged(self.conn()?, &keys)?;
        }
        Ok(orders.len() + dead.len())
    }

    /// Entries other consumers left pending for longer than `claim_idle`.
    fn claim(&mut self, keys: &StockKeys) -> Result<Vec<Entry>> {
        let (idle, consumer, count) = (
            self.opts.claim_idle.as_millis() as u64,
            self.opts.consumer.clone(),
            self.opts.batch,
        );
        let reply: Value = self.conn()?.query(
            redis::cmd("XAUTOCLAIM")
                .arg(&keys.events)
                .arg(GROUP)
                .arg(&consumer)
                .arg(idle)
                .arg("0-0")
                .arg("COUNT")
                .arg(count),
        )?;
        Ok(match &reply {
            Value::Array(parts) if parts.len() >= 2 => entries(&parts[1]),
            _ => Vec::new(),
        })
    }

    /// New entries, waiting up to `block` for some (not with `once`).
    fn read(&mut self, keys: &StockKeys) -> Result<Vec<Entry>> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.opts.consumer)
            .arg("COUNT")
            .arg(self.opts.batch);
        let block = (!self.opts.once).then_some(self.opts.block);
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(&keys.events).arg(">");
        let conn = self.conn()?;
        let limit = conn.call_timeout();
        if let Some(b) = block {
            conn.set_call_timeout(limit + b)?;
        }
        let reply: Result<Value> = conn.query(&cmd);
        conn.set_call_timeout(limit)?;
        let reply = match reply {
            Err(Error::Redis { code: Some(c), .. }) if c == "NOGROUP" => {
                // The stream was deleted (a seed of the SKU, an operator): start it again.
                ensure_group(conn, keys)?;
                return Ok(Vec::new());
            }
            r => r?,
        };
        // [[stream, [[id, fields]...]]] (RESP2), or a map of stream -> entries (RESP3).
        Ok(match &reply {
            Value::Array(streams) => streams
                .iter()
                .filter_map(|s| match s {
                    Value::Array(p) if p.len() == 2 => Some(entries(&p[1])),
                    _ => None,
                })
                .flatten()
                .collect(),
            Value::Map(m) => m.iter().flat_map(|(_, v)| entries(v)).collect(),
            _ => Vec::new(),
        })
    }

    /// Commits `orders` to PostgreSQL, retrying a failed attempt on a fresh connection until
    /// it commits or the worker is stopped (then the batch stays pending, for later). A batch
    /// that PostgreSQL refuses for its data is taken apart: see [`Worker::isolate`].
    fn persist(&mut self, keys: &StockKeys, orders: &[OrderEvent]) -> Result<()> {
        let mut backoff = Duration::from_millis(50);
        loop {
            crash_point("before_commit");
            let started = Instant::now();
            let url = self.db_url;
            let attempt = self.db().and_then(|db| db.persist(url, orders));
            let e = match attempt {
                Ok(counts) => {
                    self.record(started, counts);
                    return Ok(());
                }
                Err(e) => e,
            };
            match classify(&e) {
                Failure::BadRows => return self.isolate(keys, orders),
                Failure::Fatal => return Err(e),
                Failure::Retry if self.opts.stopped() => return Err(e),
                Failure::Retry => {}
            }
            eprintln!(
                "lockctl worker: {e}; retrying the batch in {} ms",
                backoff.as_millis()
            );
            self.db = None;
            thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    }

    /// A batch PostgreSQL refused for its data: each order alone, so that the one it refuses
    /// goes to the dead letters (with PostgreSQL's reason) and the others are persisted.
    /// Retrying the whole batch would fail the same way for ever.
    fn isolate(&mut self, keys: &StockKeys, orders: &[OrderEvent]) -> Result<()> {
        for order in orders {
            let started = Instant::now();
            let url = self.db_url;
            match self
                .db()
                .and_then(|db| db.persist(url, std::slice::from_ref(order)))
            {
                Ok(counts) => self.record(started, counts),
                Err(e) => {
                    let refused = match (&e, classify(&e)) {
                        (Error::Database { reason, .. }, Failure::BadRows) => reason.clone(),
                        _ => return Err(e),
                    };
                    let why = format!("PostgreSQL refused it: {refused}");
                    self.dead_letter(keys, &order.stream_id, &why)?;
                }
            }
        }
        Ok(())
    }

    /// Counts a committed batch: (inserted, redelivered, conflicts).
    fn record(&mut self, started: Instant, (inserted, redelivered, conflicts): (u64, u64, u64)) {
        metrics::global().observe_batch(started.elapsed(), inserted, conflicts);
        self.stats.persisted += inserted;
        self.stats.redelivered += redelivered;
        self.stats.conflicts += conflicts;
        if conflicts > 0 {
            eprintln!(
                "lockctl worker: {conflicts} order id(s) already persisted with another SKU, quantity or user: recorded in lockctl_order_conflicts"
            );
        }
    }

    fn ack(&mut self, keys: &StockKeys, ids: &[&str]) -> Result<()> {
        let _: u64 = self
            .conn()?
            .query(redis::cmd("XACK").arg(&keys.events).arg(GROUP).arg(ids))?;
        Ok(())
    }

    /// Moves an entry that is not an order to the dead-letter stream, with the reason, and
    /// acknowledges it: it never blocks the queue.
    fn dead_letter(&mut self, keys: &StockKeys, id: &str, why: &str) -> Result<()> {
        let conn = self.conn()?;
        let added: Result<String> = conn.query(
            redis::cmd("XADD")
                .arg(&keys.dead_letters)
                .arg("*")
                .arg("stream_id")
                .arg(id)
                .arg("reason")
                .arg(why),
        );
        match added {
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
                let found: String = conn.query(redis::cmd("TYPE").arg(&keys.dead_letters))?;
                return Err(Error::WrongTypeKey {
                    key: keys.dead_letters.clone(),
                    found,
                    what: format!(
                        "entry {id} of {}, which is not an order ({why}), cannot be moved there",
                        keys.events
                    ),
                });
            }
            r => r?,
        };
        self.ack(keys, &[id])?;
        self.stats.dead_letters += 1;
        metrics::global().dead_letter();
        eprintln!(
            "lockctl worker: entry {id} of {} is not an order ({why}): moved to {}",
            keys.events, keys.dead_letters
        );
        Ok(())
    }
}

/// `--once` gives up after this many failed rounds in a row (about 10 s of backoff).
const ONCE_TRIES: u32 = 10;

/// What a failure calls for.
enum Failure {
    /// Waiting fixes it: a server restarting, a connection lost, a lock timeout.
    Retry,
    /// PostgreSQL refused the rows themselves (a value out of range, a byte it cannot store,
    /// a key too long to index): the same rows will always fail.
    BadRows,
    /// Only an operator fixes it: a table dropped, a key of the wrong type.
    Fatal,
}

fn classify(e: &Error) -> Failure {
    match e {
        Error::WrongTypeKey { .. } => Failure::Fatal,
        Error::Database {
            sqlstate: Some(code),
            ..
        } => match code.get(..2).unwrap_or("") {
            // Syntax or access: the schema is not what lockctl made (42P01: a table dropped).
            "42" => Failure::Fatal,
            // Connection, transaction state, rollback (serialization, deadlock), resources,
            // object in use, operator intervention (shutdown), system and internal errors.
            "08" | "25" | "40" | "53" | "55" | "57" | "58" | "F0" | "XX" => Failure::Retry,
            // Data exceptions (22), integrity (23), program limits (54), anything else.
            _ => Failure::BadRows,
        },
        Error::Database { reason, .. } if reason.contains("db init") => Failure::Fatal,
        _ => Failure::Retry,
    }
}

/// Orders, and the entries that are not orders with why not.
fn split(batch: Vec<Entry>) -> (Vec<OrderEvent>, Vec<(String, String)>) {
    let mut orders = Vec::new();
    let mut dead = Vec::new();
    for (id, fields) in batch {
        let parsed = match &fields {
            Some(f) => OrderEvent::parse(&id, f),
            None => Err("fields that are not text".into()),
        };
        match parsed {
            Ok(o) => orders.push(o),
            Err(why) => dead.push((id, why)),
        }
    }
    (orders, dead)
}

/// For lockctl's own tests of crashes: `LOCKCTL_WORKER_CRASH_AT=before_commit` (or
/// `after_commit`) makes the worker die on the spot there, as a `kill -9` would, the first
/// time it gets there. Not for anything else.
fn crash_point(at: &str) {
    if std::env::var("LOCKCTL_WORKER_CRASH_AT").is_ok_and(|v| v == at) {
        std::process::abort();
    }
}
