//! A run's history: every request as an operation in Jepsen's shape, the faults done to the
//! system meanwhile, and what was read back, so that the one judgement
//! ([`crate::evidence::conclude`]) can be made again from the history alone, offline, and
//! other checkers can read it.
//!
//! A history is JSON Lines (`jsonl`): a first line with the run's facts and the stock before,
//! one line per operation (`invoke` when a request was sent; `ok`, `fail` or `info` when it
//! ended), faults as operations of `process: "nemesis"`, and a last line with what was read
//! back (the stock after, the ledger's rows). `process` is a lane: a request never shares its
//! lane with another in flight, as Jepsen's processes never do. The stock lockctl read while
//! the run went (each change it saw) is kept as reads of `process: "observer"` (`f:
//! "read-stock"`): drawn on the timeline, never part of the judgement.

mod blame;
mod jsonl;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::evidence::{Books, Evidence, conclude};
use crate::ledger_check::LedgerCheck;
use crate::readback::Restart;
use crate::report::{HttpFacts, PipelineReport, Report, RunFacts, Sample};
use crate::tally::Tally;
use lockctl_core::error::Error;

pub use blame::{Blamed, blamed};
pub use jsonl::{HistoryError, lanes, read, write};

/// One fault done to the system during a run (by the hunt's nemesis), healed by `stop`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// Its name (`client-kill`, `redis-pause`, `kill-worker`, ...).
    pub fault: String,
    /// When it was done, from the start of the run.
    #[serde(skip)]
    pub start: Duration,
    /// When it was undone (`None`: a fault with nothing to undo, a kill).
    #[serde(skip)]
    pub stop: Option<Duration>,
    /// What was done, in words (which process, for how long).
    pub detail: String,
    /// Whether it took effect (a fault the server refused, or with nothing to act on, did not).
    #[serde(default = "yes")]
    pub took: bool,
}

fn yes() -> bool {
    true
}

/// One read of the stock while the run went, by lockctl's own observer (a connection of its
/// own): when it was sent and answered, from the start of the run, and what it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StockRead {
    /// When the read was sent.
    pub sent: Duration,
    /// When it was answered.
    pub at: Duration,
    /// The stock it found.
    pub stock: i64,
}

/// The hunt a round's history came from: what replays it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HuntOrigin {
    /// The hunt's seed.
    pub seed: u64,
    /// The round's number in the hunt (`None`: not known, the last round judged).
    #[serde(default)]
    pub round: Option<u64>,
    /// The command that replays the hunt, as its report printed it (secrets as variables).
    pub replay: String,
    /// The variables the command reads, each with what it must hold.
    #[serde(default)]
    pub set_first: Vec<(String, String)>,
}

/// What was read back after the run, as the judgement needs it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadBack {
    /// The stock after the run; `None` when it was not read (`error` says why, or nothing was
    /// judged).
    pub stock_after: Option<i64>,
    /// Why the books could not be read.
    pub error: Option<String>,
    /// lockctl's own buyers: this run's ledger entries (request, units).
    pub ledger: Option<Vec<(u64, i64)>>,
}

impl ReadBack {
    /// Books that could not be read, and why.
    fn failed(e: &dyn std::fmt::Display) -> ReadBack {
        ReadBack {
            stock_after: None,
            error: Some(e.to_string()),
            ledger: None,
        }
    }
}

/// The most stock reads a history keeps (a change at every read for over a minute and a half); reads
/// beyond are not kept.
pub const MAX_STOCK_READS: usize = 10_000;

/// A run's report, with its history when the load kept one ([`crate::LoadOptions::history`]).
pub struct Recorded {
    /// The run's report.
    pub report: Report,
    /// The run's history; `None` when the load kept none.
    pub history: Option<Box<History>>,
    /// When the run's clock started (the answers' and the stock reads' times count from
    /// here): a caller timing its own events (faults) on another clock moves them onto this.
    pub started: std::time::Instant,
}

/// Everything a run observed that its verdict rests on, with every request's record.
#[derive(Clone, Debug)]
pub struct History {
    /// What was run.
    pub facts: RunFacts,
    /// Requests were spread over this many users (`u0`, `u1`, ...).
    pub users: Option<u64>,
    /// Every request's record, in the order they came.
    pub samples: Vec<Sample>,
    /// The faults done to the system during the run (by the hunt's nemesis); empty otherwise.
    pub faults: Vec<Fault>,
    /// What was read back after the run.
    pub read_back: ReadBack,
    /// The stock as lockctl read it while the run went: each read that found it changed, in
    /// time order (at most [`MAX_STOCK_READS`]); empty when nothing was read.
    pub stock_reads: Vec<StockRead>,
    /// The hunt this round was part of, when it was one: its seed and replay.
    pub hunt: Option<HuntOrigin>,
    /// Why the stock may have gone up during the run, if anything says so
    /// ([`Evidence::went_up`]).
    pub went_up: Option<String>,
    /// Whether Redis restarted during the run, when asked ([`Evidence::restart`]).
    pub restart: Option<Restart>,
    /// The Redis server's address, for the restart note ([`Evidence::server`]).
    pub server: String,
    /// `Some((made, requested))` when a signal stopped the run short.
    pub interrupted: Option<(u64, u64)>,
    /// Notes of the driver's own ([`Evidence::notes`]).
    pub notes: Vec<String>,
    /// Promises found broken beyond the books ([`Evidence::findings`]).
    pub findings: Vec<String>,
    /// What could not be read, so that no PASS is claimed ([`Evidence::unjudged`]).
    pub unjudged: Option<String>,
    /// The orders pipeline's report and its violations (`--queue --db`).
    pub pipeline: Option<(PipelineReport, Vec<String>)>,
    /// What `hammer --url` adds to the report; `None` for lockctl's own buyers.
    pub http: Option<HttpFacts>,
    /// The peak memory of the process that ran the load, in MB (the judge's own is not the
    /// run's).
    pub client_max_rss_mb: Option<f64>,
}

