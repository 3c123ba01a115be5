//! The hammer's judge and renderers on hand-built runs: no Redis, every verdict reasoned out.

use std::collections::HashMap;
use std::time::Duration;

use lockctl::advice::CliAdvice;
use lockctl_core::stock::{Buy, Strategy};
use lockctl_hammer::{Ended, Mode, Readback, Report, RunFacts, Sample, Verdict, judge};
use lockctl_render::{self as render, Context};

use crate::support::HAMMER_FIELDS;

fn facts(requests: u64, initial_stock: i64) -> RunFacts {
    RunFacts {
        sku: "sku_886".into(),
        run_id: "hTEST".into(),
        requests,
        concurrency: 4,
        strategy: Strategy::Lock.into(),
        mode: Mode::Threads,
        qty: 1,
        ttl_ms: 5000,
        wait_ms: 5000,
        work_ms: 0,
        watchdog: false,
        seeded: true,
        retry_every: None,
        initial_stock,
        elapsed: Duration::from_millis(100),
        client_cpu: None,
        redlock_nodes: None,
    }
}

fn done(index: u64, outcome: Buy) -> Sample {
    Sample {
        index,
        ended: Ended::Done {
            outcome,
            replayed: false,
            overran_lease: false,
        },
        latency: Duration::from_micros(300 + index * 10),
        lock_wait: Some(Duration::from_micros(100)),
        lock_hold: Some(Duration::from_micros(50)),
        sent: Duration::from_millis(index).saturating_sub(Duration::from_micros(300 + index * 10)),
        at: Duration::from_millis(index),
    }
}

fn failed(index: u64, indeterminate: bool) -> Sample {
    Sample {
        index,
        ended: Ended::Failed {
            kind: lockctl_core::ErrorKind::TimedOut,
            indeterminate,
            message: "timed out after 2000 ms talking to 127.0.0.1:6379".into(),
            hint: Some(lockctl_core::Hint::CallTimeout),
        },
        latency: Duration::from_secs(2),
        lock_wait: None,
        lock_hold: None,
        sent: Duration::ZERO,
        at: Duration::from_millis(index),
    }
}

/// Fails unless one of the report's violations mentions `needle`.
#[track_caller]
fn assert_violation(r: &Report, needle: &str) {
    assert!(
        r.violations.iter().any(|v| v.contains(needle)),
        "no violation mentions {needle:?}: {:?}",
        r.violations
    );
}

/// `n` buyers told "bought", counting the stock down from `stock`, then sold-outs.
fn clean_run(stock: i64, requests: u64) -> (Vec<Sample>, Readback) {
    let mut samples = Vec::new();
    let mut ledger = HashMap::new();
    for i in 0..requests {
        if (i as i64) < stock {
            samples.push(done(
                i,
                Buy::Bought {
                    remaining: stock - i as i64 - 1,
                },
            ));
            ledger.insert(i, 1);
        } else {
            samples.push(done(i, Buy::SoldOut { remaining: 0 }));
        }
    }
    (
        samples,
        Readback {
            final_stock: 0,
            ledger,
            went_up: None,
        },
    )
}

