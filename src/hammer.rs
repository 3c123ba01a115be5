//! The hammer: N purchases, C at a time, then proof from Redis that nothing was oversold.
//!
//! It trusts nothing the buyers say on their own. Workers only record what each request was
//! told; afterwards the stock and the ledger are read back from Redis, and [`judge`], a pure
//! function, holds the two accounts against each other: stock consumed, units the buyers were
//! told they bought, and units in the ledger must agree (within what failed requests might have
//! done), per order as well as in total, and the stock must never go below zero. The hammer
//! measures and never prints; `render` turns its [`Report`] into text or JSON.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::redlock::Quorum;
use crate::sku::{Sku, StockKeys};
use crate::stock::{self, Buy, BuyOptions, Buyer, Purchase, Strategy};

/// How the purchases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Worker threads in this process, one connection each.
    Threads,
    /// Each purchase is a child `lockctl buy` process, like the seed's "several terminals".
    Procs,
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
        }
    }
}

/// How one request ended, as its buyer was told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// A purchase outcome. `replayed` is set when the order id had bought before.
    Done {
        outcome: Buy,
        replayed: bool,
        overran_lease: bool,
    },
    /// A failure. `indeterminate` when it may have been applied anyway.
    Failed {
        kind: String,
        indeterminate: bool,
        message: String,
    },
}

/// One request's record.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Request number, 0-based; the order id is `<run id>-<index>`.
    pub index: u64,
    pub ended: Ended,
    pub latency: Duration,
    pub lock_wait: Option<Duration>,
    pub lock_hold: Option<Duration>,
    /// When the request finished, from the start of the run.
    pub at: Duration,
}

/// What the run found in Redis afterwards.
#[derive(Clone, Debug, Default)]
pub struct Readback {
    pub final_stock: i64,
    /// This run's ledger entries: request index -> units recorded under its order id.
    pub ledger: HashMap<u64, i64>,
}

/// What was run: everything [`judge`] needs besides the samples and the readback, and the
/// first fields of the report.
#[derive(Clone, Debug, Serialize)]
pub struct RunFacts {
    pub sku: String,
    pub run_id: String,
    pub requests: u64,
    pub concurrency: u64,
    pub strategy: Strategy,
    pub mode: Mode,
    pub qty: u64,
    pub ttl_ms: u64,
    pub wait_ms: u64,
    pub work_ms: u64,
    pub watchdog: bool,
    /// Whether the hammer seeded the stock itself (`--stock`).
    pub seeded: bool,
    pub initial_stock: i64,
    /// Wall time of the purchases (the report carries it as `elapsed_s`).
    #[serde(skip)]
    pub elapsed: Duration,
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

/// Whether every invariant held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// Redis could not be read back after the run: nothing can be claimed either way.
    Unknown,
}

/// The hammer's findings.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
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
    pub sold_out: u64,
    pub busy: u64,
    pub lease_lost: u64,
    pub limit_reached: u64,
    pub errors: u64,
    /// Errors whose effect is unknown (they may have deducted).
    pub indeterminate: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Lock-strategy buyers who deducted and then found their lease gone at release.
    pub lease_overrun: u64,
    /// Units sold beyond the initial stock.
    pub oversold: u64,
    /// This run's orders in the ledger, and their units.
    pub ledger_orders: u64,
    pub ledger_qty: i64,
    pub elapsed_s: f64,
    pub throughput_rps: f64,
    pub latency_ms: Percentiles,
    /// Time to acquire the lock, for the lock strategies.
    pub lock_wait_ms: Option<Percentiles>,
    /// Time the lock was held, for the lock strategies.
    pub lock_hold_ms: Option<Percentiles>,
    /// Every invariant that did not hold, in words. Empty on a pass.
    pub violations: Vec<String>,
    /// What happened, in words, for a person reading the report.
    pub notes: Vec<String>,
    /// The first error message seen, if any.
    pub first_error: Option<String>,
    /// The latency distribution: requests per bucket, each bucket up to `le_ms`.
    pub latency_buckets: Vec<Bucket>,
    /// Stock over time as the buyers were told it: `[seconds since start, stock]`, at most
    /// [`TIMELINE_POINTS`] points.
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