impl History {
    /// The history of the run `ev` is the evidence of, when its tally kept every record
    /// ([`crate::LoadOptions::history`]); `users` as the load had them.
    pub fn of(ev: &Evidence<'_>, users: Option<u64>) -> Option<History> {
        let samples = ev.tally.kept()?.to_vec();
        let read_back = match &ev.books {
            Books::Ledger(Ok((stock, check))) => ReadBack {
                stock_after: Some(*stock),
                error: None,
                ledger: Some(check.rows().map(<[_]>::to_vec).unwrap_or_default()),
            },
            Books::Stock(Ok(stock)) => ReadBack {
                stock_after: Some(*stock),
                error: None,
                ledger: None,
            },
            Books::Ledger(Err(e)) => ReadBack::failed(e),
            Books::Stock(Err(e)) => ReadBack::failed(e),
            Books::Unjudged => ReadBack {
                stock_after: None,
                error: None,
                ledger: None,
            },
        };
        Some(History {
            facts: ev.facts.clone(),
            users,
            samples,
            faults: Vec::new(),
            read_back,
            stock_reads: Vec::new(),
            hunt: None,
            went_up: ev.went_up.clone(),
            restart: ev.restart.clone(),
            server: ev.server.clone(),
            interrupted: ev.interrupted,
            notes: ev.notes.clone(),
            findings: ev.findings.clone(),
            unjudged: ev.unjudged.clone(),
            pipeline: ev.pipeline.clone(),
            http: None,
            client_max_rss_mb: crate::usage::max_rss_mb().map(|m| (m * 10.0).round() / 10.0),
        })
    }

    /// The verdict again, from this history alone: the same pure judgement a live run makes.
    pub fn judge(&self) -> Report {
        let f = &self.facts;
        let mut tally = Tally::new(f.requests, f.qty).retrying(f.retry_every);
        for s in &self.samples {
            tally.add(s);
        }
        let books = self.books(&tally);
        let mut report = conclude(Evidence {
            facts: f,
            tally: &tally,
            books,
            went_up: self.went_up.clone(),
            pipeline: self.pipeline.clone(),
            restart: self.restart.clone(),
            server: self.server.clone(),
            interrupted: self.interrupted,
            notes: self.notes.clone(),
            findings: self.findings.clone(),
            unjudged: self.unjudged.clone(),
        });
        report.http = self.http.clone();
        report.client_max_rss_mb = self.client_max_rss_mb;
        report
    }

    /// What was read back, as evidence: a ledger is checked against `t` row by row, as the
    /// live read-back does.
    fn books(&self, t: &Tally) -> Books {
        let rb = &self.read_back;
        let failed = || Error::internal(rb.error.clone().unwrap_or_default());
        match (self.facts.mode, rb.stock_after, &rb.ledger) {
            (_, Some(stock), Some(rows)) => {
                let mut check = LedgerCheck::new(t, &self.facts.run_id);
                for &(index, units) in rows {
                    check.entry(t, index, units);
                }
                Books::Ledger(Ok((stock, check)))
            }
            (crate::options::Mode::Http, Some(stock), None) => Books::Stock(Ok(stock)),
            (crate::options::Mode::Http, None, _) if rb.error.is_none() => Books::Unjudged,
            (crate::options::Mode::Http, None, _) => Books::Stock(Err(failed().into())),
            _ => Books::Ledger(Err(failed())),
        }
    }

    /// The user of request `index`, as the load named it: of `users` when they were given;
    /// otherwise an endpoint's request is a user of its own (`{user}` is `u<request>`), and
    /// lockctl's own buyer none.
    pub fn user_of(&self, index: u64) -> Option<String> {
        let base = self.original_of(index);
        match (self.users, self.facts.mode) {
            (Some(k), _) => Some(format!("u{}", base % k.max(1))),
            (None, crate::options::Mode::Http) => Some(format!("u{base}")),
            (None, _) => None,
        }
    }

    /// The order id request `index` carried (a retry, its first request's).
    pub fn order_of(&self, index: u64) -> String {
        format!("{}-{}", self.facts.run_id, self.original_of(index))
    }

    /// The order id to show for request `s`: the one its answer carried when the service
    /// numbers its own orders (`--order-from`), else the one it was sent with.
    pub fn order_shown(&self, s: &Sample) -> String {
        match &s.ended {
            crate::report::Ended::Answered {
                order: Some(order), ..
            } => order.clone(),
            _ => self.order_of(s.index),
        }
    }

    /// The request whose order id request `index` carries (itself, or the one it retried).
    pub fn original_of(&self, index: u64) -> u64 {
        crate::options::original_of(self.facts.retry_every, index)
    }
}
