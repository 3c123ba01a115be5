use super::*;

#[test]
fn bits_remember_what_was_set_and_tell_the_difference() {
    let mut a = Bits::new(200);
    let mut b = Bits::new(200);
    for i in [0, 63, 64, 199] {
        a.set(i);
    }
    b.set(64);
    a.set(500); // out of range: ignored, not a panic
    assert!(a.get(63) && !a.get(62) && !a.get(500));
    assert_eq!(a.minus(&b).collect::<Vec<_>>(), vec![0, 63, 199]);
}

#[test]
fn only_a_sold_out_answered_before_a_sale_was_sent_counts() {
    let ms = Duration::from_millis;
    let mut p = Precedence::default();
    p.sold_out(ms(5), 1);
    p.bought(ms(5), 2);
    assert_eq!(
        p.sold_out_before_a_sale(),
        None,
        "the same moment is no order"
    );
    p.bought(ms(4), 3);
    assert_eq!(
        p.sold_out_before_a_sale(),
        None,
        "sent before the answer came"
    );
    p.bought(Duration::from_micros(5001), 4);
    p.sold_out(ms(9), 5);
    assert_eq!(
        p.sold_out_before_a_sale(),
        Some((
            (ms(5), 1),
            Sale {
                sent: Duration::from_micros(5001),
                first: 4,
                answered: 4
            }
        ))
    );
}

fn sample(index: u64, sent_ms: u64, at_ms: u64, ended: Ended) -> Sample {
    Sample {
        index,
        ended,
        latency: Duration::from_millis(at_ms - sent_ms),
        lock_wait: None,
        lock_hold: None,
        sent: Duration::from_millis(sent_ms),
        at: Duration::from_millis(at_ms),
    }
}

fn answer(outcome: Outcome) -> Ended {
    Ended::Answered {
        outcome: Some(outcome),
        remaining: None,
        order: None,
    }
}

fn lost() -> Ended {
    Ended::Failed {
        kind: ErrorKind::Http(503),
        indeterminate: true,
        message: "HTTP 503: retry with the same order id".into(),
        hint: None,
    }
}

/// Every other request retries the one before it (orders 0-1, 2-3, 4-5): request 3 is
/// told "sold out" at 49 ms; order 4-5 was first sent at 40 ms (its answer lost), and its
/// retry, sent at 50 ms, is told "bought". The sale may be request 4's, made before the
/// stock ran out.
#[test]
fn a_sale_answered_to_a_retry_counts_from_the_first_send_of_its_order() {
    let records = [
        sample(3, 30, 49, answer(Outcome::SoldOut)),
        sample(5, 50, 52, answer(Outcome::Bought)),
        sample(4, 40, 41, lost()),
    ];
    let mut retrying = Tally::new(6, 1).retrying(Some(2));
    let mut not = Tally::new(6, 1);
    for s in &records {
        retrying.add(s);
        not.add(s);
    }
    assert_eq!(retrying.sold_out_before_a_sale(), None);
    assert!(
        not.sold_out_before_a_sale().is_some(),
        "without retries it is one"
    );
}

#[test]
fn a_real_under_sell_is_still_found_when_requests_are_retried() {
    // Order 4-5 first sent at 50 ms, after "sold out" came at 49 ms: a new sale.
    let mut t = Tally::new(6, 1).retrying(Some(2));
    for s in [
        sample(3, 30, 49, answer(Outcome::SoldOut)),
        sample(5, 55, 58, answer(Outcome::Bought)),
        sample(4, 50, 51, lost()),
    ] {
        t.add(&s);
    }
    assert_eq!(
        t.sold_out_before_a_sale().map(|(_, sale)| sale),
        Some(Sale {
            sent: Duration::from_millis(50),
            first: 4,
            answered: 5
        })
    );
    // An order whose retry never came counts from its own send.
    let mut t = Tally::new(6, 1).retrying(Some(2));
    t.add(&sample(3, 30, 49, answer(Outcome::SoldOut)));
    t.add(&sample(4, 50, 51, answer(Outcome::Bought)));
    assert_eq!(
        t.sold_out_before_a_sale().map(|(_, sale)| sale.answered),
        Some(4)
    );
}

#[test]
fn the_timeline_stays_small_and_spans_the_run() {
    let mut t = Timeline::default();
    for i in 0..100_000u64 {
        t.add(Duration::from_micros(i), i as i64);
    }
    assert!(t.points.len() < 2 * TIMELINE_POINTS);
    assert_eq!(t.points[0].1, 0);
    assert!(t.points.last().unwrap().1 > 90_000);
}
