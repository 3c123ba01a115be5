//! lockctl-hammer, the instrument: N purchases, C at a time (lockctl's own buyers, or HTTP
//! requests at someone's endpoint), then proof from Redis that nothing was oversold.
//!
//! It trusts nothing the buyers say on their own. Workers only record what each request was
//! told; afterwards the stock and the ledger are read back from Redis, and [`judge`], a pure
//! function, holds the two accounts against each other: stock consumed, units the buyers were
//! told they bought, and units in the ledger must agree (within what failed requests might have
//! done), per order as well as in total, and the stock must never go below zero. The hammer
//! measures and never prints; the binary's `render` turns its [`Report`] into text or JSON.
//!
//! Layout: [`report`] holds the public report types; `fan_out` what every driver shares, and
//! one file per way of driving load (`threads`, `multiplexed`, `procs`); `readback` reads the
//! results back, and `watch` reads the stock during the run for signs of stock put back;
//! [`judge`] turns samples and the read-back into a verdict. [`http`] puts an
//! external endpoint to the test instead of lockctl's own buyers (`hammer --url`), judged by
//! `judge_http` from the stock alone, since such an endpoint keeps no ledger lockctl can read.

mod batched;
mod capacity;
mod fan_out;
pub mod http;
pub mod judge;
mod judge_http;
mod ledger_check;
mod multiplexed;
mod options;
pub mod pipeline;
mod procs;
mod readback;
pub mod report;
mod run;
pub mod tally;
mod threads;
pub mod usage;
mod watch;

pub use capacity::{connections_needed, ensure_descriptors};
pub use fan_out::OUTAGE_LIMIT;
pub use judge::{judge, judge_unreadable};
pub use options::PipelineOptions;
pub use options::{HammerOptions, Mode, TIMELINE_POINTS};
pub use procs::{ChildBuy, child_deadline};
pub use readback::{READ_BACK_PATIENCE, Readback};
pub use report::PipelineReport;
pub use report::{
    Bucket, Ended, HttpFacts, LATE_AFTER_MS, LoadModel, Percentiles, Report, RunFacts, Sample,
    Subject, Verdict, overall_verdict,
};
pub use run::run;
