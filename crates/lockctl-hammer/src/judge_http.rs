//! The verdict on someone else's endpoint (`hammer --url`): what it answered held against
//! its stock in Redis, read before and after the run. Pure, like [`crate::judge`], whose
//! report skeleton and verdict rule it shares.
//!
//! There is no ledger to read, so the books are the answers and the one counter: units the
//! endpoint announced ("bought" answers times `--qty`) must equal units consumed from the
//! stock. More consumed than announced is a lost order (a ghost deduction: someone paid
//! stock for a purchase nobody was told of); more announced than consumed is a phantom sale
//! (told "bought", nothing deducted). Requests that failed after they were sent (no answer in
//! time, a broken connection, an answer no pattern matched) may have deducted, so they widen
//! the bound upwards by their units, as in lockctl's own judge.
//!
//! Under-selling is judged twice: a "sold out" while stock is left at the end, and a "sold
//! out" answered before a request later answered "bought" was even sent, which the stock at
//! the end cannot show (the endpoint may sell everything afterwards). The second rests on the
//! stock only going down, so it counts only when nothing says it went up
//! ([`crate::watch::went_up`]).

use crate::error::Error;
use crate::judge::{conclude, errors_in_words, first_checks, measured, sold_out_before_a_sale};
use crate::report::{Report, RunFacts, Verdict};
use crate::tally::Tally;
use lockctl_core::error::ErrorKind;
use lockctl_core::units::count;

/// The report of a run whose stock was read back. `went_up`: why the stock may have gone up
/// during the run, if anything says so.
pub(super) fn verdict(
    facts: &RunFacts,
    t: &Tally,
    final_stock: i64,
    went_up: Option<&str>,
) -> Report {
    let (mut violations, oversold) = invariants(facts, t, final_stock);
    let (early, note) = sold_out_before_a_sale(t, went_up);
    violations.extend(early);
    let mut r = measured(facts, t, Some(final_stock));
    r.oversold = oversold;
    r.notes = notes(t, final_stock);
    r.notes.extend(note);
    conclude(&mut r, t, violations);
    r
}

/// The report of a run whose stock could not be read back afterwards: nothing is claimed.
pub(super) fn unreadable(facts: &RunFacts, t: &Tally, e: &Error) -> Report {
    let mut r = measured(facts, t, None);
    r.verdict = Verdict::Unknown;
    r.unknown_because = Some("the stock could not be read back from Redis".into());
    r.notes = notes(t, facts.initial_stock);
    r.notes.insert(
        0,
        format!("could not read the stock back from Redis ({e}): nothing is claimed about it"),
    );
    r
}

/// The report of a run with no classification patterns: no answer says what was sold, so
/// Redis was not read and nothing is judged; what remains is the load and its latencies.
pub(super) fn nothing_to_judge(facts: &RunFacts, t: &Tally) -> Report {
    let mut r = measured(facts, t, None);
    r.verdict = Verdict::Unknown;
    r.unknown_because = Some(
        "nothing to judge: no pattern (bought, sold out, busy, or a preset's) says which answers sold anything, so the stock was not read"
            .into(),
    );
    if t.errors > 0 {
        r.notes.push(format!(
            "{} of {} failed ({})",
            t.errors,
            count(facts.requests, "request", "requests"),
            errors_in_words(&t.errors_by_kind)
        ));
    }
    r
}

/// Every request answered once; the stock never negative and nothing sold beyond it; units
/// announced == units consumed (within what failed requests may have done); no "sold out"
/// while stock was left at the end. Returns the violations and the units oversold.
fn invariants(facts: &RunFacts, t: &Tally, final_stock: i64) -> (Vec<String>, u64) {
    let announced = t.sold_qty() as i64;
    let initial = facts.initial_stock;
    let consumed = initial - final_stock;
    let (mut v, oversold) = first_checks(facts, t, final_stock, announced);
    if oversold > 0 {
        v.push(format!(
            "oversold by {oversold}: the endpoint sold {} from a stock of {initial}",
            count(announced.max(consumed), "unit", "units")
        ));
    }
    if consumed < announced {
        v.push(format!(
            "phantom sales: the endpoint answered \"bought\" for {} but the stock fell by only {consumed} ({} sold without being deducted)",
            count(announced, "unit", "units"),
            count(announced - consumed, "unit", "units")
        ));
    }
    let maybe = (t.indeterminate * facts.qty) as i64;
    let told_failed = t
        .errors_by_kind
        .get(&ErrorKind::AnsweredFailed)
        .copied()
        .unwrap_or(0);
    if consumed > announced + maybe && told_failed > 0 {
        // The service said these purchases failed, so none of them may have deducted: the
        // extra is theirs.
        let extra = consumed - announced - maybe;
        v.push(format!(
            "told it failed, but sold: the stock fell by {consumed} but the endpoint answered \"bought\" for only {}, and {} answered that the purchase failed: {} deducted behind answers that said it failed",
            count(announced, "unit", "units"),
            count(told_failed, "request was", "requests were"),
            count(extra, "unit was", "units were")
        ));
    } else if consumed > announced + maybe {
        let failed = match t.indeterminate {
            0 => String::new(),
            n => format!(", and {n} failed requests may have bought {maybe}"),
        };
        v.push(format!(
            "lost orders (ghost deductions): the stock fell by {consumed} but the endpoint answered \"bought\" for only {}{failed}: {} deducted without a buyer being told",
            count(announced, "unit", "units"),
            count(consumed - announced - maybe, "unit was", "units were")
        ));
    }
    // Stock only goes down, so a "sold out" while enough is left at the end was wrong when
    // it was said.
    if t.sold_out > 0 && final_stock >= facts.qty as i64 {
        v.push(format!(
            "under-sold: {} answered sold out but {} left",
            count(t.sold_out, "request was", "requests were"),
            count(final_stock, "unit is", "units are")
        ));
    }
    (v, oversold)
}

/// What happened, in words.
fn notes(t: &Tally, final_stock: i64) -> Vec<String> {
    let mut notes = Vec::new();
    if t.busy > 0 && final_stock > 0 {
        notes.push(format!(
            "{} turned away busy while stock remained (the endpoint's own choice: busy is an answer, not an error)",
            count(t.busy, "request was", "requests were")
        ));
    }
    if t.errors > 0 {
        notes.push(format!(
            "{} failed ({}); {} of them may have deducted",
            count(t.errors, "request", "requests"),
            errors_in_words(&t.errors_by_kind),
            t.indeterminate
        ));
    }
    notes
}
