//! lockctl-hammer, the instrument: N purchases, C at a time (lockctl's own buyers, or HTTP
//! requests at someone's endpoint), then proof from Redis that nothing was oversold.
//!
//! It trusts nothing the buyers say on their own. A [`drive::Driver`] runs the requests and
//! only records what each was told; afterwards the books are read back from Redis (and, with
//! the orders pipeline, PostgreSQL), everything the run observed is gathered into one
//! [`evidence::Evidence`], and [`evidence::conclude`], a pure function, turns it into the
//! [`Report`] and its verdict: stock consumed, units the buyers were told they bought, and
//! units in the ledger must agree (within what failed requests might have done), per order as
//! well as in total, and the stock must never go below zero. The hammer measures and never
//! prints; the binary's `render` turns a report into text or JSON.
//!
//! Layout, one line a module:
//! - `options`, [`report`]: what a run is told; what it records and concludes.
//! - `run`: one run of lockctl's own buyers; [`http`]: one run against someone's endpoint.
//! - [`drive`]: the `Driver` trait; `fan_out` what lockctl's drivers share, and `threads`,
//!   `multiplexed`, `batched`, `procs` one way each.
//! - [`tally`]: the answers folded as they come.
//! - `readback`, `ledger_check`, `watch`: the books read back, the ledger against the answers,
//!   the stock watched during the run.
//! - [`history`]: every request as Jepsen's operations, written as JSON Lines and judged
//!   again from them.
//! - [`evidence`]: everything observed, and the one judgement; `judge`, `judge_http`: the
//!   checks it applies to lockctl's buyers and to an endpoint (which keeps no ledger).
//! - [`pipeline`]: the orders path into PostgreSQL (`--queue --db`).
//! - `capacity`: open files and connections a run needs; [`usage`]: the hammer's own cost.
//! - [`redis_server`]: a `redis-server` of one's own (the private server of `--redis auto`,
//!   and the one lockctl's tests start), proven to be the child that was started.
//! - [`error`]: what stops a run, typed; the program that runs the hammer words it.

#![deny(missing_docs)]

mod batched;
mod capacity;
pub mod drive;
pub mod error;
pub mod evidence;
mod fan_out;
pub mod history;
pub mod http;
pub mod judge;
mod judge_http;
mod ledger_check;
mod multiplexed;
mod options;
pub mod pipeline;
mod procs;
mod readback;
pub mod redis_server;
pub mod report;
mod run;
pub mod tally;
mod tasks;
mod threads;
pub mod usage;
mod watch;

pub use capacity::{connections_needed, ensure_descriptors};
pub use error::{Error, Result};
pub use fan_out::OUTAGE_LIMIT;
pub use judge::{judge, judge_unreadable};
pub use ledger_check::LedgerCheck;
pub use options::PipelineOptions;
pub use options::original_of;
pub use options::{ChildBuy, Children};
pub use options::{Driving, HAMMER_WAIT, HammerOptions, Hook, LoadOptions, Mode, TIMELINE_POINTS};
pub use procs::child_deadline;
pub use readback::{READ_BACK_PATIENCE, Readback, Restart};
pub use report::PipelineReport;
pub use report::{
    Bucket, Ended, HttpFacts, LATE_AFTER_MS, LoadModel, Percentiles, Report, RunFacts, Sample,
    Subject, Verdict, overall_verdict,
};
pub use run::{run, run_recorded};
