//! The verdict: what the buyers were told held against what Redis holds. Pure: a tally of the
//! answers and the read-back in, a [`Report`] out.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use crate::ledger_check::LedgerCheck;
use crate::readback::Readback;
use crate::report::{Bucket, Percentiles, Report, RunFacts, Sample, Verdict};
use crate::tally::Tally;
use lockctl_core::error::{Error, ErrorKind};
use lockctl_core::units::{count, millis, round_to, round3};

/// Holds what the buyers were told against what Redis holds, and says whether it adds up.
/// (The hammer itself folds samples into a [`Tally`] as they come and streams the ledger
/// through a [`LedgerCheck`]; this is the same judgement from records kept in memory.)
pub fn judge(facts: &RunFacts, samples: &[Sample], rb: &Readback) -> Report {
    let t = tally_of(facts, samples);
    let mut check = LedgerCheck::new(&t, &facts.run_id);
    for (&index, &units) in &rb.ledger {
        check.entry(&t, index, units);
    }
    verdict(facts, &t, rb.final_stock, check, rb.went_up.as_deref())
}

/// The report of a run whose results could not be read back from Redis: the buyers' side is
/// all there, the verdict is unknown, and nothing is claimed about the stock.
pub fn judge_unreadable(facts: &RunFacts, samples: &[Sample], e: &Error) -> Report {
    unreadable(facts, &tally_of(facts, samples), e)
}

fn tally_of(facts: &RunFacts, samples: &[Sample]) -> Tally {
    let mut t = Tally::new(facts.requests, facts.qty);
    for s in samples {
        t.add(s);
    }
    t
}

pub(super) fn unreadable(facts: &RunFacts, t: &Tally, e: &Error) -> Report {
    let mut r = measured(facts, t, None);
    r.verdict = Verdict::Unknown;
    r.unknown_because = Some("Redis could not be read back, so nothing is claimed".into());
    r.notes = notes(t, facts.initial_stock);
    // Not "the verdict is unknown": what else is checked (the orders in PostgreSQL) may still
    // find a violation, and a FAIL is a FAIL.
    r.notes.insert(
        0,
        format!(
            "could not read the stock and the ledger back from Redis ({e}): nothing is claimed about them"
        ),
    );
    r
}

