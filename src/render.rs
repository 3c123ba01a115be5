//! Turns reports into what a person or a script reads: text lines or one JSON object.
//!
//! Rendering is pure (a report in, a `String` out), so every format is tested from hand-built
//! reports with no Redis. Units live in field names (`p99_ms`, `elapsed_s`).

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::check::CheckReport;
use crate::hammer::{Percentiles, Report, Verdict};
use crate::status::Status;
use crate::stock::{Buy, Purchase, Strategy};

/// `check` for a person.
pub fn check_text(r: &CheckReport) -> String {
    let mut s = format!(
        "Redis at {}: version {}, role {}, round trip {:.3} ms (max {:.3} ms)\n",
        r.addr, r.redis_version, r.role, r.rtt_ms, r.rtt_max_ms
    );
    for n in &r.nodes {
        match (&n.rtt_ms, &n.error) {
            (Some(rtt), _) => {
                let _ = writeln!(s, "lock node {}: ok, round trip {rtt:.3} ms", n.addr);
            }
            (None, e) => {
                let _ = writeln!(
                    s,
                    "lock node {}: DOWN ({})",
                    n.addr,
                    e.as_deref().unwrap_or("no answer")
                );
            }
        }
    }
    if let Some(q) = r.quorum {
        let _ = writeln!(
            s,
            "quorum: {}",
            if q { "reachable" } else { "NOT reachable" }
        );
    }
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
    serde_json::to_value(r).unwrap_or_else(|e| json!({ "error": e.to_string() }))
}

/// `status` for a person.
pub fn status_text(st: &Status) -> String {
    let mut s = format!(
        "{}: stock {}, seeded {}, sold {} (ledger: {} units in {} orders)\n",
        st.sku,
        st.stock,
        st.seeded.map_or("unknown".into(), |n| n.to_string()),
        st.sold,
        st.ledger_qty,
        st.ledger_orders
    );
    match st.reconciled {
        Some(true) => s.push_str("books: reconciled (stock + sold == seeded, ledger == sold)\n"),
        Some(false) => {
            s.push_str("books: DO NOT RECONCILE\n");
            for p in &st.problems {
                let _ = writeln!(s, "  - {p}");
            }
        }
        None => s.push_str(
            "books: cannot reconcile: no seed record (the stock was not set by lockctl seed)\n",
        ),
    }
    match &st.lock {
        Some(h) => {
            let _ = writeln!(
                s,
                "lock: held by {}, {:.3} s of lease left",
                h.token,
                h.ttl_ms as f64 / 1000.0
            );
        }
        None => s.push_str("lock: free\n"),
    }
    let _ = writeln!(s, "fence: {}  waiters: {}", st.fence, st.waiters);
    s
}

