//! The SQL databases shops keep stock and orders in, asked the user's own queries: PostgreSQL
//! (`postgres://`, through the `postgres` crate lockctl-core already uses) and MySQL or
//! MariaDB (`mysql://`, through the `mysql` crate, pure Rust, no TLS: these are local test
//! databases). The SKU is each query's first parameter (`$1` for PostgreSQL, `?` for MySQL), the
//! count the seed's second.
//!
//! The SKU is bound with the type its column has: on PostgreSQL the type the statement infers
//! for the parameter (an integer for `int4`/`int8`, the 16 bytes of a `uuid`, text otherwise);
//! on MySQL, which converts what it is given, an integer when the SKUs are numbers
//! ([`IdFormat::Int`]) and text otherwise.

use std::sync::Mutex;
use std::time::Duration;

use lockctl_core::redact::{redact, scrub};
use lockctl_hammer::http::ids::IdFormat;

/// A SKU as a statement's parameter: its text and the format of the hunt's SKUs.
#[derive(Clone, Copy, Debug)]
pub struct SkuParam<'a> {
    /// The SKU as written.
    pub text: &'a str,
    /// What the SKUs are.
    pub format: IdFormat,
}

impl<'a> From<&'a str> for SkuParam<'a> {
    fn from(text: &'a str) -> Self {
        SkuParam {
            text,
            format: IdFormat::Text,
        }
    }
}

impl SkuParam<'_> {
    /// The SKU as PostgreSQL's parameter of type `ty`.
    fn pg(
        &self,
        ty: Option<&postgres::types::Type>,
    ) -> Result<Box<dyn postgres::types::ToSql + Sync>, String> {
        use postgres::types::Type;
        let number = || -> Result<i64, String> {
            self.text.parse().map_err(|_| {
                format!(
                    "the SKU '{}' is bound to a parameter of type {}, and it is not a number (give the SKUs as integers)",
                    self.text,
                    ty.map_or("integer".into(), |t| t.to_string())
                )
            })
        };
        let out_of = |t: &str| {
            format!(
                "the SKU '{}' does not fit the parameter's type {t}",
                self.text
            )
        };
        Ok(match ty {
            Some(t) if *t == Type::INT8 => Box::new(number()?),
            Some(t) if *t == Type::INT4 => {
                Box::new(i32::try_from(number()?).map_err(|_| out_of("int4"))?)
            }
            Some(t) if *t == Type::INT2 => {
                Box::new(i16::try_from(number()?).map_err(|_| out_of("int2"))?)
            }
            Some(t) if *t == Type::UUID => Box::new(PgUuid::parse(self.text).ok_or_else(|| {
                format!(
                    "the SKU '{}' is bound to a parameter of type uuid, and it is not a UUID (give the SKUs as UUIDs)",
                    self.text
                )
            })?),
            _ => Box::new(self.text.to_string()),
        })
    }

    /// The SKU as MySQL's parameter.
    fn my(&self) -> mysql::Value {
        match (self.format, self.text.parse::<i64>()) {
            (IdFormat::Int, Ok(n)) => mysql::Value::Int(n),
            _ => mysql::Value::Bytes(self.text.as_bytes().to_vec()),
        }
    }
}

/// A UUID as PostgreSQL sends and takes it: 16 bytes.
#[derive(Debug)]
struct PgUuid([u8; 16]);

impl PgUuid {
    fn parse(text: &str) -> Option<PgUuid> {
        if !lockctl_hammer::http::ids::is_uuid(text) {
            return None;
        }
        let mut b = [0u8; 16];
        hex::decode_to_slice(text.replace('-', ""), &mut b).ok()?;
        Some(PgUuid(b))
    }
}

impl postgres::types::ToSql for PgUuid {
    fn to_sql(
        &self,
        _: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(&self.0);
        Ok(postgres::types::IsNull::No)
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::UUID
    }

    postgres::types::to_sql_checked!();
}

impl<'a> postgres::types::FromSql<'a> for PgUuid {
    fn from_sql(
        _: &postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(PgUuid(raw.try_into()?))
    }

    fn accepts(ty: &postgres::types::Type) -> bool {
        *ty == postgres::types::Type::UUID
    }
}

/// A connection to the database behind one of the hunt's SQL flags.
pub struct SqlDb {
    /// The URL with its password hidden, for messages.
    shown: String,
    /// To connect again when a connection breaks.
    url: String,
    timeout: Duration,
    conn: Mutex<Conn>,
}

enum Conn {
    Pg(Box<postgres::Client>),
    My(Box<mysql::Conn>),
}