/// The most points a report's stock timeline keeps.
pub const TIMELINE_POINTS: usize = 400;

/// Runs the hammer against `target` and judges the result.
pub fn run(target: &Target, opts: &HammerOptions) -> Result<Report> {
    let keys = StockKeys::new(&opts.sku);
    let mut conn = target.connect()?;
    let initial_stock = match opts.stock {
        Some(n) => {
            stock::seed(&mut conn, &opts.sku, n)?;
            n as i64
        }
        None => stock::read_stock(&mut conn, &opts.sku, &keys)?.ok_or_else(|| Error::Unseeded {
            sku: opts.sku.to_string(),
        })?,
    };
    let run_id = format!("h{}", hex::encode(rand::random::<[u8; 4]>()));
    let started = Instant::now();
    let samples = match opts.mode {
        // Simulated work needs a thread per buyer to sleep in.
        Mode::Threads
            if opts.buy.strategy == Strategy::Atomic
                && opts.buy.work.is_zero()
                && !target.is_cluster() =>
        {
            run_multiplexed(target, opts, &run_id)?
        }
        Mode::Threads => run_threads(target, opts, &run_id),
        Mode::Procs => run_procs(target, opts, &run_id)?,
    };
    let elapsed = started.elapsed();
    let readback = read_back_patiently(target, &mut conn, &opts.sku, &keys, &run_id);
    let interrupted = samples.len() as u64 != opts.requests
        && opts
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed));
    let facts = RunFacts {
        sku: opts.sku.to_string(),
        run_id,
        // An interrupted run is judged on the requests it made.
        requests: if interrupted {
            samples.len() as u64
        } else {
            opts.requests
        },
        concurrency: opts.concurrency,
        strategy: opts.buy.strategy,
        mode: opts.mode,
        qty: opts.buy.qty,
        ttl_ms: opts.buy.lock.ttl.as_millis() as u64,
        wait_ms: opts.buy.lock.wait.as_millis() as u64,
        work_ms: opts.buy.work.as_millis() as u64,
        watchdog: opts.buy.lock.watchdog,
        seeded: opts.stock.is_some(),
        initial_stock,
        elapsed,
    };
    let mut report = match readback {
        Ok(rb) => judge(&facts, &samples, &rb),
        Err(e) => judge_unreadable(&facts, &samples, &e),
    };
    if interrupted {
        report.interrupted = true;
        report.notes.insert(
            0,
            format!(
                "interrupted: {} of {} requests were made; the report covers those",
                samples.len(),
                opts.requests
            ),
        );
    }
    Ok(report)
}

/// The report of a run whose results could not be read back from Redis: the buyers' side is
/// all there, the verdict is unknown, and nothing is claimed about the stock.
pub fn judge_unreadable(facts: &RunFacts, samples: &[Sample], e: &Error) -> Report {
    let rb = Readback {
        final_stock: facts.initial_stock,
        ledger: HashMap::new(),
    };
    let mut r = judge(facts, samples, &rb);
    r.verdict = Verdict::Unknown;
    r.final_stock = None;
    r.consumed = None;
    r.oversold = 0;
    r.violations.clear();
    r.stock_timeline.pop();
    r.notes.insert(
        0,
        format!(
            "could not read the stock and the ledger back from Redis ({e}): the verdict is unknown"
        ),
    );
    r
}

/// How long the read-back keeps trying a server that is down (restarting, failing over).
pub const READ_BACK_PATIENCE: Duration = Duration::from_secs(5);

/// Reads the results back, on fresh connections and with pauses if the first try fails, for
/// at most [`READ_BACK_PATIENCE`]: a fault at the end of a run should not cost the verdict.
fn read_back_patiently(
    target: &Target,
    conn: &mut Conn,
    sku: &Sku,
    keys: &StockKeys,
    run_id: &str,
) -> Result<Readback> {
    let deadline = Instant::now() + READ_BACK_PATIENCE;
    let mut result = read_back(conn, sku, keys, run_id);
    while result.is_err() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
        result = target
            .connect()
            .and_then(|mut c| read_back(&mut c, sku, keys, run_id));
    }
    result
}

