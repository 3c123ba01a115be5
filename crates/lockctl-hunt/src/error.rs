//! The hunt's errors, as values: each carries what a message needs (the command, the address,
//! the query's trouble), and none names a flag; the program words them and adds the flag that
//! fixes each.

use std::net::SocketAddr;
use std::process::ExitStatus;

use crate::nemesis::kind::FaultKind;

/// Why a hunt ended without a report.
#[derive(Debug, thiserror::Error)]
pub enum HuntError {
    /// A call of the hunt's own failed (Redis, the system's answers, a login, the stock
    /// store): the load tester's error, which carries a core error whole.
    #[error(transparent)]
    Run(#[from] lockctl_hammer::Error),
    /// The system under test was killed by a fault and could not be started again: its rounds
    /// could no longer be told from its failures.
    #[error("the hunt cannot go on: could not restart the system after a kill: {0}")]
    Restart(#[source] ServeError),
}

impl From<lockctl_core::Error> for HuntError {
    fn from(e: lockctl_core::Error) -> Self {
        HuntError::Run(e.into())
    }
}

/// The system under test could not be started, or never became ready.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No directory for its output.
    #[error("no temporary directory: {0}")]
    TempDir(#[source] std::io::Error),
    /// Its output file could not be opened.
    #[error("could not open its output file: {0}")]
    Log(#[source] std::io::Error),
    /// `sh` could not be started.
    #[error("could not start '{command}': {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// A stop was asked for while it started.
    #[error("interrupted while '{command}' was starting")]
    Interrupted {
        /// The command.
        command: String,
    },
    /// It exited before it was ready.
    #[error("'{command}' exited ({status}) before {addr} answered; its output ends:\n{tail}")]
    Exited {
        /// The command.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// The address it was awaited at.
        addr: SocketAddr,
        /// The last lines of its output.
        tail: String,
    },
    /// Its address never accepted a connection in time.
    #[error("'{command}' never answered at {addr} within {within_s} s; its output ends:\n{tail}")]
    NeverAnswered {
        /// The command.
        command: String,
        /// The address it was awaited at.
        addr: SocketAddr,
        /// How long it was given.
        within_s: u64,
        /// The last lines of its output.
        tail: String,
    },
    /// Its readiness URL's certificate was refused: no answer will come by waiting.
    #[error("'{ready}': {message}")]
    ReadyRefused {
        /// The readiness URL, secrets hidden.
        ready: String,
        /// What was refused, and why.
        message: String,
        /// What to do about it.
        hint: lockctl_core::hint::Hint,
    },
    /// Its readiness URL was never answered 2xx in time.
    #[error(
        "'{command}' was not ready within {within_s} s: '{ready}' was never answered 2xx (the last: {last}); its output ends:\n{tail}"
    )]
    NotReady {
        /// The command.
        command: String,
        /// How long it was given.
        within_s: u64,
        /// The readiness URL, secrets hidden.
        ready: String,
        /// The last answer to it (or why there was none).
        last: String,
        /// The last lines of its output.
        tail: String,
    },
}

/// The fault-injecting proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The address to listen on could not be bound.
    #[error("cannot listen on '{listen}': {source}")]
    Listen {
        /// The address as given.
        listen: String,
        /// Why.
        source: std::io::Error,
    },
    /// The bound socket could not be set up.
    #[error("{0}")]
    Socket(#[source] std::io::Error),
    /// Its thread could not be started.
    #[error("could not start the proxy: {0}")]
    Thread(#[source] std::io::Error),
}

/// A fault the hunt's Redis will not let lockctl do (asked before the hunt).
#[derive(Debug, thiserror::Error)]
pub enum FaultCheckError {
    /// The Redis could not be reached.
    #[error("Redis at {addr}: {source}")]
    Connect {
        /// Its address.
        addr: String,
        /// Why.
        source: Box<lockctl_core::error::Error>,
    },
    /// The server lacks what the fault needs (a version that has the command).
    #[error("{source}")]
    Unsupported {
        /// The fault.
        kind: FaultKind,
        /// What the server lacks.
        source: Box<lockctl_core::error::Error>,
    },
    /// The server refused the command the fault uses (managed services often do).
    #[error(
        "{} needs CLIENT {command} on Redis at {addr}, which refused it ({reason})",
        kind.name()
    )]
    Refused {
        /// The fault.
        kind: FaultKind,
        /// The command, after `CLIENT`.
        command: &'static str,
        /// The Redis's address.
        addr: String,
        /// The server's answer.
        reason: String,
    },
}

