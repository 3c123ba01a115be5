//! What each subcommand does, one module per command; this file holds what they share: the
//! connections opened from the global flags, output on stdout, and the contract's exit codes,
//! mapped from outcomes and errors in one place.

mod buy;
mod check;
mod docs;
mod exporter;
mod hammer;
mod hammer_http;
mod hunt;
mod judge;
mod reporting;
mod run;
pub mod run_guard;
mod run_job;
mod seed;
mod status;
mod unlock;
mod worker;

use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::Arc;

use crate::cli::{Cli, ColorArg, Command, DbCommand};
use crate::private_redis::PrivateRedis;
use crate::signals;
use lockctl_core::conn::{ConnectOptions, Holdings, Target, TlsFiles};
use lockctl_core::keys::check_one_slot;
use lockctl_core::metrics::Metrics;
use lockctl_core::redact::{redact_command_line, scrub};
use lockctl_core::redlock::Quorum;
use lockctl_core::wire::ErrorJson;
use lockctl_core::{Error, ErrorKind};
use lockctl_hammer::Verdict;

/// The contract's exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok,
    Error,
    Usage,
    /// Sold out, limit reached, an invariant violated, or a server unfit for locking.
    Refused,
    Busy,
    LeaseLost,
    /// Stopped by a signal: 128 + its number, as shells report it (130 for Ctrl-C).
    Signal(i32),
    /// `run`: the job's own exit code (128 + n when a signal ended it), passed through.
    Child(i32),
}

impl Exit {
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Error => 1,
            Exit::Usage => 2,
            Exit::Refused => 3,
            Exit::Busy => 4,
            Exit::LeaseLost => 5,
            Exit::Signal(code) | Exit::Child(code) => code.clamp(0, 255) as u8,
        }
    }
}

impl Exit {
    /// The exit code of a hammer verdict: pass 0, fail 3, unknown 1.
    pub fn of_verdict(v: Verdict) -> Exit {
        match v {
            Verdict::Pass => Exit::Ok,
            Verdict::Fail => Exit::Refused,
            Verdict::Unknown => Exit::Error,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e.code())
    }
}

pub use crate::usage::{Missing, UsageError};

/// Whether `command` requests an `https://` URL (`--url`, `--ready`).
fn requests_https(command: &Command) -> bool {
    let https = |url: &Option<String>| {
        url.as_deref()
            .and_then(|u| u.get(..8))
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("https://"))
    };
    match command {
        Command::Hammer(a) => https(&a.http.url),
        Command::Hunt(a) => https(&a.url) || https(&a.ready),
        _ => false,
    }
}

/// What every command gets: the data node, the Redlock quorum if any, and the output format.
pub struct Ctx {
    pub target: Target,
    /// This process's metrics, which every connection of `target` records into: served by
    /// `--metrics-addr`, written by `--metrics-file`.
    pub metrics: Arc<Metrics>,
    pub quorum: Option<Arc<Quorum>>,
    /// Redis's connection options (its TLS files only for `rediss://`).
    pub options: ConnectOptions,
    /// `--tls-ca`, `--tls-cert`, `--tls-key` for an `https://` endpoint.
    pub endpoint_tls: TlsFiles,
    pub json: bool,
    /// `-q`: only the verdict or result line.
    pub quiet: bool,
    /// `--color`.
    pub color: ColorArg,
    /// The `--redis` URL as given (for a seed node of a cluster that must be asked directly).
    pub url: String,
    /// Whether the user named the Redis (`--redis` or `REDIS_URL`), rather than it being the
    /// default: only a named Redis is ever faulted.
    pub redis_named: bool,
    /// The private redis-server this run uses, if any: stopped when the command ends.
    _private: Option<PrivateRedis>,
}

/// What a signal that quits at once must undo first: the locks and queue places taken through
/// `holdings`, the private redis-servers, the export files created and not yet written.
fn register_clean_ups(holdings: &Holdings) {
    let holdings = holdings.clone();
    signals::on_quit(move || {
        let n = holdings.give_back_all(signals::GIVE_BACK_LIMIT);
        (n > 0).then(|| format!("gave back {n} lock(s) and queue place(s)"))
    });
    signals::on_quit(|| {
        crate::private_redis::stop_all();
        None
    });
    // Export files this run created and never wrote: not left behind empty.
    signals::on_quit(|| {
        crate::report_files::abandon_created();
        None
    });
}