fn read_back(conn: &mut Conn, sku: &Sku, keys: &StockKeys, run_id: &str) -> Result<Readback> {
    let final_stock = stock::read_stock(conn, sku, keys)?.ok_or_else(|| Error::Unseeded {
        sku: sku.to_string(),
    })?;
    let prefix = format!("{run_id}-");
    let ledger = stock::ledger(conn, sku)?
        .into_iter()
        .filter_map(|(order, units)| {
            let index = order.strip_prefix(&prefix)?.parse().ok()?;
            Some((index, units))
        })
        .collect();
    Ok(Readback {
        final_stock,
        ledger,
    })
}

fn user_of(opts: &HammerOptions, index: u64) -> Option<String> {
    opts.users.map(|k| format!("u{}", index % k.max(1)))
}

/// Runs every request index through `round` on `workers` threads, each with its own state,
/// `per_round` indices at a time (the concurrency is `workers * per_round`); a round may leave
/// requests in flight for the next, and `drain` collects them at the end. Handles what is
/// common to every way of running: Ctrl-C, progress, and outages (a server that refuses
/// connections is down or restarting: the worker backs off, 10 ms doubling to 500 ms, rather
/// than spend the remaining requests as instant failures while it comes back; after
/// [`OUTAGE_LIMIT`] of it the requests not yet made are given up, so a dead server ends the run).
fn fan_out<S>(
    opts: &HammerOptions,
    workers: u64,
    per_round: u64,
    init: impl Fn() -> S + Sync,
    round: impl Fn(&mut S, &[u64]) -> Vec<Sample> + Sync,
    drain: impl Fn(&mut S) -> Vec<Sample> + Sync,
) -> Vec<Sample> {
    let next = AtomicU64::new(0);
    let abandon = AtomicBool::new(false);
    let started = Instant::now();
    let stopped = || {
        opts.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    };
    let mut all = Vec::with_capacity(opts.requests as usize);
    thread::scope(|s| {
        let handles: Vec<_> = (0..workers.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut state = init();
                    let mut mine = Vec::new();
                    let mut backoff = Duration::from_millis(10);
                    let mut down_since: Option<Instant> = None;
                    while !stopped() {
                        let batch: Vec<u64> = (0..per_round.max(1))
                            .map(|_| next.fetch_add(1, Ordering::Relaxed))
                            .filter(|&i| i < opts.requests)
                            .collect();
                        if batch.is_empty() {
                            break;
                        }
                        let samples = if abandon.load(Ordering::Relaxed) {
                            batch.iter().map(|&i| abandoned(i)).collect()
                        } else {
                            round(&mut state, &batch)
                        };
                        let down = samples.iter().any(|s| {
                            matches!(&s.ended,
                                Ended::Failed { kind, .. } if kind == "refused" || kind == "timed_out")
                        });
                        if let Some(p) = &opts.progress {
                            p.fetch_add(samples.len() as u64, Ordering::Relaxed);
                        }
                        let at = started.elapsed();
                        mine.extend(samples.into_iter().map(|s| Sample { at, ..s }));
                        if down && !abandon.load(Ordering::Relaxed) {
                            let since = *down_since.get_or_insert_with(Instant::now);
                            if since.elapsed() >= OUTAGE_LIMIT {
                                abandon.store(true, Ordering::Relaxed);
                            }
                            thread::sleep(backoff);
                            backoff = (backoff * 2).min(Duration::from_millis(500));
                        } else {
                            down_since = None;
                            backoff = Duration::from_millis(10);
                        }
                    }
                    // Whatever a round left in flight.
                    let rest = drain(&mut state);
                    if let Some(p) = &opts.progress {
                        p.fetch_add(rest.len() as u64, Ordering::Relaxed);
                    }
                    let at = started.elapsed();
                    mine.extend(rest.into_iter().map(|s| Sample { at, ..s }));
                    mine
                })
            })
            .collect();
        for h in handles {
            // A worker that panicked loses its samples; judge() reports them unaccounted for.
            if let Ok(mine) = h.join() {
                all.extend(mine);
            }
        }
    });
    all
}

