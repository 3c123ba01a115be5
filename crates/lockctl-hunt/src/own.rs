//! lockctl's own strategies under the same nemesis (`hunt --strategy`): each strategy against
//! each fault, in rounds on fresh SKUs, judged by the hammer's own judgement; a strategy x
//! fault matrix of verdicts.
//!
//! The rounds come from the same seeded schedule as an endpoint hunt. `pause-holder` stops one
//! of the buyer processes (the rounds it is in run each purchase as a child `lockctl buy`) for
//! longer than a lease, as a holder stalled past it; the others run lockctl's buyers as threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rand::SeedableRng;

use super::nemesis::{FaultKind, Nemesis};
use super::plan::{PlannedFault, Planner};
use crate::error::HuntError;
use lockctl_core::conn::Target;
use lockctl_core::stock::Strategy;
use lockctl_hammer::error::{Error, Result};
use lockctl_hammer::report::{Report, Verdict};
use lockctl_hammer::{Driving, HammerOptions, Hook};

/// What the matrix is told. No `Default`: it runs against a target and within a budget the
/// caller gives.
pub struct OwnOptions {
    /// The strategies, one row each.
    pub strategies: Vec<Strategy>,
    /// The purchase (lease, wait, work, watchdog), the child command, the quorum: everything
    /// but the load and the strategy, which each round sets.
    pub base: HammerOptions,
    /// The faults, one column each (a column without faults comes first).
    pub faults: Vec<FaultKind>,
    /// How long the whole matrix runs, shared evenly between the cells (a cell runs on past
    /// its share until a round is judged, at most five rounds).
    pub budget: Duration,
    /// The seed of the cells' schedules (each cell mixes in its place): the same seed replays
    /// the same rounds.
    pub seed: u64,
    /// The most requests in flight a round uses.
    pub concurrency: u64,
    /// What does the faults to lockctl's own buyers and undoes them.
    pub nemesis: Nemesis,
    /// Once set, no new round starts and the round under way starts no new request.
    pub stop: Option<Arc<AtomicBool>>,
    /// The rounds' SKUs start with this.
    pub sku: String,
}

/// One strategy under one fault (or none).
pub struct Cell {
    /// The cell's strategy (its row).
    pub strategy: Strategy,
    /// The cell's fault (its column); `None`: the column without faults.
    pub fault: Option<FaultKind>,
    /// Rounds run, those a fault kept from being judged included.
    pub rounds: u64,
    /// FAIL when a round failed; PASS when a round passed and none failed; UNKNOWN when no
    /// round was judged.
    pub verdict: Verdict,
    /// The first violation seen, with its round's SKU.
    pub violation: Option<String>,
    /// The first round a fault kept from being judged, and why.
    pub unjudged: Option<String>,
}

/// The matrix.
pub struct Matrix {
    /// The seed of the schedules (`--seed` replays it).
    pub seed: u64,
    /// Every cell, strategy by strategy, each strategy's column without faults first.
    pub cells: Vec<Cell>,
    /// How long the matrix took.
    pub elapsed: Duration,
    /// Whether a signal stopped the matrix before every cell had run its share.
    pub interrupted: bool,
}

impl Matrix {
    /// FAIL when any cell failed, PASS when every cell passed, UNKNOWN otherwise.
    pub fn verdict(&self) -> Verdict {
        if self.cells.iter().any(|c| c.verdict == Verdict::Fail) {
            Verdict::Fail
        } else if self.cells.iter().all(|c| c.verdict == Verdict::Pass) {
            Verdict::Pass
        } else {
            Verdict::Unknown
        }
    }
}

/// Runs every strategy against every fault, the budget shared evenly between the cells.
/// A cell stops at its first FAIL; every fault is undone before this returns.
pub fn run_matrix(target: &Target, opts: &OwnOptions) -> Result<Matrix, HuntError> {
    let started = Instant::now();
    let columns: Vec<Option<FaultKind>> = std::iter::once(None)
        .chain(opts.faults.iter().copied().map(Some))
        .collect();
    let cells = (opts.strategies.len() * columns.len()).max(1) as u32;
    let share = opts.budget / cells;
    let tag = hex::encode(rand::random::<[u8; 3]>());
    let mut matrix = Matrix {
        seed: opts.seed,
        cells: Vec::new(),
        elapsed: Duration::ZERO,
        interrupted: false,
    };
    for (s, &strategy) in opts.strategies.iter().enumerate() {
        for (f, &fault) in columns.iter().enumerate() {
            let at = Place {
                strategy,
                fault,
                number: (s, f),
                tag: &tag,
            };
            let cell = run_cell(target, opts, &at, share, &mut matrix.interrupted)?;
            matrix.cells.push(cell);
        }
    }
    matrix.elapsed = started.elapsed();
    Ok(matrix)
}

