//! `hammer --queue --db URL`: workers beside the buyers move the orders into PostgreSQL, and the
//! verdict covers the whole path. After the buyers finish, the hammer waits (bounded) for the
//! queue to drain, stops the workers, and holds the rows of this run against what the buyers
//! were told: every order told "bought" is in PostgreSQL once with its quantity, nothing else
//! of the run is, and the stock consumed equals the units persisted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::options::{HammerOptions, PipelineOptions, TIMELINE_POINTS};
use crate::report::PipelineReport;
use crate::tally::{Bits, Tally};
use lockctl_core::conn::{Conn, Target};
use lockctl_core::error::{Error, Result};
use lockctl_core::keys::StockKeys;
use lockctl_core::orders::db::Db;
use lockctl_core::orders::worker::{self, WorkerOptions, WorkerStats};
use lockctl_core::orders::{ensure_group, queue_state};
use lockctl_core::sku::Sku;
use lockctl_core::stock::buckets::with_buckets;
use lockctl_core::units::{round_to, round3};

/// The running workers and the queue sampler.
pub(super) struct Running {
    stop: Arc<AtomicBool>,
    workers: Vec<thread::JoinHandle<Result<WorkerStats>>>,
    sampler: Option<thread::JoinHandle<()>>,
    timeline: Arc<Mutex<Vec<[f64; 2]>>>,
    sampling: Arc<AtomicBool>,
    started: Instant,
    /// The SKUs whose streams and rows the run's orders are in: the SKU's own, and each
    /// bucket's of a bucketed SKU (a bucket's orders name the bucket).
    skus: Vec<Sku>,
}

/// Orders not yet persisted, over every stream of the run.
fn backlog(conn: &mut Conn, keys: &[StockKeys]) -> Result<u64> {
    keys.iter()
        .map(|k| queue_state(conn, k).map(|q| q.backlog()))
        .sum()
}

/// Whether the orders database answers and has its schema: asked before the run seeds or
/// sells anything, so that a database that is down fails the run with nothing written.
///
/// Bounded in time: a server that accepts the connection and never answers (the PostgreSQL
/// client's own timeout covers only the TCP connect) fails the run after the connect and call
/// limits, instead of holding it forever.
pub(super) fn check_db(target: &Target, p: &PipelineOptions) -> Result<()> {
    let options = target.options();
    let limit = options.connect_timeout + options.call_timeout;
    let (tx, rx) = std::sync::mpsc::channel();
    let (url, connect) = (p.db_url.clone(), options.connect_timeout);
    thread::Builder::new()
        .name("lockctl-db-check".into())
        .spawn(move || {
            let asked = Db::connect(&url, connect).and_then(|mut db| db.require_schema(&url));
            let _ = tx.send(asked);
        })
        .map_err(|e| Error::internal(format!("could not start the database check: {e}")))?;
    match rx.recv_timeout(limit) {
        Ok(asked) => asked,
        Err(_) => Err(Error::Database {
            url: lockctl_core::redact::redact(&p.db_url),
            reason: format!(
                "no answer within {} ms (it accepted the connection but said nothing: is it PostgreSQL, and is it up?)",
                limit.as_millis()
            ),
            sqlstate: None,
            server_code: false,
            hint: Some(lockctl_core::Hint::StartDatabase),
        }),
    }
}

