//! The instrument's error type: what stops a run before it can be judged.
//!
//! A failure of Redis, the books or PostgreSQL is lockctl-core's [`lockctl_core::Error`],
//! carried whole; the rest is the load tester's own: a request that cannot be built, an
//! endpoint whose name does not resolve, a login that fails, a stock store that fails, a run
//! larger than the machine or the server allows. Each variant carries the values a message
//! needs and none names a program's flags: which setting fixes it is [`Error::hint`] or the
//! variant itself, and the program words it (the `lockctl` binary, in its `advice` module).

use lockctl_core::error::ErrorKind;
use lockctl_core::hint::Hint;

pub use crate::http::request::{Part, RequestError};

/// An error a stock store returns: its own type, boxed (a SQL driver's, say).
pub type StoreError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What stopped a run of the hammer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A failure of lockctl-core: Redis, the books, PostgreSQL.
    #[error(transparent)]
    Core(#[from] lockctl_core::Error),

    /// The request to send to an endpoint cannot be built from what was given.
    #[error(transparent)]
    Request(#[from] RequestError),

    /// The endpoint's host name does not resolve, or resolves to no address.
    #[error("cannot look up '{host}'{}", .reason.as_ref().map_or(": it has no address".into(), |r| format!(": {r}")))]
    Unresolved {
        /// The host name, as the URL gives it.
        host: String,
        /// What the resolver said; `None` when it answered with no address.
        reason: Option<String>,
    },

    /// The stock store of an endpoint failed (set before the run, or read).
    #[error("the stock in {store}: {source}")]
    Store {
        /// Where the stock is, as the store shows it (no password).
        store: String,
        /// What the store said.
        source: StoreError,
    },

    /// A user's login to an endpoint failed (no 2xx, or no token in the answer): the facts
    /// given for logging in are wrong, so nothing the endpoint answers could be judged.
    #[error("the login of user '{user}' failed: {reason}")]
    Login {
        /// The user (a name lockctl made, not a secret).
        user: String,
        /// What the login answered, escaped (never the password sent).
        reason: String,
        /// Whether the service answered at all (an HTTP answer that was not a login), as
        /// against no answer (refused, timed out, cut): a service that answers nothing is
        /// not there, whatever the facts say.
        answered: bool,
        /// The login's body is JSON and was sent with no `Content-Type` (the likely cause of
        /// an answer that took it for empty).
        untyped_json: bool,
    },

    /// A run was to start from a stock below zero: whatever it did, the books would show an
    /// oversale that was there before it.
    #[error(
        "the stock of '{sku}' ('{key}') is {value}, below zero (oversold before this run?); a run starts from a stock of 0 or more: nothing was changed"
    )]
    NegativeStock {
        /// The SKU.
        sku: String,
        /// The Redis key.
        key: String,
        /// The stock, below zero.
        value: i64,
    },

    /// The run would need more connections than the server accepts.
    #[error(
        "this run needs about {needed} connections to Redis at '{addr}', which accepts {maxclients} (maxclients) and has {in_use} in use"
    )]
    TooManyClients {
        /// The server's `host:port` (never a password).
        addr: String,
        /// Connections the run would open.
        needed: u64,
        /// The server's `maxclients`.
        maxclients: u64,
        /// Connections the server has open now.
        in_use: u64,
        /// How many concurrent buyers would fit (0: not even one).
        fits: u64,
    },

    /// The run would need more open files (connections, pipes) than this process may hold.
    #[error(
        "{concurrency} concurrent requests need about {needed} open files (their connections, pipes to child processes, the orders workers' clients), but this process may open {limit} (its open-file limit, ulimit -n; the hard limit allows no more)"
    )]
    TooFewDescriptors {
        /// The requests in flight the run asked for.
        concurrency: u64,
        /// Open files the run would need.
        needed: u64,
        /// Open files this process may have.
        limit: u64,
        /// How many concurrent requests would fit (0: not even one).
        fits: u64,
    },
}

/// The hammer's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The kind of failure, as the hammer counts errors and `--json` names them.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Core(e) => e.kind(),
            Error::Unresolved { .. } | Error::Store { .. } => ErrorKind::Refused,
            Error::NegativeStock { .. } => ErrorKind::BadStock,
            Error::Request(_)
            | Error::Login { .. }
            | Error::TooManyClients { .. }
            | Error::TooFewDescriptors { .. } => ErrorKind::Usage,
        }
    }

    /// What would fix it, when lockctl knows: data for the caller to word. The request's
    /// part at fault ([`RequestError::part`]) and the fit of a run too large are the
    /// variants' own data.
    pub fn hint(&self) -> Option<Hint> {
        match self {
            Error::Core(e) => e.hint(),
            Error::NegativeStock { sku, .. } => Some(Hint::Reseed { sku: sku.clone() }),
            Error::Unresolved { .. } => Some(Hint::EndpointUrl),
            Error::Login {
                untyped_json: true,
                answered: true,
                ..
            } => Some(Hint::JsonContentType),
            _ => None,
        }
    }

    /// Whether the command line that started the run is at fault (the binary's exit 2).
    pub fn is_usage(&self) -> bool {
        self.kind() == ErrorKind::Usage
            || matches!(
                self,
                Error::Core(
                    lockctl_core::Error::BadUrl { .. } | lockctl_core::Error::BadDbUrl { .. }
                )
            )
    }

    /// True when the failed call may still have been applied.
    pub fn is_indeterminate(&self) -> bool {
        matches!(self, Error::Core(e) if e.is_indeterminate())
    }

    /// An internal failure of lockctl itself (a thread that would not start).
    pub fn internal(reason: impl Into<String>) -> Error {
        Error::Core(lockctl_core::Error::internal(reason))
    }

    /// The core failure inside, when it is one.
    pub fn as_core(&self) -> Option<&lockctl_core::Error> {
        match self {
            Error::Core(e) => Some(e),
            _ => None,
        }
    }
}
