//! The hammer's report as text (aligned rows, the verdict last), JSON and Markdown.

use std::fmt::Write as _;

use serde::Serialize;

use crate::Advice;

use lockctl_core::units::{count, round3};
use lockctl_hammer::judge::errors_in_words;
use lockctl_hammer::report::Subject;
use lockctl_hammer::{
    HttpFacts, LATE_AFTER_MS, Mode, Percentiles, Report, Verdict, overall_verdict,
};

/// `hammer` for a person: aligned rows, the verdict last (in green or red when `color`); the
/// first error's fix in `advice`'s words.
pub fn hammer_text(r: &Report, color: bool, advice: &dyn Advice) -> String {
    let mut s = String::new();
    facts_rows(&mut s, r, advice);
    verdict_rows(&mut s, r, color);
    s
}

/// One aligned row of the text report, its control characters escaped: a row may quote an
/// endpoint's answer or a history.
fn row(s: &mut String, label: &str, text: String) {
    painted_row(s, label, "", &text);
}

/// A row that starts with `painted` (lockctl's own colours, shown as they are) and goes on
/// with `text`, escaped as in [`row`].
fn painted_row(s: &mut String, label: &str, painted: &str, text: &str) {
    let _ = writeln!(s, "  {label:<12}{painted}{}", crate::terminal(text));
}

/// The header and what was measured: outcomes, stock, latencies, throughput, notes.
fn facts_rows(s: &mut String, r: &Report, advice: &dyn Advice) {
    let _ = writeln!(s, "{}", crate::terminal(&header(r)));
    let mut outcomes = format!(
        "bought {}  sold out {}  busy {}",
        r.bought, r.sold_out, r.busy
    );
    if r.http.is_none() {
        let _ = write!(outcomes, "  lease lost {}", r.lease_lost);
    }
    if r.answered > 0 {
        let _ = write!(outcomes, "  answered {}", r.answered);
    }
    let _ = write!(outcomes, "  errors {}", r.errors);
    if r.errors > 0 {
        let _ = write!(
            outcomes,
            " ({})",
            lockctl_hammer::judge::errors_in_words(&r.errors_by_kind)
        );
    }
    if r.limit_reached > 0 {
        let _ = write!(outcomes, "  limit {}", r.limit_reached);
    }
    if r.replayed > 0 {
        let _ = write!(outcomes, "  (replayed {})", r.replayed);
    }
    row(s, "outcomes", outcomes);
    row(s, "stock", stock_text(r));
    timing_rows(s, r);
    pipeline_rows(s, r);
    for n in &r.notes {
        row(s, "note", n.clone());
    }
    if let Some(e) = first_error(r, advice) {
        row(s, "first error", e);
    }
}

/// Latencies, lock wait and hold, throughput, and the instrument's own cost.
fn timing_rows(s: &mut String, r: &Report) {
    let never_sent = r
        .errors_by_kind
        .get(&lockctl_core::error::ErrorKind::Abandoned)
        .copied()
        .unwrap_or(0);
    match never_sent {
        0 => row(s, "latency", pct_text(&r.latency_ms)),
        n => row(
            s,
            "latency",
            format!(
                "{}  (of the requests sent; {n} never sent are not in it)",
                pct_text(&r.latency_ms)
            ),
        ),
    }
    if let Some(w) = &r.lock_wait_ms {
        row(s, "lock wait", pct_text(w));
    }
    if let Some(h) = &r.lock_hold_ms {
        row(s, "lock hold", pct_text(h));
    }
    if let Some(h) = &r.http {
        schedule_rows(s, h);
    }
    let unit = if r.http.is_some() {
        "requests"
    } else {
        "purchases"
    };
    row(
        s,
        "throughput",
        format!("{:.1} {unit}/s over {:.3} s", r.throughput_rps, r.elapsed_s),
    );
    if let (Some(cpu), Some(per), Some(rss)) = (
        r.client_cpu_s,
        r.client_cpu_us_per_request,
        r.client_max_rss_mb,
    ) {
        row(
            s,
            "instrument",
            format!(
                "hammer CPU {cpu:.2} s ({per:.1} µs per {}), peak memory {rss:.1} MB",
                &unit[..unit.len() - 1]
            ),
        );
    }
}

