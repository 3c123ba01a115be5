//! A round's timeline as one self-contained HTML page (inline SVG, no scripts, no network), in
//! the manner of Porcupine's visualisation: each lane's requests as bars from sent to answered,
//! coloured by answer, faults as bands across the lanes, the stock above them as a step line
//! from lockctl's own reads during the round (the stock the answers reported as dots), and the
//! requests the violations rest on outlined and listed. A hunt's round carries its seed and
//! the command that replays it. The page is written with maud: every string from outside
//! (answers, SKUs, the command) is escaped by construction on its way in.

use std::collections::HashMap;
use std::time::Duration;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use lockctl_core::stock::{Buy, Outcome};
use lockctl_hammer::history::{Blamed, History, blamed, lanes};
use lockctl_hammer::{Ended, Report, Sample};

use crate::hunt::verdict_word;

const WIDTH: f64 = 1100.0;
const LEFT: f64 = 70.0;
const LANE: f64 = 14.0;
const STOCK: f64 = 120.0;
/// The outline of a request a violation rests on: a colour used for nothing else.
pub const BLAMED: &str = "#e0e";
/// The most requests listed under "Violations" (all are outlined).
const LISTED: usize = 50;

/// The page's style sheet: a constant, so it goes into the page as it is.
const STYLE: &str = "body{font-family:sans-serif;margin:20px;color:#222} \
    .k span{display:inline-block;width:12px;height:10px;margin:0 4px 0 12px} \
    table.named{border-collapse:collapse} \
    table.named td,table.named th{border:1px solid #ccc;padding:2px 6px} \
    pre{background:#f4f4f4;padding:6px;white-space:pre-wrap}";

/// Where things go on the drawing: time across, lanes down under the stock.
struct Frame {
    /// The last moment drawn.
    end: Duration,
    /// The top of the first lane.
    top: f64,
    lanes: u64,
}

impl Frame {
    fn x(&self, d: Duration) -> f64 {
        LEFT + (WIDTH - LEFT - 10.0) * d.as_secs_f64() / self.end.as_secs_f64()
    }
}

/// `v` to a tenth, as every computed coordinate and time is written.
fn d1(v: f64) -> String {
    format!("{v:.1}")
}

/// The page for `report`, judged from `h`.
pub fn timeline_html(h: &History, report: &Report) -> String {
    let lane_of = lanes(&h.samples);
    let end = h
        .samples
        .iter()
        .map(|s| s.at)
        .chain(h.faults.iter().filter_map(|f| f.stop))
        .chain(h.stock_reads.iter().map(|r| r.at))
        .max()
        .unwrap_or(Duration::from_millis(1))
        .max(Duration::from_millis(1));
    let frame = Frame {
        end,
        top: STOCK + 30.0,
        lanes: lane_of.iter().copied().max().map_or(1, |m| m + 1),
    };
    let named = blamed(h, report);
    let why: HashMap<u64, &str> = named.iter().map(|b| (b.index, b.why)).collect();
    // In request order: the page is the same whichever order the records were kept in. The
    // outlined ones last, so that no neighbour's bar covers an outline.
    let mut bars: Vec<(&Sample, u64)> = h.samples.iter().zip(lane_of.iter().copied()).collect();
    bars.sort_by_key(|(s, _)| (why.contains_key(&s.index), s.index));
    let height = frame.top + frame.lanes as f64 * LANE + 40.0;
    let svg = html! {
        svg xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            font-family="sans-serif" font-size="11" {
            @for f in &h.faults {
                (fault_band(f, &frame))
            }
            (stock_line(h, &frame))
            @for (s, lane) in bars {
                (bar(h, s, lane, why.get(&s.index).copied(), &frame))
            }
            // Again over the bars, see-through and deaf to the pointer: drawn only beneath,
            // a fault was hidden behind the bars of the requests it struck (a client-kill
            // from 36 ms to 256 ms showed only past the last bar). The one beneath keeps the
            // tooltip where no bar is; a bar's tooltip stays its own.
            @for f in &h.faults {
                (fault_veil(f, &frame))
            }
            text x=(LEFT) y=(d1(height - 10.0)) { "0 ms" }
            text x=(d1(WIDTH - 10.0)) y=(d1(height - 10.0)) text-anchor="end" {
                (d1(ms(end))) " ms"
            }
            text x="4" y=(d1(frame.top + 12.0)) { "lanes" }
        }
    };
    page(h, report, svg, &named)
}

