//! What the hammer records per request and what it concludes: the public report types.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::options::Mode;
use lockctl_core::Hint;
use lockctl_core::error::ErrorKind;
use lockctl_core::stock::{Buy, Outcome, Strategy};

/// How one request ended, as its buyer was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// A purchase outcome. `replayed` is set when the order id had bought before.
    Done {
        /// What the purchase came to.
        outcome: Buy,
        /// Whether the order id had bought before: nothing was deducted this time.
        replayed: bool,
        /// Whether a lock strategy deducted and then found its lease gone at release.
        overran_lease: bool,
    },
    /// An external endpoint's answer (`hammer --url`), classified: bought, sold out or busy,
    /// with the stock the answer reported when it did. `None`: a 2xx answer in a run with no
    /// patterns, which only measures load.
    Answered {
        /// The answer's outcome; `None` for a 2xx answer in a run with no patterns.
        outcome: Option<Outcome>,
        /// The stock the answer reported; `None` when it reported none.
        remaining: Option<i64>,
        /// The order id a bought answer carried (the service makes its own); `None` when it
        /// carried none or none was looked for.
        order: Option<String>,
    },
    /// A failure. `indeterminate` when it may have been applied anyway.
    Failed {
        /// The kind of failure.
        kind: ErrorKind,
        /// Whether it may have deducted anyway.
        indeterminate: bool,
        /// The error, in words.
        message: String,
        /// What would fix it, when the library named it; the program words it.
        hint: Option<Hint>,
    },
}

/// One request's record.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Request number, 0-based; the order id is `<run id>-<index>`.
    pub index: u64,
    /// How the request ended.
    pub ended: Ended,
    /// Time from the request's start to its end (for the open model, from its scheduled
    /// moment); zero for a request given up unsent.
    pub latency: Duration,
    /// Time spent acquiring the lock (also when it ended busy); `None` without a lock of
    /// lockctl's, or when the request failed.
    pub lock_wait: Option<Duration>,
    /// Time the lock was held; `None` when no lock of lockctl's was held.
    pub lock_hold: Option<Duration>,
    /// When the request was sent, from the start of the run: no byte of it left before this
    /// (taken before sending; zero when not known, which claims nothing).
    pub sent: Duration,
    /// When the request finished, from the start of the run: its answer had come by then
    /// (taken after it came).
    pub at: Duration,
}

/// What was run: everything [`crate::judge()`] needs besides the samples and the readback, and the
/// first fields of the report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunFacts {
    /// The SKU bought.
    pub sku: String,
    /// The run's id (`h` and 8 hex digits), the first part of its order ids.
    pub run_id: String,
    /// Requests in all; for an interrupted run, the requests it made.
    pub requests: u64,
    /// Requests in flight at once, as asked.
    pub concurrency: u64,
    /// What protected the stock: one of lockctl's strategies, or the endpoint.
    pub strategy: Subject,
    /// How the purchases ran.
    pub mode: Mode,
    /// Units per request.
    pub qty: u64,
    /// The lock's lease, in ms; 0 for an endpoint.
    pub ttl_ms: u64,
    /// How long a buyer waits for a held lock, in ms; 0 for an endpoint.
    pub wait_ms: u64,
    /// Simulated business time between reading the stock and writing it, in ms; 0 for an
    /// endpoint.
    pub work_ms: u64,
    /// Whether a watchdog renewed the lease while the lock was held.
    pub watchdog: bool,
    /// The number of `--lock-node` masters when the lock was taken by Redlock quorum; null for
    /// the data node's own lock.
    pub redlock_nodes: Option<u64>,
    /// Whether the hammer seeded the stock itself (`--stock`).
    pub seeded: bool,
    /// Every k-th request retried the one before it (the same order id): the hunt's
    /// `--idempotent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_every: Option<u64>,
    /// The stock before the run, as seeded or read; 0 for an endpoint whose stock is not read
    /// (no patterns).
    pub initial_stock: i64,
    /// Wall time of the purchases (the report carries it as `elapsed_s`).
    #[serde(skip, default)]
    pub elapsed: Duration,
    /// The hammer's CPU time during the purchases, when it can be read.
    #[serde(skip, default)]
    pub client_cpu: Option<Duration>,
}

/// What protected the stock in a run: one of lockctl's strategies, or the code behind an
/// external endpoint (`hammer --url`), which the report calls `endpoint`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// One of lockctl's strategies, with lockctl's own buyers.
    Strategy(Strategy),
    /// The code behind an external endpoint (`hammer --url`).
    Endpoint,
}