#[test]
fn a_clean_run_passes_and_accounts_for_every_request() {
    let (samples, rb) = clean_run(10, 100);
    let r = judge(&facts(100, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
    assert_eq!(
        (r.bought, r.sold_out, r.sold_qty, r.oversold),
        (10, 90, 10, 0)
    );
    assert_eq!(r.consumed, Some(10));
    assert_eq!(r.ledger_qty, Some(10));
    assert_eq!(
        r.latency_buckets.iter().map(|b| b.count).sum::<u64>(),
        100,
        "every request is in one latency bucket"
    );
    assert!(r.latency_ms.p50 <= r.latency_ms.p99 && r.latency_ms.p99 <= r.latency_ms.max);
    assert_eq!(r.stock_timeline.first(), Some(&[0.0, 10.0]));
    assert_eq!(r.stock_timeline.last().map(|p| p[1]), Some(0.0));
}

#[test]
fn negative_stock_is_an_oversell() {
    let (mut samples, mut rb) = clean_run(10, 20);
    samples[10] = done(10, Buy::Bought { remaining: -1 });
    rb.ledger.insert(10, 1);
    rb.final_stock = -1;
    let r = judge(&facts(20, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_eq!(r.oversold, 1);
    assert_violation(&r, "negative");
}

#[test]
fn a_buyer_told_sold_out_while_stock_remained_is_an_under_sell() {
    // Built on purpose: the last two buyers were told "sold out", yet 2 units are left.
    let (mut samples, mut rb) = clean_run(10, 10);
    samples[8] = done(8, Buy::SoldOut { remaining: 0 });
    samples[9] = done(9, Buy::SoldOut { remaining: 0 });
    rb.ledger.remove(&8);
    rb.ledger.remove(&9);
    rb.final_stock = 2;
    let r = judge(&facts(10, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_violation(&r, "under-sold");
}

/// All ten units sold and none left, so the stock at the end says nothing; but buyer 0 was
/// told "sold out" at 0.5 ms, before buyer 10 even started (at 1 ms) and bought.
fn sold_out_first_then_all_sold() -> (Vec<Sample>, Readback) {
    let (mut samples, mut rb) = clean_run(10, 11);
    samples.rotate_right(1);
    for (i, s) in samples.iter_mut().enumerate() {
        s.index = i as u64;
        s.sent = Duration::from_millis(i as u64);
        s.at = s.sent + Duration::from_micros(400);
    }
    samples[0].at = Duration::from_micros(500);
    rb.ledger = (1..=10).map(|i| (i, 1)).collect();
    (samples, rb)
}

#[test]
fn a_sold_out_told_before_a_later_buyer_started_is_an_under_sell() {
    let (samples, rb) = sold_out_first_then_all_sold();
    let r = judge(&facts(11, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_violation(
        &r,
        "under-sold: request 0 was answered \"sold out\" at 0.5 ms, before request 10 was sent (at 10 ms)",
    );

    // Stock put back during the run (a restart, say) would explain it: a note, not a FAIL.
    let restocked = Readback {
        went_up: Some("Redis restarted during the run".into()),
        ..rb.clone()
    };
    let r = judge(&facts(11, 10), &samples, &restocked);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("not counted as under-selling")),
        "{:?}",
        r.notes
    );

    // Answers that overlap in time say nothing of their order: buyer 10 was sent while the
    // "sold out" was still on its way (sent at 0.5 ms, the answer came at 0.5 ms).
    let mut overlapping = samples.clone();
    overlapping[10].sent = Duration::from_micros(500);
    for s in &mut overlapping[1..10] {
        s.sent = Duration::from_micros(100);
    }
    let r = judge(&facts(11, 10), &overlapping, &rb);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
}

#[test]
fn an_order_deducted_twice_is_named() {
    let (samples, mut rb) = clean_run(10, 10);
    rb.ledger.insert(3, 2);
    rb.final_stock = -1;
    let r = judge(&facts(10, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_violation(&r, "hTEST-3 was deducted 2 times");
}

#[test]
fn stock_that_fell_without_a_buyer_being_told_is_caught() {
    let (samples, mut rb) = clean_run(10, 10);
    rb.final_stock = -1; // one unit gone with nobody told and nothing in the ledger
    let r = judge(&facts(10, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_violation(&r, "the stock fell by 11");
    assert_violation(&r, "ledger records 10");
}

#[test]
fn an_indeterminate_error_may_have_deducted_but_a_refused_one_may_not() {
    // Request 9 timed out after sending: its deduction landed (it is in the ledger).
    let (mut samples, rb) = clean_run(10, 10);
    samples[9] = failed(9, true);
    let r = judge(&facts(10, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.violations);
    assert_eq!((r.errors, r.indeterminate, r.bought), (1, 1, 9));
    // The first error carries the library's hint; the command line words it, in text and JSON.
    let said = "timed out after 2000 ms talking to 127.0.0.1:6379 (see --timeout-ms)";
    assert!(render::hammer_text(&r, false, &CliAdvice).contains(said));
    let doc = json(render::hammer_document(
        std::slice::from_ref(&r),
        &Context::default(),
        &CliAdvice,
    ));
    assert_eq!(doc["first_error"], said);

    // The same, but the error is one that cannot have been applied: the books do not add up.
    samples[9] = failed(9, false);
    let r = judge(&facts(10, 10), &samples, &rb);
    assert_eq!(r.verdict, Verdict::Fail);
    assert_violation(&r, "hTEST-9");
}

#[test]
fn a_lost_request_is_unaccounted_for() {
    let (mut samples, rb) = clean_run(10, 10);
    samples.pop();
    let mut rb = rb;
    rb.ledger.remove(&9);
    rb.final_stock = 1;
    let r = judge(&facts(10, 10), &samples, &rb);
    assert_violation(&r, "unaccounted");
}

fn two_reports() -> Vec<Report> {
    let (samples, rb) = clean_run(10, 100);
    let fast = judge(
        &RunFacts {
            strategy: Strategy::Atomic.into(),
            elapsed: Duration::from_millis(10),
            ..facts(100, 10)
        },
        &samples,
        &rb,
    );
    let slow = judge(&facts(100, 10), &samples, &rb);
    vec![slow, fast]
}

#[test]
fn the_text_summary_has_aligned_rows_and_a_one_line_verdict() {
    let reports = two_reports();
    let text = render::hammer_text(&reports[0], false, &CliAdvice);
    for needle in ["outcomes", "latency", "throughput", "verdict     PASS"] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
    assert!(!text.contains('\x1b'), "no colour when not asked");
    assert!(render::hammer_text(&reports[0], true, &CliAdvice).contains("\x1b[1;32mPASS"));
    let cmp = render::comparison_text(&reports);
    assert!(cmp.contains("atomic ran"), "{cmp}");
    assert!(cmp.contains("10.00 times faster than lock"), "{cmp}");
}

#[test]
fn the_json_document_carries_the_contract_fields_and_the_buckets() {
    let reports = two_reports();
    let one = json(render::hammer_document(
        &reports[..1],
        &Context::default(),
        &CliAdvice,
    ));
    for f in HAMMER_FIELDS.iter().chain(&["latency_buckets"]) {
        assert!(!one[f].is_null(), "{f} missing");
    }
    let both = json(render::hammer_document(
        &reports,
        &Context::default(),
        &CliAdvice,
    ));
    assert_eq!(both["verdict"], "pass");
    assert_eq!(both["runs"].as_array().unwrap().len(), 2);
    assert_eq!(both["comparison"][0]["strategy"], "atomic");
    let text = serde_json::to_string(&both).unwrap();
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(back, both);
}

#[test]
fn the_markdown_table_has_a_row_per_strategy() {
    let md = render::hammer_markdown(&two_reports(), &Context::default());
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 4, "header, rule and two rows:\n{md}");
    let cells = rows[0].split('|').count();
    assert!(rows.iter().all(|r| r.split('|').count() == cells), "{md}");
    assert!(rows[2].starts_with("| atomic |"), "fastest first:\n{md}");
}

#[test]
fn the_html_page_stands_alone_with_its_settings_every_column_and_the_distributions() {
    let context = Context {
        redis: "127.0.0.1:6379".into(),
        redis_version: Some("7.0.15".into()),
        lockctl_version: "0.1.0 (abc)".into(),
        started_at: "2026-11-30T11:00:00Z".into(),
        command_line: "lockctl hammer -n 100".into(),
    };
    let html = render::hammer_html(&two_reports(), &context);
    assert!(html.starts_with("<!DOCTYPE html>"));
    for heading in ["Latency", "Stock over time"] {
        assert!(html.contains(&format!("<h2>{heading}</h2>")), "{heading}");
    }
    for cell in [
        "<th>SKU</th>",
        "<th>lock</th>",
        "7.0.15",
        "0.1.0 (abc)",
        "2026-11-30T11:00:00Z",
        "lockctl hammer -n 100",
        "p90 ms",
        "p99.9 ms",
        "sold out",
        "errors",
        "oversold",
    ] {
        assert!(html.contains(cell), "{cell} missing");
    }
    // Each chart draws one line per strategy, told apart by dash pattern and markers too; the
    // stock chart also has its lines at the initial stock and at zero.
    let charts = html.matches("<svg").count();
    assert!(charts >= 2, "{charts} charts");
    assert_eq!(html.matches("<polyline").count(), charts * 2 + 2);
    assert!(html.contains("stroke-dasharray=\"8 4\""));
    assert!(html.contains("<rect") && html.contains("<circle"));
    for banned in ["<script", "http://", "https://", "src="] {
        let outside_svg_ns = html.replace("http://www.w3.org/2000/svg", "");
        assert!(!outside_svg_ns.contains(banned), "{banned} in the page");
    }
}

#[test]
fn a_run_that_cannot_be_read_back_has_an_unknown_verdict() {
    let (samples, _) = clean_run(10, 20);
    let e = lockctl_core::Error::Timeout {
        addr: "127.0.0.1:6379".into(),
        after: Duration::from_millis(500),
    };
    let r = lockctl_hammer::judge_unreadable(&facts(20, 10), &samples, &e);
    assert_eq!(r.verdict, Verdict::Unknown);
    assert_eq!(r.final_stock, None);
    assert!(r.violations.is_empty());
    // The verdict says it is unknown and why; the note says what could not be read.
    assert!(
        r.unknown_because
            .as_deref()
            .is_some_and(|w| w.contains("could not be read back")),
        "{:?}",
        r.unknown_because
    );
    assert!(
        r.notes[0].contains("could not read the stock and the ledger back"),
        "{:?}",
        r.notes
    );
    let v = json(render::hammer_document(
        std::slice::from_ref(&r),
        &Context::default(),
        &CliAdvice,
    ));
    assert_eq!(v["verdict"], "unknown");
    assert!(v["final_stock"].is_null());
    assert!(render::hammer_text(&r, false, &CliAdvice).contains("UNKNOWN"));
}

/// A typed document as the JSON value a script reads.
fn json<T: serde::Serialize>(doc: T) -> serde_json::Value {
    serde_json::to_value(doc).expect("a report serialises")
}
