//! A round's timeline as one self-contained HTML page (inline SVG, no scripts, no network), in
//! the manner of Porcupine's visualisation: each lane's requests as bars from sent to answered,
//! coloured by answer, faults as bands across the lanes, the stock the answers reported as a
//! line above them, and the requests the violations name outlined in black.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::Duration;

use super::escape::escape;
use lockctl_core::stock::{Buy, Outcome};
use lockctl_hammer::history::{History, lanes};
use lockctl_hammer::{Ended, Report, Sample};

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 70.0;
const LANE: f64 = 14.0;
const STOCK: f64 = 120.0;

/// The page for `report`, judged from `h`.
pub fn timeline_html(h: &History, report: &Report) -> String {
    let lane_of = lanes(&h.samples);
    let lanes_n = lane_of.iter().copied().max().map_or(1, |m| m + 1);
    let end = h
        .samples
        .iter()
        .map(|s| s.at)
        .chain(h.faults.iter().filter_map(|f| f.stop))
        .max()
        .unwrap_or(Duration::from_millis(1))
        .max(Duration::from_millis(1));
    let x = |d: Duration| LEFT + (WIDTH - LEFT - 10.0) * d.as_secs_f64() / end.as_secs_f64();
    let top = STOCK + 30.0;
    let height = top + lanes_n as f64 * LANE + 40.0;
    let marked = marked(report, &h.facts.run_id);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    for f in &h.faults {
        let (a, b) = (
            x(f.start),
            x(f.stop.unwrap_or(f.start + Duration::from_millis(5))),
        );
        let _ = write!(
            svg,
            r##"<rect x="{a:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#d33" opacity="0.15"><title>{}</title></rect><text x="{a:.1}" y="{:.1}" fill="#a00">{}</text>"##,
            (b - a).max(2.0),
            lanes_n as f64 * LANE,
            escape(&f.detail),
            top - 4.0,
            escape(&f.fault)
        );
    }
    stock_line(&mut svg, h, &x, top);
    // In request order: the page is the same whichever order the records were kept in.
    let mut bars: Vec<(&Sample, u64)> = h.samples.iter().zip(lane_of.iter().copied()).collect();
    bars.sort_by_key(|(s, _)| s.index);
    for (s, lane) in bars {
        let (a, b) = (x(s.sent), x(s.at.max(s.sent)));
        let y = top + lane as f64 * LANE + 2.0;
        let (fill, said) = colour(s);
        let stroke = match marked.contains(&s.index) {
            true => r#" stroke="black" stroke-width="2""#,
            false => "",
        };
        let _ = write!(
            svg,
            r#"<rect x="{a:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}"{stroke}><title>request {} ({}): {said}, {:.3} to {:.3} ms</title></rect>"#,
            (b - a).max(1.5),
            LANE - 4.0,
            s.index,
            h.user_of(s.index).unwrap_or_default(),
            s.sent.as_secs_f64() * 1000.0,
            s.at.as_secs_f64() * 1000.0
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="{:.1}">0 ms</text><text x="{:.1}" y="{:.1}" text-anchor="end">{:.1} ms</text><text x="4" y="{:.1}">lanes</text></svg>"#,
        height - 10.0,
        WIDTH - 10.0,
        height - 10.0,
        end.as_secs_f64() * 1000.0,
        top + 12.0
    );
    page(h, report, &svg)
}

/// The stock each answer reported, in time order, as a line over the lanes.
fn stock_line(svg: &mut String, h: &History, x: &dyn Fn(Duration) -> f64, top: f64) {
    let mut points: Vec<(Duration, i64)> = vec![(Duration::ZERO, h.facts.initial_stock)];
    for s in &h.samples {
        let left = match &s.ended {
            Ended::Done {
                outcome: Buy::Bought { remaining } | Buy::SoldOut { remaining },
                ..
            } => Some(*remaining),
            Ended::Answered { remaining, .. } => *remaining,
            _ => None,
        };
        // An answer may claim any number: drawn within the bounds of a stock.
        let bound = lockctl_core::stock::MAX_STOCK as i64;
        if let Some(left) = left {
            points.push((s.at, left.clamp(-bound, bound)));
        }
    }
    points.sort_by_key(|p| p.0);
    if let Some(after) = h.read_back.stock_after {
        let end = points.last().map_or(Duration::ZERO, |p| p.0);
        points.push((end, after));
    }
    let high = points.iter().map(|p| p.1).max().unwrap_or(1).max(1);
    let low = points.iter().map(|p| p.1).min().unwrap_or(0).min(0);
    let span = (high as f64 - low as f64).max(1.0);
    let y = |v: i64| 20.0 + (STOCK - 20.0) * (high as f64 - v as f64) / span;
    let line: Vec<String> = points
        .iter()
        .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
        .collect();
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="3,3"/><polyline points="{}" fill="none" stroke="#236" stroke-width="1.5"/><text x="4" y="{:.1}">stock {high}</text><text x="4" y="{:.1}">0</text><text x="4" y="{:.1}" fill="#999">{}</text>"##,
        WIDTH - 10.0,
        y(0),
        y(0),
        line.join(" "),
        y(high) + 4.0,
        y(0) + 4.0,
        top - 4.0,
        if low < 0 {
            format!("lowest {low}")
        } else {
            String::new()
        }
    );
}

