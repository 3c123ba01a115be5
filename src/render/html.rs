//! `--export-html`: one self-contained page (inline SVG, no scripts, no network).

use std::fmt::Write as _;

use super::hammer::{opt, ranked, verdict_word};
use crate::hammer::Report;

/// `--export-html`: one self-contained page (inline SVG, no scripts, no network) with the
/// latency distribution and the stock over time of each strategy, and the summary table.
pub fn hammer_html(reports: &[Report]) -> String {
    let (series_cdf, series_stock) = (latency_series(reports), stock_series(reports));
    let (rows, violations) = (summary_rows(reports), violation_items(reports));
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

/// The ranges the axes span: `(x0, x1, y0, y1)`, x after `fx`, y from 0 or below; never
/// empty, so a single point or no point at all still draws.
fn bounds(series: &[Series], fx: impl Fn(f64) -> f64) -> (f64, f64, f64, f64) {
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
    (x0, x1, y0, y1)
}

/// A line chart as inline SVG, with axes, five ticks each way and a legend.
fn svg_chart(series: &[Series], log_x: bool, x_label: &str, y_label: &str) -> String {
    let (w, h, left, right, top, bottom) = (900.0, 360.0, 80.0, 20.0, 20.0, 50.0);
    let fx = |x: f64| if log_x { x.max(1e-3).log10() } else { x };
    let (x0, x1, y0, y1) = bounds(series, fx);
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

/// Per strategy, the share of requests at or below each latency bucket.
fn latency_series(reports: &[Report]) -> Vec<Series> {
    reports
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
        .collect()
}

/// Per strategy, the stock the buyers were told over time.
fn stock_series(reports: &[Report]) -> Vec<Series> {
    reports
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            name: r.run.strategy.name().to_string(),
            color: PALETTE[i % PALETTE.len()],
            points: r.stock_timeline.iter().map(|p| (p[0], p[1])).collect(),
        })
        .collect()
}

/// The summary table's rows, fastest strategy first.
fn summary_rows(reports: &[Report]) -> String {
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
    rows
}

/// Every violation, as list items.
fn violation_items(reports: &[Report]) -> String {
    let mut violations = String::new();
    for r in reports {
        for v in &r.violations {
            let _ = write!(violations, "<li>{}: {}</li>", r.run.strategy, escape(v));
        }
    }
    violations
}
