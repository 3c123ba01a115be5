//! The library's error type: real failures only.
//!
//! Expected outcomes (busy, sold out, lease lost) are values of the lock and stock modules, never
//! errors. Every variant here names the value at fault (which key, which bound, which server);
//! what would fix it is data too, [`Error::hint`], which a program words in its own terms (the
//! `lockctl` binary names its flags and commands). None of them ever carries a password:
//! addresses are `host:port` as the connection module renders them, and URLs pass through
//! [`crate::redact`] first.

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::hint::{Finding, Hint};

/// What went wrong talking to Redis or reading what it holds.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// A Redis URL could not be parsed.
    #[error("invalid Redis URL '{url}': {reason}")]
    BadUrl {
        /// The URL, its password hidden.
        url: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
        /// The setting the URL came from, when the caller said ([`Error::of_flag`]).
        flag: Option<&'static str>,
    },

    /// No connection could be opened.
    #[error("could not connect to Redis at '{addr}': {reason}")]
    Connect {
        /// The server's `host:port` (never a password).
        addr: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
    },

    /// Something answered that does not speak Redis's protocol (an HTTP server, say).
    #[error("what answers at '{addr}' is not a Redis server (protocol error)")]
    NotRedis {
        /// The server's `host:port` (never a password).
        addr: String,
    },

    /// The server answered the handshake with a refusal other than the credentials (a
    /// database index out of range, say).
    #[error("Redis at '{addr}' refused the connection: {reason}")]
    Refused {
        /// The server's `host:port` (never a password).
        addr: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
    },

    /// TLS settings that cannot work (a file that cannot be read, files without rediss://), or
    /// a handshake that failed.
    #[error("TLS: {reason}")]
    Tls {
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
    },

    /// A `rediss://` URL in a process with no rustls crypto provider installed: the `redis`
    /// crate takes the process-wide one, and this library installs none (see
    /// [`crate::conn::Target::open`]).
    #[error("no TLS crypto provider is installed in this process")]
    NoCryptoProvider,

    /// Opening a connection took longer than its limit. Nothing was sent.
    #[error("timed out after {} ms connecting to {addr}", .after.as_millis())]
    ConnectTimeout {
        /// The server's `host:port` (never a password).
        addr: String,
        /// How long it waited.
        after: Duration,
    },

    /// A call took longer than the per-call limit.
    #[error("timed out after {} ms talking to {addr}", .after.as_millis())]
    Timeout {
        /// The server's `host:port` (never a password).
        addr: String,
        /// How long it waited.
        after: Duration,
    },

    /// The server refused the credentials.
    #[error("Redis at '{addr}' refused the credentials: {reason}")]
    Auth {
        /// The server's `host:port` (never a password).
        addr: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
    },

    /// The SKU's stock key does not exist.
    #[error("'{sku}' has no stock in Redis")]
    Unseeded {
        /// The SKU.
        sku: String,
    },

    /// An endpoint's stock key (the one the verdict reads) does not exist.
    #[error("'{key}' does not exist in Redis at '{addr}'")]
    NoStockKey {
        /// The Redis key.
        key: String,
        /// The server's `host:port` (never a password).
        addr: String,
    },

    /// The SKU's stock key holds something that is not a count lockctl can use.
    #[error(
        "the stock of '{sku}' ('{key}') holds {value}, not a stock count (an integer as Redis writes one, no larger than 9007199254740991 either side of zero, as far as Lua counts exactly); nothing was changed"
    )]
    BadStock {
        /// The SKU.
        sku: String,
        /// The Redis key.
        key: String,
        /// What it holds instead, as read.
        value: String,
    },

    /// One of the SKU's books (ledger, sold counter, per-user totals) holds something lockctl
    /// never writes there. Nothing was changed.
    #[error("the books of '{sku}' are damaged: {reason}; nothing was changed")]
    BadData {
        /// The SKU.
        sku: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
    },

    /// A key of a lock holds a type lockctl never writes there.
    #[error("the lock '{name}' is damaged: '{key}' holds a {found}, not a {expected}")]
    DamagedLock {
        /// The lock's name (the SKU for a purchase's lock).
        name: String,
        /// The Redis key.
        key: String,
        /// The type the key holds.
        found: String,
        /// The type lockctl writes there.
        expected: &'static str,
    },

    /// A PostgreSQL URL could not be parsed; `url` has no password.
    #[error("invalid PostgreSQL URL '{url}': {reason}")]
    BadDbUrl {
        /// The URL, its password hidden.
        url: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
    },

    /// PostgreSQL failed or refused (the orders pipeline); `url` has no password.
    #[error("PostgreSQL at '{url}': {reason}")]
    Database {
        /// The URL, its password hidden.
        url: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
        /// The server's SQLSTATE (`22008`, `42P01`, ...) when the server replied: it tells a
        /// row PostgreSQL will never take from a failure that waiting fixes.
        sqlstate: Option<String>,
        /// Raised by the server's own code (a trigger, a function: the error has a context),
        /// or about a table that is not lockctl's: then it says nothing of lockctl's rows,
        /// whatever its SQLSTATE.
        server_code: bool,
        /// What would fix it, when lockctl knows (the schema missing, the server unreachable).
        hint: Option<Hint>,
    },

    /// A key of the orders pipeline holds a type lockctl never writes there, so the worker
    /// cannot go on without losing track of entries. Nothing was acknowledged.
    #[error(
        "'{key}' holds a {found}, not a stream, so {what}; it stays pending: move the key aside (redis-cli RENAME {key} {key}.old) or delete it, then run the worker again"
    )]
    WrongTypeKey {
        /// The key of the orders pipeline.
        key: String,
        /// The type the key holds.
        found: String,
        /// What cannot go on because of it.
        what: String,
    },

    /// Too few Redlock masters answered for a majority.
    #[error("no quorum: {answered} of {total} lock nodes answered, and Redlock needs {needed}")]
    NoQuorum {
        /// How many nodes answered.
        answered: usize,
        /// How many nodes there are.
        total: usize,
        /// How many are needed.
        needed: usize,
    },

    /// The server is older than a feature needs (by its compatibility version,
    /// `redis_version`, which Valkey also reports).
    #[error(
        "{feature} needs a server of Redis {}.{} or newer (redis_version), for {commands}; '{addr}' is {server} {version}: upgrade it, or use one that is",
        .needs.0, .needs.1
    )]
    TooOld {
        /// The server's `host:port`.
        addr: String,
        /// Its product and version, as `check` names them.
        server: String,
        /// Its own version.
        version: String,
        /// What needs more: "the orders worker".
        feature: &'static str,
        /// The commands it needs.
        commands: &'static str,
        /// The oldest `redis_version` that has them.
        needs: (u32, u32),
    },

    /// Another seed of the same SKU published its bucket map while this one was seeding: the
    /// other's map is the sale, and this seed's buckets were ended (or are not reached by
    /// anyone): none of this seed's stock is on sale.
    #[error(
        "another seed of '{sku}' won at the same time, and its stock is the one on sale; this seed's buckets were ended: none of its {count} units is on sale"
    )]
    Outrun {
        /// The SKU.
        sku: String,
        /// The units this seed would have put on sale.
        count: u64,
    },

    /// A failure inside lockctl itself, not in Redis: a thread that would not start, a binary
    /// that cannot be found.
    #[error("{reason}")]
    Internal {
        /// What failed.
        reason: String,
    },

    /// Any other failure reported by Redis or the connection.
    #[error("Redis at '{addr}' failed: {reason}")]
    Redis {
        /// The server's `host:port`.
        addr: String,
        /// What went wrong, as the server or the driver said it (never a password).
        reason: String,
        /// The server's error code (`WRONGTYPE`, `NOSCRIPT`, ...) when the server replied.
        code: Option<String>,
        /// Whether the failure happened after the command may have reached the server, so that
        /// its effect is unknown (Jepsen's "indeterminate").
        indeterminate: bool,
        /// What would fix it, when lockctl knows (a cluster node reached as a single server).
        hint: Option<Hint>,
    },
}

