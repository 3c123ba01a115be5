//! The requests a failed verdict rests on, for a reader to look at first: the ones its
//! violations name (`request N`, an order id, a user over the limit), and, where a violation
//! is of the books as a whole, the answers that went beyond them: the "bought" answers past
//! the stock (oversold) or past what the stock lost (phantom sales), in the order they were
//! answered, and the "sold out" answers while stock was left (under-sold).
//!
//! Which of several racing sales "broke" the stock is a matter of order: the answers are
//! taken in the order they were given, so the first sales the stock could not cover are the
//! ones named.

use std::collections::{BTreeMap, HashSet};

use super::History;
use crate::report::{Ended, Report, Sample, Verdict};
use lockctl_core::stock::{Buy, Outcome};

/// A request a violation rests on, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blamed {
    /// The request.
    pub index: u64,
    /// Why it is named, in words.
    pub why: &'static str,
}

/// The requests of `h` the violations of `report` rest on, by request; none unless it
/// failed.
pub fn blamed(h: &History, report: &Report) -> Vec<Blamed> {
    let mut named: BTreeMap<u64, &'static str> = BTreeMap::new();
    if report.verdict != Verdict::Fail {
        return Vec::new();
    }
    let mut name = |index: u64, why: &'static str| {
        named.entry(index).or_insert(why);
    };
    let order = format!("{}-", h.facts.run_id);
    for v in &report.violations {
        for n in numbers_after(v, "request ") {
            name(n, "named by a violation");
        }
        for n in numbers_after(v, &order) {
            for s in h.samples.iter().filter(|s| h.original_of(s.index) == n) {
                name(s.index, "its order is named by a violation");
            }
        }
        // Orders the service numbered itself (`--order-from`), named whole.
        for s in &h.samples {
            if let Ended::Answered { order: Some(o), .. } = &s.ended
                && names_whole(v, o)
            {
                name(s.index, "its order is named by a violation");
            }
        }
        if let Some(rest) = v.strip_prefix("the per-user limit of ") {
            let limit = numbers_after(v, "limit of ").next().unwrap_or(0);
            for user in
                numbers_after(rest, "u").filter(|u| rest.contains(&format!("u{u} was sold")))
            {
                let theirs = |s: &&Sample| h.user_of(s.index) == Some(format!("u{user}"));
                for s in beyond(h, limit as i64, theirs) {
                    name(s, "bought beyond the user's limit");
                }
            }
        }
        // Under-sold as a whole (the pair form names its requests).
        if v.starts_with("under-sold:") && numbers_after(v, "request ").next().is_none() {
            for s in h
                .samples
                .iter()
                .filter(|s| outcome(s) == Some(Outcome::SoldOut))
            {
                name(s.index, "told sold out while stock was left");
            }
        }
    }
    let initial = h.facts.initial_stock;
    for s in beyond(h, initial, |_| true) {
        name(s, "told bought beyond the stock");
    }
    if let Some(after) = h.read_back.stock_after {
        for s in beyond(h, (initial - after).max(0), |_| true) {
            name(s, "told bought, and the stock never fell for it");
        }
    }
    named
        .into_iter()
        .map(|(index, why)| Blamed { index, why })
        .collect()
}

/// Whether `text` names `id` as a whole word: `SO-1` is not named by `SO-10`. An id of
/// digits alone (an auto-increment's 1, 2, 3) is named only where a violation lists ids (after
/// `: `, `, ` or `(`, before `,`, `)`, ` (`, ` has` or the end), never by a count: "1 request
/// was answered" names no order 1.
fn names_whole(text: &str, id: &str) -> bool {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
    let numeric = id.bytes().all(|b| b.is_ascii_digit());
    !id.is_empty()
        && text.match_indices(id).any(|(at, _)| {
            let (before, after) = (&text[..at], &text[at + id.len()..]);
            let whole = !word(before.chars().next_back()) && !word(after.chars().next());
            let listed = [": ", ", ", "("].iter().any(|p| before.ends_with(p))
                && (after.is_empty()
                    || [",", ")", " (", " has"]
                        .iter()
                        .any(|p| after.starts_with(p)));
            whole && (!numeric || listed)
        })
}