/// The orders pipeline, when there was one.
fn pipeline_rows(s: &mut String, r: &Report) {
    if let Some(p) = &r.pipeline {
        row(
            s,
            "orders",
            format!(
                "{} rows in PostgreSQL ({} units) from {}; queue peak {}, {} {:.3} s after the buyers",
                p.rows,
                p.row_units,
                count(p.workers, "worker", "workers"),
                p.queue_peak,
                if p.drained { "drained" } else { "NOT drained" },
                p.drain_s
            ),
        );
        row(
            s,
            "",
            format!(
                "ingress {:.1} orders/s, persisted {:.1}/s; {} redelivered, {} conflicts, {} dead letters",
                p.ingress_rps, p.drain_rps, p.redelivered, p.conflicts, p.dead_letters
            ),
        );
    }
}

/// The first line: what was run.
fn header(r: &Report) -> String {
    match &r.http {
        None => format!(
            "hammer: {} of {} x{}, {} at a time, strategy {} ({}{})",
            count(r.run.requests, "purchase", "purchases"),
            r.run.sku,
            r.run.qty,
            r.run.concurrency.min(r.run.requests),
            r.run.strategy,
            mode_name(r),
            lock_kind(r)
        ),
        Some(h) => {
            let load = match h.rate_rps {
                Some(rate) => format!("open model at {rate} requests/s"),
                None => "closed model".into(),
            };
            format!(
                "hammer: {} to {} ({}), {}, {load}",
                count(r.run.requests, "request", "requests"),
                h.url,
                h.method,
                count(r.run.concurrency, "connection", "connections")
            )
        }
    }
}

/// The stock before and after, and what the buyers (or the endpoint) said was sold.
fn stock_text(r: &Report) -> String {
    let already = if r.run.seeded {
        ""
    } else {
        " [stock already in Redis]"
    };
    let before_after = format!("{} -> {}", r.run.initial_stock, opt(r.final_stock));
    match (&r.http, r.ledger_qty, r.ledger_orders) {
        (Some(h), _, _) => match &h.stock_key {
            Some(key) => format!(
                "{before_after} (consumed {}, announced {}) [{key}]",
                opt(r.consumed),
                r.sold_qty
            ),
            None => "not read (nothing to judge)".into(),
        },
        (None, Some(units), Some(orders)) => format!(
            "{before_after} (consumed {}, sold {}, ledger {} in {}){already}",
            opt(r.consumed),
            r.sold_qty,
            count(units, "unit", "units"),
            count(orders, "order", "orders")
        ),
        (None, _, _) => format!(
            "{before_after} (consumed {}, sold {}, ledger not read){already}",
            opt(r.consumed),
            r.sold_qty
        ),
    }
}

/// The open model's service time and how well the schedule was kept.
fn schedule_rows(s: &mut String, h: &HttpFacts) {
    if let Some(service) = &h.service_ms {
        row(s, "service", pct_text(service));
    }
    if let (Some(late), Some(lag)) = (h.late, h.max_lag_ms) {
        row(
            s,
            "schedule",
            format!(
                "late {late} (sent over {LATE_AFTER_MS} ms after their moment), max lag {lag:.3} ms; latency counts from each moment"
            ),
        );
    }
}