/// Opens what the global flags name, then runs the command.
pub fn run(cli: Cli) -> anyhow::Result<Exit> {
    if let Some(done) = run_offline(&cli) {
        return done;
    }
    let (options, endpoint_tls) = connect_options(&cli);
    let private = private_redis(&cli, &options)?;
    let url = match &private {
        Some(p) => p.url(),
        None => cli.redis_url(),
    };
    let metrics = Arc::new(Metrics::new());
    let holdings = Holdings::new();
    register_clean_ups(&holdings);
    let target = open_target(&cli, &url, &options)?
        .with_metrics(metrics.clone())
        .with_holdings(holdings);
    let ctx = Ctx {
        target,
        metrics,
        quorum: open_quorum(&cli, &options)?,
        options,
        endpoint_tls,
        json: cli.json,
        quiet: cli.quiet,
        color: cli.color,
        url,
        redis_named: cli.redis.is_some(),
        _private: private,
    };
    match cli.command {
        Command::Check => check::run(&ctx, cli.cluster),
        Command::Seed {
            sku,
            count,
            buckets,
        } => seed::run(&ctx, &sku, count, buckets.map(|k| k as usize)),
        Command::Buy(args) => buy::run(&ctx, args),
        Command::Hammer(args) => hammer::run(&ctx, *args),
        Command::Hunt(args) => hunt::run(&ctx, *args),
        Command::Status { sku, db } => status::run(&ctx, &sku, db),
        Command::Unlock { sku, force, token } => unlock::run(&ctx, &sku, force, token),
        Command::Exporter { sku, listen } => exporter::run(&ctx, sku, &listen),
        Command::Run(args) => run::run(&ctx, args),
        Command::Worker(args) => worker::run(&ctx, args),
        Command::Db(DbCommand::Init { db }) => worker::db_init(&ctx, &db),
        Command::Completions { .. } | Command::Man { .. } | Command::Judge { .. } => Ok(Exit::Ok),
    }
}

/// Runs a command that opens no server, if `cli` names one; `None` for every other.
fn run_offline(cli: &Cli) -> Option<anyhow::Result<Exit>> {
    match &cli.command {
        // These two only print what the command line itself defines.
        Command::Completions { shell } => Some(docs::completions(*shell)),
        Command::Man { page, out_dir } => Some(docs::man(page.as_deref(), out_dir.as_deref())),
        // A recorded history is judged offline: no server is opened.
        Command::Judge { file, export_html } => Some(judge::run(cli, file, export_html.as_deref())),
        // A template of the facts file: nothing is opened.
        Command::Hunt(h) if matches!(h.action, Some(crate::cli::HuntAction::Init)) => Some(
            emit(&crate::cli::facts::template())
                .map(|()| Exit::Ok)
                .map_err(Into::into),
        ),
        _ => None,
    }
}

/// Redis's connection options, and the TLS files for an `https://` endpoint.
fn connect_options(cli: &Cli) -> (ConnectOptions, TlsFiles) {
    let options = cli.connect_options();
    let endpoint_tls = options.tls.clone();
    // The TLS files serve an https:// endpoint as well as rediss://: a plain Redis beside an
    // https:// endpoint does without them (given to neither, Redis refuses them, saying so).
    let options = match requests_https(&cli.command) && !cli.redis_url().starts_with("rediss://") {
        true => ConnectOptions {
            tls: TlsFiles::default(),
            ..options
        },
        false => options,
    };
    (options, endpoint_tls)
}

/// The Redis at `url`: a seed node of a cluster with `--cluster` (each SKU named must then
/// keep its keys in one slot), else one server.
fn open_target(cli: &Cli, url: &str, options: &ConnectOptions) -> anyhow::Result<Target> {
    if !cli.cluster {
        return Ok(Target::open(url, options.clone())?);
    }
    for sku in cli.command.skus() {
        check_one_slot(sku).map_err(|e| UsageError(e.to_string()))?;
    }
    Ok(Target::open_cluster(url, options.clone())?)
}

/// The Redlock quorum of the `--lock-node` masters, if any are named.
fn open_quorum(cli: &Cli, options: &ConnectOptions) -> anyhow::Result<Option<Arc<Quorum>>> {
    match cli.lock_node_count() {
        Ok(0) => Ok(None),
        Ok(_) => {
            let nodes = cli
                .lock_nodes
                .iter()
                .map(|u| Target::open(u, options.clone()).map_err(|e| e.of_flag("--lock-node")))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Some(Arc::new(Quorum::new(nodes))))
        }
        Err(message) => Err(UsageError(message).into()),
    }
}

