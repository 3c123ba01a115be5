//! The arguments of `buy`, `hammer` and `run`, and their conversion into the library's
//! options.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::parse::{order_id, user_id, whole};
use lockctl_core::lock::LockOptions;
use lockctl_core::sku::Sku;
use lockctl_core::stock::buckets::MAX_BUCKETS;
use lockctl_core::stock::{BatchOptions, BuyOptions, MAX_BATCH, MAX_STOCK, Strategy};
use lockctl_hammer::Driving;

/// `lockctl run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock's name: the job holds dist_lock:<NAME> (a SKU's name excludes its buyers).
    /// Default: the command's file name.
    #[arg(long)]
    pub name: Option<Sku>,

    /// Lock lease in ms, renewed every third of it while the command runs.
    #[arg(long, default_value_t = 30_000, value_parser = whole(100, 86_400_000), allow_negative_numbers = true)]
    pub ttl_ms: u64,

    /// How long to wait for a held lock, in ms; 0 tries once.
    #[arg(long, default_value_t = 0, value_parser = whole(0, 86_400_000), allow_negative_numbers = true)]
    pub wait_ms: u64,

    /// After a lost lease: how long the command's process group has between SIGTERM and
    /// SIGKILL, in ms. It must leave the group dead before the lease could end on the server
    /// (at most a third of the TTL, less a margin). [default: 5000, or that bound if smaller]
    #[arg(long, value_parser = whole(0, 3_600_000), allow_negative_numbers = true)]
    pub grace_ms: Option<u64>,

    /// The command and its arguments (after --).
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// `lockctl worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// PostgreSQL URL: postgres://user[:password]@host[:port]/database.
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        value_name = "URL",
        required_unless_present = "requeue_dead"
    )]
    pub db: Option<String>,

    /// A SKU whose queued orders to persist (repeat for several).
    #[arg(long, required = true)]
    pub sku: Vec<Sku>,

    /// Orders per batch: one read, one transaction, one acknowledgement.
    #[arg(long, default_value_t = 1000, value_parser = whole(1, 100_000), allow_negative_numbers = true)]
    pub batch: u64,

    /// Take over orders another worker has left unacknowledged this long, in ms (a worker
    /// that died).
    #[arg(long, default_value_t = 30_000, value_parser = whole(1, 86_400_000), allow_negative_numbers = true)]
    pub claim_idle_ms: u64,

    /// Drain what is queued now and exit, instead of running until stopped.
    #[arg(long)]
    pub once: bool,

    /// Put the SKUs' dead letters that hold orders back on the queue (after fixing what
    /// PostgreSQL refused), then exit; running it again queues nothing twice.
    #[arg(long, conflicts_with = "once")]
    pub requeue_dead: bool,

    /// Serve Prometheus metrics on HOST:PORT at /metrics while the worker runs.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
}

/// `lockctl db ...`.
#[derive(Debug, clap::Subcommand)]
pub enum DbCommand {
    /// Create the orders schema, or migrate it to this lockctl's version (idempotent).
    #[command(after_help = super::help::DB_INIT, help_template = super::help::DB_INIT_HELP)]
    Init {
        /// PostgreSQL URL: postgres://user[:password]@host[:port]/database.
        #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
        db: String,
    },
}

/// How each purchase is made (shared by `buy` and `hammer`).
#[derive(Debug, Args)]
pub struct PurchaseArgs {
    /// Lock lease in ms: the lock frees itself this long after it was taken (or renewed).
    #[arg(long, default_value_t = 5000, value_parser = whole(1, 86_400_000), allow_negative_numbers = true, help_heading = "Purchase")]
    pub ttl_ms: u64,

    /// How long to wait for a held lock, in ms; 0 tries once, as the tutorial does.
    /// [default: 0 for buy, 5000 for hammer, so that a hammer sells its whole stock]
    #[arg(long, value_parser = whole(0, 86_400_000), allow_negative_numbers = true, help_heading = "Purchase")]
    pub wait_ms: Option<u64>,

    /// Simulated business time inside the critical section, in ms (after the read, before the
    /// write).
    #[arg(long, default_value_t = 0, value_parser = whole(0, 3_600_000), allow_negative_numbers = true, help_heading = "Purchase")]
    pub work_ms: u64,