/// The verdict, in green or red when `color`, with every violation under it.
fn verdict_rows(s: &mut String, r: &Report, color: bool) {
    let paint = |code: &str, text: &str| {
        if color {
            format!("\x1b[1;{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    };
    match r.verdict {
        Verdict::Pass => painted_row(
            s,
            "verdict",
            &paint("32", "PASS"),
            &format!(
                ": nothing oversold (stock {} -> {}), every request accounted for{}",
                r.run.initial_stock,
                opt(r.final_stock),
                match r.errors {
                    0 => String::new(),
                    n => format!(
                        "; {n} error{} ({})",
                        if n == 1 { "" } else { "s" },
                        errors_in_words(&r.errors_by_kind)
                    ),
                }
            ),
        ),
        Verdict::Unknown => painted_row(
            s,
            "verdict",
            &paint("33", "UNKNOWN"),
            &format!(
                ": {}",
                r.unknown_because
                    .as_deref()
                    .unwrap_or("nothing can be claimed")
            ),
        ),
        Verdict::Fail => {
            let n = r.violations.len();
            painted_row(
                s,
                "verdict",
                &paint("31", "FAIL"),
                &format!(
                    ": {}",
                    count(n as u64, "invariant violated", "invariants violated")
                ),
            );
            for v in &r.violations {
                row(s, "", format!("- {v}"));
            }
        }
    }
}

/// `hammer --json` for one run: the whole report, its first error with its fix in `advice`'s
/// words.
pub fn hammer_json(r: &Report, advice: &dyn Advice) -> Report {
    Report {
        first_error: first_error(r, advice),
        ..r.clone()
    }
}

/// Where and when a hammer ran, beyond the run's own facts: what a report needs to stand
/// alone.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Context {
    /// `host:port` of the data node.
    pub redis: String,
    pub redis_version: Option<String>,
    pub lockctl_version: String,
    /// UTC, RFC 3339.
    pub started_at: String,
    /// The command line, passwords removed.
    pub command_line: String,
}

/// The version of the JSON document `--export-json` writes; raised when a field changes
/// meaning or goes away.
pub const SCHEMA_VERSION: u32 = 1;

/// The JSON document for a hammer run, one shape whatever the number of strategies:
/// `{schema_version, context, verdict, runs: [report...], comparison: [...]}`, `verdict` pass
/// only if every run passed. With one strategy the document also carries that run's fields at
/// the top level (what `hammer --json` promises).
#[derive(Debug, Serialize)]
pub struct HammerDocument<'a> {
    /// The one run's fields, at the top level; absent with several strategies.
    #[serde(flatten)]
    pub single: Option<Report>,
    pub schema_version: u32,
    pub context: &'a Context,
    /// The verdict over every run. With one run, that run's own `verdict` (in `single`) says
    /// it, so that the key appears once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Verdict>,
    pub runs: Vec<Report>,
    pub comparison: Vec<Comparison>,
}

/// One row of the document's `comparison`, fastest first.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub strategy: Subject,
    pub throughput_rps: f64,
    /// The fastest run's speed as a multiple of this one's (1 for the fastest; null when this
    /// one made no progress).
    pub relative_speed: f64,
    pub verdict: Verdict,
}

/// The [`HammerDocument`] of `reports`.
pub fn hammer_document<'a>(
    reports: &[Report],
    context: &'a Context,
    advice: &dyn Advice,
) -> HammerDocument<'a> {
    let single = match reports {
        [one] => Some(hammer_json(one, advice)),
        _ => None,
    };
    HammerDocument {
        verdict: single.is_none().then(|| overall_verdict(reports)),
        single,
        schema_version: SCHEMA_VERSION,
        context,
        runs: reports.iter().map(|r| hammer_json(r, advice)).collect(),
        comparison: ranked(reports)
            .into_iter()
            .map(|(r, rel)| Comparison {
                strategy: r.run.strategy,
                throughput_rps: r.throughput_rps,
                relative_speed: rel,
                verdict: r.verdict,
            })
            .collect(),
    }
}

/// Reports from fastest to slowest, each with the fastest one's speed as a multiple of its own.
pub(crate) fn ranked(reports: &[Report]) -> Vec<(&Report, f64)> {
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

pub(crate) fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "FAIL",
        Verdict::Unknown => "UNKNOWN",
    }
}

