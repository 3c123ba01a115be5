//! The verdict: what the buyers were told held against what Redis holds. Pure: samples and a
//! read-back in, a [`Report`] out.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::readback::Readback;
use super::{Bucket, Ended, Percentiles, Report, RunFacts, Sample, TIMELINE_POINTS, Verdict};
use crate::error::{Error, ErrorKind};
use crate::stock::Buy;
use crate::units::{round_to, round3};

/// The report of a run whose results could not be read back from Redis: the buyers' side is
/// all there, the verdict is unknown, and nothing is claimed about the stock.
pub fn judge_unreadable(facts: &RunFacts, samples: &[Sample], e: &Error) -> Report {
    let rb = Readback {
        final_stock: facts.initial_stock,
        ledger: HashMap::new(),
    };
    let mut r = judge(facts, samples, &rb);
    r.verdict = Verdict::Unknown;
    r.unknown_because = Some("Redis could not be read back, so nothing is claimed".into());
    r.final_stock = None;
    r.consumed = None;
    r.oversold = 0;
    r.violations.clear();
    r.stock_timeline.pop();
    r.notes.insert(
        0,
        format!(
            "could not read the stock and the ledger back from Redis ({e}): the verdict is unknown"
        ),
    );
    r
}

fn new_histogram() -> Histogram<u64> {
    // Microseconds from 1 µs to one hour at three significant figures.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

fn percentiles(h: &Histogram<u64>) -> Percentiles {
    let ms = |us: f64| round3(us / 1000.0);
    Percentiles {
        p50: ms(h.value_at_quantile(0.50) as f64),
        p90: ms(h.value_at_quantile(0.90) as f64),
        p99: ms(h.value_at_quantile(0.99) as f64),
        p999: ms(h.value_at_quantile(0.999) as f64),
        max: ms(h.max() as f64),
        mean: ms(h.mean()),
    }
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}

/// What the buyers were told, counted: the buyers' side of the books.
struct Tally {
    latency: Histogram<u64>,
    wait: Histogram<u64>,
    hold: Histogram<u64>,
    samples: u64,
    bought: u64,
    replayed: u64,
    sold_out: u64,
    busy: u64,
    lease_lost: u64,
    limit_reached: u64,
    errors: u64,
    indeterminate: u64,
    lease_overrun: u64,
    errors_by_kind: BTreeMap<ErrorKind, u64>,
    first_error: Option<String>,
    /// Request index -> units its buyer was told it bought now (replays excluded).
    told_bought: HashMap<u64, i64>,
    /// Requests whose failure may have deducted anyway.
    maybe_applied: HashSet<u64>,
}

impl Tally {
    fn of(samples: &[Sample], qty: u64) -> Tally {
        let mut t = Tally {
            latency: new_histogram(),
            wait: new_histogram(),
            hold: new_histogram(),
            samples: 0,
            bought: 0,
            replayed: 0,
            sold_out: 0,
            busy: 0,
            lease_lost: 0,
            limit_reached: 0,
            errors: 0,
            indeterminate: 0,
            lease_overrun: 0,
            errors_by_kind: BTreeMap::new(),
            first_error: None,
            told_bought: HashMap::new(),
            maybe_applied: HashSet::new(),
        };
        for s in samples {
            t.add(s, qty);
        }
        t
    }

    fn add(&mut self, s: &Sample, qty: u64) {
        self.samples += 1;
        record(&mut self.latency, s.latency);
        if let Some(w) = s.lock_wait {
            record(&mut self.wait, w);
        }
        if let Some(h) = s.lock_hold {
            record(&mut self.hold, h);
        }
        match &s.ended {
            Ended::Done {
                outcome,
                replayed,
                overran_lease,
            } => match outcome {
                Buy::Bought { .. } => {
                    self.bought += 1;
                    if *replayed {
                        self.replayed += 1;
                    } else {
                        self.told_bought.insert(s.index, qty as i64);
                    }
                    self.lease_overrun += u64::from(*overran_lease);
                }
                Buy::SoldOut { .. } => self.sold_out += 1,
                Buy::Busy => self.busy += 1,
                Buy::LeaseLost => self.lease_lost += 1,
                Buy::LimitReached { .. } => self.limit_reached += 1,
            },
            Ended::Failed {
                kind,
                indeterminate,
                message,
            } => {
                self.errors += 1;
                *self.errors_by_kind.entry(*kind).or_insert(0) += 1;
                if *indeterminate {
                    self.indeterminate += 1;
                    self.maybe_applied.insert(s.index);
                }
                self.first_error.get_or_insert_with(|| message.clone());
            }
        }
    }

    /// Requests that ended as exactly one outcome.
    fn accounted(&self) -> u64 {
        self.bought + self.sold_out + self.busy + self.lease_lost + self.limit_reached + self.errors
    }

    /// Units the buyers were told they bought now.
    fn sold_qty(&self, qty: u64) -> u64 {
        (self.bought - self.replayed) * qty
    }
}

/// The totals that must add up: every request answered once, stock never negative, nothing
/// sold beyond the stock, stock consumed == units told bought (within what failed requests
/// may have done), ledger == stock consumed, and no "sold out" while stock was left.
/// Returns the violations and the units oversold.
fn invariants(facts: &RunFacts, t: &Tally, rb: &Readback) -> (Vec<String>, u64) {
    let qty = facts.qty;
    let sold_qty = t.sold_qty(qty);
    let consumed = facts.initial_stock - rb.final_stock;
    let ledger_qty: i64 = rb.ledger.values().sum();
    let mut violations = Vec::new();
    let accounted = t.accounted();
    if accounted != facts.requests || t.samples != facts.requests {
        violations.push(format!(
            "{} of {} requests are unaccounted for",
            facts.requests.abs_diff(accounted),
            facts.requests
        ));
    }
    if rb.final_stock < 0 {
        violations.push(format!("the stock went negative: {}", rb.final_stock));
    }
    let oversold = (sold_qty as i64 - facts.initial_stock)
        .max(-rb.final_stock)
        .max(0) as u64;
    if oversold > 0 {
        violations.push(format!(
            "oversold by {oversold}: {sold_qty} units sold from a stock of {}",
            facts.initial_stock
        ));
    }
    // Jepsen's counter bound: every unit told "bought" was consumed, and at most the
    // indeterminate requests' units on top of those.
    let upper = sold_qty as i64 + (t.indeterminate * qty) as i64;
    if consumed < sold_qty as i64 || consumed > upper {
        let maybe = match t.indeterminate {
            0 => String::new(),
            n => format!(" (and {n} requests may have bought)"),
        };
        violations.push(format!(
            "the stock fell by {consumed} but buyers were told they bought {sold_qty}{maybe}"
        ));
    }
    if ledger_qty != consumed {
        violations.push(format!(
            "the ledger records {ledger_qty} units but the stock fell by {consumed}"
        ));
    }
    violations.extend(per_order(facts, t, rb));
    // Stock only goes down, so "sold out" while enough stock is left at the end was wrong.
    if t.sold_out > 0 && rb.final_stock >= qty as i64 && t.errors == 0 {
        violations.push(format!(
            "under-sold: {} buyers were told sold out but {} units are left",
            t.sold_out, rb.final_stock
        ));
    }
    (violations, oversold)
}

/// Order by order: each ledger entry of this run belongs to a buyer told "bought" with the
/// same units (or to a request that failed indeterminately), and each such buyer has one.
/// At most five mismatches are listed, then a count of the rest.
fn per_order(facts: &RunFacts, t: &Tally, rb: &Readback) -> Vec<String> {
    let run = &facts.run_id;
    let mut out = Vec::new();
    for (index, &units) in &rb.ledger {
        match t.told_bought.get(index) {
            Some(&q) if units == q => {}
            Some(&q) if units > q => out.push(format!(
                "order {run}-{index} was deducted {} times ({units} units for a {q}-unit order)",
                units / q.max(1)
            )),
            Some(&q) => out.push(format!(
                "order {run}-{index} was told it bought {q} but the ledger has {units}"
            )),
            None if t.maybe_applied.contains(index) && units == facts.qty as i64 => {}
            None => out.push(format!(
                "order {run}-{index} is in the ledger ({units} units) but its buyer was not told it bought"
            )),
        }
    }
    for index in t.told_bought.keys() {
        if !rb.ledger.contains_key(index) {
            out.push(format!(
                "order {run}-{index} was told it bought but is not in the ledger"
            ));
        }
    }
    out.sort();
    const SHOWN: usize = 5;
    if out.len() > SHOWN {
        let more = out.len() - SHOWN;
        out.truncate(SHOWN);
        out.push(format!("... and {more} more order mismatches"));
    }
    out
}

/// `timed_out 2, refused 1`: the errors by kind, most frequent first.
pub fn errors_in_words(by_kind: &BTreeMap<ErrorKind, u64>) -> String {
    let mut kinds: Vec<_> = by_kind.iter().collect();
    kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    kinds
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What happened, in words, for a person reading the report.
fn notes(t: &Tally, rb: &Readback) -> Vec<String> {
    let mut notes = Vec::new();
    if t.lease_overrun > 0 {
        notes.push(format!(
            "{} buyers worked past their lease (the lock had expired before they \
             released it); stock went to {}",
            t.lease_overrun, rb.final_stock
        ));
    }
    if t.lease_lost > 0 {
        notes.push(format!(
            "{} buyers lost their lease before deducting and deducted nothing",
            t.lease_lost
        ));
    }
    if t.busy > 0 && rb.final_stock > 0 {
        notes.push(format!(
            "{} buyers were turned away busy while stock remained (raise --wait-ms to wait for the lock)",
            t.busy
        ));
    }
    if t.errors > 0 {
        notes.push(format!(
            "{} requests failed ({} of them may have deducted)",
            t.errors, t.indeterminate
        ));
    }
    notes
}

/// Holds what the buyers were told against what Redis holds, and says whether it adds up.
pub fn judge(facts: &RunFacts, samples: &[Sample], rb: &Readback) -> Report {
    let t = Tally::of(samples, facts.qty);
    let (violations, oversold) = invariants(facts, &t, rb);
    let notes = notes(&t, rb);
    let elapsed_s = facts.elapsed.as_secs_f64();
    let locks = facts.strategy.locks() && !t.wait.is_empty();
    // Invariants that hold because nothing happened prove nothing: a run in which every
    // request failed, while there was stock to sell, has measured nothing.
    let nothing_measured = violations.is_empty()
        && t.errors > 0
        && t.accounted() == t.errors
        && facts.initial_stock >= facts.qty as i64;
    let unknown_because = nothing_measured.then(|| {
        format!(
            "nothing was measured: all {} requests failed ({})",
            t.errors,
            errors_in_words(&t.errors_by_kind)
        )
    });
    Report {
        verdict: if !violations.is_empty() {
            Verdict::Fail
        } else if nothing_measured {
            Verdict::Unknown
        } else {
            Verdict::Pass
        },
        unknown_because,
        run: facts.clone(),
        interrupted: false,
        final_stock: Some(rb.final_stock),
        consumed: Some(facts.initial_stock - rb.final_stock),
        bought: t.bought,
        sold_qty: t.sold_qty(facts.qty),
        replayed: t.replayed,
        sold_out: t.sold_out,
        busy: t.busy,
        lease_lost: t.lease_lost,
        limit_reached: t.limit_reached,
        errors: t.errors,
        indeterminate: t.indeterminate,
        lease_overrun: t.lease_overrun,
        oversold,
        ledger_orders: rb.ledger.len() as u64,
        ledger_qty: rb.ledger.values().sum(),
        elapsed_s: round3(elapsed_s),
        throughput_rps: if elapsed_s > 0.0 {
            round_to(facts.requests as f64 / elapsed_s, 1)
        } else {
            0.0
        },
        latency_ms: percentiles(&t.latency),
        lock_wait_ms: locks.then(|| percentiles(&t.wait)),
        lock_hold_ms: (locks && !t.hold.is_empty()).then(|| percentiles(&t.hold)),
        violations,
        notes,
        latency_buckets: buckets(&t.latency),
        stock_timeline: timeline(facts, samples, rb.final_stock),
        errors_by_kind: t.errors_by_kind,
        first_error: t.first_error,
    }
}

/// Log-spaced buckets, each 1.5 times as wide as the last, from the fastest request to the
/// slowest; every recorded request falls in exactly one.
fn buckets(h: &Histogram<u64>) -> Vec<Bucket> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut upper = h.min().max(1) as f64;
    let mut out = vec![Bucket {
        le_ms: upper,
        count: 0,
    }];
    for v in h.iter_recorded() {
        while v.value_iterated_to() as f64 > upper {
            upper *= 1.5;
            out.push(Bucket {
                le_ms: upper,
                count: 0,
            });
        }
        if let Some(b) = out.last_mut() {
            b.count += v.count_at_value();
        }
    }
    for b in &mut out {
        b.le_ms = (b.le_ms).round() / 1000.0;
    }
    out
}

/// The stock each buyer was told, in the order the purchases finished, thinned to at most
/// [`TIMELINE_POINTS`] points, starting at the initial stock and ending at the final one.
fn timeline(facts: &RunFacts, samples: &[Sample], final_stock: i64) -> Vec<[f64; 2]> {
    let mut points: Vec<(Duration, i64)> = samples
        .iter()
        .filter_map(|s| match s.ended {
            Ended::Done {
                outcome: Buy::Bought { remaining },
                replayed: false,
                ..
            } => Some((s.at, remaining)),
            _ => None,
        })
        .collect();
    points.sort_by_key(|p| p.0);
    let step = points.len().div_ceil(TIMELINE_POINTS - 2).max(1);
    let mut out = vec![[0.0, facts.initial_stock as f64]];
    out.extend(
        points
            .iter()
            .step_by(step)
            .map(|(at, stock)| [at.as_secs_f64(), *stock as f64]),
    );
    out.push([facts.elapsed.as_secs_f64(), final_stock as f64]);
    out
}
