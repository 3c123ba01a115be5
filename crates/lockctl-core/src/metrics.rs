//! Prometheus metrics for the lock and the stock, fed by those modules themselves.
//!
//! The tutorial's last step: collect the lock's wait-queue length and hold time, then decide.
//! There is no process-wide registry: the caller makes a [`Metrics`] and gives it to its
//! [`crate::conn::Target`], and the connections of that target carry it to whoever does the
//! work: the lock records wait and hold times, grants, renewals and lost leases as they happen,
//! the stock module each purchase's outcome and the stock it saw, the orders worker its
//! batches and its waits. A target without one records nothing, at the cost of a branch. The wait-queue length is different: it belongs to Redis, not to this
//! process, so [`Metrics::set_waiters`] is fed from the queue itself (`Lock::waiters`) by
//! whoever serves the metrics, just before each scrape (the `lockctl` binary's endpoint serves them).

use std::fmt::Write as _;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkuLabel {
    sku: String,
}

/// How asking for the lock ended, for `lockctl_lock_acquire_total{result}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireResult {
    /// The lock was taken.
    Acquired,
    /// The lock was held by someone else for the whole wait.
    Busy,
    /// Taking the lock failed.
    Error,
}

impl AcquireResult {
    const ALL: [AcquireResult; 3] = [
        AcquireResult::Acquired,
        AcquireResult::Busy,
        AcquireResult::Error,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AcquireResult::Acquired => "acquired",
            AcquireResult::Busy => "busy",
            AcquireResult::Error => "error",
        }
    }
}

/// The contract's metrics (docs/operating.md, "Metrics", names them); counters gain `_total` on the
/// wire.
pub struct Metrics {
    registry: Registry,
    lock_wait: Histogram,
    lock_hold: Histogram,
    waiters: Gauge,
    /// `lockctl_lock_acquire_total` for acquired, busy, error, looked up once: the lock's hot
    /// path then costs one atomic add.
    acquire: [Counter; 3],
    renewals: Counter,
    lease_lost: Counter,
    buys: Family<OutcomeLabel, Counter>,
    /// The orders pipeline (`lockctl worker`, `hammer --queue --db`).
    pipeline: PipelineMetrics,
    stock: Family<SkuLabel, Gauge>,
}

/// The orders pipeline's metrics (a worker's).
struct PipelineMetrics {
    persisted: Counter,
    conflicts: Counter,
    dead_letters: Counter,
    batch_commit: Histogram,
    /// How long the worker has been waiting out a failure (0 while all is well), and how many
    /// attempts it has waited out.
    worker_waiting: Gauge<f64, std::sync::atomic::AtomicU64>,
    worker_retries: Counter,
}

impl PipelineMetrics {
    /// The pipeline's metrics, registered in `r`.
    fn register(r: &mut Registry) -> PipelineMetrics {
        let m = PipelineMetrics {
            persisted: Counter::default(),
            conflicts: Counter::default(),
            dead_letters: Counter::default(),
            batch_commit: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            worker_waiting: Gauge::default(),
            worker_retries: Counter::default(),
        };
        r.register(
            "lockctl_orders_persisted",
            "Orders the worker committed to PostgreSQL",
            m.persisted.clone(),
        );
        r.register(
            "lockctl_order_conflicts",
            "Order ids already persisted with another SKU or quantity",
            m.conflicts.clone(),
        );
        r.register(
            "lockctl_dead_letters",
            "Stream entries set aside to the dead-letter stream: not orders, or rows PostgreSQL refused for their data",
            m.dead_letters.clone(),
        );
        r.register(
            "lockctl_batch_commit_seconds",
            "Time to insert and commit one batch of orders",
            m.batch_commit.clone(),
        );
        r.register(
            "lockctl_worker_waiting_seconds",
            "How long the orders worker has been waiting out a failure of PostgreSQL or Redis, its batch kept (0 while all is well)",
            m.worker_waiting.clone(),
        );
        r.register(
            "lockctl_worker_retries",
            "Attempts the orders worker waited out (a failure of PostgreSQL or Redis)",
            m.worker_retries.clone(),
        );
        m
    }
}

