//! One run of lockctl's own buyers: seed (or read) the stock, drive the load, read the books
//! back, and judge.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::capacity::{check_capacity, ensure_descriptors};
use crate::drive;
use crate::error::{Error, Result};
use crate::evidence::{Books, Evidence, conclude};
use crate::history::{History, Recorded};
use crate::options::Mode;
use crate::options::{HammerOptions, LoadOptions};
use crate::report::{Report, RunFacts, Subject};
use crate::tally::Tally;
use crate::{pipeline, readback, usage, watch};
use lockctl_core::conn::{Conn, Target};
use lockctl_core::keys::StockKeys;
use lockctl_core::stock;

/// Runs the hammer against `target` and judges the result.
pub fn run(target: &Target, opts: &HammerOptions) -> Result<Report> {
    run_recorded(target, opts).map(|r| r.report)
}

/// [`run`], with the run's history when `opts.load.history` asks for one.
pub fn run_recorded(target: &Target, opts: &HammerOptions) -> Result<Recorded> {
    let keys = StockKeys::new(&opts.load.sku);
    let mut conn = preflight(target, opts)?;
    let initial_stock = starting_stock(&mut conn, opts, &keys)?;
    let incarnation = readback::Incarnation::of(target, &mut conn);
    let masters_before = bucket_masters(target, &mut conn, opts);
    let running = match &opts.pipeline {
        Some(p) => Some(pipeline::start(target, opts, p)?),
        None => None,
    };
    let watch = watch::start(target, &opts.load.sku, &keys.stock, initial_stock);
    let ran = Ran::drive(target, opts)?;
    if let Some(quiet) = &opts.load.before_read_back {
        quiet.call();
    }
    let watched = watch.finish();
    let (tally, made) = (&ran.tally, ran.tally.samples());
    let readback =
        readback::read_back_patiently(target, &mut conn, &opts.load.sku, &ran.run_id, tally);
    let restart = incarnation.restart(target);
    let failovers = failed_over(target, opts, &masters_before);
    let stopped_early = interrupted(&opts.load, made);
    let facts = ran.facts(opts, initial_stock, stopped_early);
    let went_up = match &readback {
        Ok((final_stock, _)) => watch::went_up(&restart, &watched, *final_stock),
        Err(_) => None,
    };
    let pipeline = match (running, &opts.pipeline) {
        (Some(running), Some(p)) => Some(pipeline::finish(
            running,
            target,
            p,
            ran.elapsed,
            &facts.run_id,
            tally,
        )?),
        _ => None,
    };
    let evidence = Evidence {
        facts: &facts,
        tally,
        books: Books::Ledger(readback),
        went_up,
        pipeline,
        restart: Some(restart),
        server: target.addr().to_string(),
        interrupted: stopped_early.then_some((made, opts.load.requests)),
        notes: failovers,
        findings: Vec::new(),
        unjudged: None,
    };
    let history = History::of(&evidence, opts.load.users).map(|mut h| {
        h.stock_reads = watched.reads_since(ran.started);
        Box::new(h)
    });
    Ok(Recorded {
        report: conclude(evidence),
        history,
        started: ran.started,
    })
}

/// The checks before anything is written (descriptors for the buyers, the server's room for
/// their connections, the orders database), and the connection the run reads its books on.
fn preflight(target: &Target, opts: &HammerOptions) -> Result<Conn> {
    ensure_descriptors(opts, target)?;
    let mut conn = target.connect()?;
    check_capacity(&mut conn, target, opts)?;
    if let Some(p) = &opts.pipeline {
        pipeline::check_db(target, p)?;
    }
    Ok(conn)
}

/// The buyers' part of a run: what they did, and when.
struct Ran {
    run_id: String,
    tally: Tally,
    /// When the buyers started: the run's clock.
    started: Instant,
    elapsed: Duration,
    /// The CPU time the client spent meanwhile (`None` where the platform does not say).
    client_cpu: Option<Duration>,
}

impl Ran {
    /// Drives lockctl's own buyers as `opts` says, under a run id of their own.
    fn drive(target: &Target, opts: &HammerOptions) -> Result<Ran> {
        let run_id = format!("h{}", hex::encode(rand::random::<[u8; 4]>()));
        let started = Instant::now();
        let cpu_before = usage::cpu_time();
        let tally = drive::own_buyers(target, opts).drive(&run_id)?.tally;
        let elapsed = started.elapsed();
        let client_cpu = usage::cpu_time()
            .zip(cpu_before)
            .map(|(after, before)| after.saturating_sub(before));
        Ok(Ran {
            run_id,
            tally,
            started,
            elapsed,
            client_cpu,
        })
    }

    /// The run's facts, from the stock it started with; a run `stopped_early` is judged on
    /// the requests it made.
    fn facts(&self, opts: &HammerOptions, initial_stock: i64, stopped_early: bool) -> RunFacts {
        RunFacts {
            run_id: self.run_id.clone(),
            requests: if stopped_early {
                self.tally.samples()
            } else {
                opts.load.requests
            },
            initial_stock,
            elapsed: self.elapsed,
            client_cpu: self.client_cpu,
            ..RunFacts::of(opts)
        }
    }
}