/// One purchase through `buyer` on `conn` (opened if needed; dropped after an error, since it
/// may be in any state), as a sample.
fn one_purchase(
    target: &Target,
    buyer: &Buyer,
    conn: &mut Option<Conn>,
    i: u64,
    run_id: &str,
    opts: &HammerOptions,
    t: Instant,
) -> Sample {
    let order_id = format!("{run_id}-{i}");
    let user = user_of(opts, i);
    let result = match conn {
        Some(c) => Ok(c),
        None => target.connect().map(|c| conn.insert(c)),
    }
    .and_then(|c| buyer.buy(c, &order_id, user.as_deref()));
    match result {
        Ok(p) => done(i, t.elapsed(), &p),
        Err(e) => {
            *conn = None;
            failed(i, t.elapsed(), &e)
        }
    }
}

fn done(index: u64, latency: Duration, p: &Purchase) -> Sample {
    Sample {
        index,
        ended: Ended::Done {
            outcome: p.outcome,
            replayed: p.replayed.is_some(),
            overran_lease: p.overran_lease,
        },
        latency,
        lock_wait: p.lock_wait,
        lock_hold: p.lock_hold,
        at: Duration::ZERO,
    }
}

/// One thread and one connection per buyer: every strategy, every kind of server.
fn run_threads(target: &Target, opts: &HammerOptions, run_id: &str) -> Vec<Sample> {
    let mut buyer = Buyer::new(target, &opts.sku, opts.buy.clone());
    if let Some(q) = &opts.quorum {
        buyer = buyer.with_quorum(q.clone());
    }
    let workers = opts.concurrency.clamp(1, opts.requests.max(1));
    fan_out(
        opts,
        workers,
        1,
        || None::<Conn>,
        |conn, batch| {
            batch
                .iter()
                .map(|&i| one_purchase(target, &buyer, conn, i, run_id, opts, Instant::now()))
                .collect()
        },
        |_| Vec::new(),
    )
}

/// The atomic strategy on one server: a purchase is a single command, so a few threads can
/// drive all the connections, like redis-benchmark: each connection always has one purchase in
/// flight, and a thread goes round its connections reading the reply and sending the next. On
/// a 2-core machine a thread per buyer competes with Redis for its core; measured with `-c 50`,
/// pinning Redis to one core and the threads to the other brought the threads from about 0.8
/// to 0.9-1.0 of redis-benchmark's rate. A reply that needs the ordinary path (a flushed script
/// cache, a held lock with a wait to spend) is bought again that way on the same connection.
fn run_multiplexed(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Vec<Sample>> {
    let buyer = Buyer::new(target, &opts.sku, opts.buy.clone());
    buyer.load_scripts(&mut target.connect()?)?;
    let cores = thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let concurrency = opts.concurrency.clamp(1, opts.requests.max(1));
    let workers = cores.saturating_sub(1).clamp(1, concurrency);
    let per_round = concurrency.div_ceil(workers);
    let receive = |slot: &mut Slot| -> Option<Sample> {
        let (i, t, order_id, user) = slot.in_flight.take()?;
        let conn = slot.conn.as_mut()?;
        let reply = conn.recv::<(String, i64, String)>();
        let broken = matches!(&reply, Err(e) if e.is_indeterminate());
        let sample = match buyer.atomic_reply(conn, reply, &order_id, user.as_deref()) {
            Ok(Some(p)) => done(i, t.elapsed(), &p),
            Ok(None) => one_purchase(target, &buyer, &mut slot.conn, i, run_id, opts, t),
            Err(e) => failed(i, t.elapsed(), &e),
        };
        if broken {
            slot.conn = None;
        }
        Some(sample)
    };
    Ok(fan_out(
        opts,
        workers,
        per_round,
        || (0..per_round).map(|_| Slot::default()).collect::<Vec<_>>(),
        |slots, batch| {
            let mut samples = Vec::with_capacity(batch.len());
            for (slot, &i) in slots.iter_mut().zip(batch) {
                samples.extend(receive(slot));
                let t = Instant::now();
                let order_id = format!("{run_id}-{i}");
                let user = user_of(opts, i);
                let conn = match &mut slot.conn {
                    Some(c) => c,
                    None => match target.connect() {
                        Ok(c) => slot.conn.insert(c),
                        Err(e) => {
                            samples.push(failed(i, t.elapsed(), &e));
                            continue;
                        }
                    },
                };
                match conn.send(&buyer.atomic_command(&order_id, user.as_deref())) {
                    Ok(()) => slot.in_flight = Some((i, t, order_id, user)),
                    Err(e) => {
                        slot.conn = None;
                        samples.push(failed(i, t.elapsed(), &e));
                    }
                }
            }
            // A short last batch: the slots it did not reach still have replies to read.
            for slot in slots.iter_mut().skip(batch.len()) {
                samples.extend(receive(slot));
            }
            samples
        },
        |slots| slots.iter_mut().filter_map(&receive).collect(),
    ))
}

/// One connection of [`run_multiplexed`] and the purchase in flight on it.
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    in_flight: Option<(u64, Instant, String, Option<String>)>,
}