/// Starts the workers and the sampler ([`check_db`] has asked the database first).
pub(super) fn start(target: &Target, opts: &HammerOptions, p: &PipelineOptions) -> Result<Running> {
    let mut conn = target.connect()?;
    let skus = with_buckets(&mut conn, &opts.load.sku)?;
    let keys: Vec<StockKeys> = skus.iter().map(StockKeys::new).collect();
    for k in &keys {
        ensure_group(&mut conn, k)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..p.workers.max(1) {
        let mut w = WorkerOptions::new(vec![opts.load.sku.clone()]);
        w.block = Duration::from_millis(100);
        // Orders a dead worker left pending are taken over after a second, not the default
        // 30 s: a run should not wait that long. A slow but live worker loses nothing to this:
        // the insert is idempotent.
        w.claim_idle = Duration::from_secs(1);
        w.stop = Some(stop.clone());
        w.events = p.events.clone();
        let (target, url) = (target.clone(), p.db_url.clone());
        let spawned = thread::Builder::new()
            .name("lockctl-worker".into())
            .spawn(move || worker::run(&target, &url, &w));
        match spawned {
            Ok(h) => workers.push(h),
            Err(e) => return Err(Error::internal(format!("could not start a worker: {e}"))),
        }
    }
    let timeline = Arc::new(Mutex::new(Vec::new()));
    let sampling = Arc::new(AtomicBool::new(true));
    let started = Instant::now();
    let sampler = {
        let (target, timeline, sampling) = (target.clone(), timeline.clone(), sampling.clone());
        thread::Builder::new()
            .name("lockctl-queue".into())
            .spawn(move || sample(&target, &keys, &timeline, &sampling, started))
            .ok()
    };
    Ok(Running {
        stop,
        workers,
        sampler,
        timeline,
        sampling,
        started,
        skus,
    })
}

/// The queue's backlog every 50 ms (thinned by half whenever the buffer fills).
fn sample(
    target: &Target,
    keys: &[StockKeys],
    timeline: &Mutex<Vec<[f64; 2]>>,
    sampling: &AtomicBool,
    started: Instant,
) {
    let mut conn = lockctl_core::conn::Reconnecting::new(target);
    while sampling.load(Ordering::SeqCst) {
        if let Ok(q) = conn.with(|c| backlog(c, keys)) {
            let mut t = timeline.lock().unwrap_or_else(|e| e.into_inner());
            t.push([started.elapsed().as_secs_f64(), q as f64]);
            if t.len() >= 2 * TIMELINE_POINTS {
                let mut keep = false;
                t.retain(|_| {
                    keep = !keep;
                    keep
                });
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}

/// After the buyers: waits for the queue to drain (while it makes progress, up to
/// `patience` without any), stops the workers, and checks this run's rows.
/// This run's rows in PostgreSQL. On a thread of its own: the PostgreSQL client runs a
/// runtime of its own, which cannot start inside a caller's async task (a service that runs
/// the hammer from an async fn).
fn run_rows(
    target: &Target,
    skus: &[Sku],
    p: &PipelineOptions,
    run_id: &str,
) -> Result<Vec<(String, i64)>> {
    let timeout = target.options().connect_timeout;
    thread::scope(|s| {
        s.spawn(|| {
            let mut db = Db::connect(&p.db_url, timeout)?;
            let mut rows = Vec::new();
            for sku in skus {
                rows.extend(db.orders(&p.db_url, sku.as_str(), &format!("{run_id}-"))?.0);
            }
            Ok(rows)
        })
        .join()
        .unwrap_or_else(|_| Err(Error::internal("the orders read-back panicked")))
    })
}

pub(super) fn finish(
    running: Running,
    target: &Target,
    p: &PipelineOptions,
    buyers_elapsed: Duration,
    run_id: &str,
    t: &Tally,
) -> Result<(PipelineReport, Vec<String>)> {
    let keys: Vec<StockKeys> = running.skus.iter().map(StockKeys::new).collect();
    let drain_started = Instant::now();
    let mut conn = lockctl_core::conn::Reconnecting::new(target);
    let (mut last, mut since) = (u64::MAX, Instant::now());
    let drained = loop {
        match conn.with(|c| backlog(c, &keys)) {
            Ok(0) => break true,
            Ok(q) if q < last => (last, since) = (q, Instant::now()),
            _ => {}
        }
        if since.elapsed() > p.patience {
            break false;
        }
        thread::sleep(Duration::from_millis(20));
    };
    let drain = drain_started.elapsed();
    running.stop.store(true, Ordering::SeqCst);
    let mut stats = WorkerStats::default();
    let mut failures = Vec::new();
    for h in running.workers {
        match h.join() {
            Ok(Ok(s)) => {
                stats.persisted += s.persisted;
                stats.redelivered += s.redelivered;
                stats.conflicts += s.conflicts;
                stats.dead_letters += s.dead_letters;
            }
            Ok(Err(e)) => failures.push(format!("a worker failed: {e}")),
            Err(_) => failures.push("a worker thread panicked".into()),
        }
    }
    running.sampling.store(false, Ordering::SeqCst);
    if let Some(s) = running.sampler {
        let _ = s.join();
    }
    let rows = run_rows(target, &running.skus, p, run_id)?;
    let mut violations = failures;
    violations.extend(check_rows(t, run_id, &rows));
    if !drained {
        violations.push(format!(
            "the queue did not drain: no progress for {} s after the buyers finished",
            p.patience.as_secs()
        ));
    }
    let timeline = running
        .timeline
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let bought = t.sold_qty() / t.qty.max(1);
    let whole = buyers_elapsed + drain;
    let report = PipelineReport {
        workers: p.workers,
        persisted: stats.persisted,
        redelivered: stats.redelivered,
        conflicts: stats.conflicts,
        dead_letters: stats.dead_letters,
        drained,
        drain_s: round3(drain.as_secs_f64()),
        ingress_rps: round_to(bought as f64 / buyers_elapsed.as_secs_f64().max(1e-9), 1),
        drain_rps: round_to(rows.len() as f64 / whole.as_secs_f64().max(1e-9), 1),
        queue_peak: timeline.iter().map(|p| p[1] as u64).max().unwrap_or(0),
        queue_timeline: timeline,
        rows: rows.len() as u64,
        row_units: rows.iter().fold(0i64, |a, (_, q)| a.saturating_add(*q)),
    };
    let _ = running.started;
    Ok((report, violations))
}

/// This run's rows against the answers: each order told "bought" persisted once with its
/// quantity (the primary key makes "once"), and no row of the run that no buyer was told.
fn check_rows(t: &Tally, run_id: &str, rows: &[(String, i64)]) -> Vec<String> {
    let prefix = format!("{run_id}-");
    let mut seen = Bits::new(t.told_bought.len());
    let (mut extra, mut wrong) = (Vec::new(), Vec::new());
    for (order, qty) in rows {
        let Some(index) = order
            .strip_prefix(&prefix)
            .and_then(|i| i.parse::<u64>().ok())
        else {
            continue;
        };
        seen.set(index);
        if t.told_bought.get(index) {
            if *qty != t.qty as i64 {
                wrong.push(order.clone());
            }
        } else if !t.maybe_applied.get(index) {
            extra.push(order.clone());
        }
    }
    let missing: Vec<u64> = t.told_bought.minus(&seen).collect();
    let mut out = Vec::new();
    if !missing.is_empty() {
        out.push(format!(
            "{} order(s) told bought are not in PostgreSQL (e.g. {run_id}-{})",
            missing.len(),
            missing[0]
        ));
    }
    if !extra.is_empty() {
        out.push(format!(
            "{} row(s) in PostgreSQL belong to no buyer told bought (e.g. {})",
            extra.len(),
            extra[0]
        ));
    }
    if !wrong.is_empty() {
        out.push(format!(
            "{} row(s) in PostgreSQL have another quantity than bought (e.g. {})",
            wrong.len(),
            wrong[0]
        ));
    }
    out
}