fn cell_number(s: usize, f: usize, round: u64) -> String {
    format!("{s}{f}r{round}")
}

/// Which cell: its strategy, fault and place in the matrix, and the hunt's tag.
struct Place<'a> {
    strategy: Strategy,
    fault: Option<FaultKind>,
    number: (usize, usize),
    tag: &'a str,
}

/// One cell's rounds: its share of the budget, and past it until a round is judged (at most
/// five); its first FAIL ends it.
fn run_cell(
    target: &Target,
    opts: &OwnOptions,
    at: &Place<'_>,
    share: Duration,
    interrupted: &mut bool,
) -> Result<Cell, HuntError> {
    let (strategy, fault, (s, f)) = (at.strategy, at.fault, at.number);
    let mut cell = Cell {
        strategy,
        fault,
        rounds: 0,
        verdict: Verdict::Unknown,
        violation: None,
        unjudged: None,
    };
    // Each cell its own schedule from the seed: a cell replays the same whatever the others
    // did.
    let faults: Vec<FaultKind> = fault.into_iter().collect();
    let seed = opts.seed ^ ((s as u64) << 32 | f as u64);
    let mut planner = Planner::new(seed, opts.concurrency, None, &faults);
    let cell_start = Instant::now();
    let stopped = || opts.stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst));
    while (cell.verdict == Verdict::Unknown && cell.rounds < 5) || cell_start.elapsed() < share {
        if stopped() {
            *interrupted = true;
            break;
        }
        let plan = planner.next_round();
        let sku = format!(
            "{}-{}-{}-{}",
            opts.sku,
            at.tag,
            strategy.name(),
            cell_number(s, f, plan.number)
        );
        opts.nemesis.begin_round();
        let report = own_round(target, opts, strategy, fault, &sku, &plan, &mut planner);
        if let Some(failed) = opts.nemesis.heal(Duration::ZERO).failed {
            return Err(HuntError::Restart(failed));
        }
        cell.rounds += 1;
        let report = match report {
            Ok(r) => r,
            // A fault may break the run's own calls (its seed, its read-back): the round is
            // not judged. Without a fault the error is the run's, and it stands.
            Err(e) if fault.is_some() => {
                cell.unjudged.get_or_insert_with(|| format!("{sku}: {e}"));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match report.verdict {
            Verdict::Fail => {
                cell.verdict = Verdict::Fail;
                cell.violation = Some(format!(
                    "{sku}: {}",
                    report.violations.first().cloned().unwrap_or_default()
                ));
                break;
            }
            Verdict::Pass => cell.verdict = Verdict::Pass,
            Verdict::Unknown => {}
        }
    }
    Ok(cell)
}

/// One round of `strategy` with `fault` (every round of a fault's column strikes it).
fn own_round(
    target: &Target,
    opts: &OwnOptions,
    strategy: Strategy,
    fault: Option<FaultKind>,
    sku: &str,
    plan: &super::plan::Round,
    planner: &mut Planner,
) -> Result<Report> {
    let mut run = opts.base.clone();
    run.buy.strategy = strategy;
    run.mode = match fault {
        Some(FaultKind::PauseHolder) => Driving::Procs,
        _ => Driving::Threads,
    };
    run.load.sku = sku
        .parse()
        .map_err(|e| Error::internal(format!("the round's SKU '{sku}': {e}")))?;
    run.load.requests = plan.requests;
    run.load.concurrency = plan.shape.concurrency();
    run.load.stock = Some(plan.stock);
    run.load.stop = opts.stop.clone();
    let done = Arc::new(AtomicBool::new(false));
    let (nemesis, heal_done) = (opts.nemesis.clone(), done.clone());
    run.load.before_read_back = Some(Hook(Arc::new(move || {
        heal_done.store(true, Ordering::SeqCst);
        nemesis.heal(Duration::ZERO);
    })));
    // Held longer than the lease, so that a stopped holder outlives it.
    let hold = run.buy.lock.ttl + Duration::from_millis(200);
    let strikes: Vec<PlannedFault> = fault
        .map(|kind| PlannedFault {
            kind,
            after: Duration::from_millis(5),
            hold,
        })
        .into_iter()
        .collect();
    let nemesis = opts.nemesis.clone();
    let mut rng = rand::rngs::StdRng::seed_from_u64(rand::RngExt::random(planner.rng()));
    let start = Instant::now();
    let striker = thread::spawn(move || {
        for f in strikes {
            while start.elapsed() < f.after && !done.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(1));
            }
            if done.load(Ordering::SeqCst) {
                return;
            }
            nemesis.strike(f.kind, f.hold, start.elapsed(), &mut rng);
            let until = Instant::now() + f.hold;
            while Instant::now() < until && !done.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            nemesis.lift(f.kind, start.elapsed());
        }
    });
    let report = lockctl_hammer::run(target, &run);
    let _ = striker.join();
    report
}
