//! The hammer: N purchases, C at a time, then proof from Redis that nothing was oversold.
//!
//! It trusts nothing the buyers say on their own. Workers only record what each request was
//! told; afterwards the stock and the ledger are read back from Redis, and [`judge`], a pure
//! function, holds the two accounts against each other: stock consumed, units the buyers were
//! told they bought, and units in the ledger must agree (within what failed requests might have
//! done), per order as well as in total, and the stock must never go below zero. The hammer
//! measures and never prints; `render` turns its [`Report`] into text or JSON.
//!
//! Layout: [`report`] holds the public report types; `fan_out` what every driver shares, and
//! one file per way of driving load (`threads`, `multiplexed`, `procs`); `readback` reads the
//! results back, and `watch` reads the stock during the run for signs of stock put back;
//! [`judge`] turns samples and the read-back into a verdict. [`http`] puts an
//! external endpoint to the test instead of lockctl's own buyers (`hammer --url`), judged by
//! `judge_http` from the stock alone, since such an endpoint keeps no ledger lockctl can read.

mod batched;
mod fan_out;
pub mod http;
pub mod judge;
mod judge_http;
mod multiplexed;
pub mod pipeline;
mod procs;
mod readback;
pub mod report;
pub mod tally;
mod threads;
pub mod usage;
mod watch;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

pub use fan_out::OUTAGE_LIMIT;
pub use judge::{judge, judge_unreadable};
pub use pipeline::{PipelineOptions, PipelineReport};
pub use procs::{ChildBuy, child_deadline};
pub use readback::{READ_BACK_PATIENCE, Readback};
pub use report::{
    Bucket, Ended, HttpFacts, LATE_AFTER_MS, LoadModel, Percentiles, Report, RunFacts, Sample,
    Subject, Verdict,
};

use crate::conn::Target;
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::redlock::Quorum;
use crate::sku::Sku;
use crate::stock::{self, BuyOptions, Strategy};
use crate::units::count;

/// How the purchases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Worker threads in this process, one connection each.
    Threads,
    /// Each purchase is a child `lockctl buy` process, like the seed's "several terminals".
    Procs,
    /// Each purchase is an HTTP request to someone's endpoint (`hammer --url`).
    Http,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct HammerOptions {
    /// Default: `sku_886`.
    pub sku: Sku,
    /// Purchases in all. Default: 100.
    pub requests: u64,
    /// Purchases in flight at once. Default: 10.
    pub concurrency: u64,
    /// Default: [`Mode::Threads`].
    pub mode: Mode,
    /// Seed the stock to this first; `None` uses the stock already in Redis. Default: `None`.
    pub stock: Option<u64>,
    /// How each purchase is made. Default: [`BuyOptions::default`].
    pub buy: BuyOptions,
    /// Spread purchases over this many simulated users (`u0`, `u1`, ...), so a per-user
    /// limit applies. Default: none (anonymous buyers).
    pub users: Option<u64>,
    /// The `lockctl` binary, for [`Mode::Procs`]. Default: this process's own executable.
    pub exe: Option<PathBuf>,
    /// Counts finished requests as they finish, for a progress display. Default: none.
    pub progress: Option<Arc<AtomicU64>>,
    /// Take the lock by Redlock quorum on these masters. Default: none (the data node's lock).
    pub quorum: Option<Arc<Quorum>>,
    /// Once set, no new request starts; those in flight finish. Default: none.
    pub stop: Option<Arc<AtomicBool>>,
    /// Workers beside the buyers persisting the orders into PostgreSQL (`--queue --db`), and
    /// the whole path checked. Default: none.
    pub pipeline: Option<PipelineOptions>,
}

impl Default for HammerOptions {
    fn default() -> Self {
        HammerOptions {
            sku: "sku_886".parse().expect("a valid SKU"),
            requests: 100,
            concurrency: 10,
            mode: Mode::Threads,
            stock: None,
            buy: BuyOptions::default(),
            users: None,
            exe: None,
            progress: None,
            quorum: None,
            stop: None,
            pipeline: None,
        }
    }
}

/// The most points a report's stock timeline keeps.
pub const TIMELINE_POINTS: usize = 400;

