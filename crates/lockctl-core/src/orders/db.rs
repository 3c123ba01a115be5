//! The orders table in PostgreSQL: a versioned schema, and the one batched, idempotent insert
//! the worker makes per batch.
//!
//! Idempotence is the table's primary key: a batch delivered twice (a worker killed between
//! its commit and its acknowledgement) inserts nothing the second time. An order id already in
//! the table with another SKU or quantity is not a redelivery but a conflict: it is recorded in
//! `lockctl_order_conflicts` and counted, never silently skipped.

use std::time::Duration;

use postgres::{Client, NoTls};

use std::collections::{HashMap, HashSet};

use super::OrderEvent;
use super::checkpoint::{Checkpoint, Checkpoints};
use crate::error::{Error, Result};
use crate::hint::Hint;

/// The schema's migrations, in order; `lockctl db init` applies the ones not yet applied.
/// Each creates only what is missing, so that `db init` can run them again to repair a
/// schema whose tables were dropped after its version was recorded.
const MIGRATIONS: [&str; 1] = [r"
CREATE TABLE IF NOT EXISTS lockctl_orders (
    order_id     text PRIMARY KEY,
    sku          text NOT NULL,
    qty          bigint NOT NULL CHECK (qty > 0),
    user_id      text,
    fence        bigint,
    stream_id    text NOT NULL,
    deducted_at  timestamptz NOT NULL,
    persisted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS lockctl_orders_sku ON lockctl_orders (sku);
CREATE TABLE IF NOT EXISTS lockctl_order_conflicts (
    order_id   text NOT NULL,
    sku        text NOT NULL,
    qty        bigint NOT NULL,
    stream_id  text NOT NULL,
    seen_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, stream_id)
);
"];

/// A worker's session bounds. `lock_timeout`: a batch whose rows another session has locked
/// (a worker stopped between its insert and its commit) fails after 2 s with SQLSTATE 55P03,
/// and the worker leaves it pending for later instead of waiting as long as the other stays
/// stopped. `idle_in_transaction_session_timeout`: the server ends such a stopped session
/// after 10 s, releasing its locks (its batch was not committed, so it is claimed and
/// persisted again). `statement_timeout`: no insert runs longer than 60 s. The keepalives:
/// the server notices a worker cut off by a partition within about 11 s.
pub const SESSION_BOUNDS: &str = "SET lock_timeout = '2s';
 SET idle_in_transaction_session_timeout = '10s';
 SET statement_timeout = '60s';
 SET tcp_keepalives_idle = 5;
 SET tcp_keepalives_interval = 2;
 SET tcp_keepalives_count = 3;";

/// The tables the schema's migrations create: what `require_schema` checks is there.
const TABLES: [&str; 2] = ["lockctl_orders", "lockctl_order_conflicts"];

/// The schema version this lockctl writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// What `db init` did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitReport {
    /// The schema version before the call.
    pub before: usize,
    /// The schema version after the call.
    pub now: usize,
    /// Tables that were missing although their version was recorded, and were created again.
    pub repaired: Vec<String>,
}

/// A connection to the orders database. `url` is never shown: errors name the host only.
pub struct Db {
    client: Client,
}

/// The database URL with its passwords hidden, for messages.
fn shown(url: &str) -> String {
    crate::redact::redact(url)
}

/// The fix for a missing or old schema, naming `url` when it holds no secret.
fn init_schema(url: &str) -> Hint {
    let secret = url
        .parse::<postgres::Config>()
        .map_or(true, |c| c.get_password().is_some());
    Hint::InitSchema {
        url: (!secret).then(|| url.to_string()),
    }
}

