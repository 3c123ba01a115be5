//! lockctl, the command line: what its commands show and serve, as a library so that the
//! tests read the same renderings the binary prints. The lock, the stock and the pipeline are
//! `lockctl-core`; the instrument is `lockctl-hammer`; its reports are rendered by `lockctl-render`; `main.rs` and its modules (the command
//! line, the commands, exports, signals, the private Redis, progress) are the binary itself.
//!
//! Layout:
//! - [`advice`]: the command line's words for what would fix a failure (the library's hints).
//! - [`endpoint`]: the `/metrics` HTTP endpoint (hyper), bounded against idle and slow clients.
//! - [`scrape`]: per-SKU state read from Redis for each Prometheus scrape (`lockctl exporter`).

pub mod advice;
pub mod endpoint;
pub mod scrape;