/// A fault as a band across the lanes, named above them.
fn fault_band(f: &lockctl_hammer::history::Fault, frame: &Frame) -> Markup {
    let (a, b) = fault_span(f, frame);
    html! {
        rect x=(d1(a)) y=(frame.top) width=(d1((b - a).max(2.0)))
            height=(d1(frame.lanes as f64 * LANE)) fill="#d33" opacity="0.15" {
            title { (crate::escape::terminal(&f.detail)) }
        }
        text x=(d1(a)) y=(d1(frame.top - 4.0)) fill="#a00" { (crate::escape::terminal(&f.fault)) }
    }
}

/// A fault's band again, over the bars: see-through, edged, and not in the pointer's way.
fn fault_veil(f: &lockctl_hammer::history::Fault, frame: &Frame) -> Markup {
    let (a, b) = fault_span(f, frame);
    html! {
        rect class="fault-veil" x=(d1(a)) y=(frame.top) width=(d1((b - a).max(2.0)))
            height=(d1(frame.lanes as f64 * LANE)) fill="#d33" fill-opacity="0.18" stroke="#d33"
            stroke-opacity="0.6" stroke-dasharray="3 2" pointer-events="none" {}
    }
}

/// Where a fault begins and ends on the page (a fault still on at the end: 5 ms wide).
fn fault_span(f: &lockctl_hammer::history::Fault, frame: &Frame) -> (f64, f64) {
    (
        frame.x(f.start),
        frame.x(f.stop.unwrap_or(f.start + Duration::from_millis(5))),
    )
}

/// A request as a bar in its lane from sent to answered, coloured by its answer; outlined
/// when a violation rests on it (`why`).
fn bar(h: &History, s: &Sample, lane: u64, why: Option<&str>, frame: &Frame) -> Markup {
    let (a, b) = (frame.x(s.sent), frame.x(s.at.max(s.sent)));
    let y = frame.top + lane as f64 * LANE + 2.0;
    let (fill, said) = colour(s);
    let outlined = why.is_some();
    html! {
        rect x=(d1(a)) y=(d1(y)) width=(d1((b - a).max(1.5))) height=(d1(LANE - 4.0)) fill=(fill)
            class=[outlined.then_some("blamed")] stroke=[outlined.then_some(BLAMED)]
            stroke-width=[outlined.then_some("2.5")] {
            title { (tooltip(h, s, &said, why)) }
        }
    }
}