/// A private redis-server for this hammer: asked for with `--redis auto`, or taken when no
/// `--redis` was given and nothing answers at the default address. Other commands never get
/// one: what they write must outlive them.
fn private_redis(cli: &Cli, options: &ConnectOptions) -> anyhow::Result<Option<PrivateRedis>> {
    let hammer = matches!(&cli.command, Command::Hammer(h) if !h.http.wanted());
    let http = matches!(&cli.command, Command::Hammer(h) if h.http.wanted());
    match cli.redis.as_deref() {
        // The endpoint deducts in its own Redis: the verdict must read that one.
        Some("auto") if http => Err(UsageError(
            "--redis auto starts a private redis-server, but hammer --url must read the stock the endpoint deducts: name the endpoint's Redis with --redis (default redis://127.0.0.1:6379)".into(),
        )
        .into()),
        Some("auto") if !hammer => Err(UsageError(
            "--redis auto starts a private redis-server that vanishes when the command ends; only hammer can use one (it seeds, buys and checks within the run)".into(),
        )
        .into()),
        Some("auto") if cli.cluster => Err(UsageError(
            "--redis auto starts a single private server, not a cluster: drop --cluster".into(),
        )
        .into()),
        Some("auto") => {
            let private = PrivateRedis::start("--redis auto asks for a private server")?;
            eprintln!(
                "lockctl: --redis auto: using a private redis-server on port {} for this run; its data is discarded",
                private.port()
            );
            Ok(Some(private))
        }
        Some(_) => Ok(None),
        None if !hammer || cli.cluster => Ok(None),
        None => {
            let default = cli.redis_url();
            if someone_answers(&default, options) {
                return Ok(None);
            }
            let shown = Target::open(&default, options.clone())
                .map(|t| t.addr().to_string())
                .unwrap_or(default);
            let private = PrivateRedis::start(&format!("no Redis answers at {shown}"))?;
            eprintln!(
                "lockctl: no Redis at {shown}: using a private redis-server on port {} for this run; its data is discarded",
                private.port()
            );
            Ok(Some(private))
        }
    }
}

/// Whether anything answers at `url` (a server that refuses the password still answers).
fn someone_answers(url: &str, options: &ConnectOptions) -> bool {
    let Ok(target) = Target::open(url, options.clone()) else {
        return true;
    };
    !matches!(
        target.connect(),
        Err(Error::Connect { .. } | Error::ConnectTimeout { .. })
    )
}

/// A command line clap refused (or help and version, which are not errors). Under `--json` a
/// usage error is still one JSON object on stdout, with clap's message on stderr as usual.
pub fn parse_failed(e: clap::Error) -> ExitCode {
    let usage = e.use_stderr();
    if usage && std::env::args_os().any(|a| a == "--json") {
        // clap's own sentence ("invalid value 'abc' for '--qty <QTY>': ..."), not its kind's
        // name: the first paragraph of its message, without the "error: " it starts with.
        let text = shown(&e).unwrap_or_else(|| e.to_string());
        let first = text.split("\n\n").next().unwrap_or_default();
        let reason = first.trim().trim_start_matches("error: ");
        let reason = reason.split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = emit_json(&ErrorJson::new(reason, ErrorKind::Usage, false));
    }
    match shown(&e) {
        Some(text) => {
            let _ = match e.use_stderr() {
                true => io::stderr().write_all(text.as_bytes()),
                false => io::stdout().write_all(text.as_bytes()),
            };
        }
        None => {
            let _ = e.print();
        }
    }
    if usage { Exit::Usage } else { Exit::Ok }.into()
}

/// How clap's usage line names --redis when it has a value.
const ENV_REDIS_USAGE: &str = " --redis <REDIS>";

/// A line of clap's message that is a usage line (`Usage: lockctl buy ...`).
fn is_usage_line(line: &str) -> bool {
    line.trim_start().starts_with("Usage:")
}

