//! `lockctl hammer`: N purchases, C at a time, per strategy; then the reports and exports.

use std::io::{self, IsTerminal};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockctl_core::Error;
use lockctl_core::conn::Reconnecting;
use lockctl_core::keys::StockKeys;
use lockctl_core::lock::{Lock, LockOptions};
use lockctl_core::stock::{self, Strategy};
use lockctl_hammer::{self as hammer, Driving, HammerOptions, LoadOptions, PipelineOptions};

use super::reporting::{finish, run_context, serve_metrics};
use super::{Ctx, Exit, UsageError};
use crate::cli::HammerArgs;
use crate::progress;
use crate::report_files::Exports;
use crate::signals;

/// Runs the hammer once per strategy, then prints and exports the reports.
pub fn run(ctx: &Ctx, args: HammerArgs) -> anyhow::Result<Exit> {
    if args.http.wanted() {
        return super::hammer_http::run(ctx, args);
    }
    check_args(&args)?;
    // A bad export path fails here, before any purchase is made.
    let exports = Exports::open(&args)?;
    let mut strategies: Vec<Strategy> = args.strategies();
    strategies.dedup();
    // Every strategy's run must fit this process's open files before the first one writes.
    for &strategy in &strategies {
        if let Err(e) =
            hammer::ensure_descriptors(&options(ctx, &args, strategy, None), &ctx.target)
        {
            exports.discard();
            return Err(e.into());
        }
    }
    let stock = match starting_stock(ctx, &args, strategies.len()) {
        Ok(s) => s,
        Err(e) => {
            exports.discard();
            return Err(e);
        }
    };
    let read_waiters = waiters_reader(ctx, &args);
    if let Some(addr) = &args.metrics_addr
        && let Err(e) = serve_metrics(ctx, addr, "the hammer", read_waiters.clone())
    {
        exports.discard();
        return Err(e);
    }
    let signals = signals::listen(signals::First::Finish("the requests in flight"));
    let stop = signals.requested.clone();
    let context = run_context(ctx);
    let mut reports = Vec::new();
    let mut history = None;
    for &strategy in &strategies {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let show_bar = !ctx.quiet && ctx.color.enabled(io::stderr().is_terminal());
        let bar = progress::Bar::start(
            show_bar,
            args.requests,
            strategy.name(),
            strategies.len() > 1,
        );
        let mut opts = options(ctx, &args, strategy, stock);
        opts.load.progress = bar.as_ref().map(progress::Bar::counter);
        opts.load.stop = Some(stop.clone());
        let result = hammer::run_recorded(&ctx.target, &opts);
        drop(bar);
        match result {
            Ok(r) => {
                reports.push(r.report);
                history = history.or(r.history);
            }
            Err(e) => {
                exports.discard();
                return Err(match e {
                    lockctl_hammer::Error::Core(e) => unseeded_hint(e),
                    e => e.into(),
                });
            }
        }
    }
    read_waiters();
    finish(
        ctx,
        &exports,
        &reports,
        history.as_deref(),
        &context,
        &signals,
    )
}

/// The hammer's options for one strategy's run, without a progress bar or a stop flag.
fn options(ctx: &Ctx, args: &HammerArgs, strategy: Strategy, stock: Option<u64>) -> HammerOptions {
    HammerOptions {
        load: LoadOptions {
            sku: args.sku.clone(),
            requests: args.requests,
            concurrency: args.concurrency,
            stock,
            buckets: args.buckets.map(|k| k as usize),
            users: args.users,
            users_from: 0,
            progress: None,
            stop: None,
            retries: None,
            history: args.history.is_some(),
            before_read_back: None,
        },
        mode: args.mode.map_or_else(
            || Driving::fastest_for(strategy, args.purchase.work(), &ctx.target),
            Driving::from,
        ),
        buy: args.purchase.buy_options(strategy, HAMMER_WAIT_MS),
        work: args.purchase.work(),
        children: std::env::current_exe()
            .ok()
            .map(crate::cli::child::children),
        quorum: ctx.quorum.clone(),
        pipeline: pipeline_db(args).map(|db_url| PipelineOptions {
            db_url,
            workers: args.workers,
            patience: Duration::from_secs(30),
            events: super::worker::to_stderr(),
        }),
    }
}