/// `request 12 (user u3, order h1a2b3c4d-12): bought at 41.2 ms, 3.1 ms after it was sent`,
/// and why a violation rests on it.
fn tooltip(h: &History, s: &Sample, said: &str, why: Option<&str>) -> String {
    let who = match h.user_of(s.index) {
        Some(u) => format!("user {u}, order {}", h.order_shown(s)),
        None => format!("order {}", h.order_shown(s)),
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

/// The stock over a round: the steps of its line and the answers' "remaining".
struct StockSteps {
    /// (when, stock): from the stock at the start, through each read (or each answer's
    /// "remaining" without reads), to the stock read back at the end.
    steps: Vec<(Duration, i64)>,
    /// (when, stock, request) of each answer that reported the stock, in time order.
    said: Vec<(Duration, i64, u64)>,
    /// Whether lockctl read the stock while the round went.
    read: bool,
}

impl StockSteps {
    fn of(h: &History, end: Duration) -> StockSteps {
        let bound = lockctl_core::stock::MAX_STOCK as i64;
        let mut said: Vec<_> = h
            .samples
            .iter()
            .filter_map(|s| remaining(s).map(|n| (s.at, n, s.index)))
            .collect();
        said.sort_by_key(|p| (p.0, p.2));
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
        StockSteps { steps, said, read }
    }

    /// The highest and lowest stock drawn, 1 and 0 at least.
    fn range(&self) -> (i64, i64) {
        let values = self
            .steps
            .iter()
            .map(|p| p.1)
            .chain(self.said.iter().map(|p| p.1));
        let high = values.clone().max().unwrap_or(1).max(1);
        (high, values.min().unwrap_or(0).min(0))
    }

    /// The line's points, `x,y` apart by spaces: a step, the stock holding until the read
    /// that found it changed.
    fn points(&self, frame: &Frame, y: &dyn Fn(i64) -> f64) -> String {
        let mut line: Vec<String> = Vec::new();
        let mut point = |t: Duration, v: i64| {
            let p = format!("{:.1},{:.1}", frame.x(t), y(v));
            if line.last() != Some(&p) {
                line.push(p);
            }
        };
        let mut last: Option<i64> = None;
        for &(t, v) in &self.steps {
            if let Some(before) = last {
                point(t, before);
            }
            point(t, v);
            last = Some(v);
        }
        if let Some(v) = last {
            point(frame.end, v);
        }
        line.join(" ")
    }
}

/// The stock over the round, as a step line over the lanes: from lockctl's own reads while
/// the round went when it has them, from the answers' "remaining" otherwise; from the stock
/// at the start to the stock read back at the end. The answers' "remaining" are dots.
fn stock_line(h: &History, frame: &Frame) -> Markup {
    let stock = StockSteps::of(h, frame.end);
    let (high, low) = stock.range();
    let span = (high as f64 - low as f64).max(1.0);
    let y = |v: i64| 20.0 + (STOCK - 20.0) * (high as f64 - v as f64) / span;
    let from = match stock.read {
        true => "read by lockctl during the round",
        false => "as the answers reported it (no reads during the round)",
    };
    html! {
        line x1=(LEFT) x2=(d1(WIDTH - 10.0)) y1=(d1(y(0))) y2=(d1(y(0))) stroke="#999"
            stroke-dasharray="3,3" {}
        polyline class="stock" points=(stock.points(frame, &y)) fill="none" stroke="#236"
            stroke-width="1.5" {
            title { "the stock, " (from) }
        }
        @if stock.read {
            @for (t, v, index) in &stock.said {
                circle class="said" cx=(d1(frame.x(*t))) cy=(d1(y(*v))) r="2.5" fill="#69c" {
                    title { "request " (index) " said " (v) " left" }
                }
            }
        }
        text x="4" y=(d1(y(high) + 4.0)) { "stock " (high) }
        text x="4" y=(d1(y(0) + 4.0)) { "0" }
        text x="4" y=(d1(frame.top - 4.0)) fill="#999" {
            @if low < 0 { "lowest " (low) }
        }
    }
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
            return (colour, format!("error: {message}"));
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

/// What replays the round: the hunt's seed and command, when the round was a hunt's.
fn replay(h: &History) -> Markup {
    let Some(hunt) = &h.hunt else {
        return Markup::default();
    };
    let round = hunt
        .round
        .map_or("A round".to_string(), |n| format!("Round {n}"));
    html! {
        p id="replay" { (round) " of the hunt with seed " code { (hunt.seed) } ". Replay it:" }
        pre { code { (hunt.replay) } }
        @if !hunt.set_first.is_empty() {
            p {
                "(set "
                @for (i, (name, what)) in hunt.set_first.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (name) } " to " (what)
                }
                " first)"
            }
        }
    }
}

/// The requests the violations rest on, as a table (at most [`LISTED`] rows).
fn named_table(h: &History, named: &[Blamed]) -> Markup {
    if named.is_empty() {
        return Markup::default();
    }
    let by_index: HashMap<u64, &Sample> = h.samples.iter().map(|s| (s.index, s)).collect();
    let listed = named
        .iter()
        .take(LISTED)
        .filter_map(|b| by_index.get(&b.index).map(|s| (b, *s)));
    html! {
        p { "The requests they rest on (outlined above):" }
        table class="named" {
            tr {
                th { "request" } th { "user" } th { "order" } th { "answer" }
                th { "sent (ms)" } th { "answered (ms)" } th { "why" }
            }
            @for (b, s) in listed {
                tr {
                    td { (b.index) }
                    td { (h.user_of(b.index).unwrap_or_else(|| "-".into())) }
                    td { (h.order_shown(s)) }
                    td {
                        (colour(s).1)
                        @if let Some(n) = remaining(s) { " (" (n) " left)" }
                    }
                    td { (d1(ms(s.sent))) }
                    td { (d1(ms(s.at))) }
                    td { (b.why) }
                }
            }
        }
        @if named.len() > LISTED {
            p { "and " (named.len() - LISTED) " more, outlined above." }
        }
    }
}

/// `items` as a list, or "none".
fn list_or_none(items: &[Markup]) -> Markup {
    html! {
        @if items.is_empty() {
            p class="none" { "none" }
        } @else {
            ul { @for i in items { li { (i) } } }
        }
    }
}

/// The legend of the drawing: a swatch per colour and mark, and what it means.
fn key() -> Markup {
    let swatches = [
        ("background:#3a3", "bought"),
        ("background:#888", "sold out"),
        ("background:#dc3", "busy"),
        ("background:#f90", "failed, may have deducted"),
        ("background:#c33", "failed"),
        ("background:#d33;opacity:.3", "fault"),
    ];
    html! {
        p class="k" {
            @for (style, meaning) in swatches {
                span style=(style) {} (meaning)
            }
            span style={ "border:2px solid " (BLAMED) ";width:8px;height:6px" } {}
            "a violation rests on it"
            span style="border-top:2px solid #236;height:0" {} "stock"
            span style="background:#69c;border-radius:50%;width:6px;height:6px" {}
            "stock an answer reported"
        }
    }
}

fn page(h: &History, report: &Report, svg: Markup, named: &[Blamed]) -> String {
    let violations: Vec<Markup> = report.violations.iter().map(|v| html! { (v) }).collect();
    let faults: Vec<Markup> = h
        .faults
        .iter()
        .map(|f| {
            html! {
                (crate::escape::terminal(&f.fault)) " at " (d1(ms(f.start))) " ms"
                @if let Some(stop) = f.stop { " to " (d1(ms(stop))) " ms" }
                ": " (crate::escape::terminal(&f.detail))
            }
        })
        .collect();
    let after = h
        .read_back
        .stock_after
        .map_or("unknown".into(), |s| s.to_string());
    let page = html! {
        (DOCTYPE)
        html {
            head {
                meta charset="utf-8";
                title { "lockctl: " (h.facts.sku) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (h.facts.sku) ": " (verdict_word(report.verdict)) }
                p {
                    (h.samples.len()) " requests, " (h.facts.concurrency) " at a time; stock "
                    (h.facts.initial_stock) " → " (after) ". Run " (h.facts.run_id) "."
                }
                (replay(h))
                (key())
                (svg)
                h2 { "Violations" } (list_or_none(&violations)) (named_table(h, named))
                h2 { "Faults" } (list_or_none(&faults))
            }
        }
    };
    page.into_string() + "\n"
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

    /// A fault is seen over the requests it struck: a see-through band drawn after every
    /// bar (drawn only beneath, the bars hid it), and not in a bar's tooltip's way.
    #[test]
    fn a_fault_is_drawn_over_the_bars_it_struck() {
        let mut h = round(3, 3);
        h.faults.push(lockctl_hammer::history::Fault {
            fault: "client-kill".into(),
            start: Duration::from_millis(1),
            stop: Some(Duration::from_millis(3)),
            detail: "killed 4 connection(s)".into(),
            took: true,
        });
        let html = timeline_html(&h, &h.judge());
        let last_bar = html.rfind("<title>request ").expect("the bars");
        let veil = html
            .find(r#"class="fault-veil""#)
            .expect("a veil over the bars");
        assert!(
            veil > last_bar,
            "the fault is drawn beneath the bars: {html}"
        );
        let tag = &html[veil..veil + html[veil..].find('>').unwrap()];
        assert!(tag.contains(r#"pointer-events="none""#), "{tag}");
    }

    /// A fault's name and detail (text from the system, a process's name) come to the page
    /// with their control characters escaped, as on a terminal: raw, an ESC or BEL reached
    /// anyone who printed the file.
    #[test]
    fn a_faults_control_characters_are_escaped_on_the_page() {
        let mut h = round(3, 3);
        h.faults.push(lockctl_hammer::history::Fault {
            fault: "pause-worker\u{7}".into(),
            start: Duration::from_millis(1),
            stop: Some(Duration::from_millis(3)),
            detail: "process 7 (\u{1b}]0;owned\u{7}) stopped".into(),
            took: true,
        });
        let html = timeline_html(&h, &h.judge());
        assert!(!html.contains(['\u{1b}', '\u{7}']), "{html}");
        assert!(html.contains(r"\u{1b}]0;owned\u{7}"), "{html}");
    }
}
