//! `lockctl hunt`: the facts checked before any request is sent (a bad query, a fault the
//! facts do not allow, an address the system never answers on), the system started, the hunt
//! run with every fault undone on every way out, then the report.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod facts;
mod output;
mod replay;
mod words;

use super::{Ctx, Exit, UsageError, emit, emit_json};
use crate::cli::HuntArgs;
use crate::signals;
use facts::{address_of, faults, probe_sku, remove_created, start_proxy, system_facts};
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::Sku;
use lockctl_core::stock::{BuyOptions, Strategy};
use lockctl_hammer::http::{HttpOptions, Probe};
use lockctl_hammer::{Driving, HammerOptions, LoadOptions, Verdict};
use lockctl_hunt::nemesis::{FaultKind, Nemesis, OWN_NAME, SqlFaults};
use lockctl_hunt::own::{OwnOptions, run_matrix};
use lockctl_hunt::plan::Fixed;
use lockctl_hunt::proxy::Proxy;
use lockctl_hunt::serve::{Reach, Served};
use lockctl_hunt::sql::SqlDb;
use lockctl_hunt::{self as hunt, HuntOptions, OrdersSql};
use lockctl_render::{self as render, Replay};
use output::{live_lines, print, warn_of_outsiders, write_history, write_timeline};
use replay::replay_command;

pub fn run(ctx: &Ctx, args: HuntArgs) -> anyhow::Result<Exit> {
    let faults = faults(&args, ctx.redis_named)?;
    for (flag, path) in [
        ("--junit", &args.junit),
        ("--history", &args.history),
        ("--export-html", &args.export_html),
    ] {
        if let Some(path) = path {
            writable(flag, path)?;
        }
    }
    if !args.strategy.is_empty() {
        return run_own(ctx, &args, faults);
    }
    // Signals before the facts check, which writes a probe row with --stock-sql: a Ctrl-C
    // lets it finish and remove that row; a second one quits, saying what may be left.
    let checked = Arc::new(AtomicBool::new(false));
    let probe = probe_sku(&args);
    if args.stock_sql.is_some() {
        let (checked, probe) = (Arc::clone(&checked), probe.clone());
        signals::on_quit(move || {
            (!checked.load(Ordering::SeqCst)).then(|| {
                format!(
                    "quit in the facts check: its probe row '{probe}' may be left in --stock-sql"
                )
            })
        });
    }
    let signals = signals::listen(signals::First::Finish(
        "the round, undoing its faults and stopping what --serve started",
    ));
    let (http, orders, stock_rows) = system_facts(ctx, &args, &probe)?;
    checked.store(true, Ordering::SeqCst);
    if let Some(code) = signals.exit_code() {
        signals::stopped_before_report(
            code,
            "stopped after the facts check, before the system started",
        );
        return Ok(Exit::Signal(code));
    }
    // The proxy before the system, which connects through it.
    let proxy = match &args.proxy {
        Some(listen) => Some(Arc::new(start_proxy(ctx, listen)?)),
        None => None,
    };
    // Signals and the quit handler first: a Ctrl-C while the system starts stops it too.
    let (reach, slot) = (Arc::new(Reach::new()), Arc::default());
    let created = Created {
        skus: Arc::default(),
        rows: stock_rows.is_some(),
        keep: args.keep,
        stage: Arc::default(),
    };
    undo_on_quit(
        Arc::clone(&slot),
        Some(reach.clone()),
        Some(created.clone()),
    );
    let serve = match start_serve(ctx, &args, &http, reach, &signals)? {
        Ok(serve) => serve,
        Err(stopped) => return Ok(stopped),
    };
    // lockctl's own connections name themselves, so that client-kill spares them.
    let target = ctx.target.clone().with_client_name(OWN_NAME);
    let sql_db = stock_rows
        .as_ref()
        .map(|r| r.db.clone())
        .or_else(|| orders.as_ref().map(|o| o.db.clone()));
    let nemesis = nemesis_for(&target, &args, serve.clone(), proxy, sql_db);
    nemesis
        .check(&faults)
        .map_err(|e| UsageError(words::fault_check(&e)))?;
    warn_of_outsiders(ctx, &args, &faults, &nemesis);
    if let Ok(mut s) = slot.lock() {
        *s = Some(nemesis.clone());
    }
    // On every way out, a panic included: faults undone, the system stopped.
    let _cleanup = Cleanup {
        nemesis: nemesis.clone(),
        serve: serve.clone(),
    };
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut opts = hunt_options(&args, (http, orders), faults, seed, &nemesis, &signals);
    opts.skus = Arc::clone(&created.skus);
    // Keys are only read (SCAN, PTTL), but only of a Redis that is the system's: named, or
    // holding the stock.
    opts.leases = ctx.redis_named || args.stock_sql.is_none();
    opts.on_round = live_lines(ctx);
    let result = hunt::run(&target, &opts);
    drop(_cleanup);
    // The system is stopped: what the hunt created can go, whatever the hunt came to.
    let skus: Vec<Sku> = opts.skus.lock().map(|s| s.clone()).unwrap_or_default();
    created.stage.store(REMOVING, Ordering::SeqCst);
    let cleaned = (!args.keep).then(|| remove_created(&target, &args, stock_rows.as_ref(), &skus));
    created.stage.store(REMOVED, Ordering::SeqCst);
    let mut report = result.map_err(words::hunt)?;
    report.cleaned = cleaned;
    let replay = replay_command(ctx, seed);
    write_files(&args, &report, &replay)?;
    print(ctx, &report, &replay)?;
    Ok(match signals.exit_code() {
        Some(code) if report.failure.is_none() => Exit::Signal(code),
        _ => Exit::of_verdict(report.verdict),
    })
}

