//! The command line: clap definitions, and their conversion into the library's validated
//! types (connection options, the Redlock quorum's size, purchase options). The library knows
//! nothing of clap; the fixed choices here map onto its enums.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum, value_parser};

use lockctl::conn::{ConnectOptions, TlsFiles};
use lockctl::hammer::Mode;
use lockctl::lock::LockOptions;
use lockctl::sku::{Sku, check_name};
use lockctl::stock::{BuyOptions, MAX_STOCK, Strategy};

/// Flash-sale stock deduction under a Redis distributed lock.
///
/// Seed a SKU's stock, buy it under a lock the way the tutorial does (or with a safer strategy),
/// and hammer it with concurrent buyers to prove nothing is oversold.
#[derive(Debug, Parser)]
#[command(name = "lockctl", version, propagate_version = true)]
pub struct Cli {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss:// (TLS), redis+unix:///path
    /// [default: redis://127.0.0.1:6379]. `hammer` also takes `auto`: a private redis-server
    /// for that run only (what it does anyway when nothing answers at the default).
    #[arg(long, global = true, env = "REDIS_URL", hide_env_values = true)]
    pub redis: Option<String>,

    /// Limit on each Redis call, in ms; a slower call is an error, never a hang.
    #[arg(long, global = true, default_value_t = 2000, value_parser = value_parser!(u64).range(1..=3_600_000))]
    pub timeout_ms: u64,

    /// Limit on opening a connection (including AUTH), in ms.
    #[arg(long, global = true, default_value_t = 2000, value_parser = value_parser!(u64).range(1..=3_600_000))]
    pub connect_timeout_ms: u64,

    /// PEM file of the CA that signed the server's certificate (rediss:// only).
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,

    /// PEM file of a client certificate, for servers that require one (with --tls-key).
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM file of the client certificate's private key.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// The --redis URL is a seed node of a Redis Cluster (write SKUs with a hash tag, {sku_886},
    /// so that all of a SKU's keys share one slot).
    #[arg(long, global = true)]
    pub cluster: bool,

    /// Take the lock by Redlock quorum on these independent masters (repeat; an odd number,
    /// at least 3); the stock stays on --redis. Also LOCKCTL_LOCK_NODES, comma-separated.
    #[arg(
        long = "lock-node",
        global = true,
        value_name = "URL",
        env = "LOCKCTL_LOCK_NODES",
        hide_env_values = true,
        value_delimiter = ','
    )]
    pub lock_nodes: Vec<String>,

    /// Print exactly one JSON object on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// Where Redis is when `--redis` and `REDIS_URL` say nothing.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

impl Cli {
    /// The `--redis` URL, or the default. The default itself can be moved with
    /// `LOCKCTL_DEFAULT_REDIS_URL`, which exists for lockctl's own tests (to stand for "nothing
    /// runs on 6379" without stopping the machine's Redis).
    pub fn redis_url(&self) -> String {
        match &self.redis {
            Some(url) => url.clone(),
            None => std::env::var("LOCKCTL_DEFAULT_REDIS_URL")
                .unwrap_or_else(|_| DEFAULT_REDIS_URL.to_string()),
        }
    }

    /// The connection limits and TLS files every connection gets.
    pub fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            connect_timeout: Duration::from_millis(self.connect_timeout_ms),
            call_timeout: Duration::from_millis(self.timeout_ms),
            tls: TlsFiles {
                ca: self.tls_ca.clone(),
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
            },
        }
    }

    /// How many `--lock-node` masters were given: 0, or an odd number of at least 3 (a usage
    /// error otherwise, saying why).
    pub fn lock_node_count(&self) -> Result<usize, String> {
        match self.lock_nodes.len() {
            n if n == 0 || (n >= 3 && n % 2 == 1) => Ok(n),
            n => Err(format!(
                "--lock-node was given {n} times; Redlock needs an odd number of independent masters, at least 3"
            )),
        }
    }
}

