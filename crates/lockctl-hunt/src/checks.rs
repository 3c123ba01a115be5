//! The hunt's checks beyond the books, each a pure function of what the round recorded: the
//! per-user limit against the answers, and the order rows against the "bought" answers.

use std::collections::{BTreeMap, HashMap};

use super::sql::OrderRow;
use lockctl_core::stock::{Buy, Outcome};
use lockctl_core::units::count;
use lockctl_hammer::report::{Ended, Sample};

/// How many findings of one kind are listed by name.
const SHOWN: usize = 5;

/// Whether request `s` was told it bought.
fn told_bought(s: &Sample) -> bool {
    matches!(
        s.ended,
        Ended::Answered {
            outcome: Some(Outcome::Bought),
            ..
        } | Ended::Done {
            outcome: Buy::Bought { .. },
            replayed: false,
            ..
        }
    )
}

/// Whether request `s` failed after it may have reached the system.
fn maybe_applied(s: &Sample) -> bool {
    matches!(
        s.ended,
        Ended::Failed {
            indeterminate: true,
            ..
        }
    )
}

/// No user was told it bought more than `limit` units (`qty` a request; users `u{i % users}`,
/// a retry's user its first request's, `every` as in [`retries`]).
pub fn user_limit(
    samples: &[Sample],
    every: Option<u64>,
    users: u64,
    limit: u64,
    qty: u64,
) -> Vec<String> {
    let mut bought: BTreeMap<u64, u64> = BTreeMap::new();
    for s in samples.iter().filter(|s| told_bought(s)) {
        let base = lockctl_hammer::original_of(every, s.index);
        *bought.entry(base % users.max(1)).or_default() += qty;
    }
    let over: Vec<String> = bought
        .iter()
        .filter(|(_, units)| **units > limit)
        .map(|(u, units)| format!("u{u} was sold {units}"))
        .collect();
    if over.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "the per-user limit of {limit} was broken: {} ({} over the limit)",
        list(&over),
        count(over.len() as u64, "user", "users")
    )]
}

/// Units in order rows never exceed the units taken from the stock (`taken`, when the stock
/// could be read back), nor the stock `seeded`, whatever the answers said. Every unit is in
/// exactly one place, the stock or an order, so a unit in a row that the stock never gave up
/// was sold twice. No answer explains such a row away: not a timeout, not an answer no
/// pattern matched (a 503 "lock lost" from a holder that wrote its row all the same).
pub fn rows_within_stock(rows: &[OrderRow], seeded: i64, taken: Option<i64>) -> Vec<String> {
    let units: i64 = rows.iter().map(|r| r.qty).sum();
    let bound = taken.map_or(seeded, |t| t.min(seeded));
    if units <= bound {
        return Vec::new();
    }
    let named: Vec<String> = rows.iter().map(|r| r.order.clone()).collect();
    let fell = match taken {
        Some(t) if t < seeded => format!("the stock fell by only {t} (from {seeded})"),
        _ => format!("the stock was seeded with only {seeded}"),
    };
    vec![format!(
        "oversold by {}: order rows hold {} but {fell}, whatever the answers said: {} sold twice; the rows: {}",
        units - bound,
        count(units as u64, "unit", "units"),
        count((units - bound) as u64, "unit was", "units were"),
        list(&named)
    )]
}

