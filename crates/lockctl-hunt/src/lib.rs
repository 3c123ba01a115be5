//! `lockctl hunt`: told the facts of someone's flash sale (its answers, where its stock and
//! orders live, its promises), search for the run that breaks it, within a budget.
//!
//! Rounds follow one another on fresh SKUs (so one round's books never mix with another's),
//! each with a small stock, a load shape and perhaps a fault, drawn from one seeded schedule
//! ([`plan`]). A round is an endpoint run ([`lockctl_hammer::http::run`]) with the faults done while it
//! runs ([`nemesis`]) and undone before its books are read; its verdict is the one judgement of
//! its history, with the promises checked beyond the books ([`checks`]) and the liveness
//! probe's finding added. The first FAIL ends the hunt.
//!
//! Layout: `plan` (the schedule), `liveness` (the stock at rest, the probe after a heal), `nemesis` (faults and their undoing), `serve` (the system's
//! processes), `sql` (stock and orders in PostgreSQL or MySQL), `checks` (per-user limit, order
//! rows), `own` (lockctl's own strategies under the same nemesis: the matrix), `clean` (what the
//! hunt created in the user's stores, removed at the end).

#![deny(missing_docs)]

pub mod checks;
pub mod clean;
pub mod error;
mod findings;
pub mod leases;
mod liveness;
pub mod nemesis;
pub mod own;
pub mod owners;
pub mod plan;
pub mod proxy;
mod round;
pub mod serve;
pub mod sql;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use error::HuntError;
use error::SqlError;
use lockctl_core::conn::Target;
use lockctl_core::sku::Sku;
use lockctl_hammer::Error;
use lockctl_hammer::error::StoreError;
use lockctl_hammer::history::{Fault, History};
use lockctl_hammer::http::ids::{IdFormat, Ids};
use lockctl_hammer::http::{HttpOptions, StockStore};
use lockctl_hammer::report::{Report, Verdict};
use nemesis::{FaultKind, Nemesis};
use plan::{Planner, Round};
use round::{Ran, RoundEnd, RoundSkus, round};
use sql::{SkuParam, SqlDb};

/// Where the system's orders land, and the query that reads a SKU's.
#[derive(Clone)]
pub struct OrdersSql {
    /// The database the orders are in (`--orders-sql`).
    pub db: Arc<SqlDb>,
    /// The query for a SKU's orders (`--orders-query`): the SKU its one parameter, rows of
    /// (order id, units[, user]).
    pub query: String,
}

/// The stock kept in SQL: the query that reads it and the statement that sets it.
pub struct SqlStock {
    /// The database the stock is in (`--stock-sql`).
    pub db: Arc<SqlDb>,
    /// The query that reads a SKU's stock (`--stock-query`): the SKU its one parameter, one
    /// row of one integer.
    pub query: String,
    /// The statement that sets a SKU's stock (`--stock-seed`): the SKU and the count its two
    /// parameters.
    pub seed: String,
    /// What the SKUs are, for binding them.
    pub format: IdFormat,
}

impl SqlStock {
    fn param<'a>(&self, sku: &'a Sku) -> SkuParam<'a> {
        SkuParam {
            text: sku.as_str(),
            format: self.format,
        }
    }

    /// The SKU's stock, which must be a count lockctl can do sums with.
    pub fn stock(&self, sku: &Sku) -> std::result::Result<i64, SqlError> {
        let n = self.db.integer(&self.query, self.param(sku))?;
        let bound = lockctl_core::stock::MAX_STOCK;
        match n.unsigned_abs() <= bound {
            true => Ok(n),
            false => Err(SqlError::NotAStock { n, bound }),
        }
    }
}

impl StockStore for SqlStock {
    fn set(&self, sku: &Sku, n: u64) -> std::result::Result<(), StoreError> {
        Ok(self.db.execute(&self.seed, self.param(sku), n as i64)?)
    }

    fn read(&self, sku: &Sku) -> std::result::Result<i64, StoreError> {
        Ok(self.stock(sku)?)
    }

    fn shown(&self) -> String {
        format!("{} ({})", self.db.shown(), self.query)
    }

    fn observer(&self) -> Option<Box<dyn StockStore>> {
        let db = self.db.another().ok()?;
        Some(Box::new(SqlStock {
            db: Arc::new(db),
            query: self.query.clone(),
            seed: self.seed.clone(),
            format: self.format,
        }))
    }
}

