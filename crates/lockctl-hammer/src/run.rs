//! One run of lockctl's own buyers: seed (or read) the stock, drive the load, read the books
//! back, and judge.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::capacity::{batches, check_capacity, ensure_descriptors, multiplexes};
use crate::options::{HammerOptions, Mode};
use crate::report::{Report, RunFacts};
use crate::tally::Tally;
use crate::{batched, judge, multiplexed, pipeline, procs, readback, threads, usage, watch};
use lockctl_core::conn::{Conn, Target};
use lockctl_core::error::{Error, Result};
use lockctl_core::keys::StockKeys;
use lockctl_core::stock;
use lockctl_core::units::count;

/// Runs the hammer against `target` and judges the result.
pub fn run(target: &Target, opts: &HammerOptions) -> Result<Report> {
    let keys = StockKeys::new(&opts.sku);
    ensure_descriptors(opts, target)?;
    let mut conn = target.connect()?;
    check_capacity(&mut conn, target, opts)?;
    if let Some(p) = &opts.pipeline {
        pipeline::check_db(target, p)?;
    }
    let initial_stock = starting_stock(&mut conn, opts, &keys)?;
    let incarnation = readback::Incarnation::of(target, &mut conn);
    let run_id = format!("h{}", hex::encode(rand::random::<[u8; 4]>()));
    let running = match &opts.pipeline {
        Some(p) => Some(pipeline::start(target, opts, p)?),
        None => None,
    };
    let watch = watch::start(target, &opts.sku, &keys.stock, initial_stock);
    let started = Instant::now();
    let cpu_before = usage::cpu_time();
    let tally = drive(target, opts, &run_id)?;
    let elapsed = started.elapsed();
    let client_cpu = usage::cpu_time()
        .zip(cpu_before)
        .map(|(after, before)| after.saturating_sub(before));
    let watched = watch.finish();
    let made = tally.samples();
    let readback = readback::read_back_patiently(target, &mut conn, &opts.sku, &run_id, &tally);
    let restart = incarnation.restart(target);
    let stopped_early = interrupted(opts, made);
    let facts = RunFacts {
        run_id,
        // An interrupted run is judged on the requests it made.
        requests: if stopped_early { made } else { opts.requests },
        initial_stock,
        elapsed,
        client_cpu,
        ..RunFacts::of(opts)
    };
    let mut report = match readback {
        Ok((final_stock, ledger)) => {
            let went_up = watch::went_up(&restart, &watched, final_stock);
            judge::verdict(&facts, &tally, final_stock, ledger, went_up.as_deref())
        }
        Err(e) => judge::unreadable(&facts, &tally, &e),
    };
    if let (Some(running), Some(p)) = (running, &opts.pipeline) {
        let (pipe, violations) =
            pipeline::finish(running, target, opts, p, elapsed, &facts.run_id, &tally)?;
        pipeline::judge(&mut report, pipe, violations);
    }
    // Said of the verdict as it ended, the pipeline's findings included.
    let addr = target.addr().to_string();
    report
        .notes
        .extend(restart.note(&addr, report.verdict, facts.strategy));
    if stopped_early {
        mark_interrupted(&mut report, made, opts.requests);
    }
    Ok(report)
}

/// The stock the run starts from: seeded with `--stock`, or what Redis holds.
fn starting_stock(conn: &mut Conn, opts: &HammerOptions, keys: &StockKeys) -> Result<i64> {
    match opts.stock {
        Some(n) => {
            stock::seed(conn, &opts.sku, n)?;
            Ok(n as i64)
        }
        None => {
            stock::starting_stock_at(conn, &opts.sku, &keys.stock)?.ok_or_else(|| Error::Unseeded {
                sku: opts.sku.to_string(),
            })
        }
    }
}

/// The load itself, by the way the options drive it; what every buyer was told.
fn drive(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Tally> {
    Ok(match opts.mode {
        // Simulated work needs a thread per buyer to sleep in.
        Mode::Threads if multiplexes(opts, target) => {
            multiplexed::run_multiplexed(target, opts, run_id)?
        }
        Mode::Threads if batches(opts) => batched::run_batched(target, opts, run_id)?,
        Mode::Threads => threads::run_threads(target, opts, run_id)?,
        Mode::Procs => procs::run_procs(target, opts, run_id)?,
        Mode::Http => {
            return Err(Error::internal(
                "an HTTP run goes through hammer::http::run, with the endpoint's options",
            ));
        }
    })
}

impl RunFacts {
    /// The facts the options fix before the run (the rest are zero until it has run).
    pub(crate) fn of(opts: &HammerOptions) -> RunFacts {
        RunFacts {
            sku: opts.sku.to_string(),
            run_id: String::new(),
            requests: opts.requests,
            concurrency: opts.concurrency,
            strategy: opts.buy.strategy.into(),
            mode: opts.mode,
            qty: opts.buy.qty,
            ttl_ms: opts.buy.lock.ttl.as_millis() as u64,
            wait_ms: opts.buy.lock.wait.as_millis() as u64,
            work_ms: opts.buy.work.as_millis() as u64,
            watchdog: opts.buy.lock.watchdog,
            redlock_nodes: opts.quorum.as_ref().map(|q| q.addrs().len() as u64),
            seeded: opts.stock.is_some(),
            initial_stock: 0,
            elapsed: std::time::Duration::ZERO,
            client_cpu: None,
        }
    }
}

/// Whether Ctrl-C (or SIGTERM, SIGHUP) stopped the run after `made` requests, short of all.
pub(crate) fn interrupted(opts: &HammerOptions, made: u64) -> bool {
    made != opts.requests
        && opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
}

/// Says so in a report judged on the `made` requests of the `requested`.
pub(crate) fn mark_interrupted(report: &mut Report, made: u64, requested: u64) {
    report.interrupted = true;
    report.notes.insert(
        0,
        format!(
            "interrupted: {made} of {} made; the report covers those",
            count(requested, "request", "requests")
        ),
    );
}
