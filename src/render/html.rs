//! `--export-html`: one self-contained page (inline SVG, no scripts, no network) that stands
//! alone: what was run and where, every column of the Markdown table, the latency, lock wait
//! and lock hold distributions, and the stock over time.

use std::fmt::Write as _;

use super::chart::{Scale, Series, line_chart};
use super::escape::escape;
use super::hammer::{Context, lock_kind, mode_name, ranked, summary_cells};
use lockctl_hammer::{Bucket, Report};

/// The page.
pub fn hammer_html(reports: &[Report], context: &Context) -> String {
    let title = reports.first().map_or(String::new(), |r| {
        format!(
            "{} of {}, {} at a time",
            lockctl_core::units::count(r.run.requests, "purchase", "purchases"),
            escape(&r.run.sku),
            r.run.concurrency.min(r.run.requests)
        )
    });
    let charts = [
        (
            "Latency",
            line_chart(
                &cdf(reports, |r| &r.latency_buckets),
                Scale::Log,
                "latency (ms, log scale)",
                "% of requests at or below",
            ),
        ),
        (
            "Lock wait",
            line_chart(
                &cdf(reports, |r| &r.lock_wait_buckets),
                Scale::Log,
                "time to get the lock (ms, log scale)",
                "% of purchases at or below",
            ),
        ),
        (
            "Lock hold",
            line_chart(
                &cdf(reports, |r| &r.lock_hold_buckets),
                Scale::Log,
                "time the lock was held (ms, log scale)",
                "% of purchases at or below",
            ),
        ),
        (
            "Stock over time",
            line_chart(
                &stock_series(reports),
                Scale::Linear,
                "seconds since start",
                "stock the buyers were told",
            ),
        ),
    ];
    let mut body = String::new();
    for (heading, svg) in charts {
        let _ = write!(body, "<h2>{heading}</h2>\n{svg}\n");
    }
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>lockctl hammer: {title}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
table.settings td {{ text-align: left; }}
.pass {{ color: #1a7f37; font-weight: bold; }} .fail, .unknown {{ color: #c62828; font-weight: bold; }}
svg {{ background: #fff; border: 1px solid #ddd; margin: 0.5em 0; max-width: 100%; height: auto; }}
</style></head><body>
<h1>lockctl hammer: {title}</h1>
{settings}
<table><tr><th>strategy</th><th>purchases/s</th><th>slower than fastest</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th><th>bought</th><th>sold out</th><th>busy</th><th>lease lost</th><th>errors</th><th>final stock</th><th>oversold</th><th>verdict</th></tr>
{rows}</table>
<ul>{findings}</ul>
{body}</body></html>
"#,
        settings = settings_table(reports, context),
        rows = summary_rows(reports),
        findings = findings(reports),
    )
}

/// What was run, where, when and by which command.
fn settings_table(reports: &[Report], c: &Context) -> String {
    let Some(r) = reports.first() else {
        return String::new();
    };
    let strategies: Vec<&str> = reports.iter().map(|r| r.run.strategy.name()).collect();
    let lock = match lock_kind(r).trim_start_matches(", ") {
        "" => "none (the strategy takes no lock)".to_string(),
        k => k.to_string(),
    };
    let rows = [
        ("SKU", escape(&r.run.sku)),
        ("stock", r.run.initial_stock.to_string()),
        ("purchases (-n)", r.run.requests.to_string()),
        ("at a time (-c)", r.run.concurrency.to_string()),
        ("strategies", strategies.join(", ")),
        ("mode", mode_name(r).to_string()),
        ("units per purchase", r.run.qty.to_string()),
        ("lease (--ttl-ms)", format!("{} ms", r.run.ttl_ms)),
        ("wait (--wait-ms)", format!("{} ms", r.run.wait_ms)),
        ("work (--work-ms)", format!("{} ms", r.run.work_ms)),
        (
            "watchdog",
            if r.run.watchdog { "on" } else { "off" }.to_string(),
        ),
        ("lock", lock),
        (
            "Redis",
            format!(
                "{} (version {})",
                escape(&c.redis),
                escape(c.redis_version.as_deref().unwrap_or("unknown"))
            ),
        ),
        ("lockctl", escape(&c.lockctl_version)),
        ("date", escape(&c.started_at)),
        (
            "command",
            format!("<code>{}</code>", escape(&c.command_line)),
        ),
    ];
    let mut s = String::from("<table class=\"settings\">");
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    s.push_str("</table>");
    s
}

/// Per strategy, the share of purchases at or below each bucket of a distribution.
fn cdf(reports: &[Report], buckets: impl Fn(&Report) -> &Vec<Bucket>) -> Vec<Series> {
    reports
        .iter()
        .filter(|r| !buckets(r).is_empty())
        .map(|r| {
            let b = buckets(r);
            let total = b.iter().map(|b| b.count).sum::<u64>().max(1);
            let mut seen = 0;
            let points = b
                .iter()
                .map(|b| {
                    seen += b.count;
                    (b.le_ms.max(0.001), seen as f64 * 100.0 / total as f64)
                })
                .collect();
            Series {
                name: r.run.strategy.name().to_string(),
                points,
            }
        })
        .collect()
}

/// Per strategy, the stock the buyers were told over time.
fn stock_series(reports: &[Report]) -> Vec<Series> {
    reports
        .iter()
        .map(|r| Series {
            name: r.run.strategy.name().to_string(),
            points: r.stock_timeline.iter().map(|p| (p[0], p[1])).collect(),
        })
        .collect()
}

/// The summary table's rows, fastest strategy first: every column of the Markdown export.
fn summary_rows(reports: &[Report]) -> String {
    let mut rows = String::new();
    for (r, rel) in ranked(reports) {
        let mut cells = summary_cells(r, rel);
        let word = std::mem::take(&mut cells[15]);
        let tds: String = cells[..15]
            .iter()
            .map(|c| format!("<td>{}</td>", escape(c)))
            .collect();
        let _ = writeln!(
            rows,
            "<tr>{tds}<td class=\"{}\">{word}</td></tr>",
            word.to_lowercase()
        );
    }
    rows
}

/// Every violation and note, as list items.
fn findings(reports: &[Report]) -> String {
    let mut out = String::new();
    for r in reports {
        for v in &r.violations {
            let _ = write!(
                out,
                "<li class=\"fail\">{}: {}</li>",
                r.run.strategy,
                escape(v)
            );
        }
        for n in &r.notes {
            let _ = write!(out, "<li>{}: {}</li>", r.run.strategy, escape(n));
        }
    }
    out
}
