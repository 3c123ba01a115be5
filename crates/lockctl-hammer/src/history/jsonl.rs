//! A history as JSON Lines, written and read back.
//!
//! Every line is one operation in Jepsen's shape: `type` (`invoke`, `ok`, `fail`, `info`),
//! `f`, `process`, `time` (nanoseconds from the run's start), `index` (the line's place) and
//! `value`. A purchase's `value` names the request, SKU, units, order id and user; its
//! completion adds the answer. `ok` is a sale; `fail` is an answer that sold nothing, or a
//! failure that cannot have deducted; `info` is a failure whose effect is unknown (it may have
//! deducted). The first line (`f: "facts"`) and the last (`f: "read"`) are lockctl's own.
//! The stock lockctl read during the run is `f: "read-stock"` of `process: "observer"`: an
//! `invoke` when the read was sent (`value` null) and an `ok` when it was answered (`value`
//! the stock), as Jepsen records a register's reads; the judgement does not use them.
//!
//! Layout: `write` turns a run's history into lines, `read` (with `ops`, one line at a time)
//! takes them back and refuses a history no run could have written.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{HuntOrigin, ReadBack};
use crate::readback::Restart;
use crate::report::{HttpFacts, PipelineReport, RunFacts};

mod ops;
mod read;
mod write;

pub use read::read;
pub use write::{lanes, write};

/// The version of the history's shape, in its first line.
const VERSION: u64 = 1;

/// The longest line a history may have (1 MiB), beyond the room its last line's ledger needs:
/// a longer line is refused before it is read whole (parsed, it would cost several times its
/// length in memory).
pub const MAX_LINE: usize = 1 << 20;

/// The room the last line may take for each operation line before it: a ledger row
/// (`[request,units],`, at most 20 bytes within lockctl's bounds) for each request, whose
/// invoke and completion are two lines.
const LEDGER_BYTES_PER_OP: usize = 32;

/// A history that cannot be read: the line, and why.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct HistoryError {
    /// The line, counted from 1 (one past the last for a history cut short).
    pub line: usize,
    /// Why it cannot be read.
    pub reason: String,
}

/// One line.
#[derive(Serialize, Deserialize)]
struct Op {
    #[serde(rename = "type")]
    kind: String,
    f: String,
    process: Value,
    time: u64,
    index: u64,
    value: Value,
}

/// The first line's value.
#[derive(Serialize, Deserialize)]
struct FactsValue {
    version: u64,
    facts: RunFacts,
    stock_before: i64,
    elapsed_ns: u64,
    client_cpu_ns: Option<u64>,
    users: Option<u64>,
    server: String,
    client_max_rss_mb: Option<f64>,
    /// The hunt the round was part of (absent from a hammer's history, and from older ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hunt: Option<HuntOrigin>,
}

/// The last line's value.
#[derive(Serialize, Deserialize)]
struct ReadValue {
    #[serde(flatten)]
    read_back: ReadBack,
    went_up: Option<String>,
    restart: Option<Restart>,
    interrupted: Option<(u64, u64)>,
    notes: Vec<String>,
    #[serde(default)]
    findings: Vec<String>,
    #[serde(default)]
    unjudged: Option<String>,
    pipeline: Option<(PipelineReport, Vec<String>)>,
    http: Option<HttpFacts>,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// The process of lockctl's own reads of the stock during the run.
const OBSERVER: &str = "observer";
/// Their `f`.
const READ_STOCK: &str = "read-stock";