impl Command {
    /// The SKUs this command touches.
    pub fn skus(&self) -> Vec<&Sku> {
        match self {
            Command::Check => vec![],
            Command::Seed { sku, .. }
            | Command::Status { sku }
            | Command::Unlock { sku, .. }
            | Command::Buy(BuyArgs { sku, .. })
            | Command::Hammer(HammerArgs { sku, .. }) => vec![sku],
            Command::Exporter { sku, .. } => sku.iter().collect(),
            Command::Run(r) => r.name.iter().collect(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Is this Redis reachable and fit for locking? (version, scripting, eviction, persistence,
    /// replication, round-trip time)
    Check,
    /// Set the stock of SKU to COUNT and clear its order ledger.
    Seed {
        /// The product, e.g. sku_886 (write {sku_886} to keep its keys in one cluster slot).
        sku: Sku,
        /// The new stock, a whole number from 0.
        #[arg(value_parser = value_parser!(u64).range(0..=MAX_STOCK))]
        count: u64,
    },
    /// One purchase: take the lock, read the stock, deduct if enough, release.
    Buy(BuyArgs),
    /// N purchases, C at a time, then verify from Redis that nothing was oversold.
    Hammer(HammerArgs),
    /// Stock, sold, ledger, lock holder and TTL, waiters; checks that the books reconcile.
    Status {
        /// The product, e.g. sku_886.
        sku: Sku,
    },
    /// Operator's escape hatch for a stuck lock: shows the holder; removes it with --force.
    Unlock {
        /// The product whose lock to remove.
        sku: Sku,
        /// Delete the lock whoever holds it (its holder is no longer excluded if still alive).
        #[arg(long, conflicts_with = "token")]
        force: bool,
        /// Release only if this token still holds the lock (the safe form).
        #[arg(long, value_parser = token)]
        token: Option<String>,
    },
    /// Run a command while holding the lock dist_lock:<NAME>: a distributed flock that stops the
    /// command if the lease is lost.
    Run(RunArgs),
    /// Serve per-SKU state from Redis as Prometheus metrics, read fresh on every scrape.
    Exporter {
        /// A SKU to export (repeat for several).
        #[arg(long, required = true)]
        sku: Vec<Sku>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: String,
    },
}

/// `lockctl run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock's name: the job holds dist_lock:<NAME> (a SKU's name excludes its buyers).
    /// Default: the command's file name.
    #[arg(long)]
    pub name: Option<Sku>,

    /// Lock lease in ms, renewed every third of it while the command runs.
    #[arg(long, default_value_t = 30_000, value_parser = value_parser!(u64).range(100..=86_400_000))]
    pub ttl_ms: u64,

    /// How long to wait for a held lock, in ms; 0 tries once.
    #[arg(long, default_value_t = 0, value_parser = value_parser!(u64).range(0..=86_400_000))]
    pub wait_ms: u64,

    /// After a lost lease: how long the command's process group has between SIGTERM and
    /// SIGKILL, in ms. It must leave the group dead before the lease could end on the server
    /// (at most a third of the TTL, less a margin). [default: 5000, or that bound if smaller]
    #[arg(long, value_parser = value_parser!(u64).range(0..=3_600_000))]
    pub grace_ms: Option<u64>,

    /// The command and its arguments (after --).
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
}

/// How each purchase is made (shared by `buy` and `hammer`).
#[derive(Debug, Args)]
pub struct PurchaseArgs {
    /// Lock lease in ms: the lock frees itself this long after it was taken (or renewed).
    #[arg(long, default_value_t = 5000, value_parser = value_parser!(u64).range(1..=86_400_000))]
    pub ttl_ms: u64,

    /// How long to wait for a held lock, in ms; 0 tries once, as the tutorial does.
    /// [default: 0 for buy, 5000 for hammer, so that a hammer sells its whole stock]
    #[arg(long, value_parser = value_parser!(u64).range(0..=86_400_000))]
    pub wait_ms: Option<u64>,

    /// Simulated business time inside the critical section, in ms (after the read, before the
    /// write).
    #[arg(long, default_value_t = 0, value_parser = value_parser!(u64).range(0..=3_600_000))]
    pub work_ms: u64,

    /// Renew the lease every TTL/3 while the purchase holds the lock.
    #[arg(long)]
    pub watchdog: bool,

    /// Units per purchase.
    #[arg(long, default_value_t = 1, value_parser = value_parser!(u64).range(1..=1_000_000))]
    pub qty: u64,

    /// At most this many units per user (with --user on buy, --users on hammer).
    #[arg(long, value_parser = value_parser!(u64).range(1..=MAX_STOCK))]
    pub limit: Option<u64>,
}

#[derive(Debug, Args)]
pub struct BuyArgs {
    /// The product, e.g. sku_886.
    pub sku: Sku,

    /// How the stock is protected: lock (the tutorial), fenced, atomic, or naive (no lock).
    #[arg(long, value_enum, default_value_t = StrategyArg::Lock)]
    pub strategy: StrategyArg,

    #[command(flatten)]
    pub purchase: PurchaseArgs,

    /// Idempotency key: repeating an order id that bought reports that purchase and deducts
    /// nothing (fenced and atomic strategies). Default: a fresh random id.
    #[arg(long, value_parser = order_id)]
    pub order_id: Option<String>,

    /// Who is buying, for --limit.
    #[arg(long, value_parser = user_id, requires = "limit")]
    pub user: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("http").args(["url", "preset"]).multiple(true)))]
pub struct HammerArgs {
    /// The product to hammer.
    #[arg(long, default_value = "sku_886")]
    pub sku: Sku,

