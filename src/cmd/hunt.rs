//! `lockctl hunt`: the facts checked before any request is sent (a bad query, a fault the
//! facts do not allow, an address the system never answers on), the system started, the hunt
//! run with every fault undone on every way out, then the report.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{Ctx, Exit, UsageError, emit, emit_json};
use crate::cli::HuntArgs;
use crate::signals;
use lockctl::advice::CliAdvice;
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::Sku;
use lockctl_core::stock::{BuyOptions, Strategy};
use lockctl_hammer::http::Store;
use lockctl_hammer::http::ids::{IdFormat, Ids};
use lockctl_hammer::http::{HttpOptions, Probe};
use lockctl_hammer::hunt::clean::{self, Cleaned};
use lockctl_hammer::hunt::nemesis::{FaultKind, Nemesis, OWN_NAME, SqlFaults};
use lockctl_hammer::hunt::own::{OwnOptions, run_matrix};
use lockctl_hammer::hunt::plan::Fixed;
use lockctl_hammer::hunt::proxy::Proxy;
use lockctl_hammer::hunt::serve::{Reach, Served};
use lockctl_hammer::hunt::sql::SkuParam;
use lockctl_hammer::hunt::sql::SqlDb;
use lockctl_hammer::hunt::{self, HuntOptions, OnRound, OrdersSql, RoundSeen, SqlStock};
use lockctl_hammer::{Driving, HammerOptions, LoadOptions, Verdict};
use lockctl_render::{self as render, Replay};

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
    let (http, orders, stock_rows) = system_facts(ctx, &args)?;
    // The proxy before the system, which connects through it.
    let proxy = match &args.proxy {
        Some(listen) => Some(Arc::new(start_proxy(ctx, listen)?)),
        None => None,
    };
    // Signals and the quit handler first: a Ctrl-C while the system starts stops it too.
    let (reach, slot) = (Arc::new(Reach::new()), Arc::default());
    undo_on_quit(Arc::clone(&slot), Some(reach.clone()));
    let signals = signals::listen(signals::First::Finish(
        "the round, undoing its faults and stopping what --serve started",
    ));
    let serve = match &args.serve {
        Some(cmd) => {
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
            match Served::start(cmd, addr, ready, reach.clone(), Some(&signals.requested)) {
                Ok(served) => Some(Arc::new(Mutex::new(served))),
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
                        return Ok(Exit::Signal(code));
                    }
                    None => return Err(anyhow::Error::msg(e)),
                },
            }
        }
        None => None,
    };
    // lockctl's own connections name themselves, so that client-kill spares them.
    let target = ctx.target.clone().with_client_name(OWN_NAME);
    let mut nemesis = Nemesis::new(target.clone(), serve.clone());
    if let Some(p) = &proxy {
        nemesis = nemesis.with_proxy(p.clone());
    }
    let sql_db = stock_rows
        .as_ref()
        .map(|r| r.db.clone())
        .or_else(|| orders.as_ref().map(|o| o.db.clone()));
    if let Some(db) = sql_db {
        nemesis = nemesis.with_sql(SqlFaults {
            db,
            stock_query: args.stock_sql.as_ref().and(args.stock_query.clone()),
            format: args.sku_format.into(),
        });
    }
    nemesis.check(&faults).map_err(UsageError)?;
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
    // Keys are only read (SCAN, PTTL), but only of a Redis that is the system's: named, or
    // holding the stock.
    opts.leases = ctx.redis_named || args.stock_sql.is_none();
    opts.on_round = live_lines(ctx);
    let result = hunt::run(&target, &opts);
    drop(_cleanup);
    // The system is stopped: what the hunt created can go, whatever the hunt came to.
    let skus: Vec<Sku> = opts.skus.lock().map(|s| s.clone()).unwrap_or_default();
    let cleaned = (!args.keep).then(|| remove_created(&target, &args, stock_rows.as_ref(), &skus));
    let mut report = result?;
    report.cleaned = cleaned;
    let replay = replay_command(ctx, seed);
    if let Some(path) = &args.history {
        write_history(&report, &replay, path)?;
    }
    if let Some(path) = &args.export_html {
        write_timeline(&report, &replay, path)?;
    }
    if let Some(path) = &args.junit {
        let name = args
            .url
            .as_deref()
            .map_or("hunt".to_string(), lockctl_core::redact::redact);
        std::fs::write(path, render::hunt_junit(&report, &replay, &name)).map_err(|e| {
            anyhow::Error::msg(format!("cannot write --junit '{}': {e}", path.display()))
        })?;
    }
    print(ctx, &report, &replay)?;
    Ok(match signals.exit_code() {
        Some(code) if report.failure.is_none() => Exit::Signal(code),
        _ => Exit::of_verdict(report.verdict),
    })
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

