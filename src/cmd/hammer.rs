//! `lockctl hammer`: N purchases, C at a time, per strategy; then the reports and exports.

use std::io::{self, IsTerminal};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockctl::conn::Reconnecting;
use lockctl::endpoint::{self, EndpointOptions};
use lockctl::hammer::{self, HammerOptions, PipelineOptions, Report, overall_verdict};
use lockctl::keys::StockKeys;
use lockctl::lock::{Lock, LockOptions};
use lockctl::redact::redact_command_line;
use lockctl::render::Context;
use lockctl::stock::{self, Strategy};
use lockctl::{Error, render};

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
    let signals = signals::listen(signals::First::Finish);
    let stop = signals.requested.clone();
    let context = run_context(ctx);
    let mut reports = Vec::new();
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
        let opts = HammerOptions {
            progress: bar.as_ref().map(progress::Bar::counter),
            stop: Some(stop.clone()),
            ..options(ctx, &args, strategy, stock)
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
    finish(ctx, &exports, &reports, &context, &signals)
}

/// The hammer's options for one strategy's run, without a progress bar or a stop flag.
fn options(ctx: &Ctx, args: &HammerArgs, strategy: Strategy, stock: Option<u64>) -> HammerOptions {
    HammerOptions {
        sku: args.sku.clone(),
        requests: args.requests,
        concurrency: args.concurrency,
        mode: args.mode.into(),
        stock,
        buy: args.purchase.buy_options(strategy, HAMMER_WAIT_MS),
        users: args.users,
        exe: None,
        progress: None,
        quorum: ctx.quorum.clone(),
        stop: None,
        pipeline: args.db.clone().map(|db_url| PipelineOptions {
            db_url,
            workers: args.workers,
            patience: Duration::from_secs(30),
        }),
    }
}

/// Prints and exports the reports; the exit code of their verdict, or of the signal that
/// stopped the run (Ctrl-C, SIGTERM, SIGHUP: new requests stopped, those in flight finished
/// and released their locks, and the partial report was printed).
pub(super) fn finish(
    ctx: &Ctx,
    exports: &Exports,
    reports: &[Report],
    context: &Context,
    signals: &signals::Stop,
) -> anyhow::Result<Exit> {
    let document = render::hammer_document(reports, context);
    let stdout_taken = exports.write(reports, &document, context, &ctx.metrics)?;
    if !stdout_taken {
        if ctx.json {
            emit_json(&document)?;
        } else {
            emit(&hammer_text(ctx, reports))?;
        }
    }
    Ok(if let Some(code) = signals.exit_code() {
        Exit::Signal(code)
    } else {
        Exit::of_verdict(overall_verdict(reports))
    })
}

/// What the command line allows but the hammer cannot honour.
fn check_args(args: &HammerArgs) -> anyhow::Result<()> {
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
    if args.purchase.queue && args.strategies().contains(&Strategy::Naive) {
        return Err(UsageError(
            "--queue works with lock, fenced, atomic and batch; naive is the negative control and records no order events".into(),
        )
        .into());
    }
    Ok(())
}

/// `--metrics-addr`: this process's metrics, with `before` (the queue length, say) run just
/// before each scrape; `who` says what runs meanwhile ("the hammer").
pub(super) fn serve_metrics(
    ctx: &Ctx,
    addr: &str,
    who: &str,
    before: impl Fn() + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let metrics = ctx.metrics.clone();
    let scrape = Arc::new(move || {
        before();
        metrics.encode()
    });
    let bound = endpoint::serve(addr, scrape, EndpointOptions::default())
        .map_err(|e| UsageError(format!("cannot listen on --metrics-addr '{addr}': {e}")))?;
    eprintln!("lockctl: serving http://{bound}/metrics while {who} runs");
    Ok(())
}

/// Where and when this run happens, for reports that stand alone.
pub(super) fn run_context(ctx: &Ctx) -> Context {
    let redis_version = ctx
        .target
        .connect()
        .ok()
        .and_then(|mut c| c.info("server").ok()?.get::<String>("redis_version"));
    // Every report carries it, and a report is shared: no password, token or credential
    // header of any flag goes in (`--db 'password=...'`, `--header 'Authorization: ...'`).
    let args = std::env::args_os().map(|a| a.to_string_lossy().into_owned());
    let command_line = redact_command_line(args).join(" ");
    Context {
        redis: ctx.target.addr().to_string(),
        redis_version,
        lockctl_version: crate::cli::VERSION.to_string(),
        started_at: utc_now(),
        command_line,
    }
}

/// Now, as `2026-11-30T11:22:08Z`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil: the proleptic Gregorian date of a day count.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
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
            lockctl::error::seed_command(&sku)
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

fn hammer_text(ctx: &Ctx, reports: &[Report]) -> String {
    let color = ctx.color.enabled(io::stdout().is_terminal());
    let mut out: Vec<String> = reports
        .iter()
        .map(|r| match ctx.quiet {
            // The verdict line, and the violations under it.
            true => render::hammer_text(r, color)
                .lines()
                .skip_while(|l| !l.trim_start().starts_with("verdict"))
                .map(|l| format!("{l}\n"))
                .collect(),
            false => render::hammer_text(r, color),
        })
        .collect();
    if reports.len() > 1 && !ctx.quiet {
        out.push(render::comparison_text(reports));
    }
    out.join(if ctx.quiet { "" } else { "\n" })
}
