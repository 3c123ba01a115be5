//! `lockctl worker`: moves orders from the SKUs' streams into PostgreSQL.
//!
//! Each round: claim what dead consumers left pending too long (XAUTOCLAIM), else read new
//! entries (XREADGROUP), move entries that are not orders to the dead-letter stream, persist
//! the rest in one transaction, commit, acknowledge, and now and then trim what every consumer
//! has acknowledged. A stop request finishes the batch in hand first. A bucketed SKU's orders
//! are in its buckets' streams, which the worker drains too (looked up at the start, and again
//! every second for buckets seeded later).
//!
//! The one idea that keeps paid orders: an order is dead-lettered only when PostgreSQL refuses
//! its row for the row's own data, by an allow-list of SQLSTATE classes (`classify`); every
//! other failure (a login refused, the database missing, too many connections, a shutdown, a
//! lost connection) is the server's, and is waited out with a backoff, the batch kept in hand,
//! however long it lasts. A batch whose rows another session holds locked (a worker stopped
//! mid-transaction) is left pending and taken up again later, so the other batches go on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use super::checkpoint::{Checkpoint, Checkpoints};
use super::db::Db;
use super::events::{Listener, WorkerEvent};
use super::failure::{Failure, classify};
use super::{BadOrderEvent, Entry, GROUP, OrderEvent, dead, ensure_group, entries};
use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::sku::Sku;
use crate::stock::buckets::with_buckets;

/// How a worker runs. No `Default`: a worker drains the SKUs it is given, and there is no SKU
/// to default to; [`WorkerOptions::new`] gives the defaults for the rest.
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
    /// Where what the worker has to say goes (waits, set-asides, dead letters). Default:
    /// nowhere.
    pub events: Listener,
    /// What runs where a round may be stepped into (a test's crash). Default: nothing.
    pub checkpoints: Checkpoints,
}

impl WorkerOptions {
    /// A worker for `skus`, with the defaults for the rest.
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
            events: Listener::default(),
            checkpoints: Checkpoints::default(),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst))
    }
}

/// What a worker did (`worker --json` prints it as it serializes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerStats {
    /// Orders written to PostgreSQL for the first time.
    pub persisted: u64,
    /// Orders already in PostgreSQL, delivered again (nothing written).
    pub redelivered: u64,
    /// A second deduction under one order id, recorded as a conflict.
    pub conflicts: u64,
    /// The dead-letter stream it was moved to.
    pub dead_letters: u64,
    /// Batches written.
    pub batches: u64,
    /// Failed attempts that were waited out (the database or Redis in trouble).
    pub retries: u64,
    /// Batches left pending because another session held their rows locked.
    pub set_aside: u64,
}

/// Runs until stopped (or, with `once`, until nothing is left). Fails at once, saying what to
/// run, when the orders table does not exist.
pub fn run(target: &Target, db_url: &str, opts: &WorkerOptions) -> Result<WorkerStats> {
    let timeout = target.options().connect_timeout;
    let mut db = Db::connect(db_url, timeout)?;
    db.require_schema(db_url)?;
    db.bound_session(db_url)?;
    let mut conn = target.connect()?;
    crate::check::require(&mut conn, crate::check::WORKER_NEEDS)?;
    let keys = streams(&mut conn, &opts.skus)?;
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
        waiting_since: None,
        looked: Instant::now(),
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
    /// When the current run of failures began (`None` while all is well): for the log and
    /// `lockctl_worker_waiting_seconds`.
    waiting_since: Option<Instant>,
    /// When the buckets of the SKUs were last looked up (see [`streams`]).
    looked: Instant,
}

/// How often a worker looks again for the buckets of its SKUs: a SKU seeded with buckets
/// after the worker started has its orders in the buckets' streams.
const LOOK_AGAIN: Duration = Duration::from_secs(1);

/// The streams a worker drains for `skus`: each SKU's own, and the stream of each bucket of a
/// bucketed SKU (see [`with_buckets`]).
fn streams(conn: &mut Conn, skus: &[Sku]) -> Result<Vec<StockKeys>> {
    let mut out = Vec::new();
    for sku in skus {
        out.extend(with_buckets(conn, sku)?.iter().map(StockKeys::new));
    }
    Ok(out)
}

/// How attempts at a batch ended.
enum Attempt {
    Done(Persisted),
    /// PostgreSQL refused the rows for their data (the error says how).
    Refused(Error),
}

/// How a batch in hand ended.
enum Persisted {
    /// Committed: acknowledge it.
    Committed,
    /// Its rows are locked by another session: left pending, to be claimed again later.
    SetAside,
}