    /// Purchases in all.
    #[arg(short = 'n', long = "requests", default_value_t = 100, value_parser = value_parser!(u64).range(1..=100_000_000))]
    pub requests: u64,

    /// Purchases in flight at once.
    #[arg(short = 'c', long = "concurrency", default_value_t = 10, value_parser = value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,

    /// threads: workers in this process; procs: one child `lockctl buy` per purchase.
    #[arg(long, value_enum, default_value_t = ModeArg::Threads)]
    pub mode: ModeArg,

    /// Seed the stock to this first (and clear the ledger); without it the stock already in
    /// Redis is used.
    #[arg(long, value_parser = value_parser!(u64).range(0..=MAX_STOCK))]
    pub stock: Option<u64>,

    /// Spread purchases over this many simulated users (u0, u1, ...), for --limit (and for
    /// {user} with --url).
    #[arg(long, value_parser = value_parser!(u64).range(1..=100_000_000))]
    pub users: Option<u64>,

    /// How the stock is protected; a comma-separated list (lock,fenced,atomic) runs the same
    /// load once per strategy on a freshly seeded stock and compares them.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "lock")]
    pub strategy: Vec<StrategyArg>,

    #[command(flatten)]
    pub purchase: PurchaseArgs,

    /// Write the full report as JSON (latency buckets included) to FILE; - for stdout.
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,

    /// Write the summary table as Markdown to FILE; - for stdout.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,

    /// Write a self-contained HTML page with latency and stock charts to FILE; - for stdout.
    #[arg(long, value_name = "FILE")]
    pub export_html: Option<PathBuf>,

    /// Serve Prometheus metrics on HOST:PORT at /metrics while the hammer runs.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,

    /// Write the Prometheus metrics to FILE when the hammer ends.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,

    #[command(flatten)]
    pub http: Box<HttpArgs>,
}

/// `hammer --url`: HTTP requests to someone's endpoint instead of lockctl's own buyers.
#[derive(Debug, Args)]
#[command(next_help_heading = "HTTP mode (hammer --url)")]
pub struct HttpArgs {
    /// Fire HTTP requests at this endpoint instead of lockctl's own buyers, then judge its
    /// answers against its stock in Redis (--redis). Placeholders {sku}, {user}, {order}
    /// (a fresh order id per request) and {n} (the request's index) are filled in the URL,
    /// the headers and the body.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with_all = LOCK_ONLY
    )]
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

    /// An answer whose body matches this pattern sold --qty units (checked first).
    #[arg(long, value_name = "REGEX", requires = "http")]
    pub bought_if: Option<String>,

    /// An answer whose body matches this pattern said sold out (checked second).
    #[arg(long, value_name = "REGEX", requires = "http")]
    pub sold_out_if: Option<String>,

    /// An answer whose body matches this pattern said busy, try again (checked third).
    #[arg(long, value_name = "REGEX", requires = "http")]
    pub busy_if: Option<String>,

    /// The Redis key of the stock the endpoint deducts [default: item:stock:<SKU>].
    #[arg(long, value_name = "KEY", requires = "http")]
    pub stock_key: Option<String>,

    /// The open model: R requests per second on a fixed schedule whatever the answers, over
    /// -c connections; latency counts from each request's scheduled moment. Without it, each
    /// connection sends its next request when the last is answered.
    #[arg(long, value_name = "R", value_parser = rate, requires = "http")]
    pub rate: Option<f64>,
}

