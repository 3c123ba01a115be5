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
