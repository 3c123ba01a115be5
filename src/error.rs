//! The library's error type: real failures only.
//!
//! Expected outcomes (busy, sold out, lease lost) are values of the lock and stock modules, never
//! errors. Every variant here names the value at fault and, where a flag or command fixes it, says
//! which. None of them ever carries a password: addresses are `host:port` as the connection
//! module renders them, and URLs pass through [`crate::conn::redact_url`] first.

use std::time::Duration;

/// What went wrong talking to Redis or reading what it holds.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--redis` URL could not be parsed.
    #[error("invalid Redis URL '{url}': {reason} (see --redis)")]
    BadUrl { url: String, reason: String },

    /// No connection could be opened.
    #[error(
        "could not connect to Redis at '{addr}': {reason} (is redis-server running? see --redis)"
    )]
    Connect { addr: String, reason: String },

    /// TLS settings that cannot work (a file that cannot be read, a flag without rediss://).
    #[error("TLS: {reason}")]
    Tls { reason: String },

    /// Opening a connection took longer than its limit. Nothing was sent.
    #[error("timed out after {} ms connecting to {addr} (see --connect-timeout-ms)", .after.as_millis())]
    ConnectTimeout { addr: String, after: Duration },

    /// A call took longer than the per-call limit.
    #[error("timed out after {} ms talking to {addr} (see --timeout-ms)", .after.as_millis())]
    Timeout { addr: String, after: Duration },

    /// The server refused the credentials.
    #[error(
        "Redis at '{addr}' refused the credentials: {reason} (check the user and password in --redis)"
    )]
    Auth { addr: String, reason: String },

    /// The SKU's stock key does not exist.
    #[error("'{sku}' has no stock in Redis (seed it first: lockctl seed {sku} <COUNT>)")]
    Unseeded { sku: String },

    /// The SKU's stock key holds something that is not an integer.
    #[error(
        "the stock of '{sku}' ('{key}') holds {value}, not an integer; nothing was changed (reset it with: lockctl seed {sku} <COUNT>)"
    )]
    BadStock {
        sku: String,
        key: String,
        value: String,
    },

    /// Any other failure reported by Redis or the connection.
    #[error("Redis at '{addr}' failed: {reason}")]
    Redis {
        addr: String,
        reason: String,
        /// The server's error code (`WRONGTYPE`, `NOSCRIPT`, ...) when the server replied.
        code: Option<String>,
        /// Whether the failure happened after the command may have reached the server, so that
        /// its effect is unknown (Jepsen's "indeterminate").
        indeterminate: bool,
    },
}

impl Error {
    /// A short, stable name for the kind of failure, used by the hammer to count errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::BadUrl { .. } => "bad_url",
            Error::Tls { .. } => "tls",
            Error::Connect { .. } => "refused",
            Error::Timeout { .. } | Error::ConnectTimeout { .. } => "timed_out",
            Error::Auth { .. } => "auth",
            Error::Unseeded { .. } => "unseeded",
            Error::BadStock { .. } => "bad_stock",
            Error::Redis { .. } => "redis",
        }
    }

    /// The same failure, marked as possibly applied.
    pub fn into_indeterminate(self) -> Error {
        match self {
            Error::Redis {
                addr, reason, code, ..
            } => Error::Redis {
                addr,
                reason,
                code,
                indeterminate: true,
            },
            e => e,
        }
    }

    /// True when the failed call may still have been applied by the server.
    pub fn is_indeterminate(&self) -> bool {
        match self {
            Error::Timeout { .. } => true,
            Error::Redis { indeterminate, .. } => *indeterminate,
            _ => false,
        }
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
