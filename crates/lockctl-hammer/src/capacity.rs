//! What a run needs of this machine and of Redis before it starts: open files, connections,
//! and which driver a strategy goes through.

use crate::error::{Error, Result};
use crate::options::{Driving, HammerOptions, LoadOptions};
use lockctl_core::aio::{DEFAULT_CONNECTIONS, DEFAULT_ROOM};

/// The blocking threads of `--mode tasks`'s runtime, at most (tokio's own default): what the
/// purchases that are blocking calls (`naive`) run on, each with a connection.
pub(crate) const TASKS_BLOCKING_THREADS: usize = 512;
use lockctl_core::conn::Target;
use lockctl_core::stock::Strategy;

/// Open files a run holds besides its connections: standard streams, the runtime's epoll and
/// wake-up descriptors, the read-back's and the exporter's connections, with room to spare.
const OWN_FILES: u64 = 32;

/// Makes sure this process may open the files a run of `opts` holds at once (its connections;
/// a child process's pipes): raises the soft `ulimit -n` as far as the hard limit when it has
/// to, and refuses the run, before anything is written, when even that is too few. Otherwise
/// the connections past the limit would fail one by one (EMFILE), and an HTTP endpoint would
/// look down.
pub fn ensure_descriptors(opts: &HammerOptions, target: &Target) -> Result<()> {
    let c = opts.load.in_flight();
    // Files per buyer, and all the run's buyers hold at once.
    let (per_buyer, held) = match opts.mode {
        // Starting a child holds its three pipes at both ends and the pipe that reports a
        // failed exec, while other children start beside it; each then keeps three.
        Driving::Procs => (8, 8 * c),
        // Lockctl's own buyers: a connection each, and one per watchdog.
        Driving::Threads | Driving::Tasks => {
            let conns = connections_needed(opts, target);
            ((conns.saturating_sub(4) / c).max(1), conns)
        }
    };
    // The orders pipeline's workers: each its PostgreSQL client (a socket and the runtime
    // the client runs on) and its Redis connection; and the queue's sampler.
    let held = held
        + opts
            .pipeline
            .as_ref()
            .map_or(0, |p| 6 * p.workers.max(1) + 2);
    ensure_files(c, per_buyer, held)
}

/// [`ensure_descriptors`] for a run against someone's endpoint: a connection to it each.
pub fn ensure_endpoint_descriptors(load: &LoadOptions) -> Result<()> {
    let c = load.in_flight();
    ensure_files(c, 1, c)
}

/// Raises the file limit to what `held` files (`per_buyer` for each of `c` buyers) and the
/// hammer's own need, or refuses the run saying what fits.
fn ensure_files(c: u64, per_buyer: u64, held: u64) -> Result<()> {
    let needed = held + OWN_FILES;
    let limit = match raise_file_limit(needed) {
        Some(limit) => limit,
        // Not known (getrlimit failed): the run goes on, and says so if a connect fails.
        None => return Ok(()),
    };
    if needed <= limit {
        return Ok(());
    }
    // What fits: the files not held per buyer (the hammer's own connections) come first.
    let shared = held.saturating_sub(per_buyer * c);
    let fits = limit.saturating_sub(OWN_FILES + shared) / per_buyer;
    Err(Error::TooFewDescriptors {
        concurrency: c,
        needed,
        limit,
        fits,
    })
}

/// The soft limit on open files, raised to the hard limit when it is below `wanted` (all the
/// way: a run's estimate is not an exact count); `None` when it cannot be read.
fn raise_file_limit(wanted: u64) -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    // `None` is RLIM_INFINITY.
    let lim = getrlimit(Resource::Nofile);
    let (current, maximum) = (
        lim.current.unwrap_or(u64::MAX),
        lim.maximum.unwrap_or(u64::MAX),
    );
    if current >= wanted {
        return Some(current);
    }
    // The hard limit, or (where the kernel caps it lower, fs.nr_open) what the run wants.
    for soft in [maximum, wanted.min(maximum)] {
        let raised = Rlimit {
            current: (soft != u64::MAX).then_some(soft),
            maximum: lim.maximum,
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            return Some(soft);
        }
    }
    Some(current)
}

