//! The library's error type: real failures only.
//!
//! Expected outcomes (busy, sold out, lease lost) are values of the lock and stock modules, never
//! errors. Every variant here names the value at fault and, where a flag or command fixes it, says
//! which. None of them ever carries a password: addresses are `host:port` as the connection
//! module renders them, and URLs pass through [`crate::conn::redact_url`] first.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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

    /// Something answered that does not speak Redis's protocol (an HTTP server, say).
    #[error(
        "what answers at '{addr}' is not a Redis server (protocol error): check the host and port in --redis"
    )]
    NotRedis { addr: String },

    /// The server answered the handshake with a refusal other than the credentials (a
    /// database index out of range, say).
    #[error("Redis at '{addr}' refused the connection: {reason} (see --redis)")]
    Refused { addr: String, reason: String },

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
    #[error("'{sku}' has no stock in Redis (seed it first: {})", seed_command(sku))]
    Unseeded { sku: String },

    /// The SKU's stock key holds something that is not an integer.
    #[error(
        "the stock of '{sku}' ('{key}') holds {value}, not an integer; nothing was changed (reset it with: {})",
        seed_command(sku)
    )]
    BadStock {
        sku: String,
        key: String,
        value: String,
    },

    /// One of the SKU's books (ledger, sold counter, per-user totals) holds something lockctl
    /// never writes there. Nothing was changed.
    #[error(
        "the books of '{sku}' are damaged: {reason}; nothing was changed (reset them with: {})",
        seed_command(sku)
    )]
    BadData { sku: String, reason: String },

    /// PostgreSQL failed or refused (the orders pipeline); `url` has no password.
    #[error("PostgreSQL at '{url}': {reason}")]
    Database { url: String, reason: String },

    /// Too few `--lock-node` masters answered for a Redlock majority.
    #[error(
        "no quorum: {answered} of {total} lock nodes answered, and Redlock needs {needed} (lockctl check --lock-node ... shows which are down)"
    )]
    NoQuorum {
        answered: usize,
        total: usize,
        needed: usize,
    },

    /// The run would need more connections than the server accepts.
    #[error(
        "this run needs about {needed} connections to Redis at '{addr}', which accepts {maxclients} (maxclients) and has {in_use} in use: lower -c to at most {fits}, or raise the server's maxclients"
    )]
    TooManyClients {
        addr: String,
        needed: u64,
        maxclients: u64,
        in_use: u64,
        fits: u64,
    },

    /// A failure inside lockctl itself, not in Redis: a thread that would not start, a binary
    /// that cannot be found.
    #[error("{reason}")]
    Internal { reason: String },

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

/// A short, stable name for each kind of failure: counted by the hammer (`errors_by_kind`),
/// printed as `error_kind` under `--json`, and read back from a `--mode procs` child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    BadUrl,
    Tls,
    /// The server refused the connection (down or restarting).
    Refused,
    /// A connect or a call took longer than its limit.
    TimedOut,
    Auth,
    Unseeded,
    BadStock,
    BadData,
    Redis,
    /// Too few Redlock nodes answered.
    NoQuorum,
    /// PostgreSQL failed.
    Database,
    Internal,
    /// Bad arguments (the binary's exit 2).
    Usage,
    /// A `--mode procs` child that ended without saying what happened.
    Child,
    /// A request the hammer never sent because Redis stayed unreachable.
    Abandoned,
    /// Any name this version does not know (read from a newer child, say).
    #[serde(other)]
    Unknown,
}

impl ErrorKind {
    /// The name as it appears in JSON and in the hammer's counts.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::BadUrl => "bad_url",
            ErrorKind::Tls => "tls",
            ErrorKind::Refused => "refused",
            ErrorKind::TimedOut => "timed_out",
            ErrorKind::Auth => "auth",
            ErrorKind::Unseeded => "unseeded",
            ErrorKind::BadStock => "bad_stock",
            ErrorKind::BadData => "bad_data",
            ErrorKind::Redis => "redis",
            ErrorKind::NoQuorum => "no_quorum",
            ErrorKind::Database => "database",
            ErrorKind::Internal => "internal",
            ErrorKind::Usage => "usage",
            ErrorKind::Child => "child",
            ErrorKind::Abandoned => "abandoned",
            ErrorKind::Unknown => "unknown",
        }
    }

    /// Whether this kind means the server could not be reached at all (an outage).
    pub fn is_outage(self) -> bool {
        matches!(self, ErrorKind::Refused | ErrorKind::TimedOut)
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// The kind of failure, used by the hammer to count errors.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::BadUrl { .. } => ErrorKind::BadUrl,
            Error::Tls { .. } => ErrorKind::Tls,
            Error::Connect { .. } => ErrorKind::Refused,
            Error::NotRedis { .. } | Error::Refused { .. } => ErrorKind::Redis,
            Error::Timeout { .. } | Error::ConnectTimeout { .. } => ErrorKind::TimedOut,
            Error::Auth { .. } => ErrorKind::Auth,
            Error::Unseeded { .. } => ErrorKind::Unseeded,
            Error::BadStock { .. } => ErrorKind::BadStock,
            Error::BadData { .. } => ErrorKind::BadData,
            Error::Internal { .. } => ErrorKind::Internal,
            Error::NoQuorum { .. } => ErrorKind::NoQuorum,
            Error::Database { .. } => ErrorKind::Database,
            Error::TooManyClients { .. } => ErrorKind::Usage,
            Error::Redis { .. } => ErrorKind::Redis,
        }
    }

    /// An [`Error::Internal`] with this reason.
    pub fn internal(reason: impl Into<String>) -> Error {
        Error::Internal {
            reason: reason.into(),
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

    /// True when a read was interrupted because the process was stopped and continued
    /// (SIGSTOP/SIGCONT, Ctrl-Z and `fg`): on Linux a socket read with a timeout then fails with
    /// EINTR. The reply is not lost: the connection skips it before the next reply.
    pub fn is_interrupted(&self) -> bool {
        matches!(self, Error::Redis { code: Some(c), .. } if c == INTERRUPTED)
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

/// `lockctl seed SKU <COUNT>` as one can type it: a SKU that starts with `-` needs `--` before
/// it, or it would be read as a flag.
pub fn seed_command(sku: &str) -> String {
    if sku.starts_with('-') {
        format!("lockctl seed -- {sku} <COUNT>")
    } else {
        format!("lockctl seed {sku} <COUNT>")
    }
}

/// The code an interrupted read (EINTR) carries in [`Error::Redis`].
pub const INTERRUPTED: &str = "EINTR";

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