/// The system under test started (`--serve`) and ready; `None` without `--serve`. A signal
/// while it starts ends the command with the signal's code (the inner `Err`).
fn start_serve(
    ctx: &Ctx,
    args: &HuntArgs,
    http: &HttpOptions,
    reach: Arc<Reach>,
    signals: &signals::Stop,
) -> anyhow::Result<Result<Option<Arc<Mutex<Served>>>, Exit>> {
    let Some(cmd) = &args.serve else {
        return Ok(Ok(None));
    };
    let addr = address_of(&http.request)?;
    // A daemon the system starts (it leaves the system's tree and group) comes back to
    // this process when it is orphaned, and so stays in reach to be stopped: the hunt's
    // process exists for the hunt, so a process-wide setting is its to make.
    let _ = rustix::process::set_child_subreaper(rustix::process::Pid::from_raw(
        std::process::id() as i32,
    ));
    let ready = match &args.ready {
        Some(url) => Some(
            Probe::new(url)
                .and_then(|p| p.with_tls(&ctx.endpoint_tls))
                .map_err(|e| UsageError(e.to_string().replacen("--url", "--ready", 1)))?,
        ),
        None => None,
    };
    // Without --ready the system is taken to be up when its address answers: one that
    // answers before the system is started is someone else's (a server an earlier hunt left
    // running after a kill -9, say), and the hunt would judge it, not what --serve started.
    if ready.is_none()
        && std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(300))
            .is_ok()
    {
        return Err(UsageError(format!(
            "--serve: something already answers at {addr} before --serve was started (a server \
             an earlier hunt left running?): the hunt would test it, not what --serve starts; \
             stop it, serve on another port, or give --ready URL, an address of the system's own"
        ))
        .into());
    }
    match Served::start(cmd, addr, ready, reach, Some(&signals.requested)) {
        Ok(served) => Ok(Ok(Some(Arc::new(Mutex::new(served))))),
        // Stopped by a signal while starting: the signal's code, not an error's.
        Err(e) => match signals.exit_code() {
            Some(code) => {
                signals::stopped_before_report(
                    code,
                    &format!(
                        "stopped --serve '{}' while it was starting",
                        lockctl_core::redact::redact(cmd)
                    ),
                );
                Ok(Err(Exit::Signal(code)))
            }
            // A certificate the facts do not trust is the facts' to fix: a usage error.
            None if matches!(e, lockctl_hunt::error::ServeError::ReadyRefused { .. }) => {
                Err(UsageError(words::serve(&e)).into())
            }
            None => Err(anyhow::Error::msg(words::serve(&e))),
        },
    }
}

/// The faults of this hunt: on the system's Redis, its processes, its proxy and its SQL
/// database, as far as the facts name them.
fn nemesis_for(
    target: &lockctl_core::conn::Target,
    args: &HuntArgs,
    serve: Option<Arc<Mutex<Served>>>,
    proxy: Option<Arc<Proxy>>,
    sql_db: Option<Arc<SqlDb>>,
) -> Nemesis {
    let mut nemesis = Nemesis::new(target.clone(), serve);
    if let Some(p) = proxy {
        nemesis = nemesis.with_proxy(p);
    }
    if let Some(db) = sql_db {
        nemesis = nemesis.with_sql(SqlFaults {
            db,
            stock_query: args.stock_sql.as_ref().and(args.stock_query.clone()),
            format: args.sku_format.into(),
        });
    }
    nemesis
}