/// One of the user's SQL statements, or its database, failed; the words say what of it.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// No connection could be had (the URL shown without its password, the reason scrubbed
    /// of it).
    #[error("could not connect to '{url}': {reason}")]
    Connect {
        /// The URL, password hidden.
        url: String,
        /// Why, secrets hidden.
        reason: String,
    },
    /// The URL is of neither database.
    #[error(
        "'{url}' is neither a PostgreSQL URL (postgres://user@host/db) nor a MySQL or MariaDB one (mysql://user@host/db)"
    )]
    Scheme {
        /// The URL, password hidden.
        url: String,
    },
    /// The database refused or failed the statement, in its words.
    #[error("{0}")]
    Database(String),
    /// The SKU is not a number, and the parameter is of an integer type.
    #[error(
        "the SKU '{sku}' is bound to a parameter of type {ty}, and it is not a number (give the SKUs as integers)"
    )]
    SkuNotNumber {
        /// The SKU.
        sku: String,
        /// The parameter's type.
        ty: String,
    },
    /// The SKU is a number too large for the parameter's type.
    #[error("the SKU '{sku}' does not fit the parameter's type {ty}")]
    SkuTooLarge {
        /// The SKU.
        sku: String,
        /// The parameter's type.
        ty: &'static str,
    },
    /// The SKU is not a UUID, and the parameter is one.
    #[error(
        "the SKU '{sku}' is bound to a parameter of type uuid, and it is not a UUID (give the SKUs as UUIDs)"
    )]
    SkuNotUuid {
        /// The SKU.
        sku: String,
    },
    /// The count does not fit the statement's `int4` parameter.
    #[error("a count beyond int4")]
    CountBeyondInt4,
    /// A stock query returned something other than one row of one integer.
    #[error("it must return one row of one integer, and returned {rows} row(s){}", of_columns(*rows, *columns))]
    Shape {
        /// Rows returned.
        rows: usize,
        /// Columns of the first row.
        columns: usize,
    },
    /// An orders query returned a row of too few columns.
    #[error("it must return order_id, qty and optionally user; a row had {0} column(s)")]
    OrderColumns(usize),
    /// The query returns fewer columns than needed.
    #[error("it returns {found} column(s), and {needed} are needed")]
    TooFewColumns {
        /// Its columns.
        found: usize,
        /// The columns needed.
        needed: usize,
    },
    /// The column that must be an integer is of another type.
    #[error(
        "its column {column} is of type {ty}, not an integer (cast it: CAST(... AS SIGNED) on MySQL, ::bigint on PostgreSQL)"
    )]
    NotIntegerColumn {
        /// The column, from 1.
        column: usize,
        /// Its type.
        ty: String,
    },
    /// A value read is not what it must be.
    #[error("{0}")]
    Value(#[from] BadValue),
    /// The stock read is beyond any stock count.
    #[error("it read {n}, not a stock count (at most {bound} either side of zero)")]
    NotAStock {
        /// What it read.
        n: i64,
        /// The largest stock either side of zero.
        bound: u64,
    },
    /// A thread that held the connection panicked.
    #[error("a poisoned connection")]
    Poisoned,
}

/// ` of N column(s)` after a count of rows, when there were any.
fn of_columns(rows: usize, columns: usize) -> String {
    match rows {
        0 => String::new(),
        _ => format!(" of {columns} column(s)"),
    }
}

/// A value of a row that is not what the query must return.
#[derive(Debug, thiserror::Error)]
pub enum BadValue {
    /// A NULL where an integer must be.
    #[error("a NULL, not an integer")]
    Null,
    /// A text that does not read as an integer.
    #[error("a text that is not an integer")]
    TextNotInteger,
    /// A value that does not read as an integer.
    #[error("a value that is not an integer")]
    NotInteger,
    /// An unsigned integer beyond `i64`.
    #[error("an integer beyond i64")]
    BeyondI64,
    /// A column of a type that holds no integer.
    #[error("a column of type {0}, not an integer (cast it: ::bigint)")]
    ColumnType(String),
    /// A value of another kind (as the driver shows it).
    #[error("{0}, not an integer")]
    Other(String),
    /// An order id that is neither text nor a number.
    #[error("an order id that is neither text nor a number")]
    OrderId,
    /// The driver could not read the value.
    #[error("{0}")]
    Read(String),
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The hunt's words name no program's flags: its errors carry values, and the program
    /// says which flag fixes them. Reads every source file and fails on a line of code (not a
    /// comment) that names a long flag.
    #[test]
    fn no_message_of_the_hunt_names_a_flag() {
        let mut found = Vec::new();
        let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (n, line) in text.lines().enumerate() {
                    let code = line.trim_start();
                    let flag = code.match_indices("--").any(|(i, _)| {
                        code[i + 2..]
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_lowercase())
                    });
                    if flag && !code.starts_with("//") {
                        found.push(format!("{}:{}: {code}", path.display(), n + 1));
                    }
                }
            }
        }
        assert!(found.is_empty(), "{}", found.join("\n"));
    }
}