fn db_error(url: &str, what: &str, e: postgres::Error) -> Error {
    let mut reason = e.to_string();
    let sqlstate = e.as_db_error().map(|db| db.code().code().to_string());
    if let Some(db) = e.as_db_error() {
        reason = format!("{}: {}", db.code().code(), db.message());
    }
    // Raised inside a trigger or a function (it has a context), or naming a table that is not
    // one of ours: the server's code failed, not lockctl's statement on its own rows.
    let server_code = e.as_db_error().is_some_and(|db| {
        db.where_().is_some() || db.table().is_some_and(|t| !TABLES.contains(&t))
    });
    let hint = match sqlstate.as_deref() {
        // A table of the schema was dropped: waiting will not bring it back.
        Some("42P01") if !server_code => {
            reason.push_str(" (a table of the orders schema is missing)");
            Some(init_schema(url))
        }
        Some("3D000") => Some(Hint::CreateDatabase {
            name: url
                .parse::<postgres::Config>()
                .ok()
                .and_then(|c| c.get_dbname().map(str::to_string)),
        }),
        _ => None,
    };
    // A driver message never quotes the URL, but a password must not show even if one did.
    Error::Database {
        url: shown(url),
        reason: crate::redact::scrub(&format!("{what}: {reason}"), url),
        sqlstate,
        server_code,
        hint,
    }
}