/// Runs the hammer against `target` and judges the result.
pub fn run(target: &Target, opts: &HammerOptions) -> Result<Report> {
    let keys = StockKeys::new(&opts.sku);
    ensure_descriptors(opts, target)?;
    let mut conn = target.connect()?;
    check_capacity(&mut conn, target, opts)?;
    if let Some(p) = &opts.pipeline {
        pipeline::check_db(target, p)?;
    }
    let initial_stock = match opts.stock {
        Some(n) => {
            stock::seed(&mut conn, &opts.sku, n)?;
            n as i64
        }
        None => stock::starting_stock_at(&mut conn, &opts.sku, &keys.stock)?.ok_or_else(|| {
            Error::Unseeded {
                sku: opts.sku.to_string(),
            }
        })?,
    };
    let incarnation = readback::Incarnation::of(target, &mut conn);
    let run_id = format!("h{}", hex::encode(rand::random::<[u8; 4]>()));
    let running = match &opts.pipeline {
        Some(p) => Some(pipeline::start(target, opts, p)?),
        None => None,
    };
    let watch = watch::start(target, &opts.sku, &keys.stock, initial_stock);
    let started = Instant::now();
    let cpu_before = usage::cpu_time();
    let tally = match opts.mode {
        // Simulated work needs a thread per buyer to sleep in.
        Mode::Threads if multiplexes(opts, target) => {
            multiplexed::run_multiplexed(target, opts, &run_id)?
        }
        Mode::Threads if batches(opts) => batched::run_batched(target, opts, &run_id)?,
        Mode::Threads => threads::run_threads(target, opts, &run_id)?,
        Mode::Procs => procs::run_procs(target, opts, &run_id)?,
        Mode::Http => {
            return Err(Error::internal(
                "an HTTP run goes through hammer::http::run, with the endpoint's options",
            ));
        }
    };
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
        sku: opts.sku.to_string(),
        run_id,
        // An interrupted run is judged on the requests it made.
        requests: if stopped_early { made } else { opts.requests },
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
        initial_stock,
        elapsed,
        client_cpu,
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

/// Whether Ctrl-C (or SIGTERM, SIGHUP) stopped the run after `made` requests, short of all.
fn interrupted(opts: &HammerOptions, made: u64) -> bool {
    made != opts.requests
        && opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
}

/// Says so in a report judged on the `made` requests of the `requested`.
fn mark_interrupted(report: &mut Report, made: u64, requested: u64) {
    report.interrupted = true;
    report.notes.insert(
        0,
        format!(
            "interrupted: {made} of {} made; the report covers those",
            count(requested, "request", "requests")
        ),
    );
}

/// Open files a run holds besides its connections: standard streams, the runtime's epoll and
/// wake-up descriptors, the read-back's and the exporter's connections, with room to spare.
const OWN_FILES: u64 = 32;

/// Makes sure this process may open the files a run of `opts` holds at once (its connections;
/// a child process's pipes): raises the soft `ulimit -n` as far as the hard limit when it has
/// to, and refuses the run, before anything is written, when even that is too few. Otherwise
/// the connections past the limit would fail one by one (EMFILE), and an HTTP endpoint would
/// look down.
pub fn ensure_descriptors(opts: &HammerOptions, target: &Target) -> Result<()> {
    let c = opts.concurrency.min(opts.requests.max(1)).max(1);
    // Files per buyer, and all the run's buyers hold at once.
    let (per_buyer, held) = match opts.mode {
        // A connection to the endpoint each.
        Mode::Http => (1, c),
        // Starting a child holds its three pipes at both ends and the pipe that reports a
        // failed exec, while other children start beside it; each then keeps three.
        Mode::Procs => (8, 8 * c),
        // Lockctl's own buyers: a connection each, and one per watchdog.
        Mode::Threads => {
            let conns = connections_needed(opts, target);
            ((conns.saturating_sub(4) / c).max(1), conns)
        }
    };
    // The orders pipeline's workers: each its PostgreSQL client (a socket and the runtime
    // the client runs on) and its Redis connection; and the queue's sampler.
    let held = held
        + opts
            .pipeline
            .as_ref()
            .map_or(0, |p| 6 * p.workers.max(1) + 2);
    let needed = held + OWN_FILES;
    let limit = match raise_file_limit(needed) {
        Some(limit) => limit,
        // Not known (getrlimit failed): the run goes on, and says so if a connect fails.
        None => return Ok(()),
    };
    if needed <= limit {
        return Ok(());
    }
    // What fits: the files not held per buyer (the hammer's own connections) come first.
    let shared = held.saturating_sub(per_buyer * c);
    let fits = limit.saturating_sub(OWN_FILES + shared) / per_buyer;
    let advice = match fits {
        0 => format!("raise the limit (ulimit -n {needed}) and try again"),
        _ => format!("lower -c to at most {fits}, or raise the limit (ulimit -n {needed})"),
    };
    Err(Error::TooFewDescriptors {
        concurrency: c,
        needed,
        limit,
        advice,
    })
}

/// The soft limit on open files, raised to the hard limit when it is below `wanted` (all the
/// way: a run's estimate is not an exact count); `None` when it cannot be read.
fn raise_file_limit(wanted: u64) -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given, a live local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    if lim.rlim_cur >= wanted {
        return Some(lim.rlim_cur);
    }
    // The hard limit, or (where the kernel caps it lower, fs.nr_open) what the run wants.
    for soft in [lim.rlim_max, wanted.min(lim.rlim_max)] {
        let raised = libc::rlimit {
            rlim_cur: soft,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct it is given, a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Some(soft);
        }
    }
    Some(lim.rlim_cur)
}

