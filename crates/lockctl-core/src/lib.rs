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
//! One fenced purchase, the shortest program on it (this example runs as a doc test, against a
//! `redis-server` it starts on a free port, and is skipped when none is installed):
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let Some(server) = lockctl_core::doc_server::start() else { return Ok(()) };
//! # let url = server.url();
//! use lockctl_core::conn::{ConnectOptions, Target};
//! use lockctl_core::stock::{self, Buy, BuyOptions, Buyer, Strategy};
//!
//! let target = Target::open(&url, ConnectOptions::default())?;
//! let mut conn = target.connect()?;
//! let sku = "sku_886".parse()?;
//! stock::seed(&mut conn, &sku, 1)?;
//!
//! let fenced = BuyOptions { strategy: Strategy::Fenced, ..BuyOptions::default() };
//! let buyer = Buyer::new(&target, &sku, fenced);
//! assert!(matches!(buyer.buy(&mut conn, "order-1", None)?.outcome, Buy::Bought { remaining: 0 }));
//! assert!(matches!(buyer.buy(&mut conn, "order-2", None)?.outcome, Buy::SoldOut { .. }));
//! // The first order id again deducts nothing: the ledger remembers it.
//! assert_eq!(buyer.buy(&mut conn, "order-1", None)?.replayed, Some(1));
//! # Ok(())
//! # }
//! ```
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
#[doc(hidden)]
pub mod doc_server;
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