/// The requests told "bought" (of those `mine` picks) once the units told bought, in the
/// order they were answered, passed `limit`; an order counted once, whatever its retries
/// were told.
fn beyond(h: &History, limit: i64, mine: impl Fn(&&Sample) -> bool) -> Vec<u64> {
    let mut sales: Vec<&Sample> = h
        .samples
        .iter()
        .filter(|s| outcome(s) == Some(Outcome::Bought) && !replayed(s))
        .filter(mine)
        .collect();
    sales.sort_by_key(|s| (s.at, s.index));
    let (mut sold, mut orders, mut past) = (0i64, HashSet::new(), Vec::new());
    for s in sales {
        if !orders.insert(h.original_of(s.index)) {
            continue;
        }
        sold += h.facts.qty as i64;
        if sold > limit {
            past.push(s.index);
        }
    }
    past
}

fn outcome(s: &Sample) -> Option<Outcome> {
    match &s.ended {
        Ended::Done { outcome, .. } => Some(outcome.outcome()),
        Ended::Answered { outcome, .. } => *outcome,
        Ended::Failed { .. } => None,
    }
}

/// A retry told "bought" for an order that had bought: nothing was sold by it.
fn replayed(s: &Sample) -> bool {
    matches!(
        &s.ended,
        Ended::Done {
            outcome: Buy::Bought { .. },
            replayed: true,
            ..
        }
    )
}

