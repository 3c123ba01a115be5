//! The one way the hammer drives load: every way of sending requests (lockctl's own buyers on
//! threads, multiplexed, batched or in child processes; HTTP requests at someone's endpoint)
//! is a [`Driver`], which runs the requests of the options and hands back what each was told,
//! folded into a [`Tally`], with whatever the driver itself measured. The measuring and the
//! verdict ([`crate::evidence`]) never know which driver ran.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::capacity::{batches, multiplexes, waits_as_tasks};
use crate::options::{Driving, HammerOptions};
use crate::tally::Tally;
use crate::{batched, multiplexed, procs, tasks, threads};
use lockctl_core::conn::Target;
use lockctl_core::error::Result;

/// A way of running a hammer's requests, holding the options it runs them with.
pub trait Driver {
    /// Runs every request (their order ids under `run_id`), and returns what each was told.
    fn drive(&self, run_id: &str) -> Result<Driven>;
}

/// What a driver hands back.
pub struct Driven {
    /// What every request was told.
    pub tally: Tally,
    /// Open model (`--rate`): time from sending to the answer.
    pub service: Option<Histogram<u64>>,
    /// Open model: requests sent more than [`crate::report::LATE_AFTER_MS`] after their moment.
    pub late: u64,
    /// Open model: the longest wait past a moment.
    pub max_lag: Duration,
    /// A sale's requests, as many as its buyers took (fewer than the run's bound); `None`:
    /// the run's requests, all of them.
    pub taken: Option<u64>,
}

impl Driven {
    /// A closed model's result: the answers alone.
    pub(crate) fn of(tally: Tally) -> Driven {
        Driven {
            tally,
            service: None,
            late: 0,
            max_lag: Duration::ZERO,
            taken: None,
        }
    }
}

/// lockctl's own buyers, one connection and one thread each.
struct Threads<'a>(&'a Target, &'a HammerOptions);
/// The atomic strategy's buyers: a few threads, each with many purchases in flight.
struct Multiplexed<'a>(&'a Target, &'a HammerOptions);
/// The batch strategy's buyers: one group committer the buyers submit to.
struct Batched<'a>(&'a Target, &'a HammerOptions);
/// Buyers as tokio tasks: `--mode tasks`, and the lock strategies' many buyers under
/// `threads` (a few of them waiting in Redis).
struct Tasks<'a>(&'a Target, &'a HammerOptions);
/// Each purchase a child process, started by the options' `children`.
struct Procs<'a>(&'a Target, &'a HammerOptions);

impl Driver for Threads<'_> {
    fn drive(&self, run_id: &str) -> Result<Driven> {
        threads::run_threads(self.0, self.1, run_id).map(Driven::of)
    }
}

impl Driver for Multiplexed<'_> {
    fn drive(&self, run_id: &str) -> Result<Driven> {
        multiplexed::run_multiplexed(self.0, self.1, run_id).map(Driven::of)
    }
}

impl Driver for Batched<'_> {
    fn drive(&self, run_id: &str) -> Result<Driven> {
        batched::run_batched(self.0, self.1, run_id).map(Driven::of)
    }
}

impl Driver for Tasks<'_> {
    fn drive(&self, run_id: &str) -> Result<Driven> {
        tasks::run_tasks(self.0, self.1, run_id).map(Driven::of)
    }
}

impl Driver for Procs<'_> {
    fn drive(&self, run_id: &str) -> Result<Driven> {
        procs::run_procs(self.0, self.1, run_id).map(Driven::of)
    }
}

/// The driver of lockctl's own buyers that `opts` call for.
pub(crate) fn own_buyers<'a>(target: &'a Target, opts: &'a HammerOptions) -> Box<dyn Driver + 'a> {
    match opts.mode {
        // Simulated work needs a thread per buyer to sleep in.
        Driving::Threads if multiplexes(opts, target) => Box::new(Multiplexed(target, opts)),
        Driving::Threads if batches(opts) => Box::new(Batched(target, opts)),
        Driving::Threads if waits_as_tasks(opts) => Box::new(Tasks(target, opts)),
        Driving::Threads => Box::new(Threads(target, opts)),
        Driving::Tasks => Box::new(Tasks(target, opts)),
        Driving::Procs => Box::new(Procs(target, opts)),
    }
}