/// The connections a run opens to the data node at once, at most: one per buyer (a
/// multiplexed or threaded buyer holds one; a child process holds its own, its watchdog's
/// and its expiry poker's), one per watchdog, and a few of the hammer's own.
pub fn connections_needed(opts: &HammerOptions, target: &Target) -> u64 {
    let c = opts.concurrency.min(opts.requests.max(1));
    let watchdogs = if opts.buy.lock.watchdog { c } else { 0 };
    let own = 4;
    match opts.mode {
        Mode::Procs => c * 2 + watchdogs + own,
        Mode::Http => own,
        Mode::Threads if multiplexes(opts, target) => c + own,
        // The batcher's committers, whatever the number of buyers.
        Mode::Threads if batches(opts) => 2 + own,
        Mode::Threads => c + watchdogs + own,
    }
}

/// Refuses, before anything is written, a run that needs more connections than the server
/// accepts (`maxclients` less those in use): past it Redis turns buyers away at connect time,
/// and the run would measure the server's limit instead of the lock. Skipped where the
/// server does not say (CONFIG not allowed, a cluster).
fn check_capacity(
    conn: &mut crate::conn::Conn,
    target: &Target,
    opts: &HammerOptions,
) -> Result<()> {
    if target.is_cluster() {
        return Ok(());
    }
    let max: Option<Vec<String>> = conn
        .query(redis::cmd("CONFIG").arg("GET").arg("maxclients"))
        .ok();
    let Some(maxclients) = max.and_then(|v| v.get(1).and_then(|n| n.parse::<u64>().ok())) else {
        return Ok(());
    };
    let info: String = conn
        .query(redis::cmd("INFO").arg("clients"))
        .unwrap_or_default();
    let in_use = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(1);
    let needed = connections_needed(opts, target);
    if needed + in_use.saturating_sub(1) <= maxclients {
        return Ok(());
    }
    let spare = maxclients.saturating_sub(in_use.saturating_sub(1));
    let per_buyer = needed.saturating_sub(4) / opts.concurrency.max(1);
    let fits = spare.saturating_sub(4) / per_buyer.max(1);
    let advice = match fits {
        0 => "not even -c 1 fits; close some of its clients or raise the server's maxclients"
            .to_string(),
        _ => format!("lower -c to at most {fits}, or raise the server's maxclients"),
    };
    Err(Error::TooManyClients {
        addr: target.addr().to_string(),
        needed,
        maxclients,
        in_use,
        advice,
    })
}

/// Whether the batch strategy's driver (one batcher, buyers that are not threads) runs this
/// load.
fn batches(opts: &HammerOptions) -> bool {
    opts.mode == Mode::Threads && opts.buy.strategy == Strategy::Batch
}

/// Whether the atomic strategy's multiplexed driver runs this load.
fn multiplexes(opts: &HammerOptions, target: &Target) -> bool {
    opts.mode == Mode::Threads
        && opts.buy.strategy == Strategy::Atomic
        && opts.buy.work.is_zero()
        && !target.is_cluster()
}

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