/// The files the hunt was asked for: `--history`, `--export-html`, `--junit`.
fn write_files(args: &HuntArgs, report: &hunt::HuntReport, replay: &Replay) -> anyhow::Result<()> {
    if let Some(path) = &args.history {
        write_history(report, replay, path)?;
    }
    if let Some(path) = &args.export_html {
        write_timeline(report, replay, path)?;
    }
    if let Some(path) = &args.junit {
        let name = args
            .url
            .as_deref()
            .map_or("hunt".to_string(), lockctl_core::redact::redact);
        std::fs::write(path, render::hunt_junit(report, replay, &name)).map_err(|e| {
            anyhow::Error::msg(format!("cannot write --junit '{}': {e}", path.display()))
        })?;
    }
    Ok(())
}

/// The hunt's options, from the command line and what was checked of it.
fn hunt_options(
    args: &HuntArgs,
    (http, orders): (HttpOptions, Option<OrdersSql>),
    faults: Vec<FaultKind>,
    seed: u64,
    nemesis: &Nemesis,
    signals: &signals::Stop,
) -> HuntOptions {
    let listed = http.users.listed_len();
    HuntOptions {
        http,
        sku: args.sku.to_string(),
        sku_format: args.sku_format.into(),
        concurrency: args.concurrency,
        // With --users-file, its users (checked before: --users at most their number).
        users: listed.map_or(args.users, |n| Some(args.users.unwrap_or(n as u64))),
        limit: args.limit,
        idempotent: args.idempotent,
        orders,
        budget: args.budget,
        seed,
        faults,
        heal: Duration::from_millis(args.heal_ms),
        fault_ms: args
            .fault_ms
            .map(|(lo, hi)| (Duration::from_millis(lo), Duration::from_millis(hi))),
        leases: false,
        fixed: Fixed {
            stock: args.stock,
            requests: args.requests,
            rate: args.rate,
        },
        nemesis: nemesis.clone(),
        stop: Some(signals.requested.clone()),
        skus: Arc::default(),
        on_round: None,
    }
}

/// What a hunt of a system creates in its stores, as the rounds add it: what a hunt that
/// quits at once leaves, and says it leaves.
#[derive(Clone)]
struct Created {
    /// The rounds' SKUs so far (the hunt's `HuntOptions::skus`).
    skus: Arc<Mutex<Vec<Sku>>>,
    /// Whether it has stock rows in SQL (`--stock-sql`), besides keys in Redis.
    rows: bool,
    /// `--keep`: nothing would have been removed anyway.
    keep: bool,
    /// How far the removal has come: 0 (the hunt goes on), [`REMOVING`], [`REMOVED`].
    stage: Arc<AtomicU8>,
}

/// [`Created::stage`]: what the hunt created is being removed.
const REMOVING: u8 = 1;
/// [`Created::stage`]: what the hunt created is removed (or named as left in the report).
const REMOVED: u8 = 2;

impl Created {
    /// What quitting now leaves, in words, when it leaves anything.
    fn left(&self) -> Option<String> {
        let stage = self.stage.load(Ordering::SeqCst);
        if self.keep || stage == REMOVED {
            return None;
        }
        let names: Vec<String> =
            match self.skus.try_lock() {
                Ok(s) => s.iter().map(|s| s.to_string()).collect(),
                Err(_) => return Some(
                    "left what the hunt created (its rounds' SKUs could not be read while it quit)"
                        .into(),
                ),
            };
        if names.is_empty() {
            return None;
        }
        let stores = if self.rows {
            "their stock rows in --stock-sql, and any keys in Redis that name them"
        } else {
            "the keys in Redis that name them"
        };
        let skus = hunt::clean::skus_in_words(&names);
        Some(match stage {
            REMOVING => format!(
                "quit while removing what the hunt created for {skus}: some of it may be left ({stores})"
            ),
            _ => format!(
                "left what the hunt created for {skus} ({stores}): a hunt stopped by one Ctrl-C removes them as it ends"
            ),
        })
    }
}