/// How long the server may stay unreachable before the hammer gives up on the requests it has
/// not made yet (each is then counted as an error of kind `abandoned`, never sent).
pub const OUTAGE_LIMIT: Duration = Duration::from_secs(5);

fn abandoned(index: u64) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: "abandoned".into(),
            indeterminate: false,
            message: format!(
                "not sent: Redis was unreachable for {} s",
                OUTAGE_LIMIT.as_secs()
            ),
        },
        latency: Duration::ZERO,
        lock_wait: None,
        lock_hold: None,
        at: Duration::ZERO,
    }
}

fn failed(index: u64, latency: Duration, e: &Error) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: e.kind().to_string(),
            indeterminate: e.is_indeterminate(),
            message: e.to_string(),
        },
        latency,
        lock_wait: None,
        lock_hold: None,
        at: Duration::ZERO,
    }
}

fn run_procs(target: &Target, opts: &HammerOptions, run_id: &str) -> Result<Vec<Sample>> {
    let exe = match &opts.exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| Error::Redis {
            addr: target.addr().to_string(),
            reason: format!("cannot find the lockctl binary for --mode procs: {e}"),
            code: None,
            indeterminate: false,
        })?,
    };
    let b = &opts.buy;
    let co = target.options();
    let mut common: Vec<String> = vec![
        "--json".into(),
        "--timeout-ms".into(),
        co.call_timeout.as_millis().to_string(),
        "--connect-timeout-ms".into(),
        co.connect_timeout.as_millis().to_string(),
        "buy".into(),
        opts.sku.to_string(),
        "--strategy".into(),
        b.strategy.name().into(),
        "--qty".into(),
        b.qty.to_string(),
        "--ttl-ms".into(),
        b.lock.ttl.as_millis().to_string(),
        "--wait-ms".into(),
        b.lock.wait.as_millis().to_string(),
        "--work-ms".into(),
        b.work.as_millis().to_string(),
    ];
    if b.lock.watchdog {
        common.push("--watchdog".into());
    }
    if target.is_cluster() {
        common.insert(0, "--cluster".into());
    }
    if let Some(limit) = b.limit {
        common.extend(["--limit".into(), limit.to_string()]);
    }
    let lock_nodes = opts
        .quorum
        .as_ref()
        .map(|q| q.secret_urls().join(","))
        .unwrap_or_default();
    let one_child = |i: u64| {
        let t = Instant::now();
        let mut cmd = Command::new(&exe);
        // Its own process group, so a Ctrl-C at the terminal stops the hammer from starting
        // new buyers but lets the running ones finish and release their locks.
        cmd.process_group(0);
        cmd.args(&common)
            .args(["--order-id", &format!("{run_id}-{i}")])
            // URLs travel in the environment, so no password shows in `ps`.
            .env("REDIS_URL", target.secret_url())
            .env_remove("LOCKCTL_LOCK_NODES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(u) = user_of(opts, i) {
            cmd.args(["--user", &u]);
        }
        if !lock_nodes.is_empty() {
            cmd.env("LOCKCTL_LOCK_NODES", &lock_nodes);
        }
        let out = child_outcome(cmd);
        let latency = t.elapsed();
        match out {
            Ok((ended, wait, hold)) => Sample {
                index: i,
                ended,
                latency,
                lock_wait: wait,
                lock_hold: hold,
                at: Duration::ZERO,
            },
            Err(message) => Sample {
                index: i,
                // A child that died without saying what happened may have deducted.
                ended: Ended::Failed {
                    kind: "child".into(),
                    indeterminate: true,
                    message,
                },
                latency,
                lock_wait: None,
                lock_hold: None,
                at: Duration::ZERO,
            },
        }
    };
    let workers = opts.concurrency.clamp(1, opts.requests.max(1));
    Ok(fan_out(
        opts,
        workers,
        1,
        || (),
        |_, batch| batch.iter().map(|&i| one_child(i)).collect(),
        |_| Vec::new(),
    ))
}