/// A short, stable name for each kind of failure: counted by the hammer (`errors_by_kind`),
/// printed as `error_kind` under `--json`, and read back from a `--mode procs` child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// A URL that does not parse.
    BadUrl,
    /// TLS settings that cannot work, or a handshake that failed.
    Tls,
    /// The server refused the connection (down or restarting).
    Refused,
    /// A connect or a call took longer than its limit.
    TimedOut,
    /// The server refused the credentials.
    Auth,
    /// The SKU (or an endpoint's stock key) has no stock.
    Unseeded,
    /// The stock holds something that is not a stock count, or is below zero.
    BadStock,
    /// One of the books holds something lockctl never writes there.
    BadData,
    /// Any other failure reported by Redis.
    Redis,
    /// Too few Redlock nodes answered.
    NoQuorum,
    /// PostgreSQL failed.
    Database,
    /// A seed outrun by another seed of the same SKU.
    Conflict,
    /// A failure inside lockctl itself.
    Internal,
    /// Something this machine lacks: a program that is not installed or cannot be run (a
    /// `redis-server` to start, the command `run` was given).
    Environment,
    /// Bad arguments (the binary's exit 2).
    Usage,
    /// A `--mode procs` child that ended without saying what happened.
    Child,
    /// A request the hammer never sent because its server stayed unreachable.
    Abandoned,
    /// `hammer --url`: a connection that broke after the request was sent (reset, closed
    /// before a whole answer, an answer that is not HTTP).
    Broken,
    /// `hammer --url`: a 2xx answer that matched none of the classification patterns.
    Unclassified,
    /// `hammer --url`: an answer the endpoint's failed class holds for: the service said the
    /// purchase failed, so it must not have deducted.
    AnsweredFailed,
    /// `hammer --url`: an answer with a status other than 2xx that matched none of the
    /// classification patterns, by status code (`http_500`).
    Http(u16),
    /// Any name this version does not know (read from a newer child, say).
    Unknown,
}

