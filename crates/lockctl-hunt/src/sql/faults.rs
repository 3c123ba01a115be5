//! The database faults' work: a stock row held by a session of lockctl's own (`db-lock`), and
//! the system's sessions ended (`db-kill`).

use std::time::{Duration, Instant};

use super::{Conn, OWN_APPLICATION, SkuParam, SqlDb, my_error, open, pg_error};
use crate::error::SqlError;

/// A row held by a session of lockctl's own: the stock query `FOR UPDATE` in a transaction,
/// rolled back when this is dropped (the `db-lock` fault).
pub struct RowLock {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RowLock {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How a row lock came out, within the wait [`SqlDb::hold_row`] is given.
pub enum RowHeld {
    /// The row is held.
    Held(RowLock),
    /// The system holds it: lockctl's session waits for it, and holds it once it comes.
    Queued(RowLock),
}

impl SqlDb {
    /// Holds the row `query` reads for `sku` on a session of its own: `query` with `FOR
    /// UPDATE`, in a transaction, until the [`RowLock`] is dropped. Waits `ready` for the row,
    /// at most; a session that cannot be had or a query the database refuses is an error.
    pub fn hold_row(
        &self,
        query: &str,
        sku: SkuParam,
        ready: Duration,
    ) -> Result<RowHeld, SqlError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let locking = locking_query(query);
        let (url, timeout) = (self.url.clone(), self.timeout);
        let (text, format) = (sku.text.to_string(), sku.format);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), SqlError>>();
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let sku = SkuParam {
                text: &text,
                format,
            };
            let wait = || {
                while !stopping.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(5));
                }
            };
            match open(&url, timeout) {
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
                Ok(Conn::Pg(mut c)) => {
                    let held = (|| {
                        let mut t = c.transaction().map_err(|e| pg_error(&e))?;
                        let stmt = t.prepare(&locking).map_err(|e| pg_error(&e))?;
                        let key = sku.pg(stmt.params().first())?;
                        t.query(&stmt, &[&*key]).map_err(|e| pg_error(&e))?;
                        let _ = tx.send(Ok(()));
                        wait();
                        t.rollback().map_err(|e| pg_error(&e))
                    })();
                    if let Err(e) = held {
                        let _ = tx.send(Err(e));
                    }
                }
                Ok(Conn::My(mut c)) => {
                    use mysql::prelude::Queryable;
                    let held = (|| {
                        c.query_drop("START TRANSACTION").map_err(my_error)?;
                        let _: Vec<mysql::Row> = c.exec(&locking, (sku.my(),)).map_err(my_error)?;
                        let _ = tx.send(Ok(()));
                        wait();
                        c.query_drop("ROLLBACK").map_err(my_error)
                    })();
                    if let Err(e) = held {
                        let _ = tx.send(Err(e));
                    }
                }
            }
        });
        let lock = RowLock {
            stop,
            thread: Some(thread),
        };
        match rx.recv_timeout(ready) {
            Ok(Ok(())) => Ok(RowHeld::Held(lock)),
            Ok(Err(e)) => Err(e),
            Err(_) => Ok(RowHeld::Queued(lock)),
        }
    }

    /// Ends every session on this database but lockctl's own (PostgreSQL: those not named
    /// [`OWN_APPLICATION`]; MySQL: those whose client socket is not this process's), as a
    /// database restart or failover ends them: how many were ended. A system that opens a
    /// session per request (PHP) often has none open at a given instant, so the look is made
    /// again, on the one connection, every few milliseconds for up to `within`, until one
    /// ends some (a CI run's hunt struck db-kill twice and ended nothing either time).
    pub fn kill_sessions(&self, within: Duration) -> Result<u64, SqlError> {
        let until = Instant::now() + within;
        let mut conn = open(&self.url, self.timeout)?;
        loop {
            let ended = kill_once(&mut conn)?;
            if ended > 0 || Instant::now() >= until {
                return Ok(ended);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// One pass of [`SqlDb::kill_sessions`] on `conn`.
fn kill_once(conn: &mut Conn) -> Result<u64, SqlError> {
    match conn {
        Conn::Pg(c) => {
            let rows = c
                .query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = current_database() AND pid <> pg_backend_pid() \
                         AND backend_type = 'client backend' \
                         AND coalesce(application_name, '') <> $1",
                    &[&OWN_APPLICATION],
                )
                .map_err(|e| pg_error(&e))?;
            Ok(rows.iter().filter(|r| r.get::<_, bool>(0)).count() as u64)
        }
        Conn::My(c) => {
            use mysql::prelude::Queryable;
            let sessions: Vec<(u64, String)> = c
                .query(
                    "SELECT ID, HOST FROM information_schema.PROCESSLIST \
                         WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
                )
                .map_err(my_error)?;
            // The server names a client by its address, or by the name it resolves
            // (`localhost:54321`).
            let addr = |host: &str| -> Option<std::net::SocketAddr> {
                let (name, port) = host.rsplit_once(':')?;
                let ip = match name {
                    "localhost" => "127.0.0.1",
                    ip => ip.trim_start_matches('[').trim_end_matches(']'),
                };
                Some(std::net::SocketAddr::new(
                    ip.parse().ok()?,
                    port.parse().ok()?,
                ))
            };
            let addrs: Vec<std::net::SocketAddr> =
                sessions.iter().filter_map(|(_, h)| addr(h)).collect();
            let owners = crate::owners::owners(&addrs);
            let me = std::process::id() as i32;
            let mut killed = 0;
            for (id, host) in sessions {
                let ours = addr(&host)
                    .and_then(|a| owners.get(&a))
                    .is_some_and(|o| o.pid == me);
                // A session that ended meanwhile is no error.
                if !ours && c.query_drop(format!("KILL {id}")).is_ok() {
                    killed += 1;
                }
            }
            Ok(killed)
        }
    }
}

/// The stock query that takes its row's lock: `FOR UPDATE` on a line of its own, so that a
/// query ending in a `--` comment does not comment it out (an attack: db-lock reported 15 of
/// 15 taken with no row locked, for `... WHERE sku = $1 -- a note`).
fn locking_query(query: &str) -> String {
    format!("{}\nFOR UPDATE", query.trim().trim_end_matches(';'))
}

#[cfg(test)]
mod locking_tests {
    use super::locking_query;

    #[test]
    fn a_trailing_comment_does_not_swallow_for_update() {
        let q = locking_query("SELECT qty FROM stock WHERE sku = $1 -- a note");
        assert_eq!(q.lines().last(), Some("FOR UPDATE"), "{q}");
        assert_eq!(
            locking_query("SELECT qty FROM stock WHERE sku = ?;"),
            "SELECT qty FROM stock WHERE sku = ?\nFOR UPDATE"
        );
    }
}