impl Subject {
    /// The name in reports: the strategy's, or `endpoint`.
    pub fn name(self) -> &'static str {
        match self {
            Subject::Strategy(s) => s.name(),
            Subject::Endpoint => "endpoint",
        }
    }

    /// Whether lockctl's own buyers took the lock (so lock wait and hold were measured).
    pub fn locks(self) -> bool {
        matches!(self, Subject::Strategy(s) if s.locks())
    }
}

impl From<Strategy> for Subject {
    fn from(s: Strategy) -> Subject {
        Subject::Strategy(s)
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Subject {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Subject {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name == "endpoint" {
            return Ok(Subject::Endpoint);
        }
        Strategy::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .map(Subject::Strategy)
            .ok_or_else(|| serde::de::Error::custom(format!("no strategy is called '{name}'")))
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The 99.9th percentile.
    pub p999: f64,
    /// The largest value.
    pub max: f64,
    /// The mean.
    pub mean: f64,
}

/// Whether every invariant held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every invariant held.
    Pass,
    /// An invariant did not hold (the report's `violations` say which).
    Fail,
    /// Redis could not be read back after the run: nothing can be claimed either way.
    Unknown,
}

/// The hammer's findings.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Whether every invariant held.
    pub verdict: Verdict,
    /// What was run (its fields appear at the top level of the JSON report).
    #[serde(flatten)]
    pub run: RunFacts,
    /// Whether the run was stopped (Ctrl-C) before making every request.
    pub interrupted: bool,
    /// The stock read back after the run; null when it could not be read.
    pub final_stock: Option<i64>,
    /// `initial_stock - final_stock`, read from Redis; null when it could not be read.
    pub consumed: Option<i64>,
    /// Requests told "bought" (replays of an earlier order included).
    pub bought: u64,
    /// Units the buyers were told they bought now (replays excluded).
    pub sold_qty: u64,
    /// Requests whose order id had bought before: nothing deducted.
    pub replayed: u64,
    /// Requests told "sold out".
    pub sold_out: u64,
    /// Requests answered busy: the lock stayed held for the whole wait (or the endpoint said
    /// busy).
    pub busy: u64,
    /// Requests whose lease ran out before the deduction: nothing deducted.
    pub lease_lost: u64,
    /// Requests refused by the per-user limit: nothing deducted.
    pub limit_reached: u64,
    /// `hammer --url` with no patterns: 2xx answers, which say nothing about what was sold.
    pub answered: u64,
    /// Requests that failed (by kind in `errors_by_kind`).
    pub errors: u64,
    /// Errors whose effect is unknown (they may have deducted).
    pub indeterminate: u64,
    /// Failed requests, by kind of error.
    pub errors_by_kind: BTreeMap<ErrorKind, u64>,
    /// Lock-strategy buyers who deducted and then found their lease gone at release.
    pub lease_overrun: u64,
    /// Units sold beyond the initial stock.
    pub oversold: u64,
    /// This run's orders in the ledger; null for an external endpoint (`hammer --url`), which
    /// keeps no ledger lockctl can read, and when Redis could not be read back.
    pub ledger_orders: Option<u64>,
    /// The units of this run's orders in the ledger; null when `ledger_orders` is.
    pub ledger_qty: Option<i64>,
    /// Wall time of the purchases, in seconds.
    pub elapsed_s: f64,
    /// Requests per second over `elapsed_s`; 0 when no time passed.
    pub throughput_rps: f64,
    /// The hammer's own CPU time (user + system, every thread) during the purchases.
    pub client_cpu_s: Option<f64>,
    /// The hammer's own CPU time per purchase, in microseconds.
    pub client_cpu_us_per_request: Option<f64>,
    /// The hammer process's peak resident memory, in MB.
    pub client_max_rss_mb: Option<f64>,
    /// Every request's latency (for the open model, from its scheduled moment).
    pub latency_ms: Percentiles,
    /// Time to acquire the lock, for the lock strategies.
    pub lock_wait_ms: Option<Percentiles>,
    /// Time the lock was held, for the lock strategies.
    pub lock_hold_ms: Option<Percentiles>,
    /// Every invariant that did not hold, in words. Empty on a pass.
    pub violations: Vec<String>,
    /// With `--queue --db`: the orders pipeline, drained and checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<PipelineReport>,
    /// Why the verdict is unknown (Redis could not be read back, or no request got an answer
    /// to judge); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_because: Option<String>,
    /// What happened, in words, for a person reading the report.
    pub notes: Vec<String>,
    /// The first error message seen, if any.
    pub first_error: Option<String>,
    /// What would fix the first error, when the library named it: data for the program to
    /// word (the binary adds it to `first_error` when it shows the report).
    #[serde(skip)]
    pub first_error_hint: Option<Hint>,
    /// What `hammer --url` adds: the endpoint, the load model, and for the open model the time
    /// from sending to the answer and the requests sent late. Absent for lockctl's own buyers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpFacts>,
    /// The latency distribution: requests per bucket, each bucket up to `le_ms`.
    pub latency_buckets: Vec<Bucket>,
    /// The lock wait distribution, as `latency_buckets` (empty without a lock).
    pub lock_wait_buckets: Vec<Bucket>,
    /// The lock hold distribution, as `latency_buckets` (empty without a lock).
    pub lock_hold_buckets: Vec<Bucket>,
    /// Stock over time as the buyers were told it: `[seconds since start, stock]`, at most
    /// [`crate::TIMELINE_POINTS`] points.
    pub stock_timeline: Vec<[f64; 2]>,
}

/// One bucket of a latency distribution.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// Upper bound of the bucket, in milliseconds.
    pub le_ms: f64,
    /// Requests whose latency fell in this bucket.
    pub count: u64,
}