/// What the hunt is told. No `Default`: every hunt is of a system the caller names (its URL
/// or its own buyers, and its facts); each field says its default where it has one.
pub struct HuntOptions {
    /// The request, its answers, and where its stock is (`store`, or a Redis key).
    pub http: HttpOptions,
    /// The rounds' SKUs start with this (text SKUs).
    pub sku: String,
    /// What the rounds' SKUs are: text (`<sku>-<tag>-<round>`), integers or UUIDs, each a
    /// SKU no earlier round or hunt used.
    pub sku_format: IdFormat,
    /// The most requests in flight a round uses.
    pub concurrency: u64,
    /// The system's users (`u0`, `u1`, ...); `None`: every request a user of its own, and no
    /// round a double click.
    pub users: Option<u64>,
    /// The system's per-user limit, in units, checked when it has `users`; `None`: no limit.
    pub limit: Option<u64>,
    /// The system promises one deduction per order id: some requests are resent with the
    /// same `{order}`.
    pub idempotent: bool,
    /// Where the system's orders land, held against the answers; `None`: not checked.
    pub orders: Option<OrdersSql>,
    /// How long to hunt: no round starts once it is spent.
    pub budget: Duration,
    /// The seed of the schedule of rounds: the same seed replays the same rounds.
    pub seed: u64,
    /// The faults the rounds draw from; empty: no faults.
    pub faults: Vec<FaultKind>,
    /// After the faults are undone, with stock left, a sale must come within this.
    pub heal: Duration,
    /// Every fault held between these two (`--fault-ms`); `None`: 0.3 to 1.5 s, and some
    /// past the longest lease seen and common client timeouts ([`long_holds`]).
    pub fault_ms: Option<(Duration, Duration)>,
    /// Whether the leases the system takes are learned from the hunt's Redis ([`leases`]:
    /// `SCAN` and `PTTL` only); only when that Redis is the system's.
    pub leases: bool,
    /// The stock, requests or rate every round has, when the caller fixed them.
    pub fixed: plan::Fixed,
    /// What does the faults and undoes them.
    pub nemesis: Nemesis,
    /// Once set, no new round starts and the round under way starts no new request.
    pub stop: Option<Arc<AtomicBool>>,
    /// The rounds' SKUs, each added as its round starts, whatever the hunt comes to: what the
    /// hunt creates in the system's stores is under these ([`clean`]).
    pub skus: Arc<Mutex<Vec<Sku>>>,
    /// Told of every round as it ends (a live display); `None`: nobody watches.
    pub on_round: Option<OnRound>,
}

/// One round as it ended, with the hunt so far: what a live display shows.
#[derive(Clone, Debug)]
pub struct RoundSeen {
    /// The round's number, from 1.
    pub number: u64,
    /// Its load shape (`burst`, `rate`, `double-click`).
    pub shape: &'static str,
    /// Its requests.
    pub requests: u64,
    /// Its faults: each one's name and whether it took effect.
    pub faults: Vec<(String, bool)>,
    /// Its verdict; `Unknown` for a round that could not be judged.
    pub verdict: Verdict,
    /// Rounds judged so far, this one included.
    pub judged: u64,
    /// How long the hunt has run.
    pub elapsed: Duration,
    /// The hunt's budget.
    pub budget: Duration,
}

/// What is told of each round as it ends ([`HuntOptions::on_round`]).
pub type OnRound = Arc<dyn Fn(&RoundSeen) + Send + Sync>;

/// The first round that broke a promise.
pub struct Failure {
    /// The round as planned: its stock, load shape and faults.
    pub round: Round,
    /// The round's SKU.
    pub sku: String,
    /// The round's report.
    pub report: Report,
    /// The round's history, when one was kept.
    pub history: Option<Box<History>>,
    /// The faults done during the round, each with when it was undone.
    pub faults: Vec<Fault>,
}

/// When a fault of the failing round struck, against the requests its violations rest on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Came {
    /// Before the last of those requests was answered: it may have played a part.
    Before,
    /// After every one of them was answered (a fault of the heal, or of a round whose
    /// purchases were all done): it did not touch those requests, whatever it did after.
    After,
}

impl Failure {
    /// When `fault` struck against the requests the violations rest on
    /// ([`lockctl_hammer::history::blamed`]), or every request of the round when they name
    /// none; `None` without a history.
    pub fn came(&self, fault: &Fault) -> Option<Came> {
        let h = self.history.as_ref()?;
        let named: std::collections::HashSet<u64> =
            lockctl_hammer::history::blamed(h, &self.report)
                .iter()
                .map(|b| b.index)
                .collect();
        let last = h
            .samples
            .iter()
            .filter(|s| named.is_empty() || named.contains(&s.index))
            .map(|s| s.at)
            .max()?;
        Some(match fault.start > last {
            true => Came::After,
            false => Came::Before,
        })
    }
}

