//! `lockctl hammer`: N purchases, C at a time, per strategy; then the reports and exports.

use std::io::{self, IsTerminal};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use lockctl::conn::Reconnecting;
use lockctl::endpoint::{self, EndpointOptions};
use lockctl::hammer::{self, HammerOptions, Report, overall_verdict};
use lockctl::keys::StockKeys;
use lockctl::lock::{Lock, LockOptions};
use lockctl::stock::{self, Strategy};
use lockctl::{Error, metrics, render};

use super::{Ctx, Exit, UsageError, emit, emit_json};
use crate::cli::HammerArgs;
use crate::progress;
use crate::report_files::Exports;
use crate::signals;

/// Runs the hammer once per strategy, then prints and exports the reports.
pub fn run(ctx: &Ctx, args: HammerArgs) -> anyhow::Result<Exit> {
    if args.http.wanted() {
        return super::hammer_http::run(ctx, args);
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
    // A bad export path fails here, before any purchase is made.
    let exports = Exports::open(&args)?;
    let mut strategies: Vec<Strategy> = args.strategies();
    strategies.dedup();
    let stock = match starting_stock(ctx, &args, strategies.len()) {
        Ok(s) => s,
        Err(e) => {
            exports.discard();
            return Err(e);
        }
    };
    let read_waiters = waiters_reader(ctx, &args);
    if let Some(addr) = &args.metrics_addr {
        let before = read_waiters.clone();
        let scrape = Arc::new(move || {
            before();
            metrics::global().encode()
        });
        let bound = endpoint::serve(addr, scrape, EndpointOptions::default()).map_err(|e| {
            exports.discard();
            UsageError(format!("cannot listen on --metrics-addr '{addr}': {e}"))
        })?;
        eprintln!("lockctl: serving http://{bound}/metrics while the hammer runs");
    }
    let signals = signals::listen(signals::First::Finish);
    let stop = signals.requested.clone();
    let mut reports = Vec::new();
    for &strategy in &strategies {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let bar = progress::Bar::start(args.requests, strategy.name(), strategies.len() > 1);
        let opts = HammerOptions {
            sku: args.sku.clone(),
            requests: args.requests,
            concurrency: args.concurrency,
            mode: args.mode.into(),
            stock,
            buy: args.purchase.buy_options(strategy, HAMMER_WAIT_MS),
            users: args.users,
            exe: None,
            progress: bar.as_ref().map(progress::Bar::counter),
            quorum: ctx.quorum.clone(),
            stop: Some(stop.clone()),
        };
        let result = hammer::run(&ctx.target, &opts);
        drop(bar);
        match result {
            Ok(r) => reports.push(r),
            Err(e) => {
                exports.discard();
                return Err(unseeded_hint(e));
            }
        }
    }
    read_waiters();
    finish(ctx, &exports, &reports, &signals)
}

/// Prints and exports the reports; the exit code of their verdict, or of the signal that
/// stopped the run (Ctrl-C, SIGTERM, SIGHUP: new requests stopped, those in flight finished
/// and released their locks, and the partial report was printed).
pub(super) fn finish(
    ctx: &Ctx,
    exports: &Exports,
    reports: &[Report],
    signals: &signals::Stop,
) -> anyhow::Result<Exit> {
    let document = render::hammer_document(reports);
    let stdout_taken = exports.write(reports, &document)?;
    if !stdout_taken {
        if ctx.json {
            emit_json(&document)?;
        } else {
            emit(&hammer_text(reports))?;
        }
    }
    Ok(if let Some(code) = signals.exit_code() {
        Exit::Signal(code)
    } else {
        Exit::of_verdict(overall_verdict(reports))
    })
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
            "'{sku}' has no stock in Redis: pass --stock N to seed it first, or run: lockctl seed {sku} <COUNT>"
        ),
        e => e.into(),
    }
}

/// Reads the wait-queue length from Redis into the waiters gauge (before each scrape, and at
/// the end for the metrics file), on a connection of its own.
fn waiters_reader(ctx: &Ctx, args: &HammerArgs) -> impl Fn() + Clone + Send + Sync + 'static {
    let lock = Lock::new(&ctx.target, args.sku.as_str(), LockOptions::default());
    let conn = Arc::new(Mutex::new(Reconnecting::new(&ctx.target)));
    move || {
        let mut c = conn.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(n) = c.with(|c| lock.waiters(c)) {
            metrics::global().set_waiters(n);
        }
    }
}

fn hammer_text(reports: &[Report]) -> String {
    let color = std::env::var_os("NO_COLOR").is_none() && io::stdout().is_terminal();
    let mut out: Vec<String> = reports
        .iter()
        .map(|r| render::hammer_text(r, color))
        .collect();
    if reports.len() > 1 {
        out.push(render::comparison_text(reports));
    }
    out.join("\n")
}
