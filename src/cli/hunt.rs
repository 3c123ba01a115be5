//! `lockctl hunt`'s arguments: the facts of someone's flash sale (its answers, where its stock
//! and orders live, its promises) and the search's budget and faults.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::args::{HttpArgs, PresetArg, StrategyArg};
use super::parse::whole;

/// `lockctl hunt`.
#[derive(Debug, Args)]
pub struct HuntArgs {
    /// The endpoint: one purchase per request. Placeholders {sku} (each round its own),
    /// {user}, {order} (a fresh order id per request) and {n} (the request's index).
    #[arg(
        long,
        value_name = "URL",
        required_unless_present_any = ["preset", "strategy"],
        help_heading = "The system",
        help = super::args::placeholders_help(
            "The endpoint: one purchase per request.",
            " (each round its own)",
        )
    )]
    pub url: Option<String>,

    /// The answers of a known endpoint: tutorial (run_demo.php's words).
    #[arg(long, value_enum, help_heading = "The answers")]
    pub preset: Option<PresetArg>,

    /// HTTP method.
    #[arg(long, default_value = "GET", help_heading = "The system")]
    pub method: String,

    /// A request header, 'Name: value' (repeat for several).
    #[arg(
        long = "header",
        value_name = "'NAME: VALUE'",
        help_heading = "The system"
    )]
    pub headers: Vec<String>,

    /// The request body.
    #[arg(long, value_name = "TEXT", help_heading = "The system")]
    pub body: Option<String>,

    /// Each user logs in once before its first purchase: 'METHOD URL [BODY]', placeholders as
    /// in --url (not {token}), the --header values without {token} sent along; not timed, not
    /// judged. A login that fails (no 2xx, no token) is a usage error naming its answer.
    #[arg(long, value_name = "'METHOD URL [BODY]'", help_heading = "The system")]
    pub login: Option<String>,

    /// Where a login's answer holds the token: json:/POINTER or a regex with one group
    /// [default: the first of json:/token, json:/access_token, json:/data/token,
    /// json:/data/access_token that holds one].
    #[arg(
        long,
        value_name = "PATTERN",
        requires = "login",
        help_heading = "The system"
    )]
    pub token: Option<String>,

    /// The users and their tokens, for services whose tokens come from elsewhere: one user a
    /// line, 'USER<TAB>TOKEN' or a JSON object with "user" and "token"; the hunt's users are
    /// then these users.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "login",
        help_heading = "The system"
    )]
    pub users_file: Option<PathBuf>,

    /// An answer that sold the request's units (tried first). A regex over the body,
    /// status:CODE[,CODE...], or json:/POINTER=VALUE (RFC 6901 pointer into a JSON body; VALUE
    /// compared as JSON, else as text: json:/code=0, json:/msg="sold out"); repeat it and every
    /// form must hold.
    #[arg(long, value_name = "FORM", help_heading = "The answers")]
    pub bought_if: Vec<String>,

    /// An answer that says the stock ran out (tried second); forms as --bought-if.
    #[arg(long, value_name = "FORM", help_heading = "The answers")]
    pub sold_out_if: Vec<String>,

    /// An answer that turned the buyer away, try again (tried third); forms as --bought-if.
    #[arg(long, value_name = "FORM", help_heading = "The answers")]
    pub busy_if: Vec<String>,

    /// An answer that says a rule refused the purchase (one per user, say): nothing sold,
    /// nothing owed, not under-selling (tried fourth); forms as --bought-if.
    #[arg(long, value_name = "FORM", help_heading = "The answers")]
    pub refused_if: Vec<String>,

    /// An answer that says the purchase failed: it must not have deducted; stock or an order
    /// row behind it is a finding, "told it failed, but sold" (tried fifth); forms as
    /// --bought-if.
    #[arg(long, value_name = "FORM", help_heading = "The answers")]
    pub failed_if: Vec<String>,

    /// The order id the service made, taken from each bought answer: json:/POINTER or a regex
    /// with one group. The orders check matches rows by it instead of {order}; with neither,
    /// it counts rows (per user, when the query returns a user and the request names one)
    /// against the bought answers.
    #[arg(long, value_name = "PATTERN", help_heading = "The answers")]
    pub order_from: Option<String>,

    /// What {sku} is: text (<sku>-<tag>-<round>), int (a number no earlier round or hunt
    /// used) or uuid (a fresh v4 UUID); SQL parameters are bound with the type.
    #[arg(long, value_enum, default_value = "text", help_heading = "The system")]
    pub sku_format: IdFormatArg,

    /// What {user} is: text (u0, u1, ...), int or uuid (each hunt's own).
    #[arg(long, value_enum, default_value = "text", help_heading = "The system")]
    pub user_format: IdFormatArg,

    /// The Redis key of the stock the system deducts, {sku} standing for the round's SKU
    /// [default: item:stock:{sku}].
    #[arg(
        long,
        value_name = "KEY",
        conflicts_with = "stock_sql",
        help_heading = "The stores"
    )]
    pub stock_key: Option<String>,

    /// The stock is in this database instead: postgres://... or mysql://... (MySQL, MariaDB).
    #[arg(long, value_name = "URL", requires_all = ["stock_query", "stock_seed"], help_heading = "The stores")]
    pub stock_sql: Option<String>,

    /// Reads the stock: one integer, the SKU its one parameter ($1 for PostgreSQL, ? for MySQL).
    #[arg(
        long,
        value_name = "SQL",
        requires = "stock_sql",
        help_heading = "The stores"
    )]
    pub stock_query: Option<String>,

    /// Sets the stock: the SKU and the count its two parameters.
    #[arg(
        long,
        value_name = "SQL",
        requires = "stock_sql",
        help_heading = "The stores"
    )]
    pub stock_seed: Option<String>,

    /// Deletes a stock row the hunt created (its probe's and its rounds' SKUs, nothing else) at
    /// the end: the SKU its one parameter [default: derived from a --stock-query of the form
    /// SELECT ... FROM table WHERE column = $1].
    #[arg(
        long,
        value_name = "SQL",
        requires = "stock_sql",
        help_heading = "The stores"
    )]
    pub stock_clean: Option<String>,

    /// The orders land in this database: postgres://... or mysql://...
    #[arg(
        long,
        value_name = "URL",
        requires = "orders_query",
        help_heading = "The stores"
    )]
    pub orders_sql: Option<String>,

    /// Reads a SKU's orders: rows of order_id, qty and optionally user; the SKU its one parameter.
    #[arg(
        long,
        value_name = "SQL",
        requires = "orders_sql",
        help_heading = "The stores"
    )]
    pub orders_query: Option<String>,

    /// Units each "bought" answer stands for.
    #[arg(long, default_value_t = 1, value_parser = whole(1, 1_000_000), allow_negative_numbers = true, help_heading = "The system")]
    pub qty: u64,

    /// The system's users (u0, u1, ...), for {user} and --limit; also enables double clicks.
    #[arg(long, value_parser = whole(1, 1_000_000), allow_negative_numbers = true, help_heading = "The system")]
    pub users: Option<u64>,

    /// The system promises one deduction per {order}: the hunt resends some requests with the
    /// same order id, as a client retries after a timeout.
    #[arg(long, help_heading = "The system")]
    pub idempotent: bool,

    /// The system promises no user more than this many units; the users are --users or
    /// those of --users-file (one of them is needed). Each round's stock is then at most what
    /// they may buy (users x limit / --qty).
    #[arg(long, value_parser = whole(1, 1_000_000), allow_negative_numbers = true, help_heading = "The system")]
    pub limit: Option<u64>,

    /// Start the system under test with this shell command (stopped at the end, with everything
    /// it started); its processes become targets of pause-worker and kill-worker.
    #[arg(long, value_name = "CMD", help_heading = "The system")]
    pub serve: Option<String>,

    /// The system is ready when an HTTP GET of this URL is answered 2xx: awaited after every
    /// start and restart of --serve's system, instead of the --url's port accepting a
    /// connection (a proxy in front of a service that is still starting answers 502).
    #[arg(
        long,
        value_name = "URL",
        requires = "serve",
        help_heading = "The system"
    )]
    pub ready: Option<String>,

    /// Limit on each HTTP request, connecting and the whole answer included, in ms: a slower
    /// request counts as timed out (it may have bought). Apart from --timeout-ms (Redis's);
    /// long enough for a service's own lock wait (commonly 10 s).
    #[arg(long, value_name = "MS", default_value_t = super::args::DEFAULT_REQUEST_TIMEOUT_MS, value_parser = whole(1, 3_600_000), allow_negative_numbers = true, help_heading = "The system")]
    pub request_timeout_ms: u64,

    /// Run a fault-injecting TCP proxy on this address in front of --redis, for the stall
    /// fault; configure the system to reach its Redis here (e.g. 127.0.0.1:7001).
    #[arg(
        long,
        value_name = "LISTEN",
        help_heading = "The search and its faults"
    )]
    pub proxy: Option<String>,

    /// Every round's stock, instead of one drawn from 2 to 12.
    #[arg(long, value_parser = whole(1, lockctl_core::stock::MAX_STOCK), allow_negative_numbers = true, help_heading = "The search and its faults")]
    pub stock: Option<u64>,

    /// Every round's requests, instead of two to five times its stock.
    #[arg(short = 'n', long = "requests", value_parser = whole(1, 100_000_000), allow_negative_numbers = true, help_heading = "The search and its faults")]
    pub requests: Option<u64>,

    /// Every round an open model at this many requests a second, instead of drawn shapes.
    #[arg(long, value_name = "R", value_parser = super::args::rate, help_heading = "The search and its faults")]
    pub rate: Option<f64>,

    /// How long to search: 60s, 2m, 90s.
    #[arg(long, default_value = "60s", value_parser = budget, help_heading = "The search and its faults")]
    pub budget: Duration,

    /// Replay the same schedule of rounds, shapes and faults [default: a random seed, printed].
    #[arg(long, help_heading = "The search and its faults")]
    pub seed: Option<u64>,

    /// Faults, comma-separated: client-kill, redis-pause (need a Redis named by --redis or
    /// REDIS_URL, never the default 6379), stall (needs --proxy), pause-worker, kill-worker
    /// (need --serve), db-lock (a second session holds the round's stock row; needs
    /// --stock-sql), db-kill (the system's sessions on the database ended; needs --stock-sql or
    /// --orders-sql), pause-holder (lockctl's own strategies); auto (every fault the facts
    /// allow) or none.
    #[arg(
        long,
        default_value = "auto",
        value_name = "LIST|auto|none",
        help_heading = "The search and its faults"
    )]
    pub nemesis: String,

    /// How long pauses and stalls are held, in ms: MIN..MAX (e.g. 2000..6000) [default: 300 ms
    /// to 1.5 s, and some past the longest lease seen on --redis and common client timeouts
    /// (2 s, 5 s), within the budget and --heal-ms].
    #[arg(long, value_name = "MIN..MAX", value_parser = fault_ms, help_heading = "The search and its faults")]
    pub fault_ms: Option<(u64, u64)>,

    /// After the faults are undone, with stock left, a sale must come within this many ms.
    #[arg(long, default_value_t = 10_000, value_parser = whole(1, 3_600_000), allow_negative_numbers = true, help_heading = "The search and its faults")]
    pub heal_ms: u64,

    /// Keep what the hunt created in the system's stores (its SKUs' stock rows and Redis keys)
    /// instead of removing it at the end.
    #[arg(long, help_heading = "The stores")]
    pub keep: bool,

    /// The most requests a round has in flight.
    #[arg(short = 'c', long = "concurrency", default_value_t = 16, value_parser = whole(2, 1000), allow_negative_numbers = true, help_heading = "The search and its faults")]
    pub concurrency: u64,

    /// The rounds' SKUs start with this.
    #[arg(
        long,
        default_value = "hunt",
        help_heading = "The search and its faults"
    )]
    pub sku: lockctl_core::sku::Sku,

    /// Hunt lockctl's own strategies instead of an endpoint (comma-separated: lock, fenced,
    /// atomic, batch, naive): each under each fault, a strategy x fault matrix.
    #[arg(long, value_enum, value_delimiter = ',', conflicts_with_all = ["url", "preset", "serve", "stock_sql", "orders_sql", "idempotent", "proxy"], help_heading = "lockctl's own strategies")]
    pub strategy: Vec<StrategyArg>,

    /// The lock's lease in ms, for --strategy.
    #[arg(long, default_value_t = 5000, value_parser = whole(1, 86_400_000), allow_negative_numbers = true, help_heading = "lockctl's own strategies")]
    pub ttl_ms: u64,

    /// How long a buyer waits for a held lock, in ms, for --strategy.
    #[arg(long, default_value_t = 5000, value_parser = whole(0, 86_400_000), allow_negative_numbers = true, help_heading = "lockctl's own strategies")]
    pub wait_ms: u64,

    /// Business time inside the critical section, in ms, for --strategy.
    #[arg(long, default_value_t = 0, value_parser = whole(0, 3_600_000), allow_negative_numbers = true, help_heading = "lockctl's own strategies")]
    pub work_ms: u64,

    /// Renew the lease while a buyer holds the lock, for --strategy.
    #[arg(long, help_heading = "lockctl's own strategies")]
    pub watchdog: bool,

    /// Write the failing round's timeline (or the last round's) as a self-contained HTML page
    /// to FILE: each lane's requests, the faults, the stock, the requests a violation names.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub export_html: Option<PathBuf>,

    /// Write the failing round's history (or the last round's) as JSON Lines to FILE.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub history: Option<PathBuf>,

    /// Write the verdict as JUnit XML to FILE, for CI systems: one test case for the hunt, a
    /// FAIL its failure (the violations), UNKNOWN its error.
    #[arg(long, value_name = "FILE", help_heading = "Output")]
    pub junit: Option<PathBuf>,

    /// Read the facts from this TOML file: keys are the long flag names without their dashes
    /// (stock-query = "...", header = ["A: b"], idempotent = true); flags on the command line
    /// win. `lockctl hunt init` prints a commented template.
    #[arg(long, value_name = "FILE", help_heading = "The system")]
    pub facts: Option<PathBuf>,

    #[command(subcommand)]
    pub action: Option<HuntAction>,
}

