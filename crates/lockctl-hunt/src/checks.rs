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
mod tests {
    use std::time::Duration;

    use super::*;

    fn answered(index: u64, outcome: Outcome) -> Sample {
        Sample {
            index,
            ended: Ended::Answered {
                outcome: Some(outcome),
                remaining: None,
                order: None,
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
        // The history's blame finds the user by this opening (lockctl-hammer's `blame`).
        assert!(v[0].starts_with("the per-user limit of 1 "), "{v:?}");
        assert!(user_limit(&samples, None, 4, 1, 1).is_empty());

        let good = [row("r-0", 1), row("r-1", 1), row("r-2", 1)];
        assert!(order_rows(&samples, None, OrderIds::Requested("r"), &good, 1).is_empty());
        let bad = [row("r-0", 1), row("r-0", 1), row("r-2", 2), row("r-3", 1)];
        let v = order_rows(&samples, None, OrderIds::Requested("r"), &bad, 1).join("\n");
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

    fn with_order(index: u64, order: &str) -> Sample {
        let mut s = answered(index, Outcome::Bought);
        s.ended = Ended::Answered {
            outcome: Some(Outcome::Bought),
            remaining: None,
            order: Some(order.into()),
        };
        s
    }

    fn told_it_failed(index: u64) -> Sample {
        let mut s = answered(index, Outcome::Bought);
        s.ended = Ended::Failed {
            kind: lockctl_core::error::ErrorKind::AnsweredFailed,
            indeterminate: false,
            message: String::new(),
            hint: None,
        };
        s
    }

    #[test]
    fn orders_the_service_numbers_are_matched_by_the_ids_its_answers_carry() {
        let samples = [
            with_order(0, "SO-9"),
            with_order(1, "SO-3"),
            answered(2, Outcome::SoldOut),
        ];
        let rows = [row("SO-3", 1), row("SO-9", 1)];
        assert!(order_rows(&samples, None, OrderIds::Answered, &rows, 1).is_empty());
        // Requested ids would call every one of these rows lost and orphaned at once.
        assert_eq!(
            order_rows(&samples, None, OrderIds::Requested("r"), &rows, 1).len(),
            2
        );
        let lost = order_rows(&samples, None, OrderIds::Answered, &rows[..1], 1).join("\n");
        assert!(
            lost.contains("lost orders: 1 request was answered \"bought\" but has no row: SO-9"),
            "{lost}"
        );
        let failed = [samples[0].clone(), samples[1].clone(), told_it_failed(2)];
        let extra = [row("SO-3", 1), row("SO-9", 1), row("SO-10", 1)];
        let v = order_rows(&failed, None, OrderIds::Answered, &extra, 1).join("\n");
        assert!(v.starts_with("told it failed, but sold: 1 order row without a \"bought\" answer, and 1 request was answered that the purchase failed: SO-10"), "{v}");
    }

    fn unclassified(index: u64) -> Sample {
        let mut s = answered(index, Outcome::Bought);
        s.ended = Ended::Failed {
            kind: lockctl_core::error::ErrorKind::Http(503),
            indeterminate: true,
            message: "HTTP 503: lock lost".into(),
            hint: None,
        };
        s
    }

    #[test]
    fn rows_beyond_the_units_the_stock_gave_up_are_an_oversell_whatever_was_answered() {
        // Two holders of an expired lease both wrote: the stock fell by one, two rows, and
        // the second holder answered 503 "lock lost", which no pattern classifies.
        let samples = [answered(0, Outcome::Bought), unclassified(1)];
        let rows = [row("r-0", 1), row("r-1", 1)];
        // The answers alone explain the second row by the 503 ("may have bought")...
        assert!(order_rows(&samples, None, OrderIds::Requested("r"), &rows, 1).is_empty());
        // ...but units are counted, not answers: the stock gave up one, the rows hold two.
        let v = rows_within_stock(&rows, 5, Some(1)).join("\n");
        assert!(
            v.starts_with(
                "oversold by 1: order rows hold 2 units but the stock fell by only 1 (from 5)"
            ),
            "{v}"
        );
        assert!(v.contains("the rows: r-0, r-1"), "{v}");
        assert!(rows_within_stock(&rows, 5, Some(2)).is_empty());
        // With the stock unreadable, the seeded stock is still a bound.
        assert!(rows_within_stock(&rows, 2, None).is_empty());
        let v = rows_within_stock(&rows, 1, None).join("\n");
        assert!(v.contains("the stock was seeded with only 1"), "{v}");
        // A stock read back above the seed (put back) bounds by the seed.
        assert!(!rows_within_stock(&rows, 1, Some(-3)).is_empty());
    }

    #[test]
    fn one_order_id_answered_to_several_buyers_is_a_finding_and_owes_each_its_units() {
        let samples = [
            with_order(0, "SO-SAME"),
            with_order(1, "SO-SAME"),
            with_order(2, "SO-SAME"),
            with_order(3, "SO-4"),
        ];
        let rows = [row("SO-SAME", 1), row("SO-4", 1)];
        let v = order_rows(&samples, None, OrderIds::Answered, &rows, 1).join("\n");
        assert!(
            v.contains("one order id answered to several buyers: 1 order id was named by more than one \"bought\" answer (a receipt shared by buyers): SO-SAME (request 0, request 1, request 2)"),
            "{v}"
        );
        assert!(
            v.contains("SO-SAME has 1 unit, not 3 (3 answers named it)"),
            "{v}"
        );
        // Each buyer's receipt its own: nothing found.
        let own = [
            with_order(0, "SO-1"),
            with_order(1, "SO-2"),
            with_order(2, "SO-3"),
        ];
        let rows = [row("SO-1", 1), row("SO-2", 1), row("SO-3", 1)];
        assert!(order_rows(&own, None, OrderIds::Answered, &rows, 1).is_empty());
    }

    #[test]
    fn without_order_ids_rows_are_counted_per_user_against_the_answers() {
        let samples = [
            answered(0, Outcome::Bought),
            answered(1, Outcome::Bought),
            answered(2, Outcome::SoldOut),
        ];
        let user_of = |i: u64| format!("{}", 100 + i % 2);
        let user_row = |order: &str, user: &str| OrderRow {
            user: Some(user.into()),
            ..row(order, 1)
        };
        let rows = [user_row("x", "100"), user_row("y", "101")];
        let counted = OrderIds::Counted(Some(&user_of));
        assert!(order_rows(&samples, None, counted, &rows, 1).is_empty());
        let swapped = [user_row("x", "100"), user_row("y", "100")];
        let v = order_rows(&samples, None, counted, &swapped, 1).join("\n");
        assert!(v.contains("lost orders: fewer units in order rows than answered \"bought\" (user 101: 1 bought, 0 in rows)"), "{v}");
        assert!(v.contains("user 100: 2 in rows, 1 bought"), "{v}");
        let anonymous = [row("x", 1), row("y", 1)];
        assert!(order_rows(&samples, None, OrderIds::Counted(None), &anonymous, 1).is_empty());
        let failed = [samples[0].clone(), samples[1].clone(), told_it_failed(2)];
        let three = [row("x", 1), row("y", 1), row("z", 1)];
        let v = order_rows(&failed, None, OrderIds::Counted(None), &three, 1).join("\n");
        assert!(v.starts_with("told it failed, but sold"), "{v}");
    }
}