impl Db {
    /// Connects, bounded by `timeout` (the URL's own `connect_timeout` wins if it has one).
    pub fn connect(url: &str, timeout: Duration) -> Result<Db> {
        let mut config: postgres::Config =
            url.parse().map_err(|e: postgres::Error| Error::BadDbUrl {
                url: shown(url),
                reason: format!(
                    "{}; expected postgres://user[:password]@host[:port]/database or key=value pairs (host=... dbname=...)",
                    crate::redact::scrub(&e.to_string(), url)
                ),
            })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(timeout);
        }
        // A server gone silent (a partition, a host down) is noticed within about 11 s instead
        // of the kernel's two hours: a call on a dead connection fails, and is retried.
        config
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(5))
            .keepalives_interval(Duration::from_secs(2))
            .keepalives_retries(3);
        let client = config.connect(NoTls).map_err(|e| {
            match db_error(url, "could not connect to PostgreSQL", e) {
                Error::Database {
                    url,
                    reason,
                    sqlstate,
                    server_code,
                    hint: None,
                } => Error::Database {
                    url,
                    reason,
                    sqlstate,
                    server_code,
                    hint: Some(Hint::StartDatabase),
                },
                other => other,
            }
        })?;
        Ok(Db { client })
    }

    /// Bounds this session for the orders worker (see [`SESSION_BOUNDS`]): no statement, no
    /// wait for a row lock and no idle transaction lasts longer than those bounds, so a worker
    /// stopped mid-transaction cannot hold another's batch for longer than them.
    pub fn bound_session(&mut self, url: &str) -> Result<()> {
        self.client
            .batch_execute(SESSION_BOUNDS)
            .map_err(|e| db_error(url, "could not set the worker's session bounds", e))
    }

    /// Creates or migrates the schema, and creates again any table of it that is missing (a
    /// table dropped by hand). Safe to run concurrently and again: an advisory lock serialises
    /// it, applied migrations are recorded in `lockctl_schema`, and every statement creates
    /// only what is missing.
    pub fn init(&mut self, url: &str) -> Result<InitReport> {
        let mut tx = self
            .client
            .transaction()
            .map_err(|e| db_error(url, "could not start the migration", e))?;
        let err = |e| db_error(url, "could not create the orders schema", e);
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(7170616);
             CREATE TABLE IF NOT EXISTS lockctl_schema (version integer NOT NULL);",
        )
        .map_err(err)?;
        let row = tx
            .query_one("SELECT coalesce(max(version), 0) FROM lockctl_schema", &[])
            .map_err(err)?;
        let before = row.get::<_, i32>(0).max(0) as usize;
        let mut repaired = Vec::new();
        for table in TABLES {
            let exists = tx
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
                .map_err(err)?;
            if before > 0 && !exists.get::<_, bool>(0) {
                repaired.push(table.to_string());
            }
        }
        for (i, migration) in MIGRATIONS.iter().enumerate() {
            tx.batch_execute(migration).map_err(err)?;
            if i >= before {
                tx.execute(
                    "INSERT INTO lockctl_schema (version) VALUES ($1)",
                    &[&(i as i32 + 1)],
                )
                .map_err(err)?;
            }
        }
        tx.commit().map_err(err)?;
        Ok(InitReport {
            before,
            now: before.max(SCHEMA_VERSION),
            repaired,
        })
    }

    /// Fails, saying what to run, when the schema is missing, incomplete (a table dropped) or
    /// older than this lockctl.
    pub fn require_schema(&mut self, url: &str) -> Result<()> {
        let row = self
            .client
            .query_one("SELECT to_regclass('lockctl_schema') IS NOT NULL", &[])
            .map_err(|e| db_error(url, "could not read the schema", e))?;
        let version = if row.get::<_, bool>(0) {
            let r = self
                .client
                .query_one("SELECT coalesce(max(version), 0) FROM lockctl_schema", &[])
                .map_err(|e| db_error(url, "could not read the schema version", e))?;
            r.get::<_, i32>(0).max(0) as usize
        } else {
            0
        };
        let fail = |reason: String| Error::Database {
            url: shown(url),
            reason,
            sqlstate: None,
            server_code: false,
            hint: Some(init_schema(url)),
        };
        if version < SCHEMA_VERSION {
            return Err(fail(format!(
                "the orders schema is at version {version}, this lockctl needs {SCHEMA_VERSION}"
            )));
        }
        for table in TABLES {
            let row = self
                .client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
                .map_err(|e| db_error(url, "could not read the schema", e))?;
            if !row.get::<_, bool>(0) {
                return Err(fail(format!(
                    "the table {table} of the orders schema is missing"
                )));
            }
        }
        Ok(())
    }

    /// Persists `events` in one transaction: new orders are inserted, redeliveries of the same
    /// stream entry change nothing, and an order id that exists (in the table, or earlier in
    /// this batch) from another stream entry (a second deduction under the same order id) or
    /// with another SKU, quantity or user is recorded as a conflict. Returns (inserted,
    /// redelivered, conflicts). `checkpoints` are reached with the batch inserted and not yet
    /// committed ([`Checkpoint::InTransaction`]).
    pub fn persist(
        &mut self,
        url: &str,
        events: &[OrderEvent],
        checkpoints: &Checkpoints,
    ) -> Result<(u64, u64, u64)> {
        let err = |e| db_error(url, "could not persist a batch of orders", e);
        let mut tx = self.client.transaction().map_err(err)?;
        // The first of each order id is inserted; the later ones of the batch are held against
        // what is then in the table, exactly as a redelivery in another batch would be.
        let mut seen = HashSet::new();
        let (first, later): (Vec<&OrderEvent>, Vec<&OrderEvent>) = events
            .iter()
            .partition(|e| seen.insert(e.order_id.as_str()));
        let fresh = insert(&mut tx, &first).map_err(err)?;
        let others: Vec<&OrderEvent> = first
            .into_iter()
            .filter(|e| !fresh.contains(&e.order_id))
            .chain(later)
            .collect();
        let mut conflicts = 0;
        if !others.is_empty() {
            let ids: Vec<&str> = others.iter().map(|e| e.order_id.as_str()).collect();
            let rows = tx
                .query(
                    "SELECT order_id, sku, qty, user_id, stream_id FROM lockctl_orders
                      WHERE order_id = ANY($1)",
                    &[&ids],
                )
                .map_err(err)?;
            type Row = (String, i64, Option<String>, String);
            let known: HashMap<String, Row> = rows
                .iter()
                .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4))))
                .collect();
            for e in &others {
                // A redelivery is the same entry again; the same order from another entry is
                // a second deduction, and PostgreSQL holds only the first.
                let same = known.get(&e.order_id).is_some_and(|(s, q, u, id)| {
                    *s == e.sku && *q == e.qty && *u == e.user && *id == e.origin
                });
                if !same {
                    conflicts += 1;
                    tx.execute(
                        "INSERT INTO lockctl_order_conflicts (order_id, sku, qty, stream_id)
                         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                        &[&e.order_id, &e.sku, &e.qty, &e.origin],
                    )
                    .map_err(err)?;
                }
            }
        }
        checkpoints.reach(Checkpoint::InTransaction);
        tx.commit().map_err(err)?;
        let inserted = fresh.len() as u64;
        let redelivered = events.len() as u64 - inserted - conflicts;
        Ok((inserted, redelivered, conflicts))
    }

    /// Every persisted order of `sku` whose id starts with `prefix` (`""` for all), as
    /// (order id, qty), and the conflicts recorded for the SKU.
    pub fn orders(
        &mut self,
        url: &str,
        sku: &str,
        prefix: &str,
    ) -> Result<(Vec<(String, i64)>, u64)> {
        let err = |e| db_error(url, "could not read the orders", e);
        let pattern = format!(
            "{}%",
            prefix
                .replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let rows = self
            .client
            .query(
                "SELECT order_id, qty FROM lockctl_orders WHERE sku = $1 AND order_id LIKE $2",
                &[&sku, &pattern],
            )
            .map_err(err)?;
        let conflicts = self
            .client
            .query_one(
                "SELECT count(*) FROM lockctl_order_conflicts WHERE sku = $1",
                &[&sku],
            )
            .map_err(err)?
            .get::<_, i64>(0);
        Ok((
            rows.iter().map(|r| (r.get(0), r.get(1))).collect(),
            conflicts.max(0) as u64,
        ))
    }

    /// Every persisted order of `sku`, and every conflict recorded for it, each as (order id,
    /// qty, the stream id of its deduction): for `status`, which keeps those of the current
    /// sale.
    pub fn sku_rows(&mut self, url: &str, sku: &str) -> Result<(Vec<SkuRow>, Vec<SkuRow>)> {
        let err = |e| db_error(url, "could not read the orders", e);
        let mut read = |sql: &str| -> Result<Vec<SkuRow>> {
            let rows = self.client.query(sql, &[&sku]).map_err(err)?;
            Ok(rows
                .iter()
                .map(|r| SkuRow {
                    order_id: r.get(0),
                    qty: r.get(1),
                    stream_id: r.get(2),
                })
                .collect())
        };
        let orders = read("SELECT order_id, qty, stream_id FROM lockctl_orders WHERE sku = $1")?;
        let conflicts =
            read("SELECT order_id, qty, stream_id FROM lockctl_order_conflicts WHERE sku = $1")?;
        Ok((orders, conflicts))
    }
}