/// The kinds with a fixed name, for reading names back.
const NAMED: [ErrorKind; 21] = [
    ErrorKind::BadUrl,
    ErrorKind::Tls,
    ErrorKind::Refused,
    ErrorKind::TimedOut,
    ErrorKind::Auth,
    ErrorKind::Unseeded,
    ErrorKind::BadStock,
    ErrorKind::BadData,
    ErrorKind::Redis,
    ErrorKind::NoQuorum,
    ErrorKind::Database,
    ErrorKind::Conflict,
    ErrorKind::Internal,
    ErrorKind::Environment,
    ErrorKind::Usage,
    ErrorKind::Child,
    ErrorKind::Abandoned,
    ErrorKind::Broken,
    ErrorKind::Unclassified,
    ErrorKind::AnsweredFailed,
    ErrorKind::Unknown,
];

impl ErrorKind {
    /// The name as it appears in JSON and in the hammer's counts (`http_500` for
    /// [`ErrorKind::Http`]).
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        match self {
            ErrorKind::Http(status) => format!("http_{status}").into(),
            ErrorKind::BadUrl => "bad_url".into(),
            ErrorKind::Tls => "tls".into(),
            ErrorKind::Refused => "refused".into(),
            ErrorKind::TimedOut => "timed_out".into(),
            ErrorKind::Auth => "auth".into(),
            ErrorKind::Unseeded => "unseeded".into(),
            ErrorKind::BadStock => "bad_stock".into(),
            ErrorKind::BadData => "bad_data".into(),
            ErrorKind::Redis => "redis".into(),
            ErrorKind::NoQuorum => "no_quorum".into(),
            ErrorKind::Database => "database".into(),
            ErrorKind::Conflict => "conflict".into(),
            ErrorKind::Internal => "internal".into(),
            ErrorKind::Environment => "environment".into(),
            ErrorKind::Usage => "usage".into(),
            ErrorKind::Child => "child".into(),
            ErrorKind::Abandoned => "abandoned".into(),
            ErrorKind::Broken => "broken".into(),
            ErrorKind::Unclassified => "unclassified".into(),
            ErrorKind::AnsweredFailed => "answered_failed".into(),
            ErrorKind::Unknown => "unknown".into(),
        }
    }

    /// The kind a name stands for; a name this version does not know is
    /// [`ErrorKind::Unknown`].
    pub fn from_name(name: &str) -> ErrorKind {
        if let Some(status) = name.strip_prefix("http_").and_then(|s| s.parse().ok()) {
            return ErrorKind::Http(status);
        }
        NAMED
            .into_iter()
            .find(|k| k.name() == name)
            .unwrap_or(ErrorKind::Unknown)
    }

    /// Whether this kind means the server could not be reached at all (an outage).
    pub fn is_outage(self) -> bool {
        matches!(self, ErrorKind::Refused | ErrorKind::TimedOut)
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = std::borrow::Cow::<str>::deserialize(d)?;
        Ok(ErrorKind::from_name(&name))
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Error {
    /// The kind of failure, used by the hammer to count errors.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::BadUrl { .. } => ErrorKind::BadUrl,
            Error::Tls { .. } | Error::NoCryptoProvider => ErrorKind::Tls,
            Error::Connect { .. } => ErrorKind::Refused,
            Error::NotRedis { .. } | Error::Refused { .. } => ErrorKind::Redis,
            Error::Timeout { .. } | Error::ConnectTimeout { .. } => ErrorKind::TimedOut,
            Error::Auth { .. } => ErrorKind::Auth,
            Error::Unseeded { .. } | Error::NoStockKey { .. } => ErrorKind::Unseeded,
            Error::BadStock { .. } => ErrorKind::BadStock,
            Error::BadData { .. } => ErrorKind::BadData,
            Error::Internal { .. } => ErrorKind::Internal,
            Error::Outrun { .. } => ErrorKind::Conflict,
            Error::NoQuorum { .. } => ErrorKind::NoQuorum,
            Error::Database { .. } => ErrorKind::Database,
            Error::BadDbUrl { .. } => ErrorKind::BadUrl,
            Error::WrongTypeKey { .. } | Error::DamagedLock { .. } => ErrorKind::BadData,
            Error::Redis { .. } | Error::TooOld { .. } => ErrorKind::Redis,
        }
    }

    /// The same failure, said of a URL given to the setting `flag`.
    pub fn of_flag(self, flag: &'static str) -> Error {
        match self {
            Error::BadUrl { url, reason, .. } => Error::BadUrl {
                url,
                reason,
                flag: Some(flag),
            },
            other => other,
        }
    }

    /// What would fix this failure, when lockctl knows: data for the caller to word.
    ///
    /// A host that does not resolve is told apart from a server that is down (the resolver's
    /// words are all the driver passes on: glibc's and musl's).
    pub fn hint(&self) -> Option<Hint> {
        Some(match self {
            Error::BadUrl { flag, .. } => Hint::RedisUrl { flag: *flag },
            Error::Connect { reason, .. } if unresolved(reason) => Hint::UnknownHost,
            Error::Connect { .. } => Hint::StartRedis,
            Error::NotRedis { .. } => Hint::RedisAddress,
            Error::Refused { .. } => Hint::RedisHandshake,
            Error::Tls { .. } => Hint::TlsFiles,
            Error::ConnectTimeout { .. } => Hint::ConnectTimeout,
            Error::Timeout { .. } => Hint::CallTimeout,
            Error::Auth { .. } => Hint::Credentials,
            Error::Unseeded { sku } => Hint::Seed { sku: sku.clone() },
            Error::NoStockKey { .. } => Hint::StockKey,
            Error::BadStock { sku, .. } => Hint::Reseed { sku: sku.clone() },
            // A seed resets the ledger and the counters; the order stream it does not (it may
            // hold orders not yet in PostgreSQL): a stream key of another type is for the
            // operator to look at and delete.
            Error::BadData { sku, reason } => match reason.split_once(" is a ") {
                Some((key, _)) if reason.ends_with("not a stream") => {
                    Hint::DeleteKey { key: key.into() }
                }
                _ => Hint::Reseed { sku: sku.clone() },
            },
            Error::DamagedLock { name, .. } => Hint::ForceUnlock { name: name.clone() },
            Error::BadDbUrl { .. } => Hint::DbUrl,
            Error::NoQuorum { .. } => Hint::LockNodes,
            Error::Database { hint, .. } | Error::Redis { hint, .. } => return hint.clone(),
            Error::WrongTypeKey { .. }
            | Error::TooOld { .. }
            | Error::Outrun { .. }
            | Error::NoCryptoProvider
            | Error::Internal { .. } => return None,
        })
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
                addr,
                reason,
                code,
                hint,
                ..
            } => Error::Redis {
                addr,
                reason,
                code,
                hint,
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

/// A failure met while looking (a damaged lock during `status`, a node that did not answer
/// `check`) becomes one of the findings, its fix kept as data.
impl From<&Error> for Finding {
    fn from(e: &Error) -> Finding {
        Finding {
            text: e.to_string(),
            hint: e.hint(),
        }
    }
}

/// The code an interrupted read (EINTR) carries in [`Error::Redis`].
pub const INTERRUPTED: &str = "EINTR";

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a connect failure's reason is the resolver's "no such host".
fn unresolved(reason: &str) -> bool {
    [
        "failed to lookup address",
        "Name or service not known",
        "Name does not resolve",
    ]
    .iter()
    .any(|w| reason.contains(w))
}

#[cfg(test)]
mod tests {
    use super::ErrorKind;

    #[test]
    fn every_kind_reads_back_from_its_name() {
        let mut kinds = super::NAMED.to_vec();
        kinds.extend([ErrorKind::Http(500), ErrorKind::Http(404)]);
        for k in kinds {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(
                serde_json::from_str::<ErrorKind>(&json).unwrap(),
                k,
                "{json}"
            );
        }
        assert_eq!(ErrorKind::Http(503).to_string(), "http_503");
        assert_eq!(ErrorKind::from_name("from_the_future"), ErrorKind::Unknown);
        assert_eq!(ErrorKind::from_name("http_x"), ErrorKind::Unknown);
    }
}
