//! A round's timeline as one self-contained HTML page (inline SVG, no scripts, no network), in
//! the manner of Porcupine's visualisation: each lane's requests as bars from sent to answered,
//! coloured by answer, faults as bands across the lanes, the stock above them as a step line
//! from lockctl's own reads during the round (the stock the answers reported as dots), and the
//! requests the violations rest on outlined and listed. A hunt's round carries its seed and
//! the command that replays it. Every string from outside (answers, SKUs, the command) goes
//! through [`escape`] on its way into the page.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::escape::escape;
use lockctl_core::stock::{Buy, Outcome};
use lockctl_hammer::history::{Blamed, History, blamed, lanes};
use lockctl_hammer::{Ended, Report, Sample};

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 70.0;
const LANE: f64 = 14.0;
const STOCK: f64 = 120.0;
/// The outline of a request a violation rests on: a colour used for nothing else.
pub const BLAMED: &str = "#e0e";
/// The most requests listed under "Violations" (all are outlined).
const LISTED: usize = 50;

/// The page for `report`, judged from `h`.
pub fn timeline_html(h: &History, report: &Report) -> String {
    let lane_of = lanes(&h.samples);
    let lanes_n = lane_of.iter().copied().max().map_or(1, |m| m + 1);
    let end = h
        .samples
        .iter()
        .map(|s| s.at)
        .chain(h.faults.iter().filter_map(|f| f.stop))
        .chain(h.stock_reads.iter().map(|r| r.at))
        .max()
        .unwrap_or(Duration::from_millis(1))
        .max(Duration::from_millis(1));
    let x = |d: Duration| LEFT + (WIDTH - LEFT - 10.0) * d.as_secs_f64() / end.as_secs_f64();
    let top = STOCK + 30.0;
    let height = top + lanes_n as f64 * LANE + 40.0;
    let named = blamed(h, report);
    let why: HashMap<u64, &str> = named.iter().map(|b| (b.index, b.why)).collect();
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
    stock_line(&mut svg, h, &x, end, top);
    // In request order: the page is the same whichever order the records were kept in. The
    // outlined ones last, so that no neighbour's bar covers an outline.
    let mut bars: Vec<(&Sample, u64)> = h.samples.iter().zip(lane_of.iter().copied()).collect();
    bars.sort_by_key(|(s, _)| (why.contains_key(&s.index), s.index));
    for (s, lane) in bars {
        let (a, b) = (x(s.sent), x(s.at.max(s.sent)));
        let y = top + lane as f64 * LANE + 2.0;
        let (fill, said) = colour(s);
        let outline = match why.get(&s.index) {
            Some(_) => format!(r#" class="blamed" stroke="{BLAMED}" stroke-width="2.5""#),
            None => String::new(),
        };
        let _ = write!(
            svg,
            r#"<rect x="{a:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}"{outline}><title>{}</title></rect>"#,
            (b - a).max(1.5),
            LANE - 4.0,
            tooltip(h, s, &said, why.get(&s.index).copied()),
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
    page(h, report, &svg, &named)
}

/// `request 12 (user u3, order h1a2b3c4d-12): bought at 41.2 ms, 3.1 ms after it was sent`,
/// and why a violation rests on it.
fn tooltip(h: &History, s: &Sample, said: &str, why: Option<&str>) -> String {
    let who = match h.user_of(s.index) {
        Some(u) => format!(
            "user {}, order {}",
            escape(&u),
            escape(&h.order_of(s.index))
        ),
        None => format!("order {}", escape(&h.order_of(s.index))),
    };
    let left = match remaining(s) {
        Some(n) => format!(" ({n} left, it said)"),
        None => String::new(),
    };
    let blamed = why.map_or(String::new(), |w| format!("; {w}"));
    format!(
        "request {} ({who}): {said}{left} at {:.1} ms, {:.1} ms after it was sent{blamed}",
        s.index,
        ms(s.at),
        ms(s.at.saturating_sub(s.sent)),
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The stock an answer reported, within the bounds of a stock (an answer may claim any
/// number).
fn remaining(s: &Sample) -> Option<i64> {
    let left = match &s.ended {
        Ended::Done {
            outcome: Buy::Bought { remaining } | Buy::SoldOut { remaining },
            ..
        } => Some(*remaining),
        Ended::Answered { remaining, .. } => *remaining,
        _ => None,
    };
    let bound = lockctl_core::stock::MAX_STOCK as i64;
    left.map(|l| l.clamp(-bound, bound))
}

/// The stock over the round, as a step line over the lanes: from lockctl's own reads while
/// the round went when it has them, from the answers' "remaining" otherwise; from the stock
/// at the start to the stock read back at the end. The answers' "remaining" are dots.
fn stock_line(svg: &mut String, h: &History, x: &dyn Fn(Duration) -> f64, end: Duration, top: f64) {
    let bound = lockctl_core::stock::MAX_STOCK as i64;
    let said: Vec<(Duration, i64, u64)> = {
        let mut v: Vec<_> = h
            .samples
            .iter()
            .filter_map(|s| remaining(s).map(|n| (s.at, n, s.index)))
            .collect();
        v.sort_by_key(|p| (p.0, p.2));
        v
    };
    let read = !h.stock_reads.is_empty();
    let mut steps: Vec<(Duration, i64)> = vec![(Duration::ZERO, h.facts.initial_stock)];
    match read {
        true => steps.extend(
            h.stock_reads
                .iter()
                .map(|r| (r.at, r.stock.clamp(-bound, bound))),
        ),
        false => steps.extend(said.iter().map(|p| (p.0, p.1))),
    }
    steps.sort_by_key(|p| p.0);
    if let Some(after) = h.read_back.stock_after {
        steps.push((end, after.clamp(-bound, bound)));
    }
    let values = steps.iter().map(|p| p.1).chain(said.iter().map(|p| p.1));
    let high = values.clone().max().unwrap_or(1).max(1);
    let low = values.min().unwrap_or(0).min(0);
    let span = (high as f64 - low as f64).max(1.0);
    let y = |v: i64| 20.0 + (STOCK - 20.0) * (high as f64 - v as f64) / span;
    // A step: the stock holds until the read that found it changed.
    let mut line: Vec<String> = Vec::new();
    let mut point = |t: Duration, v: i64| {
        let p = format!("{:.1},{:.1}", x(t), y(v));
        if line.last() != Some(&p) {
            line.push(p);
        }
    };
    let mut last: Option<i64> = None;
    for &(t, v) in &steps {
        if let Some(before) = last {
            point(t, before);
        }
        point(t, v);
        last = Some(v);
    }
    if let Some(v) = last {
        point(end, v);
    }
    let from = match read {
        true => "read by lockctl during the round",
        false => "as the answers reported it (no reads during the round)",
    };
    let _ = write!(
        svg,
        r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="3,3"/><polyline class="stock" points="{}" fill="none" stroke="#236" stroke-width="1.5"><title>the stock, {from}</title></polyline>"##,
        WIDTH - 10.0,
        y(0),
        y(0),
        line.join(" "),
    );
    if read {
        for (t, v, index) in &said {
            let _ = write!(
                svg,
                r##"<circle class="said" cx="{:.1}" cy="{:.1}" r="2.5" fill="#69c"><title>request {index} said {v} left</title></circle>"##,
                x(*t),
                y(*v)
            );
        }
    }
    let _ = write!(
        svg,
        r##"<text x="4" y="{:.1}">stock {high}</text><text x="4" y="{:.1}">0</text><text x="4" y="{:.1}" fill="#999">{}</text>"##,
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

/// A bar's colour and what its request was told (escaped).
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
        Some(o) => ("#69c", escape(&format!("{o:?}"))),
        None => ("#bbb", "answered".into()),
    }
}

/// What replays the round: the hunt's seed and command, when the round was a hunt's.
fn replay(h: &History) -> String {
    let Some(hunt) = &h.hunt else {
        return String::new();
    };
    let round = hunt
        .round
        .map_or("A round".to_string(), |n| format!("Round {n}"));
    let mut s = format!(
        r#"<p id="replay">{round} of the hunt with seed <code>{}</code>. Replay it:</p><pre><code>{}</code></pre>"#,
        hunt.seed,
        escape(&hunt.replay)
    );
    if !hunt.set_first.is_empty() {
        let each: Vec<String> = hunt
            .set_first
            .iter()
            .map(|(name, what)| format!("<code>{}</code> to {}", escape(name), escape(what)))
            .collect();
        let _ = write!(s, "<p>(set {} first)</p>", each.join(", "));
    }
    s
}

/// The requests the violations rest on, as a table (at most [`LISTED`] rows).
fn named_table(h: &History, named: &[Blamed]) -> String {
    if named.is_empty() {
        return String::new();
    }
    let by_index: HashMap<u64, &Sample> = h.samples.iter().map(|s| (s.index, s)).collect();
    let mut t = String::from(
        r#"<p>The requests they rest on (outlined above):</p><table class="named"><tr><th>request</th><th>user</th><th>order</th><th>answer</th><th>sent (ms)</th><th>answered (ms)</th><th>why</th></tr>"#,
    );
    for b in named.iter().take(LISTED) {
        let Some(s) = by_index.get(&b.index) else {
            continue;
        };
        let (_, said) = colour(s);
        let said = match remaining(s) {
            Some(n) => format!("{said} ({n} left)"),
            None => said,
        };
        let _ = write!(
            t,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{said}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>",
            b.index,
            escape(&h.user_of(b.index).unwrap_or_else(|| "-".into())),
            escape(&h.order_of(b.index)),
            ms(s.sent),
            ms(s.at),
            escape(b.why)
        );
    }
    t.push_str("</table>");
    if named.len() > LISTED {
        let _ = write!(
            t,
            "<p>and {} more, outlined above.</p>",
            named.len() - LISTED
        );
    }
    t
}

/// `items` as a list, or "none".
fn list_or_none(items: &[String]) -> String {
    match items.is_empty() {
        true => r#"<p class="none">none</p>"#.to_string(),
        false => format!("<ul>{}</ul>", items.concat()),
    }
}

fn page(h: &History, report: &Report, svg: &str, named: &[Blamed]) -> String {
    let violations: Vec<String> = report
        .violations
        .iter()
        .map(|v| format!("<li>{}</li>", escape(v)))
        .collect();
    let faults: Vec<String> = h
        .faults
        .iter()
        .map(|f| {
            format!(
                "<li>{} at {:.1} ms{}: {}</li>",
                escape(&f.fault),
                ms(f.start),
                f.stop
                    .map_or(String::new(), |stop| format!(" to {:.1} ms", ms(stop))),
                escape(&f.detail)
            )
        })
        .collect();
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>lockctl: {sku}</title>
<style>body{{font-family:sans-serif;margin:20px;color:#222}} .k span{{display:inline-block;width:12px;height:10px;margin:0 4px 0 12px}} table.named{{border-collapse:collapse}} table.named td,table.named th{{border:1px solid #ccc;padding:2px 6px}} pre{{background:#f4f4f4;padding:6px;white-space:pre-wrap}}</style>
</head><body>
<h1>{sku}: {verdict}</h1>
<p>{requests} requests, {concurrency} at a time; stock {before} &rarr; {after}. Run {run}.</p>
{replay}
<p class="k"><span style="background:#3a3"></span>bought<span style="background:#888"></span>sold out<span style="background:#dc3"></span>busy<span style="background:#f90"></span>failed, may have deducted<span style="background:#c33"></span>failed<span style="background:#d33;opacity:.3"></span>fault<span style="border:2px solid {BLAMED};width:8px;height:6px"></span>a violation rests on it<span style="border-top:2px solid #236;height:0"></span>stock<span style="background:#69c;border-radius:50%;width:6px;height:6px"></span>stock an answer reported</p>
{svg}
<h2>Violations</h2>{violations}{named}
<h2>Faults</h2>{faults}
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
        replay = replay(h),
        violations = list_or_none(&violations),
        named = named_table(h, named),
        faults = list_or_none(&faults),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::round;
    use lockctl_hammer::Verdict;
    use lockctl_hammer::history::HuntOrigin;

    #[test]
    fn the_seed_and_the_replay_are_on_the_page_and_escaped() {
        let mut h = round(3, 3);
        h.hunt = Some(HuntOrigin {
            seed: 42,
            round: Some(7),
            replay:
                "lockctl hunt --url 'http://x/?a=1&b=</code><script>alert(1)</script>' --seed 42"
                    .into(),
            set_first: vec![("LOCKCTL_SECRET_1".into(), "the secret in <--redis>".into())],
        });
        let report = h.judge();
        assert_eq!(report.verdict, Verdict::Pass);
        let html = timeline_html(&h, &report);
        assert!(
            html.contains("Round 7 of the hunt with seed <code>42</code>"),
            "{html}"
        );
        assert!(
            html.contains("a=1&amp;b=&lt;/code&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            !html.contains("<script>") && !html.contains("sku<b>"),
            "{html}"
        );
        assert!(html.contains("the secret in &lt;--redis&gt;"), "{html}");
        assert!(html.contains(r#"<h2>Violations</h2><p class="none">none</p>"#));
        assert!(html.contains(r#"<h2>Faults</h2><p class="none">none</p>"#));
        assert!(html.contains(
            "<title>request 1 (user u1, order hab-1): bought at 2.0 ms, 1.0 ms after it was sent</title>"
        ), "{html}");
        // The stock read, as steps: 3, then 2, 1 and 0 at 1, 2 and 3 ms.
        assert!(html.contains("the stock, read by lockctl during the round"));
        let line = html.split(r#"class="stock" points=""#).nth(1).unwrap();
        let points = line[..line.find('"').unwrap()].split(' ').count();
        assert_eq!(points, 7, "{line}");
    }
}