/// `text` as a Markdown code span (its control characters escaped), whatever backticks it holds: the fence is one backtick
/// longer than the longest run inside, padded with spaces when the text starts or ends with one.
fn code_span(text: &str) -> String {
    let text = crate::terminal(text);
    let text = text.as_ref();
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A number read back from Redis, or `?` when it could not be.
pub(crate) fn opt(v: Option<i64>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

/// `--export-markdown`: one row per strategy, then every violation.
pub fn hammer_markdown(reports: &[Report], context: &Context) -> String {
    let mut s = String::new();
    if let Some(h) = reports.first().and_then(|r| r.http.as_ref()) {
        let _ = writeln!(
            s,
            "Hammer on {} ({}): {} requests, {} connections, stock {}.\n",
            code_span(&h.url),
            h.method,
            reports[0].run.requests,
            reports[0].run.concurrency,
            reports[0].run.initial_stock
        );
    } else if let Some(r) = reports.first() {
        let _ = writeln!(
            s,
            "Hammer on {}: {}, {} at a time, {} ({} mode{}), stock {} each run, TTL {} ms, wait {} ms, work {} ms.\n",
            code_span(&r.run.sku),
            count(r.run.requests, "purchase", "purchases"),
            r.run.concurrency.min(r.run.requests),
            if r.run.watchdog {
                "watchdog on"
            } else {
                "no watchdog"
            },
            mode_name(r),
            lock_kind(r),
            r.run.initial_stock,
            r.run.ttl_ms,
            r.run.wait_ms,
            r.run.work_ms
        );
        let _ = writeln!(
            s,
            "Redis {} (version {}), lockctl {}, {}: {}\n",
            code_span(&context.redis),
            context.redis_version.as_deref().unwrap_or("unknown"),
            context.lockctl_version,
            context.started_at,
            code_span(&context.command_line)
        );
    }
    s.push_str("| strategy | purchases/s | slower than fastest | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | bought | sold out | busy | lease lost | errors | final stock | oversold | verdict |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (r, rel) in ranked(reports) {
        let _ = writeln!(s, "| {} |", summary_cells(r, rel).join(" | "));
    }
    let violations: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.violations
                .iter()
                .map(move |v| format!("- {}: {}", r.run.strategy, crate::terminal(v)))
        })
        .collect();
    if !violations.is_empty() {
        let _ = write!(s, "\nViolations:\n\n{}\n", violations.join("\n"));
    }
    s
}

/// One strategy's row of the summary table (Markdown and HTML), in the header's order:
/// strategy, purchases/s, slower than fastest, p50, p90, p99, p99.9, max (ms), bought, sold
/// out, busy, lease lost, errors, final stock, oversold, verdict.
pub(crate) fn summary_cells(r: &Report, rel: f64) -> [String; 16] {
    let l = &r.latency_ms;
    [
        r.run.strategy.to_string(),
        format!("{:.1}", r.throughput_rps),
        format!("{rel:.2}x"),
        format!("{:.3}", l.p50),
        format!("{:.3}", l.p90),
        format!("{:.3}", l.p99),
        format!("{:.3}", l.p999),
        format!("{:.3}", l.max),
        r.bought.to_string(),
        r.sold_out.to_string(),
        r.busy.to_string(),
        r.lease_lost.to_string(),
        r.errors.to_string(),
        opt(r.final_stock),
        r.oversold.to_string(),
        verdict_word(r.verdict).to_string(),
    ]
}

/// How the lock was taken, for the lock strategies: `, single-node lock` or `, Redlock quorum
/// of 5 lock nodes`.
pub(crate) fn lock_kind(r: &Report) -> String {
    match (r.run.strategy.locks(), r.run.redlock_nodes) {
        (false, _) => String::new(),
        (true, None) => ", single-node lock".into(),
        (true, Some(n)) => format!(", Redlock quorum of {n} lock nodes"),
    }
}

pub(crate) fn mode_name(r: &Report) -> &'static str {
    match r.run.mode {
        Mode::Threads => "threads",
        Mode::Tasks => "tasks",
        Mode::Procs => "processes",
        Mode::Http => "http",
    }
}

fn pct_text(p: &Percentiles) -> String {
    format!(
        "p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  max {:.3} ms",
        p.p50, p.p90, p.p99, p.max
    )
}

/// The run's first error with its fix in the command line's words.
fn first_error(r: &Report, advice: &dyn Advice) -> Option<String> {
    let e = r.first_error.as_ref()?;
    Some(advice.with_hint(e, r.first_error_hint.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::code_span;

    #[test]
    fn a_code_span_survives_backticks() {
        assert_eq!(code_span("sku_886"), "`sku_886`");
        assert_eq!(code_span("a`b"), "``a`b``");
        assert_eq!(code_span("`x``"), "``` `x`` ```");
    }
}