/// A statement the database refused or could not run, in its words.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SqlError(pub String);

/// One order row: its id, units and, when the query returns a third column, its user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderRow {
    /// The order id (the first column).
    pub order: String,
    /// Its units (the second column).
    pub qty: i64,
    /// Its user (the third column); `None` when the query returns two columns.
    pub user: Option<String>,
}

impl SqlDb {
    /// Connects to `url` within `timeout`; a scheme other than PostgreSQL's or MySQL's is an
    /// error that names the URL.
    pub fn connect(url: &str, timeout: Duration) -> Result<SqlDb, String> {
        Ok(SqlDb {
            shown: redact(url),
            url: url.to_string(),
            timeout,
            conn: Mutex::new(open(url, timeout)?),
        })
    }

    /// The same database on a connection of its own.
    pub fn another(&self) -> Result<SqlDb, String> {
        SqlDb::connect(&self.url, self.timeout)
    }

    /// `f` on the connection; when it fails, once more on a fresh connection (the server may
    /// have dropped the old one), and the first error if that cannot be had.
    fn with<T>(&self, f: impl Fn(&mut Conn) -> Result<T, String>) -> Result<T, String> {
        let mut conn = self.conn.lock().map_err(|_| "a poisoned connection")?;
        match f(&mut conn) {
            Ok(v) => Ok(v),
            Err(first) => match open(&self.url, self.timeout) {
                Ok(fresh) => {
                    *conn = fresh;
                    f(&mut conn)
                }
                Err(_) => Err(first),
            },
        }
    }

    /// Checks `query`'s result columns without running it: at least `min` of them, the one at
    /// `integer` of an integer or text type (numbers with a fraction are refused, naming the
    /// cast that fixes them).
    pub fn check_columns(&self, query: &str, min: usize, integer: usize) -> Result<(), String> {
        self.with(|c| {
            let types: Vec<String> = match c {
                Conn::Pg(c) => {
                    let stmt = c.prepare(query).map_err(|e| pg_error(&e))?;
                    stmt.columns().iter().map(|c| c.type_().name().to_string()).collect()
                }
                Conn::My(c) => {
                    use mysql::prelude::Queryable;
                    let stmt = c.prep(query).map_err(|e| e.to_string())?;
                    stmt.columns()
                        .iter()
                        .map(|c| format!("{:?}", c.column_type()))
                        .collect()
                }
            };
            if types.len() < min {
                return Err(format!(
                    "it returns {} column(s), and {min} are needed",
                    types.len()
                ));
            }
            let t = types[integer].to_ascii_lowercase();
            let integral = ["int", "text", "varchar", "char", "long", "short", "tiny", "string"]
                .iter()
                .any(|k| t.contains(k));
            match integral && !t.contains("decimal") && !t.contains("numeric") {
                true => Ok(()),
                false => Err(format!(
                    "its column {} is of type {}, not an integer (cast it: CAST(... AS SIGNED) on MySQL, ::bigint on PostgreSQL)",
                    integer + 1,
                    types[integer]
                )),
            }
        })
    }
}

/// Opens a connection to `url` within `timeout`; a scheme other than PostgreSQL's or MySQL's is
/// an error that names the URL.
fn open(url: &str, timeout: Duration) -> Result<Conn, String> {
    {
        let shown = redact(url);
        let fail = |e: &dyn std::fmt::Display| {
            format!(
                "could not connect to '{shown}': {}",
                scrub(&e.to_string(), url)
            )
        };
        let conn = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let mut config: postgres::Config = url.parse().map_err(|e| fail(&e))?;
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(timeout);
            }
            // So that db-kill tells lockctl's sessions from the system's.
            config.application_name(OWN_APPLICATION);
            Conn::Pg(Box::new(
                config.connect(postgres::NoTls).map_err(|e| fail(&e))?,
            ))
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let opts = mysql::Opts::from_url(&url).map_err(|e| fail(&e))?;
            let opts = mysql::OptsBuilder::from_opts(opts)
                .tcp_connect_timeout(Some(timeout))
                // On TCP, never the server's socket file: db-kill tells lockctl's sessions
                // by their client address.
                .prefer_socket(false)
                .read_timeout(Some(timeout * 5))
                .write_timeout(Some(timeout * 5));
            Conn::My(Box::new(mysql::Conn::new(opts).map_err(|e| fail(&e))?))
        } else {
            return Err(format!(
                "'{shown}' is neither a PostgreSQL URL (postgres://user@host/db) nor a MySQL or MariaDB one (mysql://user@host/db)"
            ));
        };
        Ok(conn)
    }
}