/// How many of the rounds that could not be judged are listed with their reason (all are
/// counted, [`HuntReport::unjudged`]).
pub const UNJUDGED_SHOWN: usize = 5;

/// What the hunt did and found.
pub struct HuntReport {
    /// FAIL when a round failed; PASS when a round was judged and none failed; UNKNOWN when
    /// no round was judged.
    pub verdict: Verdict,
    /// The seed of the schedule (`--seed` replays it).
    pub seed: u64,
    /// Rounds run, those a fault kept from being judged included.
    pub rounds: u64,
    /// Rounds whose books could be judged.
    pub judged: u64,
    /// Requests made in the rounds that came to a report.
    pub requests: u64,
    /// The rounds that came to a report, by load shape ([`plan::Shape::name`]).
    pub shapes: BTreeMap<&'static str, u64>,
    /// The faults that took effect, by kind.
    pub faults: BTreeMap<String, u64>,
    /// The faults tried, by kind (some find nothing to act on: no connection to kill).
    pub faults_tried: BTreeMap<String, u64>,
    /// How long the hunt took.
    pub elapsed: Duration,
    /// Whether a signal stopped the hunt before its budget was spent.
    pub interrupted: bool,
    /// The round that failed, which ended the hunt; `None` when none did.
    pub failure: Option<Box<Failure>>,
    /// The last round judged (its history is written when nothing failed).
    pub last: Option<Box<(Report, Option<Box<History>>)>>,
    /// Why the first rounds that could not be judged could not (at most [`UNJUDGED_SHOWN`]).
    pub unknown: Vec<String>,
    /// Every round that could not be judged, those [`HuntReport::unknown`] lists included.
    pub unjudged: u64,
    /// What the hunt created in the system's stores and removed at the end (`None`: kept, or
    /// not looked for).
    pub cleaned: Option<clean::Cleaned>,
    /// The longest lease the system was seen to take ([`leases`]); `None`: none seen, or not
    /// looked for.
    pub lease: Option<leases::Lease>,
    /// The longest a fault was held.
    pub longest_fault: Duration,
    /// The rounds whose order rows were read and held against the answers and the stock;
    /// `None` when the facts name no order rows.
    pub orders_checked: Option<u64>,
}

/// Client timeouts common in the wild (phpredis and redis-py defaults, HTTP clients): a
/// pause just past one turns a slow answer into an error the system must handle.
pub const COMMON_TIMEOUTS: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(5)];

/// How long a fault is held to outlast `d` (a lease, a timeout): a tenth more, at least
/// 300 ms more.
fn past(d: Duration) -> Duration {
    d + (d / 10).max(Duration::from_millis(300))
}

/// The long holds for the next round: just past the longest lease seen and past each common
/// client timeout, those that fit in what is left of the budget. Not bounded by the heal:
/// liveness is counted from when the faults are lifted, and a lease longer than the heal is
/// exactly the one a shorter fault never outlasts (a 20 s lease was found only by chance at
/// 169 s of 180 while holds were kept under a 10 s heal).
pub fn long_holds(lease: Option<&leases::Lease>, left: Duration) -> Vec<Duration> {
    let room = left.saturating_sub(Duration::from_secs(2));
    lease
        .map(|l| Duration::from_millis(l.ttl_ms))
        .into_iter()
        .chain(COMMON_TIMEOUTS)
        .map(past)
        .filter(|d| *d > plan::SHORT_HOLD_MAX && *d <= room)
        .collect()
}