/// A row of the orders table, or of its conflicts, as `status` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkuRow {
    /// The order id.
    pub order_id: String,
    /// Its units.
    pub qty: i64,
    /// The stream id of the deduction it came from.
    pub stream_id: String,
}

/// Inserts `events` (distinct order ids) in one statement, skipping ids already in the table;
/// returns the ids it inserted.
fn insert(
    tx: &mut postgres::Transaction<'_>,
    events: &[&OrderEvent],
) -> std::result::Result<HashSet<String>, postgres::Error> {
    let ids: Vec<&str> = events.iter().map(|e| e.order_id.as_str()).collect();
    let skus: Vec<&str> = events.iter().map(|e| e.sku.as_str()).collect();
    let qtys: Vec<i64> = events.iter().map(|e| e.qty).collect();
    let users: Vec<Option<&str>> = events.iter().map(|e| e.user.as_deref()).collect();
    let fences: Vec<Option<i64>> = events.iter().map(|e| e.fence).collect();
    let sids: Vec<&str> = events.iter().map(|e| e.origin.as_str()).collect();
    let ats: Vec<i64> = events.iter().map(|e| e.at_ms).collect();
    let inserted = tx.query(
        "INSERT INTO lockctl_orders
           (order_id, sku, qty, user_id, fence, stream_id, deducted_at)
         SELECT o, s, q, u, f, i, to_timestamp(a / 1000.0)
           FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[],
                       $6::text[], $7::bigint[]) AS t(o, s, q, u, f, i, a)
         ON CONFLICT (order_id) DO NOTHING
         RETURNING order_id",
        &[&ids, &skus, &qtys, &users, &fences, &sids, &ats],
    )?;
    Ok(inserted.iter().map(|r| r.get::<_, String>(0)).collect())
}