/// A bar's colour and what its request was told.
fn colour(s: &Sample) -> (&'static str, String) {
    let outcome = match &s.ended {
        Ended::Done { outcome, .. } => Some(outcome.outcome()),
        Ended::Answered { outcome, .. } => *outcome,
        Ended::Failed {
            indeterminate,
            message,
            ..
        } => {
            let colour = if *indeterminate { "#f90" } else { "#c33" };
            return (colour, format!("error: {}", escape(message)));
        }
    };
    match outcome {
        Some(Outcome::Bought) => ("#3a3", "bought".into()),
        Some(Outcome::SoldOut) => ("#888", "sold out".into()),
        Some(Outcome::Busy) => ("#dc3", "busy".into()),
        Some(o) => ("#69c", format!("{o:?}")),
        None => ("#bbb", "answered".into()),
    }
}

/// The requests the violations name: `request N`, or an order id `<run>-N`.
fn marked(report: &Report, run_id: &str) -> HashSet<u64> {
    let mut set = HashSet::new();
    let order = format!("{run_id}-");
    for v in &report.violations {
        for (i, _) in v.match_indices("request ") {
            if let Some(n) = number_at(&v[i + 8..]) {
                set.insert(n);
            }
        }
        for (i, _) in v.match_indices(&order) {
            if let Some(n) = number_at(&v[i + order.len()..]) {
                set.insert(n);
            }
        }
    }
    set
}

fn number_at(s: &str) -> Option<u64> {
    let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn page(h: &History, report: &Report, svg: &str) -> String {
    let mut violations = String::new();
    for v in &report.violations {
        let _ = write!(violations, "<li>{}</li>", escape(v));
    }
    let mut faults = String::new();
    for f in &h.faults {
        let _ = write!(
            faults,
            "<li>{} at {:.1} ms: {}</li>",
            escape(&f.fault),
            f.start.as_secs_f64() * 1000.0,
            escape(&f.detail)
        );
    }
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>lockctl: {sku}</title>
<style>body{{font-family:sans-serif;margin:20px;color:#222}} .k span{{display:inline-block;width:12px;height:10px;margin:0 4px 0 12px}}</style>
</head><body>
<h1>{sku}: {verdict}</h1>
<p>{requests} requests, {concurrency} at a time; stock {before} &rarr; {after}. Run {run}.</p>
<p class="k"><span style="background:#3a3"></span>bought<span style="background:#888"></span>sold out<span style="background:#dc3"></span>busy<span style="background:#f90"></span>failed, may have deducted<span style="background:#c33"></span>failed<span style="background:#d33;opacity:.3"></span>fault<span style="border:2px solid black"></span>named by a violation</p>
{svg}
<h2>Violations</h2><ul>{violations}</ul>
<h2>Faults</h2><ul>{faults}</ul>
</body></html>
"#,
        sku = escape(&h.facts.sku),
        verdict = match report.verdict {
            lockctl_hammer::Verdict::Pass => "PASS",
            lockctl_hammer::Verdict::Fail => "FAIL",
            lockctl_hammer::Verdict::Unknown => "UNKNOWN",
        },
        requests = h.samples.len(),
        concurrency = h.facts.concurrency,
        before = h.facts.initial_stock,
        after = h
            .read_back
            .stock_after
            .map_or("unknown".into(), |s| s.to_string()),
        run = escape(&h.facts.run_id),
    )
}