/// Hunts until a round fails, the budget is spent, or `stop` is set. Every fault is undone
/// before this returns, whatever happens.
pub fn run(target: &Target, opts: &HuntOptions) -> Result<HuntReport, HuntError> {
    let started = Instant::now();
    let mut planner = Planner::new(opts.seed, opts.concurrency, opts.users, &opts.faults);
    if opts.idempotent {
        planner = planner.with_retries();
    }
    planner = planner
        .with_fixed(opts.fixed)
        .with_fault_ms(opts.fault_ms)
        .with_most_units(most_units(opts));
    let tag = RoundSkus {
        tag: hex::encode(rand::random::<[u8; 3]>()),
        ids: Ids::new(opts.sku_format, ""),
        answered: AtomicBool::new(false),
    };
    let mut hunt = HuntReport::new(opts.seed);
    let stopped = || opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst));
    while started.elapsed() < opts.budget {
        if stopped() {
            hunt.interrupted = true;
            break;
        }
        let left = opts.budget.saturating_sub(started.elapsed());
        planner.with_long_holds(long_holds(hunt.lease.as_ref(), left));
        let plan = planner.next_round();
        opts.nemesis.begin_round();
        let outcome = round(target, opts, &tag, &plan, &mut planner, hunt.lease.as_ref());
        // Whatever the round came to, nothing stays broken; a system that cannot be brought
        // back ends the hunt (its rounds could no longer be told from its failures).
        if let Some(failed) = opts.nemesis.heal(Duration::ZERO).failed {
            return Err(HuntError::Restart(failed));
        }
        let Ran {
            report,
            history,
            faults,
            sku,
            lease,
        } = match outcome {
            Ok(ran) => ran,
            Err(RoundEnd::CannotGoOn(failed)) => return Err(HuntError::Restart(failed)),
            // A fault may break the run's own calls (the stock set before it, say): the round is
            // not judged. Without a fault the error is the facts', and it stands.
            // A login that fails before any fault took effect is the facts' (a bad password,
            // the wrong token pattern); after one, in this round or an earlier, it is the
            // system's (its pooled connection was the one killed), and the hunt goes on.
            Err(RoundEnd::Failed(e)) if after_fault(opts, &plan, &e) => {
                hunt.rounds += 1;
                hunt.unjudged += 1;
                if hunt.unknown.len() < UNJUDGED_SHOWN {
                    hunt.unknown.push(format!("round {}: {e}", plan.number));
                }
                tell(opts, &plan, 0, &[], Verdict::Unknown, &hunt, started);
                continue;
            }
            Err(RoundEnd::Failed(e)) => return Err(e.into()),
        };
        if let Some(l) = lease
            && hunt.lease.as_ref().is_none_or(|h| l.ttl_ms > h.ttl_ms)
        {
            // A lease longer than any seen: the next rounds hold a fault past it.
            planner.owe_long_hold(past(Duration::from_millis(l.ttl_ms)));
            hunt.lease = Some(l);
        }
        let (requests, verdict) = (report.run.requests, report.verdict);
        if opts.orders.is_some() {
            // A round judged had its rows read (rows that could not be read leave it
            // unjudged).
            *hunt.orders_checked.get_or_insert(0) += u64::from(verdict != Verdict::Unknown);
        }
        let seen = (plan.clone(), faults.clone());
        let failed = hunt.add(plan, report, history, faults, sku);
        tell(opts, &seen.0, requests, &seen.1, verdict, &hunt, started);
        if failed {
            break;
        }
    }
    if hunt.verdict != Verdict::Fail && hunt.judged > 0 {
        hunt.verdict = Verdict::Pass;
    }
    hunt.elapsed = started.elapsed();
    Ok(hunt)
}

/// Whether a round's error is a fault's doing: any error of a round with a fault, a login's
/// only once a fault of the hunt took effect.
fn after_fault(opts: &HuntOptions, plan: &Round, e: &Error) -> bool {
    match e {
        Error::Login { .. } => opts.nemesis.last_fault().is_some(),
        _ => !plan.faults.is_empty(),
    }
}

/// The most units the system's users may buy in a round, when it has both users and a
/// per-user limit: users x limit / qty.
fn most_units(opts: &HuntOptions) -> Option<u64> {
    let (users, limit) = opts.users.zip(opts.limit)?;
    Some(users.saturating_mul(limit) / opts.http.qty.max(1))
}

/// Tells the watcher, if any, of a round that ended.
fn tell(
    opts: &HuntOptions,
    plan: &Round,
    requests: u64,
    faults: &[Fault],
    verdict: Verdict,
    hunt: &HuntReport,
    started: Instant,
) {
    let Some(on_round) = &opts.on_round else {
        return;
    };
    on_round(&RoundSeen {
        number: plan.number,
        shape: plan.shape.name(),
        requests,
        faults: faults.iter().map(|f| (f.fault.clone(), f.took)).collect(),
        verdict,
        judged: hunt.judged,
        elapsed: started.elapsed(),
        budget: opts.budget,
    });
}

impl HuntReport {
    /// A hunt of `seed` before its first round: nothing run, nothing found.
    pub fn new(seed: u64) -> HuntReport {
        HuntReport {
            verdict: Verdict::Unknown,
            seed,
            rounds: 0,
            judged: 0,
            requests: 0,
            shapes: BTreeMap::new(),
            faults: BTreeMap::new(),
            faults_tried: BTreeMap::new(),
            elapsed: Duration::ZERO,
            interrupted: false,
            failure: None,
            last: None,
            unknown: Vec::new(),
            unjudged: 0,
            cleaned: None,
            lease: None,
            longest_fault: Duration::ZERO,
            orders_checked: None,
        }
    }