/// The stock the run starts from: seeded with `--stock`, or what Redis holds.
fn starting_stock(conn: &mut Conn, opts: &HammerOptions, keys: &StockKeys) -> Result<i64> {
    let sku = &opts.load.sku;
    match (opts.load.stock, opts.load.buckets) {
        (Some(n), Some(k)) => {
            stock::buckets::seed_buckets(conn, sku, n, k)?;
            Ok(n as i64)
        }
        (Some(n), None) => {
            stock::seed(conn, sku, n)?;
            Ok(n as i64)
        }
        (None, _) => {
            match stock::buckets::Buckets::read(conn, sku)? {
                Some(_) => match stock::buckets::stock_of(conn, sku)? {
                    Some(n) if n < 0 => Err(Error::NegativeStock {
                        sku: sku.to_string(),
                        key: StockKeys::new(sku).buckets,
                        value: n,
                    }),
                    n => Ok(n.ok_or_else(|| lockctl_core::Error::Unseeded {
                        sku: sku.to_string(),
                    })?),
                },
                None => Ok(crate::readback::starting_stock_at(conn, sku, &keys.stock)?
                    .ok_or_else(|| lockctl_core::Error::Unseeded {
                        sku: sku.to_string(),
                    })?),
            }
        }
    }
}

impl RunFacts {
    /// The facts the options fix before the run (the rest are zero until it has run).
    fn of(opts: &HammerOptions) -> RunFacts {
        RunFacts {
            strategy: opts.buy.strategy.into(),
            mode: opts.mode.into(),
            ttl_ms: opts.buy.lock.ttl.as_millis() as u64,
            wait_ms: opts.buy.lock.wait.as_millis() as u64,
            work_ms: opts.work.as_millis() as u64,
            watchdog: opts.buy.lock.watchdog,
            redlock_nodes: opts.quorum.as_ref().map(|q| q.addrs().len() as u64),
            ..RunFacts::of_load(&opts.load, opts.buy.qty)
        }
    }

    /// The facts of a load of `qty` units a request, before it has run, with no lock of
    /// lockctl's involved: an endpoint's run, which `RunFacts::of` fills in for lockctl's
    /// own buyers.
    pub fn of_load(load: &LoadOptions, qty: u64) -> RunFacts {
        RunFacts {
            sku: load.sku.to_string(),
            run_id: String::new(),
            requests: load.requests,
            concurrency: load.concurrency,
            strategy: Subject::Endpoint,
            mode: Mode::Http,
            qty,
            ttl_ms: 0,
            wait_ms: 0,
            work_ms: 0,
            watchdog: false,
            redlock_nodes: None,
            seeded: load.stock.is_some(),
            retry_every: load.retries,
            initial_stock: 0,
            elapsed: std::time::Duration::ZERO,
            client_cpu: None,
        }
    }
}

/// Whether Ctrl-C (or SIGTERM, SIGHUP) stopped the run after `made` requests, short of all.
pub(crate) fn interrupted(load: &LoadOptions, made: u64) -> bool {
    made != load.requests
        && load
            .stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
}

/// Of a bucketed SKU on a cluster, the master serving each bucket's slot (empty otherwise).
fn bucket_masters(target: &Target, conn: &mut Conn, opts: &HammerOptions) -> Vec<Option<String>> {
    if !target.is_cluster() {
        return Vec::new();
    }
    let Ok(Some(b)) = stock::buckets::Buckets::read(conn, &opts.load.sku) else {
        return Vec::new();
    };
    let Ok(masters) = stock::buckets::masters(conn) else {
        return Vec::new();
    };
    b.skus
        .iter()
        .map(|s| stock::buckets::master_of(&masters, lockctl_core::keys::key_slot(s.as_str())))
        .collect()
}

/// The buckets whose master changed during the run (a failover), in words: writes the old
/// master acknowledged and had not yet sent to the replica that took over are gone, and the
/// verdict's "told it bought but not in the ledger" are those losses.
fn failed_over(target: &Target, opts: &HammerOptions, before: &[Option<String>]) -> Vec<String> {
    if before.is_empty() {
        return Vec::new();
    }
    let after = match target.connect() {
        Ok(mut c) => bucket_masters(target, &mut c, opts),
        Err(_) => return Vec::new(),
    };
    before
        .iter()
        .zip(&after)
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| {
            format!(
                "bucket {i}'s master changed during the run, from {} to {} (a failover): deductions the old master acknowledged before its replica had them are lost with it; any order below told it bought but missing from the ledger is such a loss (a purchase that waits for a replica's copy, as buckets with required replicas do, is not lost so)",
                a.as_deref().unwrap_or("none"),
                b.as_deref().unwrap_or("none")
            )
        })
        .collect()
}