/// clap's message, which quotes the argument it stumbled on: an unquoted `--db host=h
/// password=pw` makes `password=pw` an unexpected argument. When an argument holds a secret,
/// the message as shown, with every argument as a report shows it (and without colour: the
/// plain text is what gets rewritten); `None` when nothing needs hiding (clap prints it as it
/// always does).
fn shown(e: &clap::Error) -> Option<String> {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let redacted = redact_command_line(&args);
    let mut changed: Vec<(&String, &String)> =
        args.iter().zip(&redacted).filter(|(a, s)| a != s).collect();
    // clap's usage line names the arguments it was given, and a value from the environment
    // counts: with REDIS_URL set, `lockctl buy` would read "Usage: lockctl buy --redis <REDIS>
    // <SKU>", as if --redis were required.
    let typed_redis = args
        .iter()
        .any(|a| a == "--redis" || a.starts_with("--redis="));
    // Only a usage line, never the help's list of options, which names every flag.
    let env_usage = !typed_redis
        && e.to_string()
            .lines()
            .any(|l| is_usage_line(l) && l.contains(ENV_REDIS_USAGE));
    if changed.is_empty() && !env_usage {
        return None;
    }
    // The longest first, so that an argument that contains another is replaced whole.
    changed.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
    let mut text = e.to_string();
    if env_usage {
        text = text
            .split_inclusive('\n')
            .map(|l| match is_usage_line(l) {
                true => l.replace(ENV_REDIS_USAGE, ""),
                false => l.to_string(),
            })
            .collect();
    }
    for (arg, redacted) in &changed {
        text = text.replace(arg.as_str(), redacted);
    }
    // A secret of an argument quoted in part (`--db=URL` quoted as its URL) goes too.
    for (arg, _) in &changed {
        text = scrub(&text, arg);
    }
    Some(text)
}

/// A command that failed: one line on stderr (and one JSON object on stdout under `--json`);
/// exit 2 for a usage error, 1 for anything else (a [`Missing`] program: its own code). A
/// closed stdout (`| head`) exits quietly.
pub fn failed(err: &anyhow::Error, json: bool) -> ExitCode {
    if is_broken_pipe(err) {
        return ExitCode::SUCCESS;
    }
    if let Some(m) = err.downcast_ref::<Missing>() {
        eprintln!("lockctl: error: {m}");
        if json {
            let _ = emit_json(&ErrorJson::new(
                m.to_string(),
                ErrorKind::Environment,
                false,
            ));
        }
        return ExitCode::from(m.code());
    }
    // The libraries name the fix as data; the command line words it.
    let message = lockctl::advice::error_message(err);
    // A message may quote a system's answer or output: nothing of it may drive the terminal.
    eprintln!(
        "lockctl: error: {}",
        lockctl_render::terminal_lines(&message)
    );
    // A URL that does not parse is a bad argument like any other.
    let hammer = err.downcast_ref::<lockctl_hammer::Error>();
    let core = err
        .downcast_ref::<Error>()
        .or_else(|| hammer.and_then(lockctl_hammer::Error::as_core));
    let usage = err.is::<UsageError>()
        || core.is_some_and(|e| matches!(e, Error::BadUrl { .. } | Error::BadDbUrl { .. }))
        || hammer.is_some_and(lockctl_hammer::Error::is_usage);
    if json {
        let reply = match (err.is::<UsageError>(), core, hammer) {
            (true, ..) => ErrorJson::new(message, ErrorKind::Usage, false),
            (false, Some(lib), _) => ErrorJson::from_error(message, lib),
            (false, None, Some(h)) => ErrorJson::new(message, h.kind(), h.is_indeterminate()),
            (false, None, None) => ErrorJson::new(message, ErrorKind::Internal, false),
        };
        let _ = emit_json(&reply);
    }
    if usage { Exit::Usage } else { Exit::Error }.into()
}

/// Human output on stdout.
pub fn emit(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// One JSON object on stdout, on one line.
pub fn emit_json<T: serde::Serialize + ?Sized>(v: &T) -> io::Result<()> {
    let line = serde_json::to_string(v).map_err(io::Error::other)?;
    emit(&format!("{line}\n"))
}

/// Text or JSON, as the command line asked; with `-q`, only the text's first line (`check`
/// hands over its verdict as that line).
pub fn output<T: serde::Serialize>(
    ctx: &Ctx,
    text: impl FnOnce() -> String,
    json: impl FnOnce() -> T,
) -> io::Result<()> {
    if ctx.json {
        return emit_json(&json());
    }
    // The text may quote what is stored in Redis (a lock holder's token, a damaged key's
    // value): nothing of it may drive the terminal.
    let t = text();
    let t = lockctl_render::terminal_lines(&t);
    if ctx.quiet {
        // The result line only: the first, where every command puts its outcome.
        emit(&format!("{}\n", t.lines().next().unwrap_or("")))
    } else {
        emit(&t)
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}
