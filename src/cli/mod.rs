//! The command line: clap definitions, and their conversion into the library's validated
//! types (connection options, the Redlock quorum's size, purchase options). The library knows
//! nothing of clap; the fixed choices here map onto its enums.
//!
//! Layout: the global flags and the subcommands here; `args` the arguments of `buy`, `hammer`
//! and `run`; `parse` the value parsers; `help` the examples and exit codes the help ends with.

mod args;
pub mod child;
pub mod facts;
pub(crate) mod help;
mod hunt;
mod parse;

pub use args::{
    BuyArgs, DbCommand, HammerArgs, HttpArgs, PresetArg, RunArgs, StrategyArg, WorkerArgs,
};
pub use help::VERSION;
pub use hunt::{HuntAction, HuntArgs};
use parse::{token, whole};

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};

use lockctl_core::conn::{ConnectOptions, TlsFiles};
use lockctl_core::sku::Sku;
use lockctl_core::stock::MAX_STOCK;
use lockctl_core::stock::buckets::MAX_BUCKETS;

/// Flash-sale stock deduction under a Redis distributed lock.
///
/// Seed a SKU's stock, buy it under a lock the way the tutorial does (or with a safer strategy),
/// and hammer it with concurrent buyers to prove nothing is oversold.
#[derive(Debug, Parser)]
#[command(
    name = "lockctl",
    version = help::VERSION,
    propagate_version = true,
    after_help = help::TOP
)]
pub struct Cli {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss:// (TLS), redis+unix:///path
    /// [default: redis://127.0.0.1:6379]; --help lists the other connection flags (timeouts,
    /// TLS, --cluster, --lock-node), which every command takes. `hammer` also takes `auto`: a private redis-server
    /// for that run only (what it does anyway when nothing answers at the default).
    #[arg(
        long,
        global = true,
        env = "REDIS_URL",
        hide_env_values = true,
        value_parser = parse::redis_url,
        help_heading = "Connection"
    )]
    pub redis: Option<String>,

    /// Limit on each Redis call, in ms; a slower call is an error, never a hang.
    #[arg(long, global = true, default_value_t = 2000, value_parser = whole(1, 3_600_000), allow_negative_numbers = true, hide_short_help = true, help_heading = "Connection")]
    pub timeout_ms: u64,

    /// Limit on opening a connection (including AUTH), in ms.
    #[arg(long, global = true, default_value_t = 2000, value_parser = whole(1, 3_600_000), allow_negative_numbers = true, hide_short_help = true, help_heading = "Connection")]
    pub connect_timeout_ms: u64,

    /// PEM file of the CA that signed the server's certificate, trusted instead of the system's
    /// roots: for rediss:// and for every https:// URL requested (--url, --ready).
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        hide_short_help = true,
        help_heading = "Connection"
    )]
    pub tls_ca: Option<PathBuf>,

    /// PEM file of a client certificate, for servers that require one (with --tls-key);
    /// rediss:// and https:// alike.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires = "tls_key",
        hide_short_help = true,
        help_heading = "Connection"
    )]
    pub tls_cert: Option<PathBuf>,

    /// PEM file of the client certificate's private key.
    #[arg(
        long,
        global = true,
        value_name = "FILE",
        requires = "tls_cert",
        hide_short_help = true,
        help_heading = "Connection"
    )]
    pub tls_key: Option<PathBuf>,

    /// The --redis URL is a seed node of a Redis Cluster (write SKUs with a hash tag, {sku_886},
    /// so that all of a SKU's keys share one slot).
    #[arg(
        long,
        global = true,
        hide_short_help = true,
        help_heading = "Connection"
    )]
    pub cluster: bool,

    /// Take the lock by Redlock quorum on these independent masters (repeat; an odd number,
    /// at least 3); the stock stays on --redis. Also LOCKCTL_LOCK_NODES, comma-separated. For
    /// check, buy, hammer and run (the others take no lock).
    #[arg(
        long = "lock-node",
        global = true,
        value_name = "URL",
        env = "LOCKCTL_LOCK_NODES",
        hide_env_values = true,
        value_delimiter = ',',
        hide_short_help = true,
        help_heading = "Connection"
    )]
    pub lock_nodes: Vec<String>,

    /// Print exactly one JSON object on stdout instead of text.
    #[arg(long, global = true, help_heading = "Output")]
    pub json: bool,

    /// Print only the verdict (hammer) or the result line (check, buy, seed).
    #[arg(short, long, global = true, help_heading = "Output")]
    pub quiet: bool,

    /// Colour the verdict: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorArg::Auto, help_heading = "Output")]
    pub color: ColorArg,

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
                "--lock-node was given {}; Redlock needs an odd number of independent masters, at least 3",
                lockctl_core::units::count(n as u64, "time", "times")
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
            | Command::Status { sku, .. }
            | Command::Unlock { sku, .. }
            | Command::Buy(BuyArgs { sku, .. }) => vec![sku],
            Command::Hammer(h) => vec![&h.sku],
            Command::Hunt(h) => vec![&h.sku],
            Command::Exporter { sku, .. } => sku.iter().collect(),
            Command::Run(r) => r.name.iter().collect(),
            Command::Worker(w) => w.sku.iter().collect(),
            Command::Completions { .. }
            | Command::Man { .. }
            | Command::Db(_)
            | Command::Judge { .. } => {
                vec![]
            }
        }
    }
}

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ColorArg {
    Auto,
    Always,
    Never,
}