/// Where the orders check finds the order id of each "bought" answer.
#[derive(Clone, Copy)]
pub enum OrderIds<'a> {
    /// The request carried it (`{order}`): `<run id>-<index>`, a retry its first request's.
    Requested(&'a str),
    /// The answer carried it: the service numbers its own orders.
    Answered,
    /// Neither: the rows are counted against the answers, per user when the rows name one
    /// and the requests did (the function names request `index`'s user as the request did).
    Counted(Option<&'a dyn Fn(u64) -> String>),
}

/// Whether request `s` was told the purchase failed (it must not have deducted).
fn told_failed(s: &Sample) -> bool {
    matches!(
        s.ended,
        Ended::Failed {
            kind: lockctl_core::error::ErrorKind::AnsweredFailed,
            ..
        }
    )
}

/// Every "bought" answer has exactly one order row with its units, and no row is without a
/// "bought" answer (or a request whose outcome is unknown); a row behind an answer that said
/// the purchase failed is named as such. How rows are told apart is `ids`'s; a retry is
/// request `every` as in [`retries`].
pub fn order_rows(
    samples: &[Sample],
    every: Option<u64>,
    ids: OrderIds,
    rows: &[OrderRow],
    qty: u64,
) -> Vec<String> {
    match ids {
        OrderIds::Requested(run_id) => by_id(samples, rows, qty, |s| {
            Some(format!(
                "{run_id}-{}",
                lockctl_hammer::original_of(every, s.index)
            ))
        }),
        OrderIds::Answered => by_id(samples, rows, qty, |s| match &s.ended {
            Ended::Answered { order, .. } => order.clone(),
            _ => None,
        }),
        OrderIds::Counted(user_of) => counted(samples, every, rows, qty, user_of),
    }
}

/// What the rows held against the answers by order id came to.
#[derive(Default)]
struct ById {
    /// Orders answered "bought" with no row.
    missing: Vec<String>,
    /// Orders with more than one row.
    doubled: Vec<String>,
    /// Orders whose rows hold other units than the answers naming them were told.
    wrong: Vec<String>,
    /// Order ids named by more than one "bought" answer: one receipt for several buyers.
    shared: Vec<String>,
    /// Rows of no order a request was told of.
    orphans: Vec<String>,
    /// "Bought" answers that carried no order id.
    no_id: Vec<String>,
    /// Orders answered "failed" that have a row.
    failed_sold: Vec<String>,
    /// Requests that may have written a row nobody was told the id of.
    unknown_ids: u64,
}

/// The rows held against the answers by order id (`id_of` a request's, when it has one).
fn by_id(
    samples: &[Sample],
    rows: &[OrderRow],
    qty: u64,
    id_of: impl Fn(&Sample) -> Option<String>,
) -> Vec<String> {
    by_id_words(samples, &tally_by_id(samples, rows, qty, id_of))
}

/// Each answer's order held against its rows: every "bought" answer naming an id owes that
/// id its units, so two answers naming one id owe it twice (a receipt shared by two buyers
/// is a finding of its own, whatever the rows hold).
fn tally_by_id(
    samples: &[Sample],
    rows: &[OrderRow],
    qty: u64,
    id_of: impl Fn(&Sample) -> Option<String>,
) -> ById {
    let mut by_order: HashMap<&str, Vec<&OrderRow>> = HashMap::new();
    for r in rows {
        by_order.entry(r.order.as_str()).or_default().push(r);
    }
    let mut t = ById::default();
    let mut known = std::collections::HashSet::new();
    // The requests told "bought" under each order id, in the order they came.
    let mut told: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut doubled: BTreeMap<String, usize> = BTreeMap::new();
    for s in samples {
        let Some(order) = id_of(s) else {
            if told_bought(s) {
                t.no_id.push(format!("request {}", s.index));
            }
            t.unknown_ids += u64::from(maybe_applied(s));
            continue;
        };
        let found = by_order
            .get(order.as_str())
            .map_or(&[][..], |v| v.as_slice());
        if told_bought(s) || maybe_applied(s) {
            known.insert(order.clone());
        }
        if told_failed(s) && !found.is_empty() {
            t.failed_sold.push(order.clone());
            known.insert(order.clone());
        }
        if found.len() > 1 {
            doubled.insert(order.clone(), found.len());
        }
        if told_bought(s) {
            told.entry(order).or_default().push(s.index);
        }
    }
    for (order, requests) in told {
        let found = by_order
            .get(order.as_str())
            .map_or(&[][..], |v| v.as_slice());
        if requests.len() > 1 {
            let named: Vec<String> = requests.iter().map(|i| format!("request {i}")).collect();
            t.shared.push(format!("{order} ({})", list(&named)));
        }
        let owed = requests.len() as i64 * qty as i64;
        let held: i64 = found.iter().map(|r| r.qty).sum();
        match found {
            [] => t.missing.push(order),
            [_, _, ..] => {}
            [_] if held != owed => t.wrong.push(format!(
                "{order} has {held} {}, not {owed}{}",
                if held == 1 { "unit" } else { "units" },
                match requests.len() {
                    1 => String::new(),
                    n => format!(" ({n} answers named it)"),
                }
            )),
            [_] => {}
        }
    }
    t.doubled = doubled
        .into_iter()
        .map(|(order, n)| format!("{order} ({n} rows)"))
        .collect();
    for r in rows {
        if !known.contains(&r.order) {
            t.orphans.push(r.order.clone());
        }
    }
    t
}

/// The findings of [`tally_by_id`], in words.
fn by_id_words(samples: &[Sample], t: &ById) -> Vec<String> {
    let mut v = Vec::new();
    if !t.missing.is_empty() {
        v.push(format!(
            "lost orders: {} answered \"bought\" but {} no row: {}",
            count(t.missing.len() as u64, "request was", "requests were"),
            if t.missing.len() == 1 { "has" } else { "have" },
            list(&t.missing)
        ));
    }
    if !t.no_id.is_empty() {
        v.push(format!(
            "{} answered \"bought\" without an order id where the pattern looks for one: {}",
            count(t.no_id.len() as u64, "request was", "requests were"),
            list(&t.no_id)
        ));
    }
    if !t.shared.is_empty() {
        v.push(format!(
            "one order id answered to several buyers: {} named by more than one \"bought\" answer (a receipt shared by buyers): {}",
            count(t.shared.len() as u64, "order id was", "order ids were"),
            list(&t.shared)
        ));
    }
    if !t.doubled.is_empty() {
        v.push(format!(
            "orders written more than once: {}",
            list(&t.doubled)
        ));
    }
    if !t.wrong.is_empty() {
        v.push(format!(
            "order rows with the wrong units: {}",
            list(&t.wrong)
        ));
    }
    if !t.failed_sold.is_empty() {
        v.push(format!(
            "told it failed, but sold: {} answered that the purchase failed, and {} a row: {}",
            count(t.failed_sold.len() as u64, "request was", "requests were"),
            if t.failed_sold.len() == 1 {
                "it has"
            } else {
                "each has"
            },
            list(&t.failed_sold)
        ));
    }
    // Rows of requests whose answer never came (a timeout) are theirs, up to their number.
    if t.orphans.len() as u64 > t.unknown_ids {
        let failed = samples.iter().filter(|s| told_failed(s)).count() as u64;
        v.push(match failed {
            0 => format!(
                "{} without a \"bought\" answer: {}",
                count(t.orphans.len() as u64, "order row", "order rows"),
                list(&t.orphans)
            ),
            n => format!(
                "told it failed, but sold: {} without a \"bought\" answer, and {} answered that the purchase failed: {}",
                count(t.orphans.len() as u64, "order row", "order rows"),
                count(n, "request was", "requests were"),
                list(&t.orphans)
            ),
        });
    }
    v
}

/// The rows counted against the answers, with nothing to tell one order from another: as
/// many units in rows as "bought" answers sold (more only by what requests whose outcome is
/// unknown may have bought), per user when the rows name one.
fn counted(
    samples: &[Sample],
    every: Option<u64>,
    rows: &[OrderRow],
    qty: u64,
    user_of: Option<&dyn Fn(u64) -> String>,
) -> Vec<String> {
    let user_of = user_of.filter(|_| !rows.is_empty() && rows.iter().all(|r| r.user.is_some()));
    let per_user = user_of.is_some();
    let key = |s: &Sample| user_of.map(|f| f(lockctl_hammer::original_of(every, s.index)));
    // Per key (a user, or everyone): units told bought, units that may have been, failed.
    let mut told: BTreeMap<Option<String>, (i64, i64, u64)> = BTreeMap::new();
    for s in samples {
        let e = told.entry(key(s)).or_default();
        if told_bought(s) {
            e.0 += qty as i64;
        }
        if maybe_applied(s) {
            e.1 += qty as i64;
        }
        if told_failed(s) {
            e.2 += 1;
        }
    }
    let mut in_rows: BTreeMap<Option<String>, i64> = BTreeMap::new();
    for r in rows {
        *in_rows
            .entry(if per_user { r.user.clone() } else { None })
            .or_default() += r.qty;
    }
    let (mut lost, mut extra, mut failed_sold) = (vec![], vec![], vec![]);
    let keys: std::collections::BTreeSet<_> = told.keys().chain(in_rows.keys()).cloned().collect();
    for k in keys {
        let (bought, maybe, failed) = told.get(&k).copied().unwrap_or_default();
        let units = in_rows.get(&k).copied().unwrap_or(0);
        let who = k.as_ref().map_or(String::new(), |u| format!("user {u}: "));
        if units < bought {
            lost.push(format!("{who}{bought} bought, {units} in rows"));
        } else if units > bought + maybe && failed > 0 {
            failed_sold.push(format!(
                "{who}{units} in rows, {bought} bought, {failed} told it failed"
            ));
        } else if units > bought + maybe {
            extra.push(format!("{who}{units} in rows, {bought} bought"));
        }
    }
    let mut v = Vec::new();
    if !lost.is_empty() {
        v.push(format!(
            "lost orders: fewer units in order rows than answered \"bought\" ({})",
            list(&lost)
        ));
    }
    if !failed_sold.is_empty() {
        v.push(format!(
            "told it failed, but sold: more units in order rows than answered \"bought\", with answers that said the purchase failed ({})",
            list(&failed_sold)
        ));
    }
    if !extra.is_empty() {
        v.push(format!(
            "order rows without a \"bought\" answer: more units in rows than answered \"bought\" ({})",
            list(&extra)
        ));
    }
    v
}

/// Requests that retried an order (every `every`-th, the one before it): a retry told
/// "bought" for an order whose first request was told "bought" too is a replay, which deducts
/// nothing (so the books count the order once); a retry whose answer contradicts the first
/// one's (one "bought", the other "sold out") breaks the promise. Busy answers and failures
/// say nothing of the outcome and are not held against it.
pub fn retries(samples: &mut [Sample], every: u64) -> Vec<String> {
    let by_index: HashMap<u64, usize> = samples
        .iter()
        .enumerate()
        .map(|(at, s)| (s.index, at))
        .collect();
    let mut contradicted = Vec::new();
    for j in 0..samples.len() {
        let index = samples[j].index;
        let first = lockctl_hammer::original_of(Some(every), index);
        let Some(&i) = by_index.get(&first).filter(|_| first != index) else {
            continue;
        };
        let (a, b) = (answer(&samples[i]), answer(&samples[j]));
        match (a, b) {
            (Some(Outcome::Bought), Some(Outcome::Bought)) => {
                let remaining = match samples[j].ended {
                    Ended::Answered { remaining, .. } => remaining.unwrap_or(0),
                    _ => 0,
                };
                samples[j].ended = Ended::Done {
                    outcome: Buy::Bought { remaining },
                    replayed: true,
                    overran_lease: false,
                };
            }
            (Some(Outcome::Bought), Some(Outcome::SoldOut))
            | (Some(Outcome::SoldOut), Some(Outcome::Bought)) => contradicted.push(format!(
                "request {index} (a retry of {first}) was answered {} but the first {}",
                name(b),
                name(a)
            )),
            _ => {}
        }
    }
    if contradicted.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "not idempotent: {} answered otherwise than the first request of the same order: {}",
        count(contradicted.len() as u64, "retry was", "retries were"),
        list(&contradicted)
    )]
}

fn answer(s: &Sample) -> Option<Outcome> {
    match &s.ended {
        Ended::Answered { outcome, .. } => *outcome,
        Ended::Done { outcome, .. } => Some(outcome.outcome()),
        Ended::Failed { .. } => None,
    }
}

fn name(o: Option<Outcome>) -> &'static str {
    match o {
        Some(Outcome::Bought) => "\"bought\"",
        Some(Outcome::SoldOut) => "\"sold out\"",
        _ => "something else",
    }
}

fn list(items: &[String]) -> String {
    let mut shown = items[..items.len().min(SHOWN)].join(", ");
    if items.len() > SHOWN {
        shown.push_str(&format!(", and {} more", items.len() - SHOWN));
    }
    shown
}

#[cfg(test)]
mod tests;
