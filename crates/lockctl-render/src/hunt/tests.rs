use super::*;

/// Twelve unjudged rounds, five listed: the text says how many more there were, and the
/// JSON counts them all.
#[test]
fn the_unjudged_rounds_not_listed_are_counted() {
    let mut h = HuntReport::new(1);
    h.rounds = 12;
    h.unjudged = 12;
    h.unknown = (1..=5).map(|n| format!("round {n}: down")).collect();
    let text = hunt_text(&h, &Replay::default(), false, false, &crate::Unworded);
    assert!(text.contains("unjudged  and 7 more"), "{text}");
    // Whether the orders check ran is said, PASS or not (issue 50).
    assert!(
        text.contains("orders    not checked (no --orders-sql)"),
        "{text}"
    );
    let replay = Replay::default();
    let json = serde_json::to_value(hunt_json(&h, &replay, &crate::Unworded)).unwrap();
    assert_eq!(json["unjudged_rounds"], 12);
    h.unjudged = 5;
    let text = hunt_text(&h, &Replay::default(), false, false, &crate::Unworded);
    assert!(!text.contains("more"), "{text}");
}

/// Issue 50: a fault struck after every purchase was done was listed beside the
/// violation as if it caused it. Each fault now says whether it came before the requests
/// the violation rests on were all answered, or after.
#[test]
fn each_fault_of_a_failure_says_whether_it_came_before_or_after_the_requests_it_rests_on() {
    use lockctl_hammer::history::Fault;
    use lockctl_hunt::plan::{Round, Shape};
    use std::time::Duration;
    // Three told "bought" from a stock of 2, answered at 1, 2 and 3 ms: the third is past
    // the stock.
    let history = crate::fixtures::round(2, 3);
    let report = history.judge();
    assert_eq!(report.verdict, Verdict::Fail, "{:?}", report.violations);
    let fault = |name: &str, ms: u64| Fault {
        fault: name.into(),
        start: Duration::from_millis(ms),
        stop: None,
        detail: "one process".into(),
        took: true,
    };
    let mut h = HuntReport::new(1);
    h.verdict = Verdict::Fail;
    h.failure = Some(Box::new(lockctl_hunt::Failure {
        round: Round {
            number: 1,
            stock: 2,
            requests: 3,
            shape: Shape::Burst { concurrency: 2 },
            faults: Vec::new(),
            retry_every: None,
        },
        sku: "s".into(),
        report,
        history: Some(Box::new(history)),
        faults: vec![fault("pause-worker", 2), fault("kill-worker", 358)],
    }));
    let text = hunt_text(&h, &Replay::default(), false, true, &crate::Unworded);
    assert!(
        text.contains("pause-worker at 2 ms: one process (before the requests the violation rests on were all answered)"),
        "{text}"
    );
    assert!(
        text.contains("kill-worker at 358 ms: one process (after every request the violation rests on was answered)"),
        "{text}"
    );
    let replay = Replay::default();
    h.orders_checked = Some(3);
    let json = serde_json::to_value(hunt_json(&h, &replay, &crate::Unworded)).unwrap();
    assert_eq!(json["orders_checked_rounds"], 3);
    let text = hunt_text(&h, &Replay::default(), false, false, &crate::Unworded);
    assert!(
        text.contains(
            "orders    checked in 3 rounds: order rows held against the answers and the stock"
        ),
        "{text}"
    );
    assert_eq!(json["failure"]["faults"][0]["came"], "before");
    assert_eq!(json["failure"]["faults"][1]["came"], "after");
}
