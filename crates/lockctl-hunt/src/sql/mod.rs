//! The SQL databases shops keep stock and orders in, asked the user's own queries: PostgreSQL
//! (`postgres://`, through the `postgres` crate lockctl-core already uses) and MySQL or
//! MariaDB (`mysql://`, through the `mysql` crate, pure Rust, no TLS: these are local test
//! databases). The SKU is each query's first parameter (`$1` for PostgreSQL, `?` for MySQL), the
//! count the seed statement's second.
//!
//! The SKU is bound with the type its column has: on PostgreSQL the type the statement infers
//! for the parameter (an integer for `int4`/`int8`, the 16 bytes of a `uuid`, text otherwise);
//! on MySQL, which converts what it is given, an integer when the SKUs are numbers
//! ([`IdFormat::Int`]) and text otherwise.

mod faults;
mod values;

use std::sync::Mutex;
use std::time::Duration;

pub use crate::error::SqlError;
pub use faults::{RowHeld, RowLock};
use lockctl_core::redact::{redact, scrub};
use lockctl_hammer::http::ids::IdFormat;
use values::{my_integer, my_text, pg_integer, pg_text};

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
    pub fn connect(url: &str, timeout: Duration) -> Result<SqlDb, SqlError> {
        Ok(SqlDb {
            shown: redact(url),
            url: url.to_string(),
            timeout,
            conn: Mutex::new(open(url, timeout)?),
        })
    }

    /// The same database on a connection of its own.
    pub fn another(&self) -> Result<SqlDb, SqlError> {
        SqlDb::connect(&self.url, self.timeout)
    }

    /// `f` on the connection; when it fails, once more on a fresh connection (the server may
    /// have dropped the old one), and the first error if that cannot be had.
    fn with<T>(&self, f: impl Fn(&mut Conn) -> Result<T, SqlError>) -> Result<T, SqlError> {
        let mut conn = self.conn.lock().map_err(|_| SqlError::Poisoned)?;
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
    pub fn check_columns(&self, query: &str, min: usize, integer: usize) -> Result<(), SqlError> {
        self.with(|c| {
            let types: Vec<String> = match c {
                Conn::Pg(c) => {
                    let stmt = c.prepare(query).map_err(|e| pg_error(&e))?;
                    stmt.columns()
                        .iter()
                        .map(|c| c.type_().name().to_string())
                        .collect()
                }
                Conn::My(c) => {
                    use mysql::prelude::Queryable;
                    let stmt = c.prep(query).map_err(my_error)?;
                    stmt.columns()
                        .iter()
                        .map(|c| format!("{:?}", c.column_type()))
                        .collect()
                }
            };
            if types.len() < min {
                return Err(SqlError::TooFewColumns {
                    found: types.len(),
                    needed: min,
                });
            }
            let t = types[integer].to_ascii_lowercase();
            let integral = [
                "int", "text", "varchar", "char", "long", "short", "tiny", "string",
            ]
            .iter()
            .any(|k| t.contains(k));
            match integral && !t.contains("decimal") && !t.contains("numeric") {
                true => Ok(()),
                false => Err(SqlError::NotIntegerColumn {
                    column: integer + 1,
                    ty: types[integer].clone(),
                }),
            }
        })
    }
}

/// Opens a connection to `url` within `timeout`; a scheme other than PostgreSQL's or MySQL's is
/// an error that names the URL.
fn open(url: &str, timeout: Duration) -> Result<Conn, SqlError> {
    {
        let shown = redact(url);
        let fail = |e: &dyn std::fmt::Display| SqlError::Connect {
            url: shown.clone(),
            reason: scrub(&e.to_string(), url),
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
            return Err(SqlError::Scheme { url: shown });
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
    pub fn integer(&self, query: &str, sku: SkuParam) -> Result<i64, SqlError> {
        self.with(|conn| match conn {
            Conn::Pg(c) => {
                let stmt = c.prepare(query).map_err(|e| pg_error(&e))?;
                let key = sku.pg(stmt.params().first())?;
                let rows = c.query(&stmt, &[&*key]).map_err(|e| pg_error(&e))?;
                match rows.as_slice() {
                    [row] if row.len() == 1 => Ok(pg_integer(row, 0)?),
                    rows => Err(shape(rows.len(), rows.first().map_or(0, |r| r.len()))),
                }
            }
            Conn::My(c) => {
                use mysql::prelude::Queryable;
                let rows: Vec<mysql::Row> = c.exec(query, (sku.my(),)).map_err(my_error)?;
                match rows.as_slice() {
                    [row] if row.len() == 1 => Ok(my_integer(row, 0)?),
                    rows => Err(shape(rows.len(), rows.first().map_or(0, |r| r.len()))),
                }
            }
        })
    }

    /// `statement` with the SKU and `count` as its two parameters (the seed).
    pub fn execute(&self, statement: &str, sku: SkuParam, count: i64) -> Result<(), SqlError> {
        self.with(|conn| match conn {
            Conn::Pg(c) => {
                let stmt = c.prepare(statement).map_err(|e| pg_error(&e))?;
                let key = sku.pg(stmt.params().first())?;
                let sku = &*key;
                // The count's type is the one the statement infers for its parameter.
                let small = i32::try_from(count).ok();
                let result = match stmt.params().get(1) {
                    Some(t) if *t == postgres::types::Type::INT4 => {
                        c.execute(&stmt, &[sku, &small.ok_or(SqlError::CountBeyondInt4)?])
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
                c.exec_drop(statement, (sku.my(), count)).map_err(my_error)
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
                    .map_err(my_error)
            }
        })
    }

    /// `query` with the SKU as its one parameter: rows of (order id, units[, user]).
    pub fn orders(&self, query: &str, sku: SkuParam) -> Result<Vec<OrderRow>, SqlError> {
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
                let rows: Vec<mysql::Row> = c.exec(query, (sku.my(),)).map_err(my_error)?;
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

fn shape(rows: usize, columns: usize) -> SqlError {
    SqlError::Shape { rows, columns }
}

fn columns(n: usize) -> SqlError {
    SqlError::OrderColumns(n)
}

/// PostgreSQL's error in its words: the SQLSTATE and the message, when the server sent one.
fn pg_error(e: &postgres::Error) -> SqlError {
    SqlError::Database(match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    })
}

/// MySQL's error in its words.
fn my_error(e: mysql::Error) -> SqlError {
    SqlError::Database(e.to_string())
}

/// The name lockctl's own PostgreSQL sessions give themselves (`application_name`), so that
/// `db-kill` tells them from the system's.
pub const OWN_APPLICATION: &str = "lockctl-hunt";