/// The connections a run opens to the data node at once, at most: one per buyer (a
/// multiplexed or threaded buyer holds one; a child process holds its own, its watchdog's
/// and its expiry poker's), one per watchdog, and a few of the hammer's own.
pub fn connections_needed(opts: &HammerOptions, target: &Target) -> u64 {
    let c = opts.load.concurrency.min(opts.load.requests.max(1));
    let watchdogs = if opts.buy.lock.watchdog { c } else { 0 };
    let own = 4;
    match opts.mode {
        Driving::Procs => c * 2 + watchdogs + own,
        Driving::Threads if multiplexes(opts, target) => c + own,
        // The batcher's committers, whatever the number of buyers.
        Driving::Threads if batches(opts) => 2 + own,
        // The waiting room's places, each a connection (and a watchdog's).
        Driving::Threads if waits_as_tasks(opts) => {
            let places = DEFAULT_ROOM as u64;
            places + watchdogs.min(places) + own
        }
        Driving::Threads => c + watchdogs + own,
        Driving::Tasks => match opts.buy.strategy {
            // The native transport's multiplexed connections, and the blocking pool's for
            // what one command cannot finish (a bucketed SKU's borrowing, say).
            Strategy::Atomic if opts.work.is_zero() && !target.is_cluster() => {
                DEFAULT_CONNECTIONS as u64 + 2 + own
            }
            // The group committers (or, under atomic with work, the pipelining ones).
            Strategy::Atomic | Strategy::Batch => 2 + own,
            Strategy::Lock | Strategy::Fenced => {
                let places = (DEFAULT_ROOM as u64).min(c);
                places + watchdogs.min(places) + own
            }
            // A blocking call each, on the runtime's blocking pool.
            Strategy::Naive => c.min(TASKS_BLOCKING_THREADS as u64) + own,
        },
    }
}

/// Refuses, before anything is written, a run that needs more connections than the server
/// accepts (`maxclients` less those in use): past it Redis turns buyers away at connect time,
/// and the run would measure the server's limit instead of the lock. Skipped where the
/// server does not say (CONFIG not allowed, a cluster).
pub(crate) fn check_capacity(
    conn: &mut lockctl_core::conn::Conn,
    target: &Target,
    opts: &HammerOptions,
) -> Result<()> {
    if target.is_cluster() {
        return Ok(());
    }
    let max: Option<Vec<String>> = conn
        .query(redis::cmd("CONFIG").arg("GET").arg("maxclients"))
        .ok();
    let Some(maxclients) = max.and_then(|v| v.get(1).and_then(|n| n.parse::<u64>().ok())) else {
        return Ok(());
    };
    let in_use = conn
        .info("clients")
        .ok()
        .and_then(|info| info.get::<u64>("connected_clients"))
        .unwrap_or(1);
    let needed = connections_needed(opts, target);
    if needed + in_use.saturating_sub(1) <= maxclients {
        return Ok(());
    }
    let spare = maxclients.saturating_sub(in_use.saturating_sub(1));
    let per_buyer = needed.saturating_sub(4) / opts.load.concurrency.max(1);
    let fits = spare.saturating_sub(4) / per_buyer.max(1);
    Err(Error::TooManyClients {
        addr: target.addr().to_string(),
        needed,
        maxclients,
        in_use,
        fits,
    })
}

/// Whether the batch strategy's driver (one batcher, buyers that are not threads) runs this
/// load.
pub(crate) fn batches(opts: &HammerOptions) -> bool {
    opts.mode == Driving::Threads && opts.buy.strategy == Strategy::Batch
}

/// Whether the lock strategies' task driver runs this load: more buyers than the waiting
/// room ([`DEFAULT_ROOM`]) has places; up to that, a thread each.
pub(crate) fn waits_as_tasks(opts: &HammerOptions) -> bool {
    opts.mode == Driving::Threads
        && matches!(opts.buy.strategy, Strategy::Lock | Strategy::Fenced)
        && opts.load.in_flight() > DEFAULT_ROOM as u64
}

/// Whether the atomic strategy's multiplexed driver runs this load.
pub(crate) fn multiplexes(opts: &HammerOptions, target: &Target) -> bool {
    opts.mode == Driving::Threads
        && opts.buy.strategy == Strategy::Atomic
        && opts.work.is_zero()
        && !target.is_cluster()
}