    /// Renew the lease every TTL/3 while the purchase holds the lock.
    #[arg(long, help_heading = "Purchase")]
    pub watchdog: bool,

    /// Units per purchase.
    #[arg(long, default_value_t = 1, value_parser = whole(1, 1_000_000), allow_negative_numbers = true, help_heading = "Purchase")]
    pub qty: u64,

    /// At most this many units per user (with --user on buy, --users on hammer).
    #[arg(long, value_parser = whole(1, MAX_STOCK), allow_negative_numbers = true, help_heading = "Purchase")]
    pub limit: Option<u64>,

    /// Append each bought order to the stream item:order_events:<SKU>, in the same script as
    /// the deduction, for `lockctl worker` to persist into PostgreSQL.
    #[arg(long, help_heading = "Purchase")]
    pub queue: bool,

    /// batch: the longest a purchase waits for its batch to leave while another is on its way,
    /// in ms (a purchase that finds none in flight leaves at once).
    #[arg(long, default_value_t = 1, value_parser = whole(0, 10_000), allow_negative_numbers = true, help_heading = "Purchase")]
    pub batch_ms: u64,

    /// batch: the most purchases decided by one script call.
    #[arg(long, default_value_t = 256, value_parser = whole(1, MAX_BATCH as u64), allow_negative_numbers = true, help_heading = "Purchase")]
    pub batch_max: u64,

    /// Answer "bought" only once N replicas have the deduction (WAIT N after it, for at most
    /// --timeout-ms); a deduction fewer replicas took in time is reported as an error (it was
    /// made, and a failover may lose it).
    #[arg(long, default_value_t = 0, value_parser = whole(0, 100), allow_negative_numbers = true, value_name = "N", help_heading = "Purchase")]
    pub require_replicas: u64,
}

#[derive(Debug, Args)]
pub struct BuyArgs {
    /// The product, e.g. sku_886.
    pub sku: Sku,

    /// How the stock is protected: lock (the tutorial), fenced, atomic, batch (group commit), or
    /// naive (no lock).
    #[arg(long, value_enum, default_value_t = StrategyArg::Lock, help_heading = "Purchase")]
    pub strategy: StrategyArg,

    #[command(flatten)]
    pub purchase: PurchaseArgs,

    /// Idempotency key: repeating an order id that bought reports that purchase and deducts
    /// nothing (fenced and atomic strategies). Default: a fresh random id.
    #[arg(long, value_parser = order_id, help_heading = "Purchase")]
    pub order_id: Option<String>,

    /// Who is buying, for --limit.
    #[arg(long, value_parser = user_id, requires = "limit", help_heading = "Purchase")]
    pub user: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("http").args(["url", "preset"]).multiple(true)))]
pub struct HammerArgs {
    /// The product to hammer.
    #[arg(long, default_value = "sku_886", help_heading = "Load")]
    pub sku: Sku,

    /// Purchases in all.
    #[arg(short = 'n', long = "requests", default_value_t = 100, value_parser = whole(1, 100_000_000), allow_negative_numbers = true, help_heading = "Load")]
    pub requests: u64,

    /// Purchases in flight at once.
    #[arg(short = 'c', long = "concurrency", default_value_t = 10, value_parser = whole(1, 10_000), allow_negative_numbers = true, help_heading = "Load")]
    pub concurrency: u64,

    /// threads: workers in this process; tasks: tokio tasks; procs: one child `lockctl buy`
    /// per purchase. Default: tasks for atomic on a single server without --work-ms, where it
    /// is measured faster; threads otherwise.
    #[arg(long, value_enum, help_heading = "Load")]
    pub mode: Option<ModeArg>,

    /// Seed the stock to this first (and clear the ledger); without it the stock already in
    /// Redis is used.
    #[arg(long, value_parser = whole(0, MAX_STOCK), allow_negative_numbers = true, help_heading = "Load")]
    pub stock: Option<u64>,

    /// With --stock: split it over K buckets on different cluster masters (as `seed
    /// --buckets K`).
    #[arg(long, value_name = "K", requires = "stock", value_parser = whole(1, MAX_BUCKETS as u64), allow_negative_numbers = true, help_heading = "Load")]
    pub buckets: Option<u64>,