/// The hammer's flags that mean nothing for an external endpoint, which protects its stock
/// its own way. (`--lock-node`, often set through LOCKCTL_LOCK_NODES, is ignored rather than
/// refused; `--cluster` still applies: the stock key is read from a cluster.)
const LOCK_ONLY: [&str; 8] = [
    "strategy",
    "ttl_ms",
    "wait_ms",
    "work_ms",
    "watchdog",
    "limit",
    "mode",
    "metrics_addr",
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
fn rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1_000_000.0 => Ok(r),
        _ => Err(format!(
            "'{s}' is not a rate: give requests per second, more than 0 and at most 1000000 (e.g. --rate 200 or --rate 0.5)"
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
}

impl From<StrategyArg> for Strategy {
    fn from(s: StrategyArg) -> Strategy {
        match s {
            StrategyArg::Lock => Strategy::Lock,
            StrategyArg::Fenced => Strategy::Fenced,
            StrategyArg::Atomic => Strategy::Atomic,
            StrategyArg::Naive => Strategy::Naive,
        }
    }
}

/// `--mode`: how the hammer's purchases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// Worker threads in this process, one connection each.
    Threads,
    /// Each purchase is a child `lockctl buy` process, like the tutorial's "several terminals".
    Procs,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Threads => Mode::Threads,
            ModeArg::Procs => Mode::Procs,
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
            work: Duration::from_millis(self.work_ms),
            lock: LockOptions {
                ttl: Duration::from_millis(self.ttl_ms),
                wait: Duration::from_millis(self.wait_ms.unwrap_or(default_wait_ms)),
                watchdog: self.watchdog,
            },
            limit: self.limit,
        }
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

fn order_id(s: &str) -> Result<String, String> {
    check_name("an order id", "order-42", s).map(|()| s.to_string())
}

fn token(s: &str) -> Result<String, String> {
    check_name("a token", "5f0c...e21a (see lockctl status)", s).map(|()| s.to_string())
}

fn user_id(s: &str) -> Result<String, String> {
    check_name("a user id", "alice", s).map(|()| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use proptest::strategy::Strategy as _;

    #[test]
    fn the_clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The procs hammer writes its children's command lines from the library's option
    /// structs; parsed back by this command line, they must give the very same options.
    #[test]
    fn a_procs_child_command_line_parses_back_to_the_parents_options() {
        use lockctl::conn::Target;
        use lockctl::hammer::ChildBuy;

        let connect = ConnectOptions::new(Duration::from_millis(321), Duration::from_millis(654));
        let target = Target::open("redis://:pw@127.0.0.1:1/3", connect.clone()).unwrap();
        let sku: Sku = "{sku-1}".parse().unwrap();
        for (i, strategy) in Strategy::ALL.into_iter().enumerate() {
            let buy = BuyOptions {
                strategy,
                qty: 1 + i as u64,
                work: Duration::from_millis(7 * i as u64),
                lock: LockOptions {
                    ttl: Duration::from_millis(1000 + i as u64),
                    wait: Duration::from_millis(10 * i as u64),
                    watchdog: i % 2 == 1,
                },
                limit: (i % 2 == 0).then_some(5),
            };
            let child = ChildBuy {
                target: &target,
                sku: &sku,
                buy: &buy,
                order_id: "h1-7",
                user: Some("u3"),
            };
            let args = std::iter::once("lockctl".into()).chain(child.args());
            let cli = Cli::try_parse_from(args).expect("the child's arguments parse");
            assert!(cli.json, "the child must answer in JSON");
            assert_eq!(cli.connect_options(), connect);
            let Command::Buy(b) = &cli.command else {
                panic!("not a buy: {:?}", cli.command)
            };
            assert_eq!(b.buy_options(), buy, "{strategy}");
            assert_eq!(b.sku, sku);
            assert_eq!(b.order_id.as_deref(), Some("h1-7"));
            assert_eq!(b.user.as_deref(), buy.limit.map(|_| "u3"));
            let text = format!("{:?}", child.args());
            assert!(
                !text.contains("pw"),
                "a password on the command line: {text}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(3000))]

        /// Whatever the arguments, parsing answers (a command or an error) and never panics.
        #[test]
        fn any_arguments_parse_or_fail_cleanly(
            args in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<String>(),
                    proptest::sample::select(vec![
                        "buy", "seed", "hammer", "status", "unlock", "check", "exporter",
                        "--qty", "--ttl-ms", "--wait-ms", "--work-ms", "--stock", "-n", "-c",
                        "--strategy", "lock,fenced", "--sku", "--json", "--force", "--token",
                        "--limit", "--user", "--users", "--order-id", "--mode", "procs",
                        "--lock-node", "--cluster", "0", "-1", "18446744073709551616", "{x}",
                    ]).prop_map(String::from),
                ],
                0..8,
            )
        ) {
            let _ = Cli::try_parse_from(std::iter::once("lockctl".to_string()).chain(args));
        }
    }
}