impl SqlDb {
    /// The URL, password hidden.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// `query` with the SKU as its one parameter: one row of one integer, or an error saying
    /// what came back instead.
    pub fn integer(&self, query: &str, sku: SkuParam) -> Result<i64, String> {
        self.with(|conn| match conn {
            Conn::Pg(c) => {
                let stmt = c.prepare(query).map_err(|e| pg_error(&e))?;
                let key = sku.pg(stmt.params().first())?;
                let rows = c.query(&stmt, &[&*key]).map_err(|e| pg_error(&e))?;
                match rows.as_slice() {
                    [row] if row.len() == 1 => pg_integer(row, 0),
                    rows => Err(shape(rows.len(), rows.first().map_or(0, |r| r.len()))),
                }
            }
            Conn::My(c) => {
                use mysql::prelude::Queryable;
                let rows: Vec<mysql::Row> =
                    c.exec(query, (sku.my(),)).map_err(|e| e.to_string())?;
                match rows.as_slice() {
                    [row] if row.len() == 1 => my_integer(row, 0),
                    rows => Err(shape(rows.len(), rows.first().map_or(0, |r| r.len()))),
                }
            }
        })
    }

    /// `statement` with the SKU and `count` as its two parameters (the seed).
    pub fn execute(&self, statement: &str, sku: SkuParam, count: i64) -> Result<(), String> {
        self.with(|conn| match conn {
            Conn::Pg(c) => {
                let stmt = c.prepare(statement).map_err(|e| pg_error(&e))?;
                let key = sku.pg(stmt.params().first())?;
                let sku = &*key;
                // The count's type is the one the statement infers for its parameter.
                let small = i32::try_from(count).ok();
                let result = match stmt.params().get(1) {
                    Some(t) if *t == postgres::types::Type::INT4 => {
                        c.execute(&stmt, &[sku, &small.ok_or("a count beyond int4")?])
                    }
                    Some(t) if *t == postgres::types::Type::TEXT => {
                        c.execute(&stmt, &[sku, &count.to_string()])
                    }
                    _ => c.execute(&stmt, &[sku, &count]),
                };
                result.map(|_| ()).map_err(|e| pg_error(&e))
            }
            Conn::My(c) => {
                use mysql::prelude::Queryable;
                c.exec_drop(statement, (sku.my(), count))
                    .map_err(|e| e.to_string())
            }
        })
    }

    /// `statement` with the SKU as its one parameter (a delete): the rows it affected.
    pub fn delete(&self, statement: &str, sku: SkuParam) -> Result<u64, SqlError> {
        self.with(|conn| match conn {
            Conn::Pg(c) => {
                let stmt = c.prepare(statement).map_err(|e| pg_error(&e))?;
                let key = sku.pg(stmt.params().first())?;
                c.execute(&stmt, &[&*key]).map_err(|e| pg_error(&e))
            }
            Conn::My(c) => {
                use mysql::prelude::Queryable;
                c.exec_drop(statement, (sku.my(),))
                    .map(|()| c.affected_rows())
                    .map_err(|e| e.to_string())
            }
        })
        .map_err(SqlError)
    }

    /// `query` with the SKU as its one parameter: rows of (order id, units[, user]).
    pub fn orders(&self, query: &str, sku: SkuParam) -> Result<Vec<OrderRow>, String> {
        self.with(|conn| match conn {
            Conn::Pg(c) => {
                let stmt = c.prepare(query).map_err(|e| pg_error(&e))?;
                let key = sku.pg(stmt.params().first())?;
                let rows = c.query(&stmt, &[&*key]).map_err(|e| pg_error(&e))?;
                rows.iter()
                    .map(|r| {
                        if r.len() < 2 {
                            return Err(columns(r.len()));
                        }
                        Ok(OrderRow {
                            order: pg_text(r, 0)?,
                            qty: pg_integer(r, 1)?,
                            user: (r.len() > 2).then(|| pg_text(r, 2)).transpose()?,
                        })
                    })
                    .collect()
            }
            Conn::My(c) => {
                use mysql::prelude::Queryable;
                let rows: Vec<mysql::Row> =
                    c.exec(query, (sku.my(),)).map_err(|e| e.to_string())?;
                rows.iter()
                    .map(|r| {
                        if r.len() < 2 {
                            return Err(columns(r.len()));
                        }
                        Ok(OrderRow {
                            order: my_text(r, 0)?,
                            qty: my_integer(r, 1)?,
                            user: (r.len() > 2).then(|| my_text(r, 2)).transpose()?,
                        })
                    })
                    .collect()
            }
        })
    }
}