    /// Spread purchases over this many simulated users (u0, u1, ...), for --limit (and for
    /// {user} with --url).
    #[arg(long, value_parser = whole(1, 100_000_000), allow_negative_numbers = true, help_heading = "Load")]
    pub users: Option<u64>,

    /// How the stock is protected; a comma-separated list (lock,fenced,atomic) runs the same
    /// load once per strategy on a freshly seeded stock and compares them.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "lock",
        help_heading = "Load"
    )]
    pub strategy: Vec<StrategyArg>,

    #[command(flatten)]
    pub purchase: PurchaseArgs,

    /// Write the full report as JSON (latency buckets included) to FILE; - for stdout.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub export_json: Option<PathBuf>,

    /// Write every request as JSON Lines in Jepsen's history shape (invoke, then ok, fail or
    /// info), with the facts first and what was read back last, to FILE; `lockctl judge FILE`
    /// gives the same verdict from it. - for stdout. One strategy a run.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub history: Option<PathBuf>,

    /// Write the summary table as Markdown to FILE; - for stdout.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub export_markdown: Option<PathBuf>,

    /// Write a self-contained HTML page with latency and stock charts to FILE; - for stdout.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub export_html: Option<PathBuf>,

    /// Serve Prometheus metrics on HOST:PORT at /metrics while the hammer runs.
    #[arg(long, value_name = "HOST:PORT", help_heading = "Reports")]
    pub metrics_addr: Option<String>,

    /// Write the Prometheus metrics to FILE when the hammer ends.
    #[arg(long, value_name = "FILE", help_heading = "Reports")]
    pub metrics_file: Option<PathBuf>,

    /// With --queue: run workers beside the buyers that persist the orders into this
    /// PostgreSQL database, wait for the queue to drain, and check every order there. With
    /// --queue and no --db, DATABASE_URL when it is set.
    #[arg(long, value_name = "URL", help_heading = "Load")]
    pub db: Option<String>,

    /// Workers beside the buyers (with --db).
    #[arg(long, default_value_t = 1, value_parser = whole(1, 64), allow_negative_numbers = true, help_heading = "Load")]
    pub workers: u64,

    #[command(flatten)]
    pub http: Box<HttpArgs>,
}

/// --url's help. clap reads `{n}` in help text as a line break, so the placeholder's `n` is
/// set apart by a style boundary: `{n}` on a terminal (bold n), and exactly `{n}` once the
/// styles are stripped (a pipe, a file).
fn url_help() -> clap::builder::StyledStr {
    placeholders_help(
        "Fire HTTP requests at this endpoint instead of lockctl's own buyers, then judge its \
         answers against its stock in Redis (--redis). https:// is checked against the \
         system's roots, or --tls-ca.",
        "",
    )
}

/// `lead`, then the placeholders' sentence (with `sku_note` after `{sku}`), `{n}` kept whole
/// (see [`url_help`]).
pub(super) fn placeholders_help(lead: &str, sku_note: &str) -> clap::builder::StyledStr {
    use std::fmt::Write as _;
    let bold = clap::builder::styling::Style::new().bold();
    let mut help = clap::builder::StyledStr::new();
    let _ = write!(
        help,
        "{lead} Placeholders {{sku}}{sku_note}, {{user}}, {{order}} (a fresh order id per \
         request), {{{bold}n{bold:#}}} (the request's index) and {{token}} (the user's, from \
         --login or --users-file) are filled in the URL, the headers and the body."
    );
    help
}

/// `hammer --url`: HTTP requests to someone's endpoint instead of lockctl's own buyers.
#[derive(Debug, Args)]
#[command(next_help_heading = "HTTP mode (hammer --url)")]
pub struct HttpArgs {
    /// Fire HTTP requests at this endpoint instead of lockctl's own buyers, then judge its
    /// answers against its stock in Redis (--redis). Placeholders {sku}, {user}, {order}
    /// (a fresh order id per request) and {n} (the request's index) are filled in the URL,
    /// the headers and the body.
    #[arg(long, value_name = "URL", conflicts_with_all = LOCK_ONLY, help = url_help())]
    pub url: Option<String>,