/// One line on stderr per round as it ends, when stderr is a terminal (not with `--json` or
/// `-q`): the round, its shape and faults, its verdict, the hunt so far and the time left. A
/// hunt is otherwise silent for its whole budget.
fn live_lines(ctx: &Ctx) -> Option<OnRound> {
    use std::io::IsTerminal;
    if ctx.json || ctx.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    Some(Arc::new(|r: &RoundSeen| {
        let faults = match r.faults.as_slice() {
            [] => "no fault".to_string(),
            f => f
                .iter()
                .map(|(name, took)| match took {
                    true => name.clone(),
                    false => format!("{name} (no effect)"),
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        let verdict = match r.verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Unknown => "not judged",
        };
        let left = r.budget.saturating_sub(r.elapsed).as_secs();
        eprintln!(
            "hunt: round {} · {} · {} · {faults} · {verdict} · {} judged · {left} s left",
            r.number,
            r.shape,
            lockctl_core::units::count(r.requests, "request", "requests"),
            r.judged,
        );
    }))
}

/// Where the stock rows the hunt creates are, and how to delete one.
struct StockRows {
    db: Arc<SqlDb>,
    /// The delete (`--stock-clean`, or derived from `--stock-query`); `None`: none is known.
    clean: Option<String>,
    /// The facts check's probe SKU, when its row is still there.
    probe: Option<String>,
}

/// Removes what the hunt created: the keys on --redis that contain one of its rounds' SKUs,
/// and the stock rows of its SKUs in --stock-sql (when a delete is known); what is left is
/// said, with how to remove it.
fn remove_created(
    target: &lockctl_core::conn::Target,
    args: &HuntArgs,
    stock: Option<&StockRows>,
    skus: &[Sku],
) -> Cleaned {
    let mut cleaned = Cleaned::default();
    match clean::remove_keys(target, skus, args.stock_key.as_deref()) {
        Ok(n) => cleaned.keys = n,
        // With the stock in SQL, --redis may be nobody's: nothing of the hunt's is there.
        Err(_) if stock.is_some() => {}
        Err(e) => cleaned.left.push(format!(
            "the keys of the hunt's SKUs on --redis could not be removed: {e}"
        )),
    }
    let Some(stock) = stock else {
        return cleaned;
    };
    let mut names: Vec<String> = stock.probe.iter().cloned().collect();
    names.extend(skus.iter().map(|s| s.to_string()));
    match &stock.clean {
        Some(statement) => clean::delete_rows(
            &stock.db,
            statement,
            &names,
            args.sku_format.into(),
            &mut cleaned,
        ),
        None if names.is_empty() => {}
        None => cleaned.left.push(format!(
            "the stock rows of the hunt's SKUs ({}) are left in --stock-sql: --stock-query is not of the form SELECT ... FROM table WHERE column = $1, so which rows are the hunt's cannot be told; give --stock-clean 'DELETE FROM ... WHERE ... = $1' to have them removed",
            clean::skus_in_words(&names)
        )),
    }
    cleaned
}

/// A second Ctrl-C quits at once: nothing paused or stopped stays so, and the system is
/// killed with its whole group and its strays (without waiting for it: a restart may hold it).
fn undo_on_quit(nemesis: Arc<Mutex<Option<Nemesis>>>, serve: Option<Arc<Reach>>) {
    signals::on_quit(move || {
        if let Ok(n) = nemesis.try_lock()
            && let Some(n) = n.as_ref()
        {
            n.heal_now();
        }
        if let Some(r) = &serve {
            r.kill_now();
        }
        Some("undid the hunt's faults and stopped --serve".into())
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

/// The failing round's history (or the last round's), with the hunt's seed and replay, and
/// its report.
fn round_of<'a>(
    report: &'a hunt::HuntReport,
    replay: &Replay,
) -> Option<(lockctl_hammer::history::History, &'a lockctl_hammer::Report)> {
    let (h, r, round) = match (&report.failure, &report.last) {
        (Some(f), _) => (f.history.as_deref()?, &f.report, Some(f.round.number)),
        (None, Some(last)) => (last.1.as_deref()?, &last.0, None),
        (None, None) => return None,
    };
    let mut h = h.clone();
    h.hunt = Some(lockctl_hammer::history::HuntOrigin {
        seed: report.seed,
        round,
        replay: replay.command.clone(),
        set_first: replay.secrets.clone(),
    });
    Some((h, r))
}

/// The failing round's timeline (or the last round's) as an HTML page at `path`.
fn write_timeline(
    report: &hunt::HuntReport,
    replay: &Replay,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    if let Some((h, r)) = round_of(report, replay) {
        std::fs::write(path, render::timeline_html(&h, r)).map_err(|e| {
            anyhow::anyhow!("could not write the timeline to '{}': {e}", path.display())
        })?;
    }
    Ok(())
}

/// The failing round's history (or the last round's) as JSON Lines at `path`.
fn write_history(
    report: &hunt::HuntReport,
    replay: &Replay,
    path: &std::path::Path,
) -> anyhow::Result<()> {
    if let Some((h, _)) = round_of(report, replay) {
        let mut out = Vec::new();
        lockctl_hammer::history::write(&h, &mut out)?;
        std::fs::write(path, out).map_err(|e| {
            anyhow::anyhow!("could not write the history to '{}': {e}", path.display())
        })?;
    }
    Ok(())
}

/// The system's answers, stock and orders, each checked before any request is sent; and where
/// the stock rows the hunt creates are.
fn system_facts(
    ctx: &Ctx,
    args: &HuntArgs,
) -> anyhow::Result<(HttpOptions, Option<OrdersSql>, Option<StockRows>)> {
    let mut http = super::hammer_http::http_options(ctx, &args.http_args(), args.qty)?;
    if !http.classifier.judges() {
        return Err(UsageError(
            "a hunt judges the system's answers: say what they mean with --bought-if, --sold-out-if, --busy-if, --refused-if, --failed-if or --preset tutorial".into(),
        )
        .into());
    }
    http.stock_key = args.stock_key.clone();
    if http.users.listed_len().is_none() {
        http.users = Ids::new(args.user_format.into(), "u");
    }
    super::hammer_http::users_in_file(&http, args.users)?;
    if let Some(pattern) = &args.order_from {
        http.classifier = http
            .classifier
            .with_order_from(pattern)
            .map_err(|e| UsageError(super::hammer_http::bad_pattern(&e)))?;
    }
    // The probe is a SKU in the rounds' format that no round uses.
    let probe = match args.sku_format.into() {
        IdFormat::Text => format!("{}-probe", args.sku),
        format => Ids::new(format, "").name(0),
    };
    let mut rows = None;
    if let Some(url) = &args.stock_sql {
        let (store, stock) = stock_store(ctx, args, url, &probe)?;
        http.store = Some(store);
        rows = Some(stock);
    }
    let orders = match (&args.orders_sql, &args.orders_query) {
        (Some(url), Some(query)) => Some(orders_sql(ctx, url, query, &probe, args)?),
        _ => None,
    };
    Ok((http, orders, rows))
}

/// The hunt's report on stdout, as text or JSON.
fn print(ctx: &Ctx, report: &hunt::HuntReport, replay: &Replay) -> anyhow::Result<()> {
    if ctx.json {
        emit_json(&render::hunt_json(report, replay, &CliAdvice))?;
    } else {
        let color = ctx
            .color
            .enabled(std::io::IsTerminal::is_terminal(&std::io::stdout()));
        emit(&render::hunt_text(
            report, replay, color, ctx.quiet, &CliAdvice,
        ))?;
    }
    Ok(())
}

/// `hunt --strategy`: lockctl's own strategies, each under each fault; the matrix.
fn run_own(ctx: &Ctx, args: &HuntArgs, faults: Vec<FaultKind>) -> anyhow::Result<Exit> {
    let nemesis = Nemesis::of_own_buyers(ctx.target.clone());
    nemesis.check(&faults).map_err(UsageError)?;
    undo_on_quit(Arc::new(Mutex::new(Some(nemesis.clone()))), None);
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
    let matrix = matrix?;
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

/// The proxy on `listen`, forwarding to the Redis of --redis (a TCP address).
fn start_proxy(ctx: &Ctx, listen: &str) -> anyhow::Result<Proxy> {
    let upstream: Vec<_> = ctx
        .target
        .addr()
        .to_socket_addrs()
        .map(Iterator::collect)
        .unwrap_or_default();
    if upstream.is_empty() {
        return Err(UsageError(format!(
            "--proxy forwards to --redis over TCP, and '{}' is not a TCP address",
            ctx.target.addr()
        ))
        .into());
    }
    Ok(Proxy::start(listen, upstream).map_err(UsageError)?)
}

/// Before the first fault: the clients of the Redis that its faults would touch beyond the
/// system under test, named on stderr (the address, and the process when this machine holds
/// the connection), so that a Redis shared with someone else is known before it is paused.
fn warn_of_outsiders(ctx: &Ctx, args: &HuntArgs, faults: &[FaultKind], nemesis: &Nemesis) {
    let redis_faults: Vec<&str> = faults
        .iter()
        .filter(|k| k.faults_redis())
        .map(|k| k.name())
        .collect();
    if redis_faults.is_empty() {
        return;
    }
    let outsiders = nemesis.outsiders();
    if outsiders.is_empty() {
        return;
    }
    let named: Vec<String> = outsiders
        .iter()
        .take(5)
        .map(|o| match &o.owner {
            Some(w) => format!("{} (pid {}, {})", o.addr, w.pid, w.command),
            None => o.addr.clone(),
        })
        .collect();
    let more = match outsiders.len() {
        n if n > 5 => format!(", and {} more", n - 5),
        _ => String::new(),
    };
    let whose = match args.serve {
        Some(_) => "outside the system under test (not started by --serve)",
        None => "that lockctl cannot tell are the system's (no --serve names its processes)",
    };
    let message = format!(
        "Redis at {} has {} {whose}: {}{more}; {} act on them too",
        ctx.target.addr(),
        lockctl_core::units::count(outsiders.len() as u64, "client", "clients"),
        named.join(", "),
        redis_faults.join(" and "),
    );
    eprintln!("lockctl: warning: {}", lockctl_render::terminal(&message));
}

/// The faults `--nemesis` names, checked against the facts. A fault on the Redis server
/// itself (`client-kill`, `redis-pause`) needs that Redis named (`redis_named`: `--redis` or
/// `REDIS_URL`): `auto` leaves them out otherwise, and naming one is a usage error, so that
/// nothing faults whatever happens to answer at the default address.
fn faults(args: &HuntArgs, redis_named: bool) -> anyhow::Result<Vec<FaultKind>> {
    let mut list = named_faults(args)?;
    if !redis_named {
        if let Some(k) = list.iter().find(|k| k.faults_redis())
            && args.nemesis != "auto"
        {
            return Err(UsageError(format!(
                "--nemesis {} acts on a Redis server (every client of it), and no Redis was named: lockctl never faults a Redis by default; name the system's with --redis URL (or REDIS_URL)",
                k.name()
            ))
            .into());
        }
        list.retain(|k| !k.faults_redis());
    }
    Ok(list)
}

fn named_faults(args: &HuntArgs) -> anyhow::Result<Vec<FaultKind>> {
    let serve = args.serve.is_some();
    let own = !args.strategy.is_empty();
    let sql = args.stock_sql.is_some() || args.orders_sql.is_some();
    let list = match args.nemesis.as_str() {
        "none" => return Ok(Vec::new()),
        "auto" if own => vec![
            FaultKind::RedisPause,
            FaultKind::ClientKill,
            FaultKind::PauseHolder,
        ],
        // Every fault the facts allow: the Redis faults whenever a Redis is named (`faults`
        // leaves them out otherwise), SQL stock or not; the database faults with SQL facts.
        "auto" => FaultKind::ALL
            .into_iter()
            .filter(|k| (serve || !k.needs_serve()) && !k.own_only())
            .filter(|k| args.proxy.is_some() || !k.needs_proxy())
            .filter(|k| *k != FaultKind::DbLock || args.stock_sql.is_some())
            .filter(|k| *k != FaultKind::DbKill || sql)
            .collect(),
        list => {
            let mut kinds = Vec::new();
            for name in list.split(',').map(str::trim) {
                let kind = FaultKind::from_name(name).ok_or_else(|| {
                    UsageError(format!(
                        "--nemesis: '{name}' is not a fault; give client-kill, redis-pause, stall, pause-worker, kill-worker, db-lock, db-kill, pause-holder (comma-separated), auto or none"
                    ))
                })?;
                if kind.own_only() && !own {
                    return Err(UsageError(format!(
                        "--nemesis {name} stalls lockctl's own buyers: it is for hunt --strategy; against an endpoint, pause-worker stalls the system's processes"
                    ))
                    .into());
                }
                if kind.needs_serve() && own {
                    return Err(UsageError(format!(
                        "--nemesis {name} signals a system's processes, and hunt --strategy runs lockctl's own buyers: use pause-holder for them"
                    ))
                    .into());
                }
                if kind.needs_sql() && own {
                    return Err(UsageError(format!(
                        "--nemesis {name} acts on a system's SQL database, and hunt --strategy runs lockctl's own buyers on Redis: drop {name}"
                    ))
                    .into());
                }
                if kind == FaultKind::DbLock && args.stock_sql.is_none() {
                    return Err(UsageError(format!(
                        "--nemesis {name} holds the round's stock row, and no --stock-sql says where the stock is: add --stock-sql URL and --stock-query, or drop {name}"
                    ))
                    .into());
                }
                if kind == FaultKind::DbKill && !sql {
                    return Err(UsageError(format!(
                        "--nemesis {name} ends the system's database sessions, and no --stock-sql or --orders-sql names the database: add one, or drop {name}"
                    ))
                    .into());
                }
                if kind.needs_proxy() && args.proxy.is_none() {
                    return Err(UsageError(format!(
                        "--nemesis {name} stalls the system's connections to Redis in lockctl's proxy, and there is none: add --proxy LISTEN and point the system's Redis at it, or drop {name}"
                    ))
                    .into());
                }
                if kind.needs_serve() && !serve {
                    return Err(UsageError(format!(
                        "--nemesis {name} signals the system's processes, and no --serve says which they are: add --serve 'CMD' (the command that starts the system), or drop {name}"
                    ))
                    .into());
                }
                kinds.push(kind);
            }
            kinds
        }
    };
    Ok(list)
}

/// The SQL stock, checked before any request: the seed and the query must work on a probe SKU
/// and read back what was set; then the probe's row is deleted (unless --keep), which checks the
/// delete the hunt ends with.
fn stock_store(
    ctx: &Ctx,
    args: &HuntArgs,
    url: &str,
    probe: &str,
) -> anyhow::Result<(Store, StockRows)> {
    let db = SqlDb::connect(url, ctx.options.connect_timeout)
        .map_err(|e| UsageError(format!("--stock-sql: {e}")))?;
    let (query, seed) = (
        args.stock_query.clone().unwrap_or_default(),
        args.stock_seed.clone().unwrap_or_default(),
    );
    let param = SkuParam {
        text: probe,
        format: args.sku_format.into(),
    };
    db.execute(&seed, param, 7).map_err(|e| {
        UsageError(format!(
            "--stock-seed '{seed}' failed on a probe SKU '{probe}' with 7: {e}"
        ))
    })?;
    db.check_columns(&query, 1, 0)
        .map_err(|e| UsageError(format!("--stock-query '{query}': {e}")))?;
    match db.integer(&query, param) {
        Ok(7) => {}
        Ok(n) => {
            return Err(UsageError(format!(
                "--stock-query '{query}' read {n} for the probe SKU '{probe}' that --stock-seed had just set to 7: the two do not name the same stock"
            ))
            .into());
        }
        Err(e) => {
            return Err(UsageError(format!("--stock-query '{query}': {e}")).into());
        }
    }
    let db = Arc::new(db);
    let mut rows = StockRows {
        db: db.clone(),
        clean: None,
        probe: Some(probe.to_string()),
    };
    match (&args.stock_clean, args.keep) {
        (Some(clean), true) => rows.clean = Some(clean.clone()),
        (Some(clean), false) => match db.delete(clean, param) {
            Ok(n) if n > 0 => {
                rows.clean = Some(clean.clone());
                rows.probe = None;
            }
            Ok(_) => {
                return Err(UsageError(format!(
                    "--stock-clean '{clean}' deleted no row of the probe SKU '{probe}' that --stock-seed had just set: it must delete the SKU's stock row, the SKU its one parameter"
                ))
                .into());
            }
            Err(e) => {
                return Err(UsageError(format!(
                    "--stock-clean '{clean}' failed on the probe SKU '{probe}': {e}"
                ))
                .into());
            }
        },
        // Derived, it is used only once it deleted the probe's row, and only that.
        (None, keep) => {
            if let Some(clean) = clean::delete_for(&query) {
                match keep {
                    true => rows.clean = Some(clean),
                    false => {
                        if db.delete(&clean, param).is_ok_and(|n| n == 1) {
                            rows.clean = Some(clean);
                            rows.probe = None;
                        }
                    }
                }
            }
        }
    }
    let store = Store(Arc::new(SqlStock {
        db,
        query,
        seed,
        format: args.sku_format.into(),
    }));
    Ok((store, rows))
}

/// The orders database, its query tried on the probe SKU before any request.
fn orders_sql(
    ctx: &Ctx,
    url: &str,
    query: &str,
    probe: &str,
    args: &HuntArgs,
) -> anyhow::Result<OrdersSql> {
    let db = SqlDb::connect(url, ctx.options.connect_timeout)
        .map_err(|e| UsageError(format!("--orders-sql: {e}")))?;
    let param = SkuParam {
        text: probe,
        format: args.sku_format.into(),
    };
    db.check_columns(query, 2, 1)
        .and_then(|()| db.orders(query, param).map(|_| ()))
        .map_err(|e| UsageError(format!("--orders-query '{query}': {e}")))?;
    Ok(OrdersSql {
        db: Arc::new(db),
        query: query.to_string(),
    })
}

/// The address `--serve`'s system is awaited at: the `--url`'s host and port (443 for
/// https:// when it names none).
fn address_of(request: &lockctl_hammer::http::RequestSpec) -> anyhow::Result<SocketAddr> {
    request.resolve().map_err(|e| {
        UsageError(format!(
            "--serve: {e}, so the system's readiness cannot be awaited"
        ))
        .into()
    })
}

/// The command that replays this hunt: this command line with `--seed` set to `seed` and the
/// Redis actually used named (`--redis`, from `REDIS_URL` or the default when the line has
/// none; `--lock-node` from `LOCKCTL_LOCK_NODES`), each secret in it taken from an environment variable the report names, so that the
/// line runs as printed.
fn replay_command(ctx: &Ctx, seed: u64) -> Replay {
    let mut args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--seed") {
        args.drain(i..(i + 2).min(args.len()));
    }
    args.retain(|a| !a.starts_with("--seed="));
    args.push("--seed".into());
    args.push(seed.to_string());
    if let Some(first) = args.first_mut() {
        *first = "lockctl".into();
    }
    let named = |flag: &str| {
        args.iter()
            .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|v| v.starts_with('=')))
    };
    let mut from_env = Vec::new();
    if !named("--redis") {
        from_env.extend(["--redis".to_string(), ctx.url.clone()]);
    }
    // The Redlock nodes too, when they came from the environment.
    if !named("--lock-node")
        && let Ok(nodes) = std::env::var("LOCKCTL_LOCK_NODES")
    {
        for node in nodes.split(',').filter(|n| !n.trim().is_empty()) {
            from_env.extend(["--lock-node".to_string(), node.trim().to_string()]);
        }
    }
    if !args.is_empty() {
        args.splice(1..1, from_env);
    }
    let mut replay = Replay::default();
    let mut words = Vec::new();
    let mut flag: Option<String> = None;
    for arg in &args {
        let (spans, of) = if arg.starts_with("--") && !arg.contains(['=', ' ']) {
            flag = Some(arg.clone());
            (Vec::new(), None)
        } else if let Some((f, _)) = arg.split_once('=').filter(|(f, _)| f.starts_with("--")) {
            flag = None;
            (
                lockctl_core::redact::secret_spans(None, arg),
                Some(f.to_string()),
            )
        } else {
            let of = flag.take();
            (lockctl_core::redact::secret_spans(of.as_deref(), arg), of)
        };
        let mut word = String::new();
        let mut at = 0;
        for (a, b) in spans
            .into_iter()
            .filter(|&(a, b)| !is_placeholder(&arg[a..b]))
        {
            if a > at {
                word.push_str(&shell_quote(&arg[at..a]));
            }
            let what = of.as_deref().unwrap_or("the command line");
            word.push_str(&format!("\"${{{}}}\"", replay.secret(&arg[a..b], what)));
            at = b;
        }
        if at < arg.len() || arg.is_empty() {
            word.push_str(&shell_quote(&arg[at..]));
        }
        words.push(word);
    }
    replay.command = words.join(" ");
    replay
}

/// A value made of placeholders only (`{order}`, `Bearer {token}`): no secret, and the replay
/// needs it as it is.
fn is_placeholder(value: &str) -> bool {
    let mut rest = value.trim();
    for scheme in ["Bearer ", "Basic ", "Token "] {
        if rest.len() > scheme.len() && rest[..scheme.len()].eq_ignore_ascii_case(scheme) {
            rest = rest[scheme.len()..].trim_start();
        }
    }
    !rest.is_empty() && lockctl_core::redact::only_placeholders(rest)
}

/// `a` as one shell word that `sh` reads back as `a`. A control character other than a line
/// break is written as `"$(printf '\033')"` (its bytes in octal, as POSIX printf reads them),
/// so that the line shows nothing a terminal acts on (an escape that colours or erases, a
/// carriage return, a tab a copy turns into spaces) and still runs as printed; a line break
/// stays inside its quotes.
fn shell_quote(a: &str) -> String {
    let raw = |c: char| c.is_control() && c != '\n';
    if !a.contains(raw) {
        return quote_printable(a);
    }
    let mut out = String::new();
    let mut rest = a;
    while !rest.is_empty() {
        let printable = rest.find(raw).unwrap_or(rest.len());
        if printable > 0 {
            out.push_str(&quote_printable(&rest[..printable]));
        }
        rest = &rest[printable..];
        let controls = rest.find(|c: char| !raw(c)).unwrap_or(rest.len());
        if controls > 0 {
            let octal: String = rest[..controls]
                .bytes()
                .map(|b| format!("\\{b:03o}"))
                .collect();
            out.push_str(&format!("\"$(printf '{octal}')\""));
        }
        rest = &rest[controls..];
    }
    out
}

/// `a` (no control character but line breaks) as one shell word.
fn quote_printable(a: &str) -> String {
    if !a.is_empty()
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c))
    {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}