type ChildResult = (Ended, Option<Duration>, Option<Duration>);

/// Runs one child `lockctl buy --json` and reads its one JSON object.
fn child_outcome(mut cmd: Command) -> Result<ChildResult, String> {
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start lockctl: {e}"))?;
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut stderr);
    }
    let status = child
        .wait()
        .map_err(|e| format!("lockctl did not finish: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|_| {
        format!(
            "lockctl buy exited with {status} and no JSON: {}",
            stderr.trim()
        )
    })?;
    let ms = |name: &str| {
        v[name]
            .as_f64()
            .map(|x| Duration::from_secs_f64(x / 1000.0))
    };
    if let Some(message) = v["error"].as_str() {
        return Ok((
            Ended::Failed {
                kind: v["error_kind"].as_str().unwrap_or("child").into(),
                indeterminate: v["indeterminate"].as_bool().unwrap_or(true),
                message: message.into(),
            },
            None,
            None,
        ));
    }
    let remaining = v["remaining"].as_i64().unwrap_or(0);
    let outcome = match v["outcome"].as_str() {
        Some("bought") => Buy::Bought { remaining },
        Some("sold_out") => Buy::SoldOut { remaining },
        Some("busy") => Buy::Busy,
        Some("lease_lost") => Buy::LeaseLost,
        Some("limit_reached") => Buy::LimitReached {
            bought: v["user_bought"].as_u64().unwrap_or(0),
            limit: v["limit"].as_u64().unwrap_or(0),
        },
        other => return Err(format!("lockctl buy answered an unknown outcome {other:?}")),
    };
    Ok((
        Ended::Done {
            outcome,
            replayed: v["replayed"].as_bool().unwrap_or(false),
            overran_lease: v["lease_overrun"].as_bool().unwrap_or(false),
        },
        ms("lock_wait_ms"),
        ms("lock_hold_ms"),
    ))
}

fn new_histogram() -> Histogram<u64> {
    // Microseconds from 1 µs to one hour at three significant figures.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    let ms = |us: u64| (us as f64 / 1000.0 * 1000.0).round() / 1000.0;
    Percentiles {
        p50: ms(h.value_at_quantile(0.50)),
        p90: ms(h.value_at_quantile(0.90)),
        p99: ms(h.value_at_quantile(0.99)),
        p999: ms(h.value_at_quantile(0.999)),
        max: ms(h.max()),
        mean: (h.mean() / 1000.0 * 1000.0).round() / 1000.0,
    }
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}