impl ColorArg {
    /// Whether to colour output going to a stream that is (or is not) a terminal.
    pub fn enabled(self, terminal: bool) -> bool {
        match self {
            ColorArg::Always => true,
            ColorArg::Never => false,
            ColorArg::Auto => terminal && std::env::var_os("NO_COLOR").is_none(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Is this Redis reachable and fit for locking? (version, scripting, eviction, persistence,
    /// replication, round-trip time)
    #[command(after_help = help::CHECK)]
    Check,
    /// Set the stock of SKU to COUNT and clear its order ledger.
    #[command(after_help = help::SEED)]
    Seed {
        /// The product, e.g. sku_886 (write {sku_886} to keep its keys in one cluster slot).
        sku: Sku,
        /// The new stock, a whole number from 0.
        #[arg(value_parser = whole(0, MAX_STOCK), allow_negative_numbers = true)]
        count: u64,
        /// Split the stock over K buckets whose keys sit on different masters of a Redis
        /// Cluster, for one hot SKU: a purchase buys in its user's bucket and borrows from the
        /// others before it answers sold out (see docs/cluster.md, "Bucketed stock").
        #[arg(long, value_name = "K", value_parser = whole(1, MAX_BUCKETS as u64), allow_negative_numbers = true)]
        buckets: Option<u64>,
    },
    /// One purchase, the tutorial's flow: take the lock, read the stock, deduct if enough,
    /// release.
    #[command(after_help = help::BUY)]
    Buy(BuyArgs),
    /// N purchases, C at a time, then verify from Redis that nothing was oversold.
    #[command(after_help = help::HAMMER)]
    Hammer(Box<HammerArgs>),
    /// Stock, sold, ledger, lock holder and TTL, waiters; checks that the books reconcile.
    #[command(after_help = help::STATUS)]
    Status {
        /// The product, e.g. sku_886.
        sku: Sku,
        /// Also reconcile the orders in this PostgreSQL database (seeded == stock + persisted +
        /// still queued).
        #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
        db: Option<String>,
    },
    /// Operator's escape hatch for a stuck lock: shows the holder; removes it with --force.
    #[command(after_help = help::UNLOCK)]
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
    #[command(after_help = help::RUN)]
    Run(RunArgs),
    /// Serve per-SKU state from Redis as Prometheus metrics, read fresh on every scrape.
    #[command(after_help = help::EXPORTER)]
    Exporter {
        /// A SKU to export (repeat for several).
        #[arg(long, required = true)]
        sku: Vec<Sku>,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: String,
    },
    /// Persist queued orders (the streams of --queue) into PostgreSQL.
    #[command(after_help = help::WORKER)]
    Worker(WorkerArgs),
    /// Search for the run that breaks someone's flash sale: rounds of load on fresh SKUs with
    /// faults, within a budget; the first violation ends it (exit 3).
    #[command(
        after_help = help::HUNT,
        subcommand_negates_reqs = true,
        args_conflicts_with_subcommands = true
    )]
    Hunt(Box<HuntArgs>),
    /// Judge a recorded history (hammer --history) again, offline: the same verdict and exit
    /// codes as the run that wrote it.
    #[command(after_help = help::JUDGE)]
    Judge {
        /// The history, JSON Lines as --history writes it; - for stdin.
        file: PathBuf,
        /// Also write its timeline as a self-contained HTML page to this file.
        #[arg(long, value_name = "OUT")]
        export_html: Option<PathBuf>,
    },
    /// The orders database: `db init` creates (or migrates) its schema.
    #[command(subcommand, help_template = help::DB_HELP)]
    Db(DbCommand),
    /// Print shell completions for bash, zsh or fish.
    #[command(after_help = help::COMPLETIONS, help_template = help::COMPLETIONS_HELP)]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a manual page (roff), generated from the same definitions as --help: lockctl(1),
    /// or one subcommand's (`lockctl man hammer`); --out-dir writes them all.
    #[command(after_help = help::MAN, help_template = help::MAN_HELP)]
    Man {
        /// A subcommand whose page to print (hammer, buy, db-init, ...); none: lockctl(1).
        page: Option<String>,
        /// Write every page (lockctl.1, lockctl-hammer.1, ...) into this directory instead.
        #[arg(long, value_name = "DIR", conflicts_with = "page")]
        out_dir: Option<PathBuf>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use lockctl_core::lock::LockOptions;
    use lockctl_core::stock::{BatchOptions, BuyOptions, Strategy};
    use proptest::strategy::Strategy as _;

    #[test]
    fn the_clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// The procs hammer writes its children's command lines from the library's option
    /// structs; parsed back by this command line, they must give the very same options.
    #[test]
    fn a_procs_child_command_line_parses_back_to_the_parents_options() {
        use lockctl_core::conn::Target;
        use lockctl_hammer::ChildBuy;

        let connect = ConnectOptions::new(Duration::from_millis(321), Duration::from_millis(654));
        let target = Target::open("redis://:pw@127.0.0.1:1/3", connect.clone()).unwrap();
        let sku: Sku = "{sku-1}".parse().unwrap();
        for (i, strategy) in Strategy::ALL.into_iter().enumerate() {
            let buy = BuyOptions {
                strategy,
                qty: 1 + i as u64,
                lock: LockOptions {
                    ttl: Duration::from_millis(1000 + i as u64),
                    wait: Duration::from_millis(10 * i as u64),
                    watchdog: i % 2 == 1,
                },
                limit: (i % 2 == 0).then_some(5),
                queue: i % 2 == 0,
                batch: BatchOptions {
                    window: Duration::from_millis(i as u64),
                    max: 1 + 10 * i,
                },
                require_replicas: i as u32 % 3,
            };
            let child = ChildBuy {
                target: &target,
                sku: &sku,
                buy: &buy,
                work: Duration::from_millis(7 * i as u64),
                order_id: "h1-7",
                user: Some("u3"),
                lock_nodes: None,
            };
            let args = std::iter::once("lockctl".into()).chain(child::args(&child));
            let cli = Cli::try_parse_from(args).expect("the child's arguments parse");
            assert!(cli.json, "the child must answer in JSON");
            assert_eq!(cli.connect_options(), connect);
            let Command::Buy(b) = &cli.command else {
                panic!("not a buy: {:?}", cli.command)
            };
            assert_eq!(b.buy_options(), buy, "{strategy}");
            assert_eq!(b.purchase.work(), child.work, "{strategy}");
            assert_eq!(b.sku, sku);
            assert_eq!(b.order_id.as_deref(), Some("h1-7"));
            assert_eq!(b.user.as_deref(), buy.limit.map(|_| "u3"));
            let text = format!("{:?}", child::args(&child));
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
