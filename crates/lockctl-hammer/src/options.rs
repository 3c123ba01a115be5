//! What a run is told: how many purchases, how many at once, how each is made, and by which
//! driver.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use lockctl_core::conn::Target;
use lockctl_core::redlock::Quorum;
use lockctl_core::sku::Sku;
use lockctl_core::stock::{BuyOptions, Strategy};

/// How the purchases run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Worker threads in this process, one connection each.
    Threads,
    /// A tokio task per buyer, on the native async core (`lockctl_core::aio`).
    Tasks,
    /// Each purchase is a child `lockctl buy` process, like the tutorial's "several terminals".
    Procs,
    /// Each purchase is an HTTP request to someone's endpoint (`hammer --url`).
    Http,
}

/// How lockctl's own buyers run (the report's [`Mode`] adds `http` for someone's endpoint,
/// which is driven by [`crate::http::run`] and never by these options).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Driving {
    /// Worker threads in this process, one connection each.
    #[default]
    Threads,
    /// A tokio task per buyer (`--mode tasks`): under `atomic` each purchase a request on a
    /// few multiplexed connections, pipelined, with no thread per buyer; the other strategies
    /// through `lockctl_core::aio`'s async buyers.
    Tasks,
    /// Each purchase is a child process (`lockctl buy`), like the tutorial's "several terminals".
    Procs,
}

impl Driving {
    /// The driver a run gets when none is asked for: the fastest measured for its purchases.
    /// `atomic` on a single server without simulated work runs as tasks (every purchase a
    /// request pipelined on a few multiplexed connections); everything else as threads.
    /// Measured side by side here (release build, a private Redis, 50,000 purchases, two
    /// rounds each): atomic at c=10, threads 56,476 and 57,812 purchases/s against tasks
    /// 67,030 and 61,740; at c=50, threads 61,485 and 61,129 against tasks 94,924 and 96,004.
    /// The others were not faster on tasks at c=10 (10,000 purchases): lock 9,164/9,506 on
    /// threads against 8,926/7,660, fenced 10,686/10,364 against 9,968/9,825, batch
    /// 91,500/98,193 against 49,855/53,883, naive 23,254/21,873 against 19,691/19,731.
    pub fn fastest_for(strategy: Strategy, work: Duration, target: &Target) -> Driving {
        if strategy == Strategy::Atomic && work.is_zero() && !target.is_cluster() {
            Driving::Tasks
        } else {
            Driving::Threads
        }
    }
}

impl From<Driving> for Mode {
    fn from(d: Driving) -> Mode {
        match d {
            Driving::Threads => Mode::Threads,
            Driving::Tasks => Mode::Tasks,
            Driving::Procs => Mode::Procs,
        }
    }
}

/// The load, whatever receives it: how many requests, how many at once, on which SKU and
/// stock, and the run's controls.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Default: `sku_886`.
    pub sku: Sku,
    /// Requests in all. Default: 100.
    pub requests: u64,
    /// Requests in flight at once. Default: 10.
    pub concurrency: u64,
    /// Seed the stock to this first; `None` uses the stock already in Redis. Default: `None`.
    pub stock: Option<u64>,
    /// With `stock`: seed it over this many buckets (`--buckets K`, see
    /// [`lockctl_core::stock::buckets`]). Default: `None`, one stock key.
    pub buckets: Option<usize>,
    /// Spread requests over this many simulated users (`u0`, `u1`, ...). Default: none.
    pub users: Option<u64>,
    /// The first user's number (`u<users_from>`, ...), for requests that must come from users
    /// nobody used before (the hunt's liveness probe). Default: 0.
    pub users_from: u64,
    /// Counts finished requests as they finish, for a progress display. Default: none.
    pub progress: Option<Arc<AtomicU64>>,
    /// Once set, no new request starts; those in flight finish. Default: none.
    pub stop: Option<Arc<AtomicBool>>,
    /// Every k-th request retries the one before it: the same order id and user, as a client
    /// resends after a timeout (the hunt's `--idempotent`). Default: none.
    pub retries: Option<u64>,
    /// Keep every request's record, for the run's history ([`crate::history`]). Default: off
    /// (the answers are only folded into counts and histograms).
    pub history: bool,
    /// Called once every request has ended, before the books are read back: what must be
    /// quiet or undone first (the hunt heals its faults here). Default: none.
    pub before_read_back: Option<Hook>,
}

/// A function a run calls at a fixed point, shared.
#[derive(Clone)]
pub struct Hook(pub Arc<dyn Fn() + Send + Sync>);

impl Hook {
    /// Calls the function.
    pub fn call(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hook")
    }
}

impl LoadOptions {
    /// The request whose order id and user request `i` carries: the one before it when `i` is
    /// a retry ([`LoadOptions::retries`]), else itself.
    pub fn original_of(&self, i: u64) -> u64 {
        original_of(self.retries, i)
    }

    /// Requests in flight at once: the concurrency, at least one and at most the requests.
    pub fn in_flight(&self) -> u64 {
        self.concurrency.clamp(1, self.requests.max(1))
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            sku: "sku_886".parse().expect("a valid SKU"),
            requests: 100,
            concurrency: 10,
            stock: None,
            buckets: None,
            users: None,
            users_from: 0,
            progress: None,
            stop: None,
            retries: None,
            history: false,
            before_read_back: None,
        }
    }
}