/// Holds what the buyers were told against what Redis holds, and says whether it adds up.
pub fn judge(facts: &RunFacts, samples: &[Sample], rb: &Readback) -> Report {
    let qty = facts.qty;
    let mut latency = new_histogram();
    let mut wait = new_histogram();
    let mut hold = new_histogram();
    let (mut bought, mut replayed, mut sold_out, mut busy, mut lease_lost, mut limit_reached) =
        (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let (mut errors, mut indeterminate, mut lease_overrun) = (0u64, 0u64, 0u64);
    let mut errors_by_kind = BTreeMap::new();
    let mut first_error = None;
    let mut violations = Vec::new();
    // Per request: what the ledger may hold for it.
    let mut told_bought = HashMap::new();
    let mut maybe_applied = std::collections::HashSet::new();

    for s in samples {
        record(&mut latency, s.latency);
        if let Some(w) = s.lock_wait {
            record(&mut wait, w);
        }
        if let Some(h) = s.lock_hold {
            record(&mut hold, h);
        }
        match &s.ended {
            Ended::Done {
                outcome,
                replayed: was_replay,
                overran_lease,
            } => match outcome {
                Buy::Bought { .. } => {
                    bought += 1;
                    if *was_replay {
                        replayed += 1;
                    } else {
                        told_bought.insert(s.index, qty as i64);
                    }
                    lease_overrun += u64::from(*overran_lease);
                }
                Buy::SoldOut { .. } => sold_out += 1,
                Buy::Busy => busy += 1,
                Buy::LeaseLost => lease_lost += 1,
                Buy::LimitReached { .. } => limit_reached += 1,
            },
            Ended::Failed {
                kind,
                indeterminate: ind,
                message,
            } => {
                errors += 1;
                *errors_by_kind.entry(kind.clone()).or_insert(0) += 1;
                if *ind {
                    indeterminate += 1;
                    maybe_applied.insert(s.index);
                }
                first_error.get_or_insert_with(|| message.clone());
            }
        }
    }

    let sold_qty = (bought - replayed) * qty;
    let consumed = facts.initial_stock - rb.final_stock;
    let ledger_qty: i64 = rb.ledger.values().sum();
    let accounted = bought + sold_out + busy + lease_lost + limit_reached + errors;
    if accounted != facts.requests || samples.len() as u64 != facts.requests {
        violations.push(format!(
            "{} of {} requests are unaccounted for",
            facts.requests.abs_diff(accounted),
            facts.requests
        ));
    }
    if rb.final_stock < 0 {
        violations.push(format!("the stock went negative: {}", rb.final_stock));
    }
    let oversold = (sold_qty as i64 - facts.initial_stock)
        .max(-rb.final_stock)
        .max(0) as u64;
    if oversold > 0 {
        violations.push(format!(
            "oversold by {oversold}: {sold_qty} units sold from a stock of {}",
            facts.initial_stock
        ));
    }
    // Jepsen's counter bound: every unit told "bought" was consumed, and at most the
    // indeterminate requests' units on top of those.
    let upper = sold_qty as i64 + (indeterminate * qty) as i64;
    if consumed < sold_qty as i64 || consumed > upper {
        violations.push(format!(
            "the stock fell by {consumed} but buyers were told they bought {sold_qty}{}",
            if indeterminate > 0 {
                format!(" (and {indeterminate} requests may have bought)")
            } else {
                String::new()
            }
        ));
    }
    if ledger_qty != consumed {
        violations.push(format!(
            "the ledger records {ledger_qty} units but the stock fell by {consumed}"
        ));
    }
    let mut per_order = Vec::new();
    for (index, &units) in &rb.ledger {
        match told_bought.get(index) {
            Some(&q) if units == q => {}
            Some(&q) if units > q => per_order.push(format!(
                "order {}-{index} was deducted {} times ({units} units for a {q}-unit order)",
                facts.run_id,
                units / q.max(1)
            )),
            Some(&q) => per_order.push(format!(
                "order {}-{index} was told it bought {q} but the ledger has {units}",
                facts.run_id
            )),
            None if maybe_applied.contains(index) && units == qty as i64 => {}
            None => per_order.push(format!(
                "order {}-{index} is in the ledger ({units} units) but its buyer was not told it bought",
                facts.run_id
            )),
        }
    }
    for index in told_bought.keys() {
        if !rb.ledger.contains_key(index) {
            per_order.push(format!(
                "order {}-{index} was told it bought but is not in the ledger",
                facts.run_id
            ));
        }
    }
    per_order.sort();
    let shown = per_order.len().min(5);
    if per_order.len() > shown {
        let more = per_order.len() - shown;
        per_order.truncate(shown);
        per_order.push(format!("... and {more} more order mismatches"));
    }
    violations.extend(per_order);
    // Stock only goes down, so "sold out" while enough stock is left at the end was wrong.
    if sold_out > 0 && rb.final_stock >= qty as i64 && errors == 0 {
        violations.push(format!(
            "under-sold: {sold_out} buyers were told sold out but {} units are left",
            rb.final_stock
        ));
    }

    let mut notes = Vec::new();
    if lease_overrun > 0 {
        notes.push(format!(
            "{lease_overrun} buyers worked past their lease (the lock had expired before they \
             released it); stock went to {}",
            rb.final_stock
        ));
    }
    if lease_lost > 0 {
        notes.push(format!(
            "{lease_lost} buyers lost their lease before deducting and deducted nothing"
        ));
    }
    if busy > 0 && rb.final_stock > 0 {
        notes.push(format!(
            "{busy} buyers were turned away busy while stock remained (raise --wait-ms to wait for the lock)"
        ));
    }
    if errors > 0 {
        notes.push(format!(
            "{errors} requests failed ({indeterminate} of them may have deducted)"
        ));
    }

    let elapsed_s = facts.elapsed.as_secs_f64();
    let locks = facts.strategy.locks() && !wait.is_empty();
    let latency_buckets = buckets(&latency);
    let stock_timeline = timeline(facts, samples, rb.final_stock);
    Report {
        verdict: if violations.is_empty() {
            Verdict::Pass
        } else {
            Verdict::Fail
        },
        run: facts.clone(),
        interrupted: false,
        final_stock: Some(rb.final_stock),
        consumed: Some(consumed),
        bought,
        sold_qty,
        replayed,
        sold_out,
        busy,
        lease_lost,
        limit_reached,
        errors,
        indeterminate,
        errors_by_kind,
        lease_overrun,
        oversold,
        ledger_orders: rb.ledger.len() as u64,
        ledger_qty,
        elapsed_s: (elapsed_s * 1000.0).round() / 1000.0,
        throughput_rps: if elapsed_s > 0.0 {
            (facts.requests as f64 / elapsed_s * 10.0).round() / 10.0
        } else {
            0.0
        },
        latency_ms: percentiles(&latency),
        lock_wait_ms: locks.then(|| percentiles(&wait)),
        lock_hold_ms: (locks && !hold.is_empty()).then(|| percentiles(&hold)),
        violations,
        notes,
        first_error,
        latency_buckets,
        stock_timeline,
    }
}

/// Log-spaced buckets, each 1.5 times as wide as the last, from the fastest request to the
/// slowest; every recorded request falls in exactly one.
fn buckets(h: &Histogram<u64>) -> Vec<Bucket> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut upper = h.min().max(1) as f64;
    let mut out = vec![Bucket {
        le_ms: upper,
        count: 0,
    }];
    for v in h.iter_recorded() {
        while v.value_iterated_to() as f64 > upper {
            upper *= 1.5;
            out.push(Bucket {
                le_ms: upper,
                count: 0,
            });
        }
        if let Some(b) = out.last_mut() {
            b.count += v.count_at_value();
        }
    }
    for b in &mut out {
        b.le_ms = (b.le_ms).round() / 1000.0;
    }
    out
}

/// The stock each buyer was told, in the order the purchases finished, thinned to at most
/// [`TIMELINE_POINTS`] points, starting at the initial stock and ending at the final one.
fn timeline(facts: &RunFacts, samples: &[Sample], final_stock: i64) -> Vec<[f64; 2]> {
    let mut points: Vec<(Duration, i64)> = samples
        .iter()
        .filter_map(|s| match s.ended {
            Ended::Done {
                outcome: Buy::Bought { remaining },
                replayed: false,
                ..
            } => Some((s.at, remaining)),
            _ => None,
        })
        .collect();
    points.sort_by_key(|p| p.0);
    let step = points.len().div_ceil(TIMELINE_POINTS - 2).max(1);
    let mut out = vec![[0.0, facts.initial_stock as f64]];
    out.extend(
        points
            .iter()
            .step_by(step)
            .map(|(at, stock)| [at.as_secs_f64(), *stock as f64]),
    );
    out.push([facts.elapsed.as_secs_f64(), final_stock as f64]);
    out
}