impl Worker<'_> {
    fn run_rounds(&mut self) -> Result<()> {
        // Failed rounds since the last one that moved entries: `once` gives up after a few,
        // rather than report a drain that did not happen.
        let mut failures = 0;
        while !self.opts.stopped() {
            self.look_for_buckets();
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

    /// Adds the streams of buckets seeded since the last look (at most every [`LOOK_AGAIN`]).
    /// A look that fails changes nothing: the rounds report the trouble, and the next look
    /// tries again.
    fn look_for_buckets(&mut self) {
        if self.looked.elapsed() < LOOK_AGAIN {
            return;
        }
        self.looked = Instant::now();
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let Ok(now) = streams(conn, &self.opts.skus) else {
            return;
        };
        for k in now {
            if !self.keys.iter().any(|have| have.events == k.events)
                && ensure_group(conn, &k).is_ok()
            {
                self.keys.push(k);
            }
        }
    }

    /// A failed round: wait and reconnect (Redis restarting, PostgreSQL restarting); an error
    /// that waiting cannot fix (a table gone, a dead-letter key of another type) ends the
    /// worker, and so does a `--once` run that keeps failing.
    fn failed(&mut self, e: Error, failures: u32) -> Result<()> {
        if matches!(classify(&e), Failure::Fatal) || (self.opts.once && failures >= ONCE_TRIES) {
            return Err(e);
        }
        if self.opts.stopped() {
            // Asked to stop (a signal may well have interrupted the call): nothing to wait out.
            return Ok(());
        }
        if e.is_interrupted() {
            // A signal interrupted the call (Ctrl-C, before the stop flag is seen; a stop and
            // continue): not the server's trouble, so nothing is waited out or said. The
            // connection, which may be mid-reply, is opened again; the batch stays pending.
            self.conn = None;
            return Ok(());
        }
        let backoff = self.backoff;
        self.wait_out(&e, backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.conn = None;
        self.db = None;
        Ok(())
    }

    /// Says what is being waited out (and for how long so far), counts it, and sleeps.
    fn wait_out(&mut self, e: &Error, backoff: Duration) {
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        self.stats.retries += 1;
        if let Some(m) = self.target.metrics() {
            m.worker_retry(since.elapsed());
        }
        self.opts.events.tell(WorkerEvent::Waiting {
            error: e.to_string(),
            backoff,
            waiting: since.elapsed(),
        });
        thread::sleep(backoff);
    }

    /// All is well again.
    fn recovered(&mut self) {
        if let Some(since) = self.waiting_since.take() {
            self.opts.events.tell(WorkerEvent::Recovered {
                after: since.elapsed(),
            });
            if let Some(m) = self.target.metrics() {
                m.worker_recovered();
            }
        }
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
            let mut db = Db::connect(self.db_url, timeout)?;
            db.bound_session(self.db_url)?;
            self.db = Some(db);
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
            match self.persist(&keys, &orders)? {
                Persisted::Committed => {
                    self.opts.checkpoints.reach(Checkpoint::AfterCommit);
                    let ids: Vec<&str> = orders.iter().map(|o| o.stream_id.as_str()).collect();
                    self.ack(&keys, &ids)?;
                }
                Persisted::SetAside => {
                    self.stats.set_aside += 1;
                    self.opts.events.tell(WorkerEvent::SetAside {
                        orders: orders.len(),
                        stream: keys.events.clone(),
                    });
                }
            }
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
        let conn = self.conn()?;
        let reply: Result<Value> = conn.query(
            redis::cmd("XAUTOCLAIM")
                .arg(&keys.events)
                .arg(GROUP)
                .arg(&consumer)
                .arg(idle)
                .arg("0-0")
                .arg("COUNT")
                .arg(count),
        );
        let reply = reply.map_err(|e| super::not_a_stream(conn, keys, e))?;
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
            r => r.map_err(|e| super::not_a_stream(conn, keys, e))?,
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

    /// Commits `orders` to PostgreSQL (see [`Worker::attempts`]); a batch PostgreSQL refuses
    /// for its data is taken apart (see [`Worker::isolate`]).
    fn persist(&mut self, keys: &StockKeys, orders: &[OrderEvent]) -> Result<Persisted> {
        match self.attempts(orders)? {
            Attempt::Done(p) => Ok(p),
            Attempt::Refused(_) => self.isolate(keys, orders),
        }
    }

    /// Tries to commit `orders` until it commits, waiting out every failure of the server
    /// with a backoff, the batch in hand, however long that takes; gives up only when the
    /// worker is stopped (or a `--once` run has tried [`ONCE_TRIES`] times), leaving the batch
    /// pending for later. Rows refused for their data, and rows locked by another session,
    /// end the attempts at once.
    fn attempts(&mut self, orders: &[OrderEvent]) -> Result<Attempt> {
        let mut backoff = Duration::from_millis(50);
        let mut tries = 0;
        loop {
            self.opts.checkpoints.reach(Checkpoint::BeforeCommit);
            let started = Instant::now();
            let (url, opts) = (self.db_url, self.opts);
            // A failure to connect is always the server's trouble, whatever its SQLSTATE (a
            // login refused is 28000, a database missing 3D000): only the insert itself can
            // say that rows are bad.
            let e = match self.db() {
                Err(e) => e,
                Ok(db) => match db.persist(url, orders, &opts.checkpoints) {
                    Ok(counts) => {
                        self.record(started, counts);
                        self.recovered();
                        return Ok(Attempt::Done(Persisted::Committed));
                    }
                    Err(e) => match classify(&e) {
                        Failure::BadRows => return Ok(Attempt::Refused(e)),
                        Failure::Locked => return Ok(Attempt::Done(Persisted::SetAside)),
                        Failure::Fatal => return Err(e),
                        Failure::Retry => e,
                    },
                },
            };
            tries += 1;
            if self.opts.stopped() || (self.opts.once && tries >= ONCE_TRIES) {
                return Err(e);
            }
            self.wait_out(&e, backoff);
            self.db = None;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// A batch PostgreSQL refused for its data: each order alone, so that the one it refuses
    /// goes to the dead letters (whole, with PostgreSQL's reason) and the others are
    /// persisted. Retrying the whole batch would fail the same way for ever. A failure of the
    /// server meanwhile is waited out as in [`Worker::attempts`].
    fn isolate(&mut self, keys: &StockKeys, orders: &[OrderEvent]) -> Result<Persisted> {
        for order in orders {
            match self.attempts(std::slice::from_ref(order))? {
                Attempt::Done(Persisted::Committed) => {}
                Attempt::Done(Persisted::SetAside) => return Ok(Persisted::SetAside),
                Attempt::Refused(e) => {
                    let reason = match &e {
                        Error::Database { reason, .. } => reason.clone(),
                        other => other.to_string(),
                    };
                    let why = format!("PostgreSQL refused it: {reason}");
                    self.dead_letter(keys, &order.stream_id, &why)?;
                }
            }
        }
        Ok(Persisted::Committed)
    }

    /// Counts a committed batch: (inserted, redelivered, conflicts).
    fn record(&mut self, started: Instant, (inserted, redelivered, conflicts): (u64, u64, u64)) {
        if let Some(m) = self.target.metrics() {
            m.observe_batch(started.elapsed(), inserted, conflicts);
        }
        self.stats.persisted += inserted;
        self.stats.redelivered += redelivered;
        self.stats.conflicts += conflicts;
        if conflicts > 0 {
            self.opts
                .events
                .tell(WorkerEvent::Conflicts { count: conflicts });
        }
    }

    fn ack(&mut self, keys: &StockKeys, ids: &[&str]) -> Result<()> {
        let _: u64 = self
            .conn()?
            .query(redis::cmd("XACK").arg(&keys.events).arg(GROUP).arg(ids))?;
        Ok(())
    }

    /// Moves an entry to the dead-letter stream, whole and with the reason, and acknowledges
    /// it, in one step: it never blocks the queue, and `--requeue-dead` can put it back.
    fn dead_letter(&mut self, keys: &StockKeys, id: &str, why: &str) -> Result<()> {
        dead::move_to_dead_letters(self.conn()?, keys, id, why)?;
        self.stats.dead_letters += 1;
        if let Some(m) = self.target.metrics() {
            m.dead_letter();
        }
        self.opts.events.tell(WorkerEvent::DeadLettered {
            id: id.to_string(),
            stream: keys.events.clone(),
            why: why.to_string(),
            dead_letters: keys.dead_letters.clone(),
        });
        Ok(())
    }
}

/// `--once` gives up after this many failed rounds in a row (about 10 s of backoff).
const ONCE_TRIES: u32 = 10;

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Orders, and the entries that are not orders with why not.
fn split(batch: Vec<Entry>) -> (Vec<OrderEvent>, Vec<(String, String)>) {
    let mut orders = Vec::new();
    let mut dead = Vec::new();
    for (id, fields) in batch {
        let parsed = match &fields {
            Some(f) => OrderEvent::parse(&id, f),
            None => Err(BadOrderEvent::NotText),
        };
        match parsed {
            Ok(o) => orders.push(o),
            Err(why) => dead.push((id, why.to_string())),
        }
    }
    (orders, dead)
}