/// A run of lockctl's own buyers: the load, and how each purchase is made and driven.
#[derive(Clone, Debug)]
pub struct HammerOptions {
    /// The load: how many requests, how many at once, on which SKU and stock.
    pub load: LoadOptions,
    /// Default: [`Driving::Threads`].
    pub mode: Driving,
    /// How each purchase is made. Default: [`BuyOptions::default`], but waiting up to
    /// [`HAMMER_WAIT`] for a held lock (a hammer that tried once would turn most of its buyers
    /// away busy, and its stock would not sell out).
    pub buy: BuyOptions,
    /// Simulated business time in each purchase: the buyer sleeps this long once it has found
    /// enough stock, before it deducts (under the lock for `lock` and `fenced`, between the
    /// read and the write for `naive`, before the script for `atomic` and `batch`). A lease
    /// shorter than this runs out mid-purchase: the tutorial's homework. Default: zero.
    pub work: Duration,
    /// How each child purchase is started, for [`Driving::Procs`] (the binary starts `lockctl
    /// buy --json`). Default: none, and a child-process run is refused.
    pub children: Option<Children>,
    /// Take the lock by Redlock quorum on these masters. Default: none (the data node's lock).
    pub quorum: Option<Arc<Quorum>>,
    /// Workers beside the buyers persisting the orders into PostgreSQL (`--queue --db`), and
    /// the whole path checked. Default: none.
    pub pipeline: Option<PipelineOptions>,
}

/// How long a hammer's buyer waits for a held lock by default.
pub const HAMMER_WAIT: Duration = Duration::from_secs(5);

impl Default for HammerOptions {
    fn default() -> Self {
        let mut buy = BuyOptions::default();
        buy.lock.wait = HAMMER_WAIT;
        HammerOptions {
            load: LoadOptions::default(),
            mode: Driving::default(),
            buy,
            work: Duration::ZERO,
            children: None,
            quorum: None,
            pipeline: None,
        }
    }
}

/// The most points a report's stock timeline keeps.
pub const TIMELINE_POINTS: usize = 400;

/// What to run beside the buyers. No `Default`: the pipeline writes into a database that must
/// be named; [`PipelineOptions::new`] gives the defaults for the rest.
#[derive(Clone, Debug)]
pub struct PipelineOptions {
    /// The PostgreSQL URL (`--db`).
    pub db_url: String,
    /// Workers beside the buyers. Default: 1.
    pub workers: u64,
    /// How long the queue may make no progress after the buyers finish before the hammer stops
    /// waiting for it. Default: 30 s.
    pub patience: Duration,
    /// Where the workers' events go (failures waited out, dead letters). Default: nowhere.
    pub events: lockctl_core::orders::events::Listener,
}

impl PipelineOptions {
    /// Workers persisting into the PostgreSQL at `db_url`, with the defaults for the rest (one
    /// worker, 30 s of patience, events heard by nobody).
    pub fn new(db_url: impl Into<String>) -> PipelineOptions {
        PipelineOptions {
            db_url: db_url.into(),
            workers: 1,
            patience: Duration::from_secs(30),
            events: lockctl_core::orders::events::Listener::default(),
        }
    }
}

/// One child purchase: everything its command line carries.
#[derive(Clone, Copy, Debug)]
pub struct ChildBuy<'a> {
    /// The Redis to buy from.
    pub target: &'a Target,
    /// The SKU to buy.
    pub sku: &'a Sku,
    /// How to buy: the strategy, the units, the lock.
    pub buy: &'a BuyOptions,
    /// The simulated business time inside the purchase ([`HammerOptions::work`]).
    pub work: Duration,
    /// The order id (`<run id>-<index>`).
    pub order_id: &'a str,
    /// The buyer's user (`u<k>`); `None` when the load has no users.
    pub user: Option<&'a str>,
    /// The Redlock masters' URLs (with their passwords), for the child's environment.
    pub lock_nodes: Option<&'a str>,
}

/// How each child purchase is started: the caller writes its command (the binary: `lockctl buy
/// --json ...`, with the URLs in the environment). The child must print one [`lockctl_core::wire::BuyReply`] on
/// stdout. Cloning shares it.
#[derive(Clone)]
pub struct Children(Arc<dyn Fn(&ChildBuy<'_>) -> Command + Send + Sync>);

impl Children {
    /// Starts each child purchase with the command `command` writes for it.
    pub fn new(command: impl Fn(&ChildBuy<'_>) -> Command + Send + Sync + 'static) -> Children {
        Children(Arc::new(command))
    }

    /// The command that starts `child`.
    pub fn command(&self, child: &ChildBuy<'_>) -> Command {
        (self.0)(child)
    }
}

impl std::fmt::Debug for Children {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Children")
    }
}

/// The request whose order id and user request `i` carries when every `every`-th request
/// retries the one before it.
pub fn original_of(every: Option<u64>, i: u64) -> u64 {
    match every {
        Some(k) if k >= 2 && i % k == k - 1 => i - 1,
        _ => i,
    }
}
