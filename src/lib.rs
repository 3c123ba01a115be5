//! lockctl: flash-sale ("秒杀") stock deduction under a Redis distributed lock, and the
//! instrument that proves nothing was oversold.
//!
//! It grew from a tutorial whose PHP `DistributedLock` takes `SET dist_lock:<sku> <token> NX PX
//! <ttl>`, reads `item:stock:<sku>`, decrements it if positive, and releases with a Lua
//! compare-and-delete. lockctl keeps those keys and that protocol (a PHP client and lockctl
//! exclude each other), and adds what the tutorial leaves as homework: lease-loss detection, a
//! watchdog, fenced and atomic deductions, and a hammer that reads Redis back to check the books.
//!
//! Layout:
//! - [`redact`]: one rule that hides every password, token and credential header in what is shown.
//! - [`conn`]: connections with bounded waits and errors that never show a password.
//! - [`keys`]: every Redis key of a SKU or a lock, built in one place.
//! - [`lock`]: the lock itself (acquire, release, renew, fencing tokens); knows nothing of stock.
//! - [`redlock`]: the quorum of independent masters behind `--lock-node`.
//! - [`stock`]: seeding, the ledger, and one purchase under each strategy; uses `lock`.
//! - [`check`]: is a server fit to hold locks?
//! - [`metrics`]: the Prometheus metrics the lock and stock modules feed.
//! - [`endpoint`]: the `/metrics` HTTP endpoint (hyper), bounded against idle and slow clients.
//! - [`orders`]: the pipeline: order events in a Redis stream, moved into PostgreSQL by workers.
//! - [`hammer`]: many purchases at once, then the verdict; measures and never prints.
//! - [`status`]: one SKU's books and lock, reconciled.
//! - [`scrape`]: per-SKU state read from Redis for each Prometheus scrape (`lockctl exporter`).
//! - [`render`]: reports as text, JSON, Markdown or HTML.
//! - [`wire`]: the JSON objects that cross a process boundary (`buy --json`, errors).
//! - [`sku`]: the names that become keys, checked at the boundary.
//! - [`units`]: one rounding rule for every reported number.
//! - [`error`]: the library's failures (expected outcomes are values, not errors).

pub mod check;
pub mod conn;
pub mod endpoint;
pub mod error;
pub mod hammer;
pub mod keys;
pub mod lock;
pub mod metrics;
pub mod orders;
pub mod redact;
pub mod redlock;
pub mod render;
pub mod scrape;
pub mod sku;
pub mod status;
pub mod stock;
pub mod units;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