/// A second Ctrl-C quits at once: nothing paused or stopped stays so, and the system is
/// killed with its whole group and its strays (without waiting for it: a restart may hold it).
/// What the hunt created in the system's stores is left (removing it could take as long as
/// the round the user would not wait for), and the message names it.
fn undo_on_quit(
    nemesis: Arc<Mutex<Option<Nemesis>>>,
    serve: Option<Arc<Reach>>,
    created: Option<Created>,
) {
    signals::on_quit(move || {
        if let Ok(n) = nemesis.try_lock()
            && let Some(n) = n.as_ref()
        {
            n.heal_now();
        }
        if let Some(r) = &serve {
            r.kill_now();
        }
        let undid = match serve {
            Some(_) => "undid the hunt's faults and stopped --serve",
            None => "undid the hunt's faults",
        };
        match created.as_ref().and_then(Created::left) {
            Some(left) => Some(format!("{undid}; {left}")),
            None => Some(undid.into()),
        }
    });
}

/// Undoes the hunt's faults and stops the system when dropped: at the end, on an error, and
/// when a panic unwinds.
struct Cleanup {
    nemesis: Nemesis,
    serve: Option<Arc<Mutex<Served>>>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        self.nemesis.heal_now();
        if let Some(s) = &self.serve {
            s.lock().unwrap_or_else(|p| p.into_inner()).stop();
        }
    }
}

/// A `--history` path that cannot be written is refused before the hunt, not after it. A
/// file this creates to find out is removed again.
fn writable(flag: &str, path: &std::path::Path) -> anyhow::Result<()> {
    let existed = path.exists();
    let opened = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path);
    if !existed && opened.is_ok() {
        let _ = std::fs::remove_file(path);
    }
    opened.map(|_| ()).map_err(|e| {
        UsageError(format!(
            "cannot write {flag} '{}': {e} (give a writable path)",
            path.display()
        ))
        .into()
    })
}

/// `hunt --strategy`: lockctl's own strategies, each under each fault; the matrix.
fn run_own(ctx: &Ctx, args: &HuntArgs, faults: Vec<FaultKind>) -> anyhow::Result<Exit> {
    let nemesis = Nemesis::of_own_buyers(ctx.target.clone());
    nemesis
        .check(&faults)
        .map_err(|e| UsageError(words::fault_check(&e)))?;
    undo_on_quit(Arc::new(Mutex::new(Some(nemesis.clone()))), None, None);
    let signals = signals::listen(signals::First::Finish("the round and undoing its faults"));
    let _cleanup = Cleanup {
        nemesis: nemesis.clone(),
        serve: None,
    };
    let seed = args.seed.unwrap_or_else(rand::random);
    let mut strategies: Vec<Strategy> = Vec::new();
    for s in args.strategy.iter().map(|s| Strategy::from(*s)) {
        if !strategies.contains(&s) {
            strategies.push(s);
        }
    }
    let base = HammerOptions {
        load: LoadOptions::default(),
        mode: Driving::Threads,
        buy: BuyOptions {
            qty: args.qty,
            lock: LockOptions {
                ttl: Duration::from_millis(args.ttl_ms),
                wait: Duration::from_millis(args.wait_ms),
                watchdog: args.watchdog,
            },
            ..BuyOptions::default()
        },
        work: Duration::from_millis(args.work_ms),
        children: std::env::current_exe()
            .ok()
            .map(crate::cli::child::children),
        quorum: ctx.quorum.clone(),
        pipeline: None,
    };
    let opts = OwnOptions {
        strategies,
        base,
        faults,
        budget: args.budget,
        seed,
        concurrency: args.concurrency,
        nemesis: nemesis.clone(),
        stop: Some(signals.requested.clone()),
        sku: args.sku.to_string(),
    };
    let matrix = run_matrix(&ctx.target, &opts);
    nemesis.heal_now();
    let matrix = matrix.map_err(words::hunt)?;
    let replay = replay_command(ctx, seed);
    if let Some(path) = &args.export_html {
        std::fs::write(path, render::matrix_html(&matrix, &replay)).map_err(|e| {
            anyhow::anyhow!("could not write the matrix to '{}': {e}", path.display())
        })?;
    }
    if ctx.json {
        emit_json(&render::matrix_json(&matrix, &replay))?;
    } else {
        emit(&render::matrix_text(&matrix, &replay))?;
    }
    Ok(match signals.exit_code() {
        Some(code) if matrix.verdict() != Verdict::Fail => Exit::Signal(code),
        _ => Exit::of_verdict(matrix.verdict()),
    })
}
