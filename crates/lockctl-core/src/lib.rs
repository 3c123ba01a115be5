//! lockctl-core: flash-sale ("秒杀") stock deduction under a Redis distributed lock, as a
//! library a service depends on.
//!
//! It grew from a tutorial whose PHP `DistributedLock` takes `SET dist_lock:<sku> <token> NX PX
//! <ttl>`, reads `item:stock:<sku>`, decrements it if positive, and releases with a Lua
//! compare-and-delete. lockctl keeps those keys and that protocol (a PHP client and lockctl
//! exclude each other), and adds what the tutorial leaves as homework: lease-loss detection, a
//! watchdog, fencing tokens, atomic and group-committed deductions, an idempotent ledger and an
//! orders pipeline into PostgreSQL.
//!
//! One fenced purchase, the shortest program on it:
//!
//! ```no_run
#![doc = include_str!("../doc-examples/fenced_purchase.rs")]
//! ```
//!
//! The documentation's examples are compiled with every `cargo test` but never run by it
//! (`no_run`): running them needs a Redis server, and an example that skipped itself without
//! one would pass without being checked. Each lives in a file of `doc-examples/`, which the
//! server tier (`tests/it/doc_examples.rs`) runs, as it is, against a `redis-server` of its own.
//!
//! It holds no process-wide state (metrics and the locks to give back on a quick exit travel
//! with the caller's [`conn::Target`]), never prints and never exits: its errors carry the key,
//! the bound or the server, and the caller words them.
//!
//! Layout:
//! - [`conn`]: connections with bounded waits and errors that never show a password.
//! - [`keys`]: every Redis key of a SKU or a lock, built in one place.
//! - [`lock`]: the lock itself (acquire, release, renew, fencing tokens); knows nothing of stock.
//! - [`redlock`]: the quorum of independent masters a lock can be taken by.
//! - [`stock`]: seeding, the ledger, and one purchase under each strategy; uses `lock`.
//! - [`orders`]: the pipeline: order events in a Redis stream, moved into PostgreSQL by workers.
//! - [`check`]: is a server fit to hold locks?
//! - [`status`]: one SKU's books and lock, reconciled.
//! - [`metrics`]: the Prometheus metrics the lock, the stock and the worker record into.
//! - [`wire`]: the JSON objects that cross a process boundary (a purchase, an error).
//! - [`redact`]: one rule that hides every secret in what is shown.
//! - [`sku`]: the names that become keys, checked at the boundary.
//! - [`units`]: one rounding rule for every reported number.
//! - [`aio`] (feature `tokio`): the same calls from async code, a lock held around an async
//!   body with a lease-loss signal, and the group committer as a cheap async handle.
//! - [`error`]: the library's failures (expected outcomes are values, not errors).
//! - [`hint`]: what would fix a failure or a finding, as data for the caller to word.

#![deny(missing_docs)]

/// The `redis` crate this library is built on, for the commands a caller builds itself
/// ([`conn::Conn::query`], [`lock::Guard::fenced`]) without a second, mismatched copy.
pub use redis;

#[cfg(feature = "tokio")]
pub mod aio;
pub mod check;
pub mod conn;
pub mod error;
pub mod hint;
pub mod keys;
pub mod lock;
pub mod metrics;
pub mod orders;
pub mod redact;
pub mod redlock;
pub mod sku;
pub mod status;
pub mod stock;
pub mod units;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
pub use hint::{Finding, Hint};