    /// Read the answers as the tutorial's run_demo.php writes them (扣减成功, 已售罄, 并发过高);
    /// a --url naming only a server gets its path, /run_demo.php?sku={sku} [default --url:
    /// http://127.0.0.1:8080/run_demo.php?sku={sku}]
    #[arg(long, value_enum, conflicts_with_all = LOCK_ONLY)]
    pub preset: Option<PresetArg>,

    /// The HTTP method.
    #[arg(long, default_value = "GET", requires = "http")]
    pub method: String,

    /// A request header, 'Name: value' (repeat for several).
    #[arg(long = "header", value_name = "'NAME: VALUE'", requires = "http")]
    pub headers: Vec<String>,

    /// The request body.
    #[arg(long, value_name = "TEXT", requires = "http")]
    pub body: Option<String>,

    /// Each user logs in once before its first purchase: 'METHOD URL [BODY]', placeholders as
    /// in --url (not {token}), the --header values without {token} sent along; not timed, not
    /// judged. A login that fails (no 2xx, no token) is a usage error naming its answer.
    #[arg(long, value_name = "'METHOD URL [BODY]'", requires = "http")]
    pub login: Option<String>,

    /// Where a login's answer holds the token: json:/POINTER or a regex with one group
    /// [default: the first of json:/token, json:/access_token, json:/data/token,
    /// json:/data/access_token that holds one].
    #[arg(long, value_name = "PATTERN", requires = "login")]
    pub token: Option<String>,

    /// The users and their tokens, for services whose tokens come from elsewhere: one user a
    /// line, 'USER<TAB>TOKEN' or a JSON object with "user" and "token"; {user} is then these
    /// users (and --users at most their number).
    #[arg(long, value_name = "FILE", conflicts_with = "login", requires = "http")]
    pub users_file: Option<std::path::PathBuf>,

    /// An answer that sold --qty units (tried first). A regex over the body,
    /// status:CODE[,CODE...], or json:/POINTER=VALUE (RFC 6901 pointer into a JSON body;
    /// VALUE compared as JSON, else as text); repeat it and every form must hold.
    #[arg(long, value_name = "FORM", requires = "http")]
    pub bought_if: Vec<String>,

    /// An answer that said sold out (tried second); forms as --bought-if.
    #[arg(long, value_name = "FORM", requires = "http")]
    pub sold_out_if: Vec<String>,

    /// An answer that said busy, try again (tried third); forms as --bought-if.
    #[arg(long, value_name = "FORM", requires = "http")]
    pub busy_if: Vec<String>,

    /// An answer that said a rule refused the purchase (one per user, say): nothing sold,
    /// nothing owed (tried fourth); forms as --bought-if.
    #[arg(long, value_name = "FORM", requires = "http")]
    pub refused_if: Vec<String>,

    /// An answer that said the purchase failed: it must not have deducted, and a sale behind
    /// it is a finding (tried fifth); forms as --bought-if.
    #[arg(long, value_name = "FORM", requires = "http")]
    pub failed_if: Vec<String>,

    /// The Redis key of the stock the endpoint deducts [default: item:stock:<SKU>].
    #[arg(long, value_name = "KEY", requires = "http")]
    pub stock_key: Option<String>,

    /// The open model: R requests per second on a fixed schedule whatever the answers, over
    /// -c connections; latency counts from each request's scheduled moment. Without it, each
    /// connection sends its next request when the last is answered.
    #[arg(long, value_name = "R", value_parser = rate, requires = "http")]
    pub rate: Option<f64>,

    /// Limit on each HTTP request, connecting and the whole answer included, in ms: a slower
    /// request counts as timed out (it may have bought). Apart from --timeout-ms (Redis's);
    /// long enough for a service's own lock wait (commonly 10 s).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_REQUEST_TIMEOUT_MS, value_parser = whole(1, 3_600_000), allow_negative_numbers = true, requires = "http")]
    pub request_timeout_ms: u64,
}

/// `--request-timeout-ms`'s default: a service that waits up to 10 s for its lock still
/// answers within it, with room to spare.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;

