//! The `lockctl` binary: parses the command line, calls the library, prints, and maps the
//! result to the contract's exit codes in one place.

mod cli;
mod export;
mod progress;

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use serde_json::{Value, json};

use cli::{Cli, Command, HammerArgs, PurchaseArgs};
use lockctl::conn::{ConnectOptions, Target, TlsFiles};
use lockctl::hammer::{self, HammerOptions, Report, Verdict};
use lockctl::lock::{Lock, LockOptions, Release};
use lockctl::redlock::Quorum;
use lockctl::sku::StockKeys;
use lockctl::stock::{self, Buy, BuyOptions, Buyer, Strategy};
use lockctl::{Error, check, exporter, metrics, render, status};

use export::{Exports, UsageError};

/// The contract's exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Exit {
    Ok = 0,
    Error = 1,
    Usage = 2,
    /// Sold out, limit reached, an invariant violated, or a server unfit for locking.
    Refused = 3,
    Busy = 4,
    LeaseLost = 5,
    /// Ctrl-C stopped a hammer (128 + SIGINT, as shells report it).
    Interrupted = 130,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are not errors; a usage error under --json is still one JSON
            // object on stdout, with clap's message on stderr as usual.
            let usage = e.use_stderr();
            if usage && std::env::args().any(|a| a == "--json") {
                let _ = emit_json(&json!({
                    "error": e.kind().as_str().unwrap_or("invalid arguments"),
                    "error_kind": "usage",
                    "indeterminate": false,
                }));
            }
            let _ = e.print();
            return ExitCode::from(if usage { Exit::Usage as u8 } else { 0 });
        }
    };
    let json = cli.json;
    match run(cli) {
        Ok(code) => ExitCode::from(code as u8),
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("lockctl: error: {err:#}");
            let usage = err.is::<UsageError>();
            if json {
                let lib = err.downcast_ref::<Error>();
                let kind = if usage {
                    "usage"
                } else {
                    lib.map_or("internal", Error::kind)
                };
                let _ = emit_json(&json!({
                    "error": format!("{err:#}"),
                    "error_kind": kind,
                    "indeterminate": lib.is_some_and(Error::is_indeterminate),
                }));
            }
            ExitCode::from(if usage { Exit::Usage } else { Exit::Error } as u8)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<Exit> {
    let options = ConnectOptions {
        connect_timeout: Duration::from_millis(cli.connect_timeout_ms),
        call_timeout: Duration::from_millis(cli.timeout_ms),
        tls: TlsFiles {
            ca: cli.tls_ca.clone(),
            cert: cli.tls_cert.clone(),
            key: cli.tls_key.clone(),
        },
    };
    let target = if cli.cluster {
        for sku in cli.command.skus() {
            stock::check_one_slot(sku).map_err(UsageError)?;
        }
        Target::open_cluster(&cli.redis, options.clone())?
    } else {
        Target::open(&cli.redis, options.clone())?
    };
    let quorum = match cli.lock_nodes.len() {
        0 => None,
        n if n >= 3 && n % 2 == 1 => {
            let nodes = cli
                .lock_nodes
                .iter()
                .map(|u| Target::open(u, options.clone()))
                .collect::<Result<Vec<_>, _>>()?;
            Some(Arc::new(Quorum::new(nodes)))
        }
        n => {
            return Err(UsageError(format!(
                "--lock-node was given {n} times; Redlock needs an odd number of independent masters, at least 3"
            ))
            .into());
        }
    };
    match cli.command {
        Command::Check => {
            // On a cluster, the seed node answers for itself (INFO and CONFIG would be sent to
            // every node and come back as maps), and CLUSTER INFO for the cluster.
            let mut seed = match cli.cluster {
                true => Target::open(&cli.redis, options.clone())?.connect()?,
                false => target.connect()?,
            };
            let mut report = check::check(&mut seed)?;
            if cli.cluster {
                check::check_cluster(&mut report, &mut seed);
            }
            if let Some(q) = &quorum {
                check::check_quorum(&mut report, q, options.call_timeout);
            }
            if cli.json {
                emit_json(&render::check_json(&report))?;
            } else {
                emit(&render::check_text(&report))?;
            }
            Ok(if report.ok { Exit::Ok } else { Exit::Refused })
        }
        Command::Seed { sku, count } => {
            stock::seed(&mut target.connect()?, &sku, count)
                .with_context(|| format!("could not seed '{sku}'"))?;
            if cli.json {
                emit_json(&json!({ "sku": sku.as_str(), "stock": count, "ledger_cleared": true }))?;
            } else {
                emit(&format!("seeded {sku}: stock {count}, ledger cleared\n"))?;
            }
            Ok(Exit::Ok)
        }
        Command::Buy(args) => {
            let options = buy_options(&args.purchase, args.strategy, 0);
            let strategy = options.strategy;
            let mut buyer = Buyer::new(&target, &args.sku, options);
            if let Some(q) = &quorum {
                buyer = buyer.with_quorum(q.clone());
            }
            let order_id = args.order_id.unwrap_or_else(stock::new_order_id);
            let purchase = buyer.buy(&mut target.connect()?, &order_id, args.user.as_deref())?;
            if cli.json {
                emit_json(&render::buy_json(args.sku.as_str(), strategy, &purchase))?;
            } else {
                emit(&render::buy_text(args.sku.as_str(), &purchase))?;
            }
            Ok(match purchase.outcome {
                Buy::Bought { .. } => Exit::Ok,
                Buy::SoldOut { .. } | Buy::LimitReached { .. } => Exit::Refused,
                Buy::Busy => Exit::Busy,
                Buy::LeaseLost => Exit::LeaseLost,
            })
        }
        Command::Hammer(args) => hammer_cmd(&target, quorum, args, cli.json),
        Command::Status { sku } => {
            let st = status::status(&mut target.connect()?, &target, &sku)?;
            if cli.json {
                emit_json(&render::status_json(&st))?;
            } else {
                emit(&render::status_text(&st))?;
            }
            Ok(if st.reconciled == Some(false) {
                Exit::Refused
            } else {
                Exit::Ok
            })
        }
        Command::Unlock { sku, force, token } => unlock_cmd(&target, &sku, force, token, cli.json),
        Command::Exporter { sku, listen } => exporter_cmd(&target, sku, &listen),
    }
}

/// Serves the exporter until killed. One connection, reopened after a failed scrape.
fn exporter_cmd(
    target: &Target,
    skus: Vec<lockctl::sku::Sku>,
    listen: &str,
) -> anyhow::Result<Exit> {
    let conn = std::sync::Mutex::new(Some(target.connect()?));
    let t = target.clone();
    let bound = metrics::serve(
        listen,
        || {},
        move || {
            let mut guard = conn.lock().unwrap_or_else(|e| e.into_inner());
            if guard.is_none() {
                *guard = t.connect().ok();
            }
            let Some(c) = guard.as_mut() else {
                return "# Redis unreachable\n# EOF\n".into();
            };
            let (body, failed) = exporter::scrape(c, &t, &skus);
            if failed {
                *guard = None;
            }
            body
        },
    )
    .map_err(|e| UsageError(format!("cannot listen on --listen '{listen}': {e}")))?;
    eprintln!("lockctl: serving http://{bound}/metrics (Ctrl-C to stop)");
    loop {
        std::thread::park();
    }
}

fn unlock_cmd(
    target: &Target,
    sku: &lockctl::sku::Sku,
    force: bool,
    token: Option<String>,
    json: bool,
) -> anyhow::Result<Exit> {
    let mut conn = target.connect()?;
    let lock = Lock::new(target, sku.as_str(), LockOptions::default());
    let holder = lock.holder(&mut conn)?;
    let key = &lock.keys().lock;
    let (removed, message, exit) = match (&holder, force, token) {
        (None, _, _) => (false, format!("{key} is not held: nothing to do"), Exit::Ok),
        (Some(_), true, _) => match lock.force_unlock(&mut conn)? {
            Some(t) => (true, format!("removed {key}, held by token {t}"), Exit::Ok),
            None => (
                false,
                format!("{key} was released meanwhile: nothing to do"),
                Exit::Ok,
            ),
        },
        (Some((held, _)), false, Some(t)) => match lock.release_by_token(&mut conn, &t)? {
            Release::Released => (true, format!("released {key}, held by token {t}"), Exit::Ok),
            Release::Expired => (
                false,
                format!("{key} is not held any more: nothing to do"),
                Exit::Ok,
            ),
            Release::NotOwner => (
                false,
                format!("not released: {key} is held by token {held}, not {t}"),
                Exit::Refused,
            ),
        },
        (Some((held, ttl)), false, None) => (
            false,
            format!(
                "{key} is held by token {held} for {:.3} s more; not removed (pass --force to delete it, or --token {held} to release it only if that holder still has it)",
                ttl.as_secs_f64()
            ),
            Exit::Refused,
        ),
    };
    if json {
        emit_json(&json!({
            "sku": sku.as_str(),
            "held_by": holder.as_ref().map(|(t, _)| t),
            "ttl_ms": holder.as_ref().map(|(_, d)| d.as_millis() as u64),
            "removed": removed,
            "message": message,
        }))?;
    } else {
        emit(&format!("{message}\n"))?;
    }
    Ok(exit)
}

/// Runs the hammer once per strategy, then prints and exports the reports.
fn hammer_cmd(
    target: &Target,
    quorum: Option<Arc<Quorum>>,
    args: HammerArgs,
    json: bool,
) -> anyhow::Result<Exit> {
    // A bad export path fails here, before any purchase is made.
    let exports = Exports::open(&args)?;
    let mut strategies = args.strategy.clone();
    strategies.dedup();
    // Several strategies each start from the same stock: the one given, or the one in Redis.
    let stock = match args.stock {
        None if strategies.len() > 1 => {
            let keys = StockKeys::new(&args.sku);
            let now = stock::read_stock(&mut target.connect()?, &args.sku, &keys)?;
            Some(
                now.map(|n| n.max(0) as u64)
                    .ok_or_else(|| Error::Unseeded {
                        sku: args.sku.to_string(),
                    })?,
            )
        }
        given => given,
    };
    let waiting_lock = Lock::new(target, args.sku.as_str(), LockOptions::default());
    let read_waiters = {
        let (lock, target) = (waiting_lock.clone(), target.clone());
        let conn = std::sync::Arc::new(std::sync::Mutex::new(None::<lockctl::conn::Conn>));
        move || {
            let mut c = conn.lock().unwrap_or_else(|e| e.into_inner());
            if c.is_none() {
                *c = target.connect().ok();
            }
            if let Some(n) = c.as_mut().and_then(|c| lock.waiters(c).ok()) {
                metrics::global().set_waiters(n);
            }
        }
    };
    if let Some(addr) = &args.metrics_addr {
        let bound = metrics::serve(addr, read_waiters.clone(), || metrics::global().encode())
            .map_err(|e| {
                exports.discard();
                UsageError(format!("cannot listen on --metrics-addr '{addr}': {e}"))
            })?;
        eprintln!("lockctl: serving http://{bound}/metrics while the hammer runs");
    }
    // Ctrl-C stops new requests; those in flight finish and release their locks, and the
    // partial report is printed. A second Ctrl-C quits at once.
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let _ = ctrlc::set_handler(move || {
            if stop.swap(true, Ordering::SeqCst) {
                std::process::exit(Exit::Interrupted as i32);
            }
            eprintln!(
                "lockctl: interrupted: finishing the requests in flight (Ctrl-C again to quit now)"
            );
        });
    }
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
            mode: args.mode,
            stock,
            buy: buy_options(&args.purchase, strategy, HAMMER_WAIT_MS),
            users: args.users,
            exe: None,
            progress: bar.as_ref().map(progress::Bar::counter),
            quorum: quorum.clone(),
            stop: Some(stop.clone()),
        };
        let result = hammer::run(target, &opts);
        drop(bar);
        match result {
            Ok(r) => reports.push(r),
            Err(e) => {
                exports.discard();
                return Err(match e {
                    Error::Unseeded { sku } => anyhow::anyhow!(
                        "'{sku}' has no stock in Redis: pass --stock N to seed it first, or run: lockctl seed {sku} <COUNT>"
                    ),
                    e => e.into(),
                });
            }
        }
    }
    read_waiters();
    let document = render::hammer_document(&reports);
    let stdout_taken = exports.write(&reports, &document)?;
    if !stdout_taken {
        if json {
            emit_json(&document)?;
        } else {
            emit(&hammer_text(&reports))?;
        }
    }
    Ok(if stop.load(Ordering::SeqCst) {
        Exit::Interrupted
    } else if reports.iter().any(|r| r.verdict == Verdict::Fail) {
        Exit::Refused
    } else if reports.iter().all(|r| r.verdict == Verdict::Pass) {
        Exit::Ok
    } else {
        Exit::Error
    })
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

/// The hammer waits for the lock by default: with the seed's one try, most of a fast run's
/// buyers would be turned away busy and the stock would not sell out.
const HAMMER_WAIT_MS: u64 = 5000;

fn buy_options(p: &PurchaseArgs, strategy: Strategy, default_wait_ms: u64) -> BuyOptions {
    BuyOptions {
        strategy,
        qty: p.qty,
        work: Duration::from_millis(p.work_ms),
        lock: LockOptions {
            ttl: Duration::from_millis(p.ttl_ms),
            wait: Duration::from_millis(p.wait_ms.unwrap_or(default_wait_ms)),
            watchdog: p.watchdog,
        },
        limit: p.limit,
    }
}

fn emit(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

fn emit_json(v: &Value) -> io::Result<()> {
    emit(&format!("{v}\n"))
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