/// The numbers that follow `prefix` in `text`.
fn numbers_after<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = u64> + 'a {
    text.match_indices(prefix).filter_map(move |(i, _)| {
        let rest = &text[i + prefix.len()..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::history::ReadBack;
    use crate::options::Mode;
    use crate::report::{RunFacts, Subject};

    /// An endpoint's run from `stock`, each answer (`Some(true)` bought, `Some(false)` sold
    /// out) at its millisecond, the stock read back `after`.
    fn run(stock: i64, answers: &[(Option<bool>, u64)], after: i64, users: Option<u64>) -> History {
        let samples = answers
            .iter()
            .enumerate()
            .map(|(i, &(bought, at))| Sample {
                index: i as u64,
                ended: Ended::Answered {
                    outcome: bought.map(|b| match b {
                        true => Outcome::Bought,
                        false => Outcome::SoldOut,
                    }),
                    remaining: None,
                    order: None,
                },
                latency: Duration::from_millis(1),
                lock_wait: None,
                lock_hold: None,
                sent: Duration::ZERO,
                at: Duration::from_millis(at),
            })
            .collect();
        History {
            facts: RunFacts {
                sku: "s".into(),
                run_id: "hab".into(),
                requests: answers.len() as u64,
                concurrency: 4,
                strategy: Subject::Endpoint,
                mode: Mode::Http,
                qty: 1,
                ttl_ms: 0,
                wait_ms: 0,
                work_ms: 0,
                watchdog: false,
                redlock_nodes: None,
                seeded: true,
                retry_every: None,
                initial_stock: stock,
                elapsed: Duration::from_millis(10),
                client_cpu: None,
            },
            users,
            samples,
            faults: Vec::new(),
            read_back: ReadBack {
                stock_after: Some(after),
                error: None,
                ledger: None,
            },
            stock_reads: Vec::new(),
            hunt: None,
            went_up: None,
            restart: None,
            server: "x".into(),
            interrupted: None,
            notes: Vec::new(),
            findings: Vec::new(),
            unjudged: None,
            pipeline: None,
            http: None,
            client_max_rss_mb: None,
        }
    }

    fn indices(h: &History) -> Vec<(u64, &'static str)> {
        blamed(h, &h.judge())
            .into_iter()
            .map(|b| (b.index, b.why))
            .collect()
    }

    #[test]
    fn the_sales_answered_after_the_stock_ran_out_are_the_ones_named() {
        // Stock 2, four told bought, answered in the reverse of their order: 1 and 0 last.
        let yes = Some(true);
        let h = run(2, &[(yes, 9), (yes, 8), (yes, 2), (yes, 1)], -2, None);
        let beyond = "told bought beyond the stock";
        assert_eq!(indices(&h), [(0, beyond), (1, beyond)]);
        // Told bought, and the stock fell by one of the two.
        let h = run(2, &[(yes, 1), (yes, 2)], 1, None);
        assert_eq!(
            indices(&h),
            [(1, "told bought, and the stock never fell for it")]
        );
    }

    #[test]
    fn a_sold_out_while_stock_was_left_and_a_user_over_the_limit_are_named() {
        let (yes, no) = (Some(true), Some(false));
        let h = run(3, &[(yes, 1), (no, 2)], 2, None);
        assert_eq!(indices(&h), [(1, "told sold out while stock was left")]);
        // u0 (requests 0 and 2) sold twice, with a limit of one: the second is named.
        let mut h = run(4, &[(yes, 1), (yes, 2), (yes, 3)], 1, Some(2));
        // The finding as the hunt's per-user check words it (lockctl-hunt's `checks`).
        h.findings = vec![
            "the per-user limit of 1 was broken: u0 was sold 2 (1 user over the limit)".into(),
        ];
        assert_eq!(indices(&h), [(2, "bought beyond the user's limit")]);
    }

    /// Issue 50: a lost-order FAIL on a service that numbers its own orders outlined no
    /// request (only `<run id>-N` ids were looked for): the answers whose numbers a violation
    /// names are named, whole (`SO-1` is not `SO-10`).
    #[test]
    fn the_answers_whose_own_order_numbers_a_violation_names_are_named() {
        let yes = Some(true);
        let mut h = run(5, &[(yes, 1), (yes, 2), (yes, 3)], 2, None);
        for (s, o) in h.samples.iter_mut().zip(["SO-1", "SO-10", "SO-2"]) {
            s.ended = Ended::Answered {
                outcome: Some(Outcome::Bought),
                remaining: None,
                order: Some(o.into()),
            };
        }
        h.findings =
            vec!["lost orders: 1 request was answered \"bought\" but has no row: SO-10".into()];
        assert_eq!(indices(&h), [(1, "its order is named by a violation")]);
        assert_eq!(h.order_shown(&h.samples[1]), "SO-10");
        assert!(!names_whole("has no row: SO-10", "SO-1"));
        assert!(names_whole("rows: SO-1, SO-2", "SO-1"));
    }

    /// Found by an attack round (issue 50): a service that numbers its orders 1, 2, 3 (an
    /// auto-increment id, the commonest kind) has its numbers matched against the whole
    /// violation text, counts included: "1 request was answered" names the request whose
    /// order is number 1, which nothing is wrong with. The wrong request is outlined in the
    /// HTML page and the history, and `Failure::came` dates the faults against it.
    #[test]
    fn counts_in_a_violation_are_not_numeric_order_ids() {
        let yes = Some(true);
        let mut h = run(5, &[(yes, 9), (yes, 2), (yes, 3)], 2, None);
        for (s, o) in h.samples.iter_mut().zip(["1", "2", "3"]) {
            s.ended = Ended::Answered {
                outcome: Some(Outcome::Bought),
                remaining: None,
                order: Some(o.into()),
            };
        }
        h.findings =
            vec!["lost orders: 1 request was answered \"bought\" but has no row: 3".into()];
        assert_eq!(indices(&h), [(2, "its order is named by a violation")]);
    }

    #[test]
    fn a_pass_names_nothing() {
        let yes = Some(true);
        let h = run(2, &[(yes, 1), (yes, 2), (Some(false), 3)], 0, None);
        assert_eq!(h.judge().verdict, Verdict::Pass);
        assert!(indices(&h).is_empty());
    }
}