/// The hammer's flags that mean nothing for an external endpoint, which protects its stock
/// its own way. (`--lock-node`, often set through LOCKCTL_LOCK_NODES, is ignored rather than
/// refused; `--cluster` still applies: the stock key is read from a cluster.)
const LOCK_ONLY: [&str; 12] = [
    "strategy",
    "buckets",
    "require_replicas",
    "ttl_ms",
    "wait_ms",
    "work_ms",
    "watchdog",
    "limit",
    "mode",
    "metrics_addr",
    "queue",
    "db",
];

/// `--preset`: answers of a known endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    /// The tutorial's run_demo.php.
    Tutorial,
}

impl HttpArgs {
    /// Whether this is an HTTP run.
    pub fn wanted(&self) -> bool {
        self.url.is_some() || self.preset.is_some()
    }
}

/// `--rate`: requests per second, more than zero and at most a million.
pub(super) fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        // At least one request in 1000 s: a schedule a run can keep (and a clock can count).
        Ok(r) if (0.001..=1_000_000.0).contains(&r) => Ok(r),
        _ => Err(format!(
            "'{s}' is not a rate: give requests per second, at least 0.001 and at most 1000000 (e.g. --rate 200 or --rate 0.5)"
        )),
    }
}

/// `--strategy`: how the stock is protected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StrategyArg {
    /// The tutorial's flow: lock, GET, DECR if enough, release.
    Lock,
    /// The lock, but the deduction checks the lease atomically.
    Fenced,
    /// No lock: one script checks and deducts.
    Atomic,
    /// GET then DECR with no lock: the negative control.
    Naive,
    /// atomic, with this process's concurrent purchases decided by one script call (group
    /// commit; see --batch-ms, --batch-max).
    Batch,
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Strategy {
        match s {
            StrategyArg::Lock => Strategy::Lock,
            StrategyArg::Fenced => Strategy::Fenced,
            StrategyArg::Atomic => Strategy::Atomic,
            StrategyArg::Naive => Strategy::Naive,
            StrategyArg::Batch => Strategy::Batch,
        }
    }
}

/// `--mode`: how the hammer's purchases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Worker threads in this process, one connection each.
    Threads,
    /// A tokio task per buyer on the native async core: under atomic, every purchase pipelined
    /// on a few multiplexed connections.
    Tasks,
    /// Each purchase is a child `lockctl buy` process, like the tutorial's "several terminals".
    Procs,
}

impl From<ModeArg> for Driving {
    fn from(m: ModeArg) -> Driving {
        match m {
            ModeArg::Threads => Driving::Threads,
            ModeArg::Tasks => Driving::Tasks,
            ModeArg::Procs => Driving::Procs,
        }
    }
}

impl PurchaseArgs {
    /// The library's options for `strategy`, waiting `default_wait_ms` for the lock unless
    /// `--wait-ms` says otherwise.
    pub fn buy_options(&self, strategy: Strategy, default_wait_ms: u64) -> BuyOptions {
        BuyOptions {
            strategy,
            qty: self.qty,
            lock: LockOptions {
                ttl: Duration::from_millis(self.ttl_ms),
                wait: Duration::from_millis(self.wait_ms.unwrap_or(default_wait_ms)),
                watchdog: self.watchdog,
            },
            limit: self.limit,
            queue: self.queue,
            batch: BatchOptions {
                window: Duration::from_millis(self.batch_ms),
                max: self.batch_max as usize,
            },
            require_replicas: self.require_replicas as u32,
        }
    }
}

impl PurchaseArgs {
    /// `--work-ms`: the simulated business time inside each purchase.
    pub fn work(&self) -> Duration {
        Duration::from_millis(self.work_ms)
    }
}

impl BuyArgs {
    /// `buy` tries the lock once unless `--wait-ms` is given, as the tutorial does.
    pub fn buy_options(&self) -> BuyOptions {
        self.purchase.buy_options(self.strategy.into(), 0)
    }
}

impl HammerArgs {
    /// The strategies to run, in the order given.
    pub fn strategies(&self) -> Vec<Strategy> {
        self.strategy.iter().map(|&s| s.into()).collect()
    }
}
