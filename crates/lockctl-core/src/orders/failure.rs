//! What a worker's failure calls for: waiting it out, setting a batch aside, dead-lettering
//! rows, or stopping for an operator. The one rule that keeps paid orders: a row is refused for
//! its own data only by an allow-list of SQLSTATE classes; anything else is the server's.

use crate::error::Error;

/// What a failure calls for.
pub(super) enum Failure {
    /// Waiting fixes it: the server restarting, refusing logins, out of connections or disk,
    /// a lost connection, a database being restored; anything not named below.
    Retry,
    /// PostgreSQL refused the rows themselves (see [`refused_for_its_data`]): the same rows
    /// will always fail.
    BadRows,
    /// Another session holds the rows locked past `lock_timeout` (55P03), or the statement ran
    /// past `statement_timeout` (57014): leave the batch for later, go on with the others.
    Locked,
    /// Only an operator fixes it: a table of the schema dropped (42P01 and the other errors of
    /// a schema that is not lockctl's, class 42 but for a privilege withdrawn), a Redis key of
    /// the wrong type. The batch stays pending; the worker ends saying what to run.
    Fatal,
}

/// The allow-list of SQLSTATE classes that refuse a row for its own data: data exceptions
/// (22: a value out of range, a byte the encoding cannot hold), integrity constraints (23: a
/// check a DBA added) and program limits (54: a key too long to index). Never a fall-through:
/// a class not named here is the server's trouble, and dead-lettering a paid order for it
/// would lose the order.
fn refused_for_its_data(sqlstate: &str) -> bool {
    matches!(sqlstate.get(..2), Some("22" | "23" | "54"))
}

pub(super) fn classify(e: &Error) -> Failure {
    match e {
        Error::WrongTypeKey { .. } => Failure::Fatal,
        // A trigger or a function of the server's failed: its trouble, whatever the class
        // (a division by zero in an audit trigger is 22012, but the row is fine).
        Error::Database {
            server_code: true, ..
        } => Failure::Retry,
        Error::Database {
            sqlstate: Some(code),
            ..
        } => match code.as_str() {
            "55P03" | "57014" => Failure::Locked,
            "42501" => Failure::Retry,
            c if c.starts_with("42") => Failure::Fatal,
            c if refused_for_its_data(c) => Failure::BadRows,
            _ => Failure::Retry,
        },
        Error::Database {
            hint: Some(crate::Hint::InitSchema { .. }),
            ..
        } => Failure::Fatal,
        _ => Failure::Retry,
    }
}