/// `lockctl hunt init`.
#[derive(Debug, Subcommand)]
pub enum HuntAction {
    /// Print a commented template of a facts file (every hunt flag, with an example) to
    /// stdout: lockctl hunt init > hunt.toml
    Init,
}

impl HuntArgs {
    /// The HTTP flags as `hammer --url` takes them.
    pub fn http_args(&self) -> HttpArgs {
        HttpArgs {
            url: self.url.clone(),
            preset: self.preset,
            method: self.method.clone(),
            headers: self.headers.clone(),
            body: self.body.clone(),
            bought_if: self.bought_if.clone(),
            sold_out_if: self.sold_out_if.clone(),
            busy_if: self.busy_if.clone(),
            refused_if: self.refused_if.clone(),
            failed_if: self.failed_if.clone(),
            login: self.login.clone(),
            token: self.token.clone(),
            users_file: self.users_file.clone(),
            stock_key: None,
            rate: None,
            request_timeout_ms: self.request_timeout_ms,
        }
    }
}

/// `--sku-format`, `--user-format`: what an identity is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IdFormatArg {
    /// Text, as lockctl names things.
    Text,
    /// A whole number.
    Int,
    /// A v4 UUID.
    Uuid,
}

impl From<IdFormatArg> for lockctl_hammer::http::ids::IdFormat {
    fn from(f: IdFormatArg) -> Self {
        use lockctl_hammer::http::ids::IdFormat;
        match f {
            IdFormatArg::Text => IdFormat::Text,
            IdFormatArg::Int => IdFormat::Int,
            IdFormatArg::Uuid => IdFormat::Uuid,
        }
    }
}

/// `--budget`: a duration of at least one second.
/// `--fault-ms MIN..MAX`: two whole numbers of ms, the first at most the second.
pub(crate) fn fault_ms(s: &str) -> Result<(u64, u64), String> {
    let bad = || {
        format!(
            "'{}' is not a range of fault lengths: give MIN..MAX in ms, from 1 to 3600000, MIN at most MAX (e.g. 2000..6000)",
            s.escape_debug()
        )
    };
    let (lo, hi) = s.split_once("..").ok_or_else(bad)?;
    let ms = |v: &str| {
        v.trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=3_600_000).contains(n))
    };
    match (ms(lo), ms(hi)) {
        (Some(lo), Some(hi)) if lo <= hi => Ok((lo, hi)),
        _ => Err(bad()),
    }
}

fn budget(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d >= Duration::from_secs(1) && d <= Duration::from_secs(7 * 24 * 3600) => Ok(d),
        _ => Err(format!(
            "'{s}' is not a budget: give a duration from 1s to 7d (e.g. 60s, 2m, 1h)"
        )),
    }
}