/// `status --json`.
pub fn status_json(st: &Status) -> Value {
    serde_json::to_value(st).unwrap_or_else(|e| json!({ "error": e.to_string() }))
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

/// `hammer` for a person: aligned rows, the verdict last (in green or red when `color`).
pub fn hammer_text(r: &Report, color: bool) -> String {
    let mut s = String::new();
    let row = |s: &mut String, label: &str, text: String| {
        let _ = writeln!(s, "  {label:<12}{text}");
    };
    let _ = writeln!(
        s,
        "hammer: {} purchases of {} x{}, {} at a time, strategy {} ({})",
        r.run.requests,
        r.run.sku,
        r.run.qty,
        r.run.concurrency,
        r.run.strategy,
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
            r.run.initial_stock,
            opt(r.final_stock),
            opt(r.consumed),
            r.sold_qty,
            r.ledger_qty,
            r.ledger_orders,
            if r.run.seeded {
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
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[1;{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    match r.verdict {
        Verdict::Pass => row(
            &mut s,
            "verdict",
            format!(
                "{}: nothing oversold (stock {} -> {}), every request accounted for",
                paint("32", "PASS"),
                r.run.initial_stock,
                opt(r.final_stock)
            ),
        ),
        Verdict::Unknown => row(
            &mut s,
            "verdict",
            format!(
                "{}: Redis could not be read back, so nothing is claimed",
                paint("33", "UNKNOWN")
            ),
        ),
        Verdict::Fail => {
            let n = r.violations.len();
            row(
                &mut s,
                "verdict",
                format!("{}: {n} invariant(s) violated", paint("31", "FAIL")),
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
    serde_json::to_value(r).unwrap_or_else(|e| json!({ "error": e.to_string() }))
}

/// The one JSON document for a hammer run: the report itself for one strategy; for several,
/// `{verdict, runs: [report...], comparison: [...]}` with `verdict` pass only if all passed.
pub fn hammer_document(reports: &[Report]) -> Value {
    match reports {
        [one] => hammer_json(one),
        _ => json!({
            "verdict": overall(reports),
            "runs": reports.iter().map(hammer_json).collect::<Vec<_>>(),
            "comparison": ranked(reports).iter().map(|(r, rel)| json!({
                "strategy": r.run.strategy,
                "throughput_rps": r.throughput_rps,
                "relative_speed": rel,
                "verdict": r.verdict,
            })).collect::<Vec<_>>(),
        }),
    }
}

/// All pass: pass; any fail: fail; otherwise (some unknown): unknown.
fn overall(reports: &[Report]) -> Verdict {
    if reports.iter().any(|r| r.verdict == Verdict::Fail) {
        Verdict::Fail
    } else if reports.iter().all(|r| r.verdict == Verdict::Pass) {
        Verdict::Pass
    } else {
        Verdict::Unknown
    }
}

/// Reports from fastest to slowest, each with the fastest one's speed as a multiple of its own.
fn ranked(reports: &[Report]) -> Vec<(&Report, f64)> {
    let mut v: Vec<&Report> = reports.iter().collect();
    v.sort_by(|a, b| b.throughput_rps.total_cmp(&a.throughput_rps));
    let best = v.first().map_or(0.0, |r| r.throughput_rps);
    v.into_iter()
        .map(|r| {
            let rel = if r.throughput_rps > 0.0 {
                round3(best / r.throughput_rps)
            } else {
                f64::INFINITY
            };
            (r, rel)
        })
        .collect()
}

/// The side-by-side table for several strategies, like hyperfine's summary.
pub fn comparison_text(reports: &[Report]) -> String {
    let mut s = String::from("comparison (the same load on a freshly seeded stock each time):\n");
    let _ = writeln!(
        s,
        "  {:<9}{:>13}{:>10}{:>10}{:>8}{:>10}  verdict",
        "strategy", "purchases/s", "p50 ms", "p99 ms", "sold", "stock"
    );
    let ranked = ranked(reports);
    for (r, _) in &ranked {
        let _ = writeln!(
            s,
            "  {:<9}{:>13.1}{:>10.3}{:>10.3}{:>8}{:>10}  {}",
            r.run.strategy.name(),
            r.throughput_rps,
            r.latency_ms.p50,
            r.latency_ms.p99,
            r.sold_qty,
            opt(r.final_stock),
            verdict_word(r.verdict)
        );
    }
    if let Some(((fastest, _), rest)) = ranked.split_first() {
        let _ = writeln!(s, "  {} ran", fastest.run.strategy);
        for (r, rel) in rest {
            let _ = writeln!(s, "    {rel:>8.2} times faster than {}", r.run.strategy);
        }
    }
    s
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "FAIL",
        Verdict::Unknown => "UNKNOWN",
    }
}

/// A number read back from Redis, or `?` when it could not be.
fn opt(v: Option<i64>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

/// `--export-markdown`: one row per strategy, then every violation.
pub fn hammer_markdown(reports: &[Report]) -> String {
    let mut s = String::new();
    if let Some(r) = reports.first() {
        let _ = writeln!(
            s,
            "Hammer on `{}`: {} purchases, {} at a time, {} ({} mode), stock {} each run.\n",
            r.run.sku,
            r.run.requests,
            r.run.concurrency,
            if r.run.watchdog {
                "watchdog on"
            } else {
                "no watchdog"
            },
            mode_name(r),
            r.run.initial_stock
        );
    }
    s.push_str("| strategy | purchases/s | slower than fastest | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | bought | sold out | busy | lease lost | errors | final stock | oversold | verdict |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (r, rel) in ranked(reports) {
        let l = &r.latency_ms;
        let _ = writeln!(
            s,
            "| {} | {:.1} | {:.2}x | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.run.strategy,
            r.throughput_rps,
            rel,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            r.bought,
            r.sold_out,
            r.busy,
            r.lease_lost,
            r.errors,
            opt(r.final_stock),
            r.oversold,
            verdict_word(r.verdict)
        );
    }
    let violations: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.violations
                .iter()
                .map(move |v| format!("- {}: {v}", r.run.strategy))
        })
        .collect();
    if !violations.is_empty() {
        let _ = write!(s, "\nViolations:\n\n{}\n", violations.join("\n"));
    }
    s
}

/// `--export-html`: one self-contained page (inline SVG, no scripts, no network) with the
/// latency distribution and the stock over time of each strategy, and the summary table.
pub fn hammer_html(reports: &[Report]) -> String {
    let series_cdf: Vec<Series> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let total: u64 = r
                .latency_buckets
                .iter()
                .map(|b| b.count)
                .sum::<u64>()
                .max(1);
            let mut seen = 0;
            let points = r
                .latency_buckets
                .iter()
                .map(|b| {
                    seen += b.count;
                    (b.le_ms.max(0.001), seen as f64 * 100.0 / total as f64)
                })
                .collect();
            Series {
                name: r.run.strategy.name().to_string(),
                color: PALETTE[i % PALETTE.len()],
                points,
            }
        })
        .collect();
    let series_stock: Vec<Series> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            name: r.run.strategy.name().to_string(),
            color: PALETTE[i % PALETTE.len()],
            points: r.stock_timeline.iter().map(|p| (p[0], p[1])).collect(),
        })
        .collect();
    let mut rows = String::new();
    for (r, rel) in ranked(reports) {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{:.1}</td><td>{:.2}x</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
            r.run.strategy,
            r.throughput_rps,
            rel,
            r.latency_ms.p50,
            r.latency_ms.p99,
            r.latency_ms.max,
            r.bought,
            r.busy,
            r.lease_lost,
            opt(r.final_stock),
            verdict_word(r.verdict).to_lowercase(),
            verdict_word(r.verdict)
        );
    }
    let mut violations = String::new();
    for r in reports {
        for v in &r.violations {
            let _ = write!(violations, "<li>{}: {}</li>", r.run.strategy, escape(v));
        }
    }
    let title = reports.first().map_or(String::new(), |r| {
        format!(
            "{} purchases of {}, {} at a time",
            r.run.requests,
            escape(&r.run.sku),
            r.run.concurrency
        )
    });
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>lockctl hammer: {title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
.pass {{ color: #1a7f37; font-weight: bold; }} .fail {{ color: #c62828; font-weight: bold; }}
svg {{ background: #fff; border: 1px solid #ddd; margin: 0.5em 0; }}
</style></head><body>
<h1>lockctl hammer</h1>
<p>{title}</p>
<table><tr><th>strategy</th><th>purchases/s</th><th>slower than fastest</th><th>p50 ms</th><th>p99 ms</th><th>max ms</th><th>bought</th><th>busy</th><th>lease lost</th><th>final stock</th><th>verdict</th></tr>
{rows}</table>
<ul>{violations}</ul>
<h2>Latency distribution</h2>
{cdf}
<h2>Stock over time</h2>
{stock}
</body></html>
"#,
        cdf = svg_chart(
            &series_cdf,
            true,
            "latency (ms, log scale)",
            "% of requests at or below"
        ),
        stock = svg_chart(
            &series_stock,
            false,
            "seconds since start",
            "stock the buyers were told"
        ),
    )
}

const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

struct Series {
    name: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
}

/// A line chart as inline SVG, with axes, five ticks each way and a legend.
fn svg_chart(series: &[Series], log_x: bool, x_label: &str, y_label: &str) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 360.0, 80.0, 20.0, 20.0, 50.0);
    let fx = |x: f64| if log_x { x.max(1e-3).log10() } else { x };
    let all = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, 0.0_f64, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(fx(x));
        x1 = x1.max(fx(x));
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y1) = (0.0, 1.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    if y1 - y0 < 1e-9 {
        y1 = y0 + 1.0;
    }
    let px = |x: f64| left + (fx(x) - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom);
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{b}" x2="{r}" y2="{b}" stroke="#444"/><line x1="{left}" y1="{top}" x2="{left}" y2="{b}" stroke="#444"/>"##,
        b = h - bottom,
        r = w - right
    );
    for i in 0..=4 {
        let t = i as f64 / 4.0;
        let xv = x0 + t * (x1 - x0);
        let label = if log_x { 10f64.powf(xv) } else { xv };
        let x = left + t * (w - left - right);
        let _ = write!(
            s,
            r##"<line x1="{x}" y1="{top}" x2="{x}" y2="{b}" stroke="#eee"/><text x="{x}" y="{ty}" text-anchor="middle" font-size="12">{}</text>"##,
            short(label),
            b = h - bottom,
            ty = h - bottom + 16.0
        );
        let yv = y0 + t * (y1 - y0);
        let y = py(yv);
        let _ = write!(
            s,
            r##"<line x1="{left}" y1="{y}" x2="{r}" y2="{y}" stroke="#eee"/><text x="{tx}" y="{y}" text-anchor="end" font-size="12" dy="4">{}</text>"##,
            short(yv),
            r = w - right,
            tx = left - 6.0
        );
    }
    let _ = write!(
        s,
        r#"<text x="{cx}" y="{by}" text-anchor="middle" font-size="13">{x_label}</text><text x="18" y="{cy}" text-anchor="middle" font-size="12" transform="rotate(-90 18 {cy})">{y_label}</text>"#,
        cx = (left + w - right) / 2.0,
        by = h - 8.0,
        cy = (top + h - bottom) / 2.0
    );
    for (i, se) in series.iter().enumerate() {
        let pts: Vec<String> = se
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{c}" stroke-width="2" points="{p}"/><rect x="{lx}" y="{ly}" width="12" height="12" fill="{c}"/><text x="{tx}" y="{ty}" font-size="13">{n}</text>"#,
            c = se.color,
            p = pts.join(" "),
            lx = w - right - 120.0,
            ly = top + 6.0 + 18.0 * i as f64,
            tx = w - right - 102.0,
            ty = top + 16.0 + 18.0 * i as f64,
            n = escape(&se.name)
        );
    }
    s.push_str("</svg>");
    s
}

fn short(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn mode_name(r: &Report) -> &'static str {
    match r.run.mode {
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