pub(super) fn percentiles(h: &Histogram<u64>) -> Percentiles {
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

/// The totals that must add up: every request answered once, stock never negative, nothing
/// sold beyond the stock, stock consumed == units told bought (within what failed requests
/// may have done), ledger == stock consumed, and no "sold out" while stock was left.
/// Returns the violations and the units oversold.
fn invariants(
    facts: &RunFacts,
    t: &Tally,
    final_stock: i64,
    ledger_qty: i64,
) -> (Vec<String>, u64) {
    let qty = facts.qty;
    let sold_qty = t.sold_qty();
    let consumed = facts.initial_stock - final_stock;
    let (mut violations, oversold) = first_checks(facts, t, final_stock, sold_qty as i64);
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
            n => format!(" (and {} may have bought)", count(n, "request", "requests")),
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
    (violations, oversold)
}

/// What every verdict checks first, whoever sold: every request answered once and the stock
/// never negative. Returns those violations and the units oversold, from the units `sold`
/// and the stock left (each verdict words the oversell its own way).
pub(super) fn first_checks(
    facts: &RunFacts,
    t: &Tally,
    final_stock: i64,
    sold: i64,
) -> (Vec<String>, u64) {
    let mut violations = Vec::new();
    let accounted = t.accounted();
    if accounted != facts.requests || t.samples() != facts.requests {
        violations.push(format!(
            "{} of {} are unaccounted for",
            facts.requests.abs_diff(accounted),
            count(facts.requests, "request", "requests")
        ));
    }
    if final_stock < 0 {
        violations.push(format!("the stock went negative: {final_stock}"));
    }
    let oversold = (sold - facts.initial_stock).max(-final_stock).max(0) as u64;
    (violations, oversold)
}

/// Stock only goes down, so "sold out" while enough stock is left at the end was wrong.
fn undersold(facts: &RunFacts, t: &Tally, final_stock: i64) -> Option<String> {
    (t.sold_out > 0 && final_stock >= facts.qty as i64 && t.errors == 0).then(|| {
        format!(
            "under-sold: {} told sold out but {} left",
            count(t.sold_out, "buyer was", "buyers were"),
            count(final_stock, "unit is", "units are")
        )
    })
}

/// A "sold out" answered before a request later answered "bought" was even sent. The stock
/// only goes down, so at the sold-out answer there was still at least what that later sale
/// took: the answer was false (or the sale was). A sale answered to a retry counts from the
/// first send of its order ([`crate::tally::Sale`]). Only answers strictly ordered in time count
/// ([`crate::tally::Precedence`]), and only when nothing says the stock went up in between
/// (`went_up`, from [`crate::watch::went_up`]); otherwise the pair is a note, not a
/// violation. Returns the violation or the note.
pub(super) fn sold_out_before_a_sale(
    t: &Tally,
    went_up: Option<&str>,
) -> (Option<String>, Option<String>) {
    let Some(((answered, s), sale)) = t.sold_out_before_a_sale() else {
        return (None, None);
    };
    let b = sale.answered;
    let sale_in_words = match sale.first == b {
        true => format!(
            "before request {b} was sent (at {} ms), which was answered \"bought\"",
            millis(sale.sent)
        ),
        // The sale may have been made by the first request of the order, whose answer was
        // lost: it counts from then.
        false => format!(
            "before request {} was sent (at {} ms), whose order was answered \"bought\" (to request {b}, of the same order id)",
            sale.first,
            millis(sale.sent)
        ),
    };
    let pair = format!(
        "request {s} was answered \"sold out\" at {} ms, {sale_in_words}",
        millis(answered)
    );
    match went_up {
        None => (
            Some(format!(
                "under-sold: {pair}: nothing was seen to put stock back, so it had not run out when request {s} was told it had"
            )),
            None,
        ),
        Some(why) => (
            None,
            Some(format!(
                "{pair}; not counted as under-selling: {why}, and stock put back in between would explain it"
            )),
        ),
    }
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
fn notes(t: &Tally, final_stock: i64) -> Vec<String> {
    let mut notes = Vec::new();
    if t.lease_overrun > 0 {
        notes.push(format!(
            "{} past their lease (the lock had expired before they released it); stock went \
             to {final_stock}",
            count(t.lease_overrun, "buyer worked", "buyers worked")
        ));
    }
    if t.lease_lost > 0 {
        notes.push(format!(
            "{} before deducting and deducted nothing",
            count(
                t.lease_lost,
                "buyer lost its lease",
                "buyers lost their lease"
            )
        ));
    }
    if t.busy > 0 && final_stock > 0 {
        notes.push(format!(
            "{} turned away busy while stock remained (a longer wait for the lock would have served them)",
            count(t.busy, "buyer was", "buyers were")
        ));
    }
    if t.errors > 0 {
        notes.push(format!(
            "{} failed ({} of them may have deducted)",
            count(t.errors, "request", "requests"),
            t.indeterminate
        ));
    }
    notes
}

/// The report: the tally and the ledger check held against the stock read back. `went_up`:
/// why the stock may have gone up during the run, if anything says so.
pub(super) fn verdict(
    facts: &RunFacts,
    t: &Tally,
    final_stock: i64,
    check: LedgerCheck,
    went_up: Option<&str>,
) -> Report {
    let (ledger_orders, ledger_qty, per_order) = check.finish(t);
    let (mut violations, oversold) = invariants(facts, t, final_stock, ledger_qty);
    violations.extend(per_order);
    violations.extend(undersold(facts, t, final_stock));
    let (early, note) = sold_out_before_a_sale(t, went_up);
    violations.extend(early);
    let mut r = measured(facts, t, Some(final_stock));
    r.ledger_orders = Some(ledger_orders);
    r.ledger_qty = Some(ledger_qty);
    r.oversold = oversold;
    r.notes = notes(t, final_stock);
    r.notes.extend(note);
    conclude(&mut r, t, violations);
    r
}

/// The verdict from what was found: FAIL on any violation; UNKNOWN when nothing was measured
/// (every request failed, with stock to sell or none: invariants that hold because nothing
/// happened prove nothing); PASS otherwise.
pub(super) fn conclude(r: &mut Report, t: &Tally, violations: Vec<String>) {
    let nothing_measured = violations.is_empty() && t.errors > 0 && t.accounted() == t.errors;
    r.verdict = if !violations.is_empty() {
        Verdict::Fail
    } else if let Some(why) = sold_nothing(r, t).filter(|_| {
        // Every request failing is "nothing was measured", unless the stock fell behind
        // answers no pattern understood: those are named.
        !nothing_measured || (t.unmatched.0 > 0 && r.consumed.is_some_and(|c| c > 0))
    }) {
        r.unknown_because = Some(why);
        Verdict::Unknown
    } else if nothing_measured {
        r.unknown_because = Some(format!(
            "nothing was measured: {} failed ({})",
            match t.errors {
                1 => "the one request".to_string(),
                n => format!("all {n} requests"),
            },
            errors_in_words(&t.errors_by_kind)
        ));
        Verdict::Unknown
    } else {
        Verdict::Pass
    };
    r.violations = violations;
}

/// A run in which nobody bought while the stock had units for them: invariants that hold
/// because nothing was sold prove nothing, so such a run never reads as a PASS beside one
/// that really sold. When the stock fell all the same and answers matched no pattern, the
/// answers were not understood (a `--bought-if` that matches nothing, say): they are named.
fn sold_nothing(r: &Report, t: &Tally) -> Option<String> {
    let facts = &r.run;
    let nobody_bought = t.bought == 0 && t.replayed == 0;
    if !nobody_bought || facts.requests == 0 || facts.initial_stock < facts.qty as i64 {
        return None;
    }
    let (unmatched, example) = (t.unmatched.0, t.unmatched.1.as_ref().map(|(_, m)| m));
    let fell = r.consumed.filter(|c| *c > 0);
    Some(match (fell, unmatched, example) {
        (Some(fell), 1.., Some(example)) => format!(
            "nothing was judged: the stock fell by {fell} but no answer was classified \"bought\" ({} matched no pattern, the first: {example}): check the \"bought\" pattern against what the service answers",
            count(unmatched, "answer", "answers"),
        ),
        (Some(fell), ..) => format!(
            "nothing was judged: the stock fell by {fell} but no answer was classified \"bought\" ({})",
            outcomes_in_words(t)
        ),
        (None, ..) => format!(
            "nothing was sold: {} met a stock of {} and none bought ({}); a run that sells nothing shows nothing about overselling",
            count(facts.requests, "request", "requests"),
            facts.initial_stock,
            outcomes_in_words(t)
        ),
    })
}

/// `12 busy, 3 lease lost, 2 failed (timed_out 2)`: what the requests were told instead.
fn outcomes_in_words(t: &Tally) -> String {
    let mut parts = Vec::new();
    for (n, what) in [
        (t.sold_out, "sold out"),
        (t.busy, "busy"),
        (t.lease_lost, "lease lost"),
        (t.limit_reached, "over the limit"),
    ] {
        if n > 0 {
            parts.push(format!("{n} {what}"));
        }
    }
    if t.errors > 0 {
        parts.push(format!(
            "{} failed ({})",
            t.errors,
            errors_in_words(&t.errors_by_kind)
        ));
    }
    if parts.is_empty() {
        return "no answer".into();
    }
    parts.join(", ")
}

/// Everything measured, before any judgement (a PASS with no violations, no ledger and
/// nothing oversold, for the judge to fill in): the counts, latencies, throughput, the
/// hammer's own cost, and the stock over time, ending at `final_stock` when it was read.
pub(super) fn measured(facts: &RunFacts, t: &Tally, final_stock: Option<i64>) -> Report {
    let elapsed_s = facts.elapsed.as_secs_f64();
    let locks = facts.strategy.locks() && !t.wait.is_empty();
    let mut timeline = vec![[0.0, facts.initial_stock as f64]];
    timeline.extend(
        t.timeline_points()
            .iter()
            .map(|(at, stock)| [at.as_secs_f64(), *stock as f64]),
    );
    timeline.extend(final_stock.map(|f| [elapsed_s, f as f64]));
    Report {
        verdict: Verdict::Pass,
        unknown_because: None,
        pipeline: None,
        run: facts.clone(),
        interrupted: false,
        final_stock,
        consumed: final_stock.map(|f| facts.initial_stock - f),
        bought: t.bought,
        sold_qty: t.sold_qty(),
        replayed: t.replayed,
        sold_out: t.sold_out,
        busy: t.busy,
        lease_lost: t.lease_lost,
        limit_reached: t.limit_reached,
        answered: t.answered,
        errors: t.errors,
        indeterminate: t.indeterminate,
        lease_overrun: t.lease_overrun,
        oversold: 0,
        ledger_orders: None,
        ledger_qty: None,
        elapsed_s: round3(elapsed_s),
        client_cpu_s: facts.client_cpu.map(|d| round3(d.as_secs_f64())),
        client_cpu_us_per_request: facts
            .client_cpu
            .filter(|_| facts.requests > 0)
            .map(|d| round_to(d.as_secs_f64() * 1e6 / facts.requests as f64, 1)),
        client_max_rss_mb: crate::usage::max_rss_mb().map(|m| round_to(m, 1)),
        throughput_rps: if elapsed_s > 0.0 {
            round_to(facts.requests as f64 / elapsed_s, 1)
        } else {
            0.0
        },
        latency_ms: percentiles(&t.latency),
        lock_wait_ms: locks.then(|| percentiles(&t.wait)),
        lock_hold_ms: (locks && !t.hold.is_empty()).then(|| percentiles(&t.hold)),
        violations: Vec::new(),
        notes: Vec::new(),
        http: None,
        latency_buckets: buckets(&t.latency),
        lock_wait_buckets: buckets(&t.wait),
        lock_hold_buckets: buckets(&t.hold),
        stock_timeline: timeline,
        errors_by_kind: t.errors_by_kind.clone(),
        first_error: t.first_error.as_ref().map(|(_, m, _)| m.clone()),
        first_error_hint: t.first_error.as_ref().and_then(|(.., h)| h.clone()),
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