/// The database the orders pipeline writes into: `--db`, or with `--queue`, DATABASE_URL. A
/// DATABASE_URL exported for `worker` and `status` does not turn a plain hammer into one with
/// a pipeline (nor, as clap's `requires` did, into an error asking for --queue).
fn pipeline_db(args: &HammerArgs) -> Option<String> {
    let env = || std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty());
    args.db
        .clone()
        .or_else(|| args.purchase.queue.then(env).flatten())
}

/// What the command line allows but the hammer cannot honour.
fn check_args(args: &HammerArgs) -> anyhow::Result<()> {
    if args.db.is_some() && !args.purchase.queue {
        return Err(UsageError(
            "--db persists the orders that --queue sends through the stream: add --queue (lockctl hammer --queue --db URL ...)".into(),
        )
        .into());
    }
    if args.users.is_some() && args.purchase.limit.is_none() {
        return Err(UsageError(
            "--users spreads purchases over simulated users for a per-user limit: add --limit N (or, with --url, it numbers {user})".into(),
        )
        .into());
    }
    if args.purchase.limit.is_some() && args.users.is_none() {
        return Err(UsageError(
            "--limit needs --users: a per-user limit is enforced over simulated users (e.g. --users 20 --limit 2)".into(),
        )
        .into());
    }
    let mut strategies = args.strategies();
    strategies.dedup();
    if args.history.is_some() && strategies.len() > 1 {
        return Err(UsageError(format!(
            "--history records one run, and --strategy names {}; give one strategy (run the hammer once per strategy for a history of each)",
            strategies.len()
        ))
        .into());
    }
    if args.purchase.queue && args.strategies().contains(&Strategy::Naive) {
        return Err(UsageError(
            "--queue works with lock, fenced, atomic and batch; naive is the negative control and records no order events".into(),
        )
        .into());
    }
    Ok(())
}

/// The hammer waits for the lock by default: with the tutorial's one try, most of a fast run's
/// buyers would be turned away busy and the stock would not sell out.
const HAMMER_WAIT_MS: u64 = 5000;

/// Several strategies each start from the same stock: the one given, or the one in Redis.
fn starting_stock(ctx: &Ctx, args: &HammerArgs, strategies: usize) -> anyhow::Result<Option<u64>> {
    match args.stock {
        None if strategies > 1 => {
            let keys = StockKeys::new(&args.sku);
            let now = stock::read_stock(&mut ctx.target.connect()?, &args.sku, &keys)?;
            match now {
                Some(n) => Ok(Some(n.max(0) as u64)),
                None => Err(unseeded_hint(Error::Unseeded {
                    sku: args.sku.to_string(),
                })),
            }
        }
        given => Ok(given),
    }
}

/// The hammer's own words for a SKU with no stock: it can seed it itself.
fn unseeded_hint(e: Error) -> anyhow::Error {
    match e {
        Error::Unseeded { sku } => anyhow::anyhow!(
            "'{sku}' has no stock in Redis: pass --stock N to seed it first, or run: {}",
            lockctl::advice::seed_command(&sku)
        ),
        e => e.into(),
    }
}

/// Reads the wait-queue length from Redis into the waiters gauge (before each scrape, and at
/// the end for the metrics file), on a connection of its own.
fn waiters_reader(ctx: &Ctx, args: &HammerArgs) -> impl Fn() + Clone + Send + Sync + 'static {
    let lock = Lock::new(&ctx.target, args.sku.as_str(), LockOptions::default());
    let conn = Arc::new(Mutex::new(Reconnecting::new(&ctx.target)));
    let metrics = ctx.metrics.clone();
    move || {
        let mut c = conn.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(n) = c.with(|c| lock.waiters(c)) {
            metrics.set_waiters(n);
        }
    }
}
