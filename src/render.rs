//! Turns reports into what a person or a script reads: text lines or one JSON object.
//!
//! Rendering is pure (a report in, a `String` out), so every format is tested from hand-built
//! reports with no Redis. Units live in field names (`p99_ms`, `elapsed_s`).

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::check::CheckReport;
use crate::hammer::{Percentiles, Report, Verdict};
use crate::stock::{Buy, Purchase, Strategy};

/// `check` for a person.
pub fn check_text(r: &CheckReport) -> String {
    let mut s = format!(
        "Redis at {}: version {}, role {}, round trip {:.3} ms (max {:.3} ms)\n",
        r.addr, r.redis_version, r.role, r.rtt_ms, r.rtt_max_ms
    );
    for p in &r.problems {
        let _ = writeln!(s, "problem: {p}");
    }
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s.push_str(if r.ok {
        "ok: fit for locking\n"
    } else {
        "not fit for locking\n"
    });
    s
}

/// `check --json`.
pub fn check_json(r: &CheckReport) -> Value {
    serde_json::to_value(r).expect("a check report serializes")
}

/// `buy` for a person, after the seed's three messages.
pub fn buy_text(sku: &str, p: &Purchase) -> String {
    let mut s = match p.outcome {
        Buy::Bought { remaining } => match p.replayed {
            Some(q) => format!(
                "already bought: order {} bought {q} of {sku} before; nothing deducted now, {remaining} left",
                p.order_id
            ),
            None => format!(
                "bought, {remaining} left ({} of {sku}, order {})",
                p.qty, p.order_id
            ),
        },
        Buy::SoldOut { remaining } => {
            format!("sold out: {sku} has {remaining} left, {} wanted", p.qty)
        }
        Buy::Busy => format!(
            "busy, try again: another buyer holds the lock on {sku} (or wait for it with --wait-ms)"
        ),
        Buy::LeaseLost => format!(
            "lease lost: the lock on {sku} expired before the deduction; nothing was deducted \
             (raise --ttl-ms or add --watchdog)"
        ),
        Buy::LimitReached { bought, limit } => format!(
            "limit reached: this user already has {bought} of {sku} and may buy {limit} in all; \
             nothing was deducted"
        ),
    };
    s.push('\n');
    if p.overran_lease {
        s.push_str(
            "warning: the lease expired before the release: another buyer may have been inside \
             the lock at the same time (raise --ttl-ms, add --watchdog, or use --strategy fenced)\n",
        );
    }
    s
}

/// `buy --json`: the contract's fields, then the rest.
pub fn buy_json(sku: &str, strategy: Strategy, p: &Purchase) -> Value {
    let ms = |d: Option<std::time::Duration>| d.map(|d| round3(d.as_secs_f64() * 1000.0));
    let mut v = json!({
        "outcome": p.outcome.name(),
        "remaining": p.outcome.remaining(),
        "sku": sku,
        "qty": p.qty,
        "order_id": p.order_id,
        "strategy": strategy,
        "fence": p.fence,
        "replayed": p.replayed.is_some(),
        "lease_overrun": p.overran_lease,
        "lock_wait_ms": ms(p.lock_wait),
        "lock_hold_ms": ms(p.lock_hold),
        "renewals": p.renewals,
    });
    if let Buy::LimitReached { bought, limit } = p.outcome {
        v["user_bought"] = json!(bought);
        v["limit"] = json!(limit);
    }
    if let Some(q) = p.replayed {
        v["original_qty"] = json!(q);
    }
    v
}

/// `hammer` for a person: aligned rows, the verdict last.
pub fn hammer_text(r: &Report) -> String {
    let mut s = String::new();
    let row = |s: &mut String, label: &str, text: String| {
        let _ = writeln!(s, "  {label:<11}{text}");
    };
    let _ = writeln!(
        s,
        "hammer: {} purchases of {} x{}, {} at a time, strategy {} ({})",
        r.requests,
        r.sku,
        r.qty,
        r.concurrency,
        r.strategy,
        mode_name(r)
    );
    let mut outcomes = format!(
        "bought {}  sold out {}  busy {}  lease lost {}  errors {}",
        r.bought, r.sold_out, r.busy, r.lease_lost, r.errors
    );
    if r.limit_reached > 0 {
        let _ = write!(outcomes, "  limit {}", r.limit_reached);
    }
    if r.replayed > 0 {
        let _ = write!(outcomes, "  (replayed {})", r.replayed);
    }
    row(&mut s, "outcomes", outcomes);
    row(
        &mut s,
        "stock",
        format!(
            "{} -> {} (consumed {}, sold {}, ledger {} units in {} orders){}",
            r.initial_stock,
            r.final_stock,
            r.consumed,
            r.sold_qty,
            r.ledger_qty,
            r.ledger_orders,
            if r.seeded {
                ""
            } else {
                " [stock already in Redis]"
            }
        ),
    );
    row(&mut s, "latency", pct_text(&r.latency_ms));
    if let Some(w) = &r.lock_wait_ms {
        row(&mut s, "lock wait", pct_text(w));
    }
    if let Some(h) = &r.lock_hold_ms {
        row(&mut s, "lock hold", pct_text(h));
    }
    row(
        &mut s,
        "throughput",
        format!(
            "{:.1} purchases/s over {:.3} s",
            r.throughput_rps, r.elapsed_s
        ),
    );
    for n in &r.notes {
        row(&mut s, "note", n.clone());
    }
    if let Some(e) = &r.first_error {
        row(&mut s, "first error", e.clone());
    }
    match r.verdict {
        Verdict::Pass => row(
            &mut s,
            "verdict",
            format!(
                "PASS: nothing oversold (stock {} -> {}), every request accounted for",
                r.initial_stock, r.final_stock
            ),
        ),
        Verdict::Fail => {
            let n = r.violations.len();
            row(
                &mut s,
                "verdict",
                format!("FAIL: {n} invariant(s) violated"),
            );
            for v in &r.violations {
                row(&mut s, "", format!("- {v}"));
            }
        }
    }
    s
}

/// `hammer --json`: the whole report.
pub fn hammer_json(r: &Report) -> Value {
    serde_json::to_value(r).expect("a hammer report serializes")
}

fn mode_name(r: &Report) -> &'static str {
    match r.mode {
        crate::hammer::Mode::Threads => "threads",
        crate::hammer::Mode::Procs => "processes",
    }
}

fn pct_text(p: &Percentiles) -> String {
    format!(
        "p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        p.p50, p.p90, p.p99, p.max
    )
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