    /// Counts a judged round in; whether it ends the hunt (it failed).
    fn add(
        &mut self,
        plan: Round,
        report: Report,
        history: Option<Box<History>>,
        faults: Vec<Fault>,
        sku: String,
    ) -> bool {
        self.rounds += 1;
        self.requests += report.run.requests;
        *self.shapes.entry(plan.shape.name()).or_default() += 1;
        for f in &faults {
            let held = f.stop.map_or(Duration::ZERO, |s| s.saturating_sub(f.start));
            self.longest_fault = self.longest_fault.max(held);
            *self.faults_tried.entry(f.fault.clone()).or_default() += 1;
            if f.took {
                *self.faults.entry(f.fault.clone()).or_default() += 1;
            }
        }
        match report.verdict {
            Verdict::Fail => {
                self.judged += 1;
                self.verdict = Verdict::Fail;
                self.failure = Some(Box::new(Failure {
                    round: plan,
                    sku,
                    report,
                    history,
                    faults,
                }));
                return true;
            }
            Verdict::Pass => {
                self.judged += 1;
                self.last = Some(Box::new((report, history)));
            }
            Verdict::Unknown => {
                self.unjudged += 1;
                if self.unknown.len() < UNJUDGED_SHOWN {
                    let why = report.unknown_because.clone().unwrap_or_default();
                    // The first error, unless the reason quotes it already.
                    let first = report
                        .first_error
                        .clone()
                        .filter(|f| !why.contains(f.as_str()))
                        .map_or(String::new(), |f| format!(" ({f})"));
                    self.unknown
                        .push(format!("round {}: {why}{first}", plan.number));
                }
                if self.last.is_none() {
                    self.last = Some(Box::new((report, history)));
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockctl_core::stock::Strategy;
    use lockctl_hammer::Mode;
    use lockctl_hammer::report::RunFacts;

    /// Past the lease seen and each common timeout, as far as the budget allows: a lease
    /// longer than the heal is held past all the same (a 20 s lease with the default 10 s
    /// heal was held past only by chance).
    #[test]
    fn long_holds_outlast_the_lease_and_common_timeouts_within_the_budget() {
        let lease = |ttl_ms| leases::Lease {
            key: "lock:x".into(),
            ttl_ms,
        };
        let s = Duration::from_millis;
        assert_eq!(
            long_holds(Some(&lease(2500)), s(60_000)),
            vec![s(2800), s(2300), s(5500)]
        );
        assert_eq!(
            long_holds(Some(&lease(20_000)), s(60_000)),
            vec![s(22_000), s(2300), s(5500)]
        );
        assert_eq!(
            long_holds(Some(&lease(20_000)), s(10_000)),
            vec![s(2300), s(5500)]
        );
        assert_eq!(long_holds(None, s(4500)), vec![s(2300)]);
        assert!(long_holds(None, s(3000)).is_empty());
    }

    /// Twelve rounds that could not be judged: the first few are listed with their reason,
    /// and all twelve are counted.
    #[test]
    fn every_unjudged_round_is_counted_beyond_those_listed() {
        let facts = RunFacts {
            sku: "hunt-1".into(),
            run_id: "hTEST".into(),
            requests: 4,
            concurrency: 2,
            strategy: Strategy::Lock.into(),
            mode: Mode::Threads,
            qty: 1,
            ttl_ms: 5000,
            wait_ms: 5000,
            work_ms: 0,
            watchdog: false,
            redlock_nodes: None,
            seeded: true,
            retry_every: None,
            initial_stock: 2,
            elapsed: Duration::from_millis(10),
            client_cpu: None,
        };
        let mut planner = Planner::new(7, 16, None, &[]);
        let mut hunt = HuntReport::new(7);
        for _ in 0..12 {
            let report = lockctl_hammer::judge::judge_unreadable(
                &facts,
                &[],
                &lockctl_core::Error::internal("down"),
            );
            let failed = hunt.add(planner.next_round(), report, None, Vec::new(), "s".into());
            assert!(!failed);
        }
        assert_eq!(hunt.unknown.len(), UNJUDGED_SHOWN);
        assert_eq!(hunt.unjudged, 12);
        assert_eq!(hunt.rounds, 12);
    }
}
