//! The plain tier: tests that need nothing but Rust. No server is started, no program other
//! than this crate's own binary is run, and no network is touched beyond loopback sockets the
//! test itself opens: `cargo test` runs them on any machine that builds lockctl.
//!
//! The server tier (`tests/it`, real Redis, Valkey, PostgreSQL, MariaDB, PHP, chromium) builds
//! only with the `server-tests` feature; `scripts/test` runs it.

mod contract;
mod driven;
mod facts;
mod report;
mod wording;