fn shape(rows: usize, columns: usize) -> String {
    format!(
        "it must return one row of one integer, and returned {rows} row(s){}",
        if rows > 0 {
            format!(" of {columns} column(s)")
        } else {
            String::new()
        }
    )
}

fn columns(n: usize) -> String {
    format!("it must return order_id, qty and optionally user; a row had {n} column(s)")
}

fn pg_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

fn pg_integer(row: &postgres::Row, i: usize) -> Result<i64, String> {
    use postgres::types::Type;
    let t = row.columns()[i].type_().clone();
    let read = match t {
        Type::INT8 => row.try_get::<_, Option<i64>>(i),
        Type::INT4 => row.try_get::<_, Option<i32>>(i).map(|v| v.map(i64::from)),
        Type::INT2 => row.try_get::<_, Option<i16>>(i).map(|v| v.map(i64::from)),
        Type::TEXT | Type::VARCHAR => {
            return row
                .try_get::<_, Option<String>>(i)
                .map_err(|e| e.to_string())?
                .ok_or("a NULL, not an integer")?
                .trim()
                .parse()
                .map_err(|_| "a text that is not an integer".into());
        }
        other => {
            return Err(format!(
                "a column of type {other}, not an integer (cast it: ::bigint)"
            ));
        }
    };
    read.map_err(|e| e.to_string())?
        .ok_or_else(|| "a NULL, not an integer".into())
}

fn pg_text(row: &postgres::Row, i: usize) -> Result<String, String> {
    use postgres::types::Type;
    match row.columns()[i].type_().clone() {
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            row.try_get::<_, String>(i).map_err(|e| e.to_string())
        }
        Type::UUID => row
            .try_get::<_, PgUuid>(i)
            .map(|u| lockctl_hammer::http::ids::uuid_text(u.0))
            .map_err(|e| e.to_string()),
        _ => pg_integer(row, i).map(|n| n.to_string()),
    }
}

fn my_integer(row: &mysql::Row, i: usize) -> Result<i64, String> {
    match row.as_ref(i) {
        Some(mysql::Value::Int(n)) => Ok(*n),
        Some(mysql::Value::UInt(n)) => {
            i64::try_from(*n).map_err(|_| "an integer beyond i64".into())
        }
        Some(mysql::Value::Bytes(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| "a value that is not an integer".into()),
        Some(mysql::Value::NULL) | None => Err("a NULL, not an integer".into()),
        Some(other) => Err(format!("{other:?}, not an integer")),
    }
}

fn my_text(row: &mysql::Row, i: usize) -> Result<String, String> {
    match row.as_ref(i) {
        Some(mysql::Value::Bytes(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        Some(mysql::Value::Int(n)) => Ok(n.to_string()),
        Some(mysql::Value::UInt(n)) => Ok(n.to_string()),
        _ => Err("an order id that is neither text nor a number".into()),
    }
}

/// The name lockctl's own PostgreSQL sessions give themselves (`application_name`), so that
/// `db-kill` tells them from the system's.
pub const OWN_APPLICATION: &str = "lockctl-hunt";

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
    pub fn hold_row(&self, query: &str, sku: SkuParam, ready: Duration) -> Result<RowHeld, String> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let locking = format!("{} FOR UPDATE", query.trim().trim_end_matches(';'));
        let (url, timeout) = (self.url.clone(), self.timeout);
        let (text, format) = (sku.text.to_string(), sku.format);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
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
                        c.query_drop("START TRANSACTION")
                            .map_err(|e| e.to_string())?;
                        let _: Vec<mysql::Row> =
                            c.exec(&locking, (sku.my(),)).map_err(|e| e.to_string())?;
                        let _ = tx.send(Ok(()));
                        wait();
                        c.query_drop("ROLLBACK").map_err(|e| e.to_string())
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
    /// database restart or failover ends them: how many were ended.
    pub fn kill_sessions(&self) -> Result<u64, String> {
        match open(&self.url, self.timeout)? {
            Conn::Pg(mut c) => {
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
            Conn::My(mut c) => {
                use mysql::prelude::Queryable;
                let sessions: Vec<(u64, String)> = c
                    .query(
                        "SELECT ID, HOST FROM information_schema.PROCESSLIST \
                         WHERE DB = DATABASE() AND ID <> CONNECTION_ID()",
                    )
                    .map_err(|e| e.to_string())?;
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
                let owners = super::owners::owners(&addrs);
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
}