impl Metrics {
    /// A registry of lockctl's metrics, all at zero. Give it to a [`crate::conn::Target`]
    /// ([`crate::conn::Target::with_metrics`]) and every connection of that target records into
    /// it; a target without one records nothing.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Metrics {
        // 50 µs to about 100 s, doubling: lock waits range from one round trip to a long queue.
        let buckets = || exponential_buckets(0.00005, 2.0, 22);
        let (lock_wait, lock_hold) = (Histogram::new(buckets()), Histogram::new(buckets()));
        let (waiters, renewals, lease_lost) =
            (Gauge::default(), Counter::default(), Counter::default());
        let (acquire_family, buys, stock) = (
            Family::<ResultLabel, Counter>::default(),
            Family::default(),
            Family::default(),
        );
        let acquire = AcquireResult::ALL.map(|result| {
            acquire_family
                .get_or_create(&ResultLabel {
                    result: result.as_str().to_string(),
                })
                .clone()
        });
        let mut r = Registry::default();
        r.register(
            "lockctl_lock_wait_seconds",
            "Time from asking for the lock to getting it (or giving up)",
            lock_wait.clone(),
        );
        r.register(
            "lockctl_lock_hold_seconds",
            "Time from acquiring the lock to releasing it",
            lock_hold.clone(),
        );
        r.register(
            "lockctl_lock_waiters",
            "Clients waiting for the lock right now (the wait-queue length in Redis)",
            waiters.clone(),
        );
        r.register(
            "lockctl_lock_acquire",
            "Lock acquisitions by result: acquired, busy, error",
            acquire_family,
        );
        r.register(
            "lockctl_lock_renewals",
            "Lease renewals made by the watchdog",
            renewals.clone(),
        );
        r.register(
            "lockctl_lock_lease_lost",
            "Leases that expired while held",
            lease_lost.clone(),
        );
        r.register("lockctl_buy", "Purchases by outcome", buys.clone());
        let pipeline = PipelineMetrics::register(&mut r);
        r.register("lockctl_stock", "Stock last seen, per SKU", stock.clone());
        Metrics {
            registry: r,
            lock_wait,
            lock_hold,
            waiters,
            acquire,
            renewals,
            lease_lost,
            buys,
            pipeline,
            stock,
        }
    }

    /// One request for the lock: how long it waited and how it ended.
    pub fn observe_wait(&self, d: Duration, result: AcquireResult) {
        self.lock_wait.observe(d.as_secs_f64());
        self.acquire[result as usize].inc();
    }

    /// Records how long a lock was held.
    pub fn observe_hold(&self, d: Duration) {
        self.lock_hold.observe(d.as_secs_f64());
    }

    /// Counts a lease renewed by the watchdog.
    pub fn renewed(&self) {
        self.renewals.inc();
    }

    /// One batch committed: its time, new orders and conflicts.
    pub fn observe_batch(&self, d: Duration, persisted: u64, conflicts: u64) {
        self.pipeline.batch_commit.observe(d.as_secs_f64());
        self.pipeline.persisted.inc_by(persisted);
        self.pipeline.conflicts.inc_by(conflicts);
    }

    /// The worker waits out one more failed attempt; it has been waiting for `d` so far.
    pub fn worker_retry(&self, d: Duration) {
        self.pipeline.worker_retries.inc();
        self.pipeline.worker_waiting.set(d.as_secs_f64());
    }

    /// The worker's wait is over.
    pub fn worker_recovered(&self) {
        self.pipeline.worker_waiting.set(0.0);
    }

    /// Counts an order set aside in the dead letters.
    pub fn dead_letter(&self) {
        self.pipeline.dead_letters.inc();
    }

    /// Counts a purchase whose lease ran out.
    pub fn lease_lost(&self) {
        self.lease_lost.inc();
    }

    /// The counter for one purchase outcome, by its label (`bought`, ..., or `error`). Hold
    /// on to it: looking it up takes a lock and an allocation, incrementing it is one atomic
    /// add.
    pub fn buy_counter(&self, outcome: &str) -> Counter {
        self.buys
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_string(),
            })
            .clone()
    }

    /// The stock gauge of one SKU (hold on to it, as with [`Metrics::buy_counter`]).
    pub fn stock_gauge(&self, sku: &str) -> Gauge {
        self.stock
            .get_or_create(&SkuLabel {
                sku: sku.to_string(),
            })
            .clone()
    }

    /// Sets the stock gauge of `sku`.
    pub fn set_stock(&self, sku: &str, stock: i64) {
        self.stock_gauge(sku).set(stock);
    }

    /// The wait-queue length, as read from Redis.
    pub fn set_waiters(&self, n: u64) {
        self.waiters.set(n as i64);
    }

    /// The Prometheus text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            let _ = writeln!(out, "# encoding failed");
        }
        out
    }
}
