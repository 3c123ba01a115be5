//! The hunt's checks beyond the books, each a pure function of what the round recorded: the
//! per-user limit against the answers, and the order rows against the "bought" answers.

use std::collections::{BTreeMap, HashMap};

use super::sql::OrderRow;
use crate::report::{Ended, Sample};
use lockctl_core::stock::{Buy, Outcome};
use lockctl_core::units::count;

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
        let base = crate::options::original_of(every, s.index);
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

/// Every "bought" answer has exactly one order row with its units, and no row is without a
/// "bought" answer (or a request whose outcome is unknown). `run_id` makes the order ids; a
/// retry carries its first request's (`every` as in [`retries`]).
pub fn order_rows(
    samples: &[Sample],
    every: Option<u64>,
    run_id: &str,
    rows: &[OrderRow],
    qty: u64,
) -> Vec<String> {
    let mut by_order: HashMap<&str, Vec<&OrderRow>> = HashMap::new();
    for r in rows {
        by_order.entry(r.order.as_str()).or_default().push(r);
    }
    let (mut missing, mut doubled, mut wrong, mut orphans) = (vec![], vec![], vec![], vec![]);
    let mut known = std::collections::HashSet::new();
    for s in samples {
        let order = format!("{run_id}-{}", crate::options::original_of(every, s.index));
        let found = by_order
            .get(order.as_str())
            .map_or(&[][..], |v| v.as_slice());
        if told_bought(s) || maybe_applied(s) {
            known.insert(order.clone());
        }
        match (told_bought(s), found) {
            (true, []) => missing.push(order),
            (true, [one]) if one.qty != qty as i64 => {
                wrong.push(format!("{order} has {} units, not {qty}", one.qty))
            }
            (_, [_, _, ..]) => doubled.push(format!("{order} ({} rows)", found.len())),
            _ => {}
        }
    }
    for r in rows {
        if !known.contains(&r.order) {
            orphans.push(r.order.clone());
        }
    }
    let mut v = Vec::new();
    if !missing.is_empty() {
        v.push(format!(
            "lost orders: {} answered \"bought\" but {} no row: {}",
            count(missing.len() as u64, "request was", "requests were"),
            if missing.len() == 1 { "has" } else { "have" },
            list(&missing)
        ));
    }
    if !doubled.is_empty() {
        v.push(format!("orders written more than once: {}", list(&doubled)));
    }
    if !wrong.is_empty() {
        v.push(format!("order rows with the wrong units: {}", list(&wrong)));
    }
    if !orphans.is_empty() {
        v.push(format!(
            "{} without a \"bought\" answer: {}",
            count(orphans.len() as u64, "order row", "order rows"),
            list(&orphans)
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
        let first = crate::options::original_of(Some(every), index);
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
mod tests {
    use std::time::Duration;

    use super::*;

    fn answered(index: u64, outcome: Outcome) -> Sample {
        Sample {
            index,
            ended: Ended::Answered {
                outcome: Some(outcome),
                remaining: None,
            },
            latency: Duration::ZERO,
            lock_wait: None,
            lock_hold: None,
            sent: Duration::ZERO,
            at: Duration::ZERO,
        }
    }

    fn row(order: &str, qty: i64) -> OrderRow {
        OrderRow {
            order: order.into(),
            qty,
            user: None,
        }
    }

    #[test]
    fn a_user_sold_twice_and_rows_that_do_not_match_the_answers_are_named() {
        // Users u0 and u1; u0 is told "bought" twice (requests 0 and 2) under a limit of 1.
        let samples = [
            answered(0, Outcome::Bought),
            answered(1, Outcome::Bought),
            answered(2, Outcome::Bought),
            answered(3, Outcome::SoldOut),
        ];
        let v = user_limit(&samples, None, 2, 1, 1);
        assert!(v[0].contains("u0 was sold 2"), "{v:?}");
        assert!(user_limit(&samples, None, 4, 1, 1).is_empty());

        let good = [row("r-0", 1), row("r-1", 1), row("r-2", 1)];
        assert!(order_rows(&samples, None, "r", &good, 1).is_empty());
        let bad = [row("r-0", 1), row("r-0", 1), row("r-2", 2), row("r-3", 1)];
        let v = order_rows(&samples, None, "r", &bad, 1).join("\n");
        assert!(
            v.contains("lost orders: 1 request was answered \"bought\" but has no row: r-1"),
            "{v}"
        );
        assert!(v.contains("r-0 (2 rows)"), "{v}");
        assert!(v.contains("r-2 has 2 units"), "{v}");
        assert!(
            v.contains("1 order row without a \"bought\" answer: r-3"),
            "{v}"
        );
    }
}
