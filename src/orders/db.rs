//! The orders table in PostgreSQL: a versioned schema, and the one batched, idempotent insert
//! the worker makes per batch.
//!
//! Idempotence is the table's primary key: a batch delivered twice (a worker killed between
//! its commit and its acknowledgement) inserts nothing the second time. An order id already in
//! the table with another SKU or quantity is not a redelivery but a conflict: it is recorded in
//! `lockctl_order_conflicts` and counted, never silently skipped.

use std::time::Duration;

use postgres::{Client, NoTls};

use super::OrderEvent;
use crate::error::{Error, Result};

/// The schema's migrations, in order; `lockctl db init` applies the ones not yet applied.
const MIGRATIONS: [&str; 1] = [r"
CREATE TABLE lockctl_orders (
    order_id     text PRIMARY KEY,
    sku          text NOT NULL,
    qty          bigint NOT NULL CHECK (qty > 0),
    user_id      text,
    fence        bigint,
    stream_id    text NOT NULL,
    deducted_at  timestamptz NOT NULL,
    persisted_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX lockctl_orders_sku ON lockctl_orders (sku);
CREATE TABLE lockctl_order_conflicts (
    order_id   text NOT NULL,
    sku        text NOT NULL,
    qty        bigint NOT NULL,
    stream_id  text NOT NULL,
    seen_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (order_id, stream_id)
);
"];

/// The schema version this lockctl writes.
pub const SCHEMA_VERSION: usize = MIGRATIONS.len();

/// A connection to the orders database. `url` is never shown: errors name the host only.
pub struct Db {
    client: Client,
}

/// `postgres://user:pw@host/db` with the password hidden, for messages.
fn shown(url: &str) -> String {
    crate::conn::redact_url(url)
}

fn db_error(url: &str, what: &str, e: postgres::Error) -> Error {
    let mut reason = e.to_string();
    if let Some(db) = e.as_db_error() {
        reason = format!("{}: {}", db.code().code(), db.message());
    }
    // A driver message never quotes the URL, but a password must not show even if one did.
    if let Some(at) = url.rfind('@') {
        let secret = &url[..at];
        if let Some((_, pw)) = secret.rsplit_once(':')
            && !pw.is_empty()
            && !pw.starts_with("//")
        {
            reason = reason.replace(pw, "***");
        }
    }
    Error::Database {
        url: shown(url),
        reason: format!("{what}: {reason}"),
    }
}

impl Db {
    /// Connects, bounded by `timeout` (the URL's own `connect_timeout` wins if it has one).
    pub fn connect(url: &str, timeout: Duration) -> Result<Db> {
        let mut config: postgres::Config = url.parse().map_err(|e: postgres::Error| {
            Error::BadUrl {
                url: shown(url),
                reason: format!(
                    "{e}; expected postgres://user[:password]@host[:port]/database (see --db or DATABASE_URL)"
                ),
            }
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(timeout);
        }
        let client = config.connect(NoTls).map_err(|e| {
            db_error(
                url,
                "could not connect to PostgreSQL (is it running? see --db)",
                e,
            )
        })?;
        Ok(Db { client })
    }

    /// Creates or migrates the schema; returns (version before, version now). Safe to run
    /// concurrently and again: an advisory lock serialises it, and applied migrations are
    /// recorded in `lockctl_schema`.
    pub fn init(&mut self, url: &str) -> Result<(usize, usize)> {
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
        for (i, migration) in MIGRATIONS.iter().enumerate().skip(before) {
            tx.batch_execute(migration).map_err(err)?;
            tx.execute(
                "INSERT INTO lockctl_schema (version) VALUES ($1)",
                &[&(i as i32 + 1)],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok((before, before.max(SCHEMA_VERSION)))
    }

    /// Fails, saying what to run, when the schema is missing or older than this lockctl.
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
        if version < SCHEMA_VERSION {
            return Err(Error::Database {
                url: shown(url),
                reason: format!(
                    "the orders schema is at version {version}, this lockctl needs {SCHEMA_VERSION}: run lockctl db init --db URL first"
                ),
            });
        }
        Ok(())
    }

    /// Persists `events` in one transaction: new orders are inserted, redeliveries of the same
    /// order change nothing, and an order id that exists with another SKU or quantity is
    /// recorded as a conflict. Returns (inserted, redelivered, conflicts).
    pub fn persist(&mut self, url: &str, events: &[OrderEvent]) -> Result<(u64, u64, u64)> {
        let err = |e| db_error(url, "could not persist a batch of orders", e);
        let mut tx = self.client.transaction().map_err(err)?;
        let ids: Vec<&str> = events.iter().map(|e| e.order_id.as_str()).collect();
        let skus: Vec<&str> = events.iter().map(|e| e.sku.as_str()).collect();
        let qtys: Vec<i64> = events.iter().map(|e| e.qty).collect();
        let users: Vec<Option<&str>> = events.iter().map(|e| e.user.as_deref()).collect();
        let fences: Vec<Option<i64>> = events.iter().map(|e| e.fence).collect();
        let sids: Vec<&str> = events.iter().map(|e| e.stream_id.as_str()).collect();
        let ats: Vec<i64> = events.iter().map(|e| e.at_ms).collect();
        let inserted = tx
            .query(
                "INSERT INTO lockctl_orders
                   (order_id, sku, qty, user_id, fence, stream_id, deducted_at)
                 SELECT o, s, q, u, f, i, to_timestamp(a / 1000.0)
                   FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[],
                               $6::text[], $7::bigint[]) AS t(o, s, q, u, f, i, a)
                 ON CONFLICT (order_id) DO NOTHING
                 RETURNING order_id",
                &[&ids, &skus, &qtys, &users, &fences, &sids, &ats],
            )
            .map_err(err)?;
        let fresh: std::collections::HashSet<String> =
            inserted.iter().map(|r| r.get::<_, String>(0)).collect();
        let others: Vec<&OrderEvent> = events
            .iter()
            .filter(|e| !fresh.contains(&e.order_id))
            .collect();
        let mut conflicts = 0;
        if !others.is_empty() {
            let ids: Vec<&str> = others.iter().map(|e| e.order_id.as_str()).collect();
            let rows = tx
                .query(
                    "SELECT order_id, sku, qty FROM lockctl_orders WHERE order_id = ANY($1)",
                    &[&ids],
                )
                .map_err(err)?;
            let known: std::collections::HashMap<String, (String, i64)> = rows
                .iter()
                .map(|r| (r.get(0), (r.get(1), r.get(2))))
                .collect();
            for e in &others {
                let same = known
                    .get(&e.order_id)
                    .is_some_and(|(s, q)| *s == e.sku && *q == e.qty);
                if !same {
                    conflicts += 1;
                    tx.execute(
                        "INSERT INTO lockctl_order_conflicts (order_id, sku, qty, stream_id)
                         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                        &[&e.order_id, &e.sku, &e.qty, &e.stream_id],
                    )
                    .map_err(err)?;
                }
            }
        }
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
}