/// How `hammer --url` offered its load.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadModel {
    /// `-c` connections, each sending its next request when the last one is answered.
    Closed,
    /// Requests at a fixed rate whatever the answers (`--rate`); latency counts from each
    /// request's scheduled moment.
    Open,
}

/// The facts of an HTTP run (`hammer --url`), beside the common ones.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HttpFacts {
    /// The URL template as given, any password in it replaced by `***`.
    pub url: String,
    /// The HTTP method.
    pub method: String,
    /// The Redis key read before and after the run; null when nothing is judged.
    pub stock_key: Option<String>,
    /// How the load was offered.
    pub load: LoadModel,
    /// The open model's rate, requests per second.
    pub rate_rps: Option<f64>,
    /// The bound on each request, connecting included.
    pub timeout_ms: u64,
    /// Open model: time from sending each request to its answer (`latency_ms` counts from its
    /// scheduled moment, so it includes any wait for a free connection).
    pub service_ms: Option<Percentiles>,
    /// Open model: requests sent more than [`LATE_AFTER_MS`] after their scheduled moment
    /// (every connection was busy, or the driver fell behind); all are still sent.
    pub late: Option<u64>,
    /// Open model: the longest any request waited past its scheduled moment, in ms.
    pub max_lag_ms: Option<f64>,
}

/// How far past its scheduled moment a request may leave and still be on time, in ms: the
/// open model's clock thread wakes within tens of microseconds of each moment, so a request
/// that leaves a millisecond late waited for a free connection, or for lockctl itself.
pub const LATE_AFTER_MS: u64 = 1;

/// The verdict of several runs: all pass: pass; any fail: fail; otherwise (some unknown):
/// unknown.
pub fn overall_verdict(reports: &[Report]) -> Verdict {
    if reports.iter().any(|r| r.verdict == Verdict::Fail) {
        Verdict::Fail
    } else if reports.iter().all(|r| r.verdict == Verdict::Pass) {
        Verdict::Pass
    } else {
        Verdict::Unknown
    }
}

/// The pipeline's part of the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PipelineReport {
    /// Workers asked for (at least one ran).
    pub workers: u64,
    /// Orders the workers inserted.
    pub persisted: u64,
    /// Orders delivered again that were in PostgreSQL already: nothing written.
    pub redelivered: u64,
    /// Second deductions under one order id, recorded as conflicts.
    pub conflicts: u64,
    /// Orders moved to the dead-letter stream.
    pub dead_letters: u64,
    /// Whether every queued order was persisted before the hammer stopped waiting.
    pub drained: bool,
    /// How long the queue took to drain after the buyers finished.
    pub drain_s: f64,
    /// Orders bought per second, over the buying (replays excluded).
    pub ingress_rps: f64,
    /// This run's rows per second, over buying and draining.
    pub drain_rps: f64,
    /// The longest the queue got.
    pub queue_peak: u64,
    /// `[seconds since start, orders queued and not yet persisted]`.
    pub queue_timeline: Vec<[f64; 2]>,
    /// This run's rows in PostgreSQL.
    pub rows: u64,
    /// The units of this run's rows in PostgreSQL.
    pub row_units: i64,
}
