//! `--export-html`: one self-contained page (inline SVG, no scripts, no network) that stands
//! alone: what was run and where, every column of the Markdown table, the latency, lock wait
//! and lock hold distributions, and the stock over time.

use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::chart::{Scale, Series, line_chart};
use crate::hammer::{Context, lock_kind, mode_name, ranked, summary_cells};
use crate::hunt::verdict_word;
use lockctl_hammer::{Bucket, Report, Verdict, overall_verdict};

/// The page's style sheet: a constant, so it goes into the page as it is.
const STYLE: &str = "
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
td:first-child, th:first-child { text-align: left; }
table.settings td { text-align: left; }
.pass { color: #1a7f37; font-weight: bold; } .fail, .unknown { color: #c62828; font-weight: bold; }
svg { background: #fff; border: 1px solid #ddd; margin: 0.5em 0; max-width: 100%; height: auto; }
.banner { padding: 0.8em 1.2em; margin: 1em 0; border-radius: 6px; color: #fff; }
.banner h2 { margin: 0 0 0.3em 0; font-size: 2em; } .banner ul { margin: 0.3em 0; }
.banner.pass { background: #1a7f37; } .banner.fail { background: #c62828; } .banner.unknown { background: #b26a00; }
";

/// The summary table's headings after the strategy's (and, comparing strategies, after
/// "slower than fastest").
const HEADINGS: [&str; 13] = [
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "p99.9 ms",
    "max ms",
    "bought",
    "sold out",
    "busy",
    "lease lost",
    "errors",
    "final stock",
    "oversold",
    "verdict",
];

/// The page.
pub fn hammer_html(reports: &[Report], context: &Context) -> String {
    let title = reports.first().map_or(String::new(), |r| {
        format!(
            "{} of {}, {} at a time",
            lockctl_core::units::count(r.run.requests, "purchase", "purchases"),
            r.run.sku,
            r.run.concurrency.min(r.run.requests)
        )
    });
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (verdict_word(overall_verdict(reports))) " · lockctl hammer: " (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "lockctl hammer: " (title) }
                (banner(reports))
                (settings_table(reports, context))
                (summary_table(reports))
                ul { (findings(reports)) }
                (errors_table(reports))
                @for (heading, svg) in charts(reports) {
                    h2 { (heading) }
                    (svg)
                }
            }
        }
    };
    page.into_string() + "\n"
}

/// The distributions and the stock and throughput over time, each under its heading.
fn charts(reports: &[Report]) -> [(&'static str, Markup); 5] {
    [
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
        (
            "Throughput over time",
            line_chart(
                &throughput_series(reports),
                Scale::Linear,
                "seconds since start",
                "units sold per second",
            ),
        ),
    ]
}

/// What was run, where, when and by which command.
fn settings_table(reports: &[Report], c: &Context) -> Markup {
    let Some(r) = reports.first() else {
        return Markup::default();
    };
    let strategies: Vec<&str> = reports.iter().map(|r| r.run.strategy.name()).collect();
    let lock = match lock_kind(r).trim_start_matches(", ") {
        "" => "none (the strategy takes no lock)".to_string(),
        k => k.to_string(),
    };
    let rows = [
        ("SKU", r.run.sku.clone()),
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
                c.redis,
                c.redis_version.as_deref().unwrap_or("unknown")
            ),
        ),
        ("lockctl", c.lockctl_version.clone()),
        ("date", c.started_at.clone()),
    ];
    html! {
        table class="settings" {
            @for (k, v) in rows {
                tr { th { (k) } td { (v) } }
            }
            tr { th { "command" } td { code { (c.command_line) } } }
        }
    }
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

/// Per strategy, the stock the buyers were told over time; and flat lines at the initial
/// stock and at zero, so that a stock below zero (oversold) shows as a stretch under the zero
/// line, named in the legend.
fn stock_series(reports: &[Report]) -> Vec<Series> {
    let mut series: Vec<Series> = reports
        .iter()
        .map(|r| Series {
            name: r.run.strategy.name().to_string(),
            points: r.stock_timeline.iter().map(|p| (p[0], p[1])).collect(),
        })
        .collect();
    let end = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(0.0_f64, f64::max)
        .max(0.001);
    let initial = reports.first().map_or(0, |r| r.run.initial_stock) as f64;
    let below = reports
        .iter()
        .flat_map(|r| r.stock_timeline.iter().map(|p| p[1]))
        .fold(0.0_f64, f64::min);
    series.push(Series {
        name: format!("initial stock ({initial})"),
        points: vec![(0.0, initial), (end, initial)],
    });
    series.push(Series {
        name: if below < 0.0 {
            format!("zero (the stock went down to {below}: oversold)")
        } else {
            "zero".to_string()
        },
        points: vec![(0.0, 0.0), (end, 0.0)],
    });
    series
}

/// Per strategy, units sold per second over time, from the stock the buyers were told: the
/// fall of the stock between two points of the timeline over the time between them, in at
/// most 40 steps.
fn throughput_series(reports: &[Report]) -> Vec<Series> {
    reports
        .iter()
        .filter(|r| r.stock_timeline.len() > 1)
        .map(|r| {
            let t = &r.stock_timeline;
            let step = t.len().div_ceil(40).max(1);
            let picked: Vec<&[f64; 2]> = t.iter().step_by(step).chain(t.last()).collect();
            let points = picked
                .windows(2)
                .filter(|w| w[1][0] > w[0][0])
                .map(|w| (w[1][0], (w[0][1] - w[1][1]).max(0.0) / (w[1][0] - w[0][0])))
                .collect();
            Series {
                name: r.run.strategy.name().to_string(),
                points,
            }
        })
        .collect()
}

/// The errors by kind, per strategy, as a table; nothing when no request failed.
fn errors_table(reports: &[Report]) -> Markup {
    if reports.iter().all(|r| r.errors == 0) {
        return Markup::default();
    }
    html! {
        h2 { "Errors by kind" }
        table {
            tr { th { "strategy" } th { "kind" } th { "requests" } }
            @for r in reports {
                @for (kind, n) in &r.errors_by_kind {
                    tr { td { (r.run.strategy.name()) } td { (kind.name()) } td { (n) } }
                }
            }
        }
    }
}

/// What the verdict checked, as the judge checks it (`lockctl_hammer::judge`): the same for
/// every run of lockctl's own buyers, with the orders pipeline's and the HTTP judge's own.
fn invariants(r: &Report) -> Vec<&'static str> {
    let mut checked = vec![
        "every request answered once (none unaccounted for)",
        "the stock never went below zero",
        "nothing sold beyond the initial stock",
        "the stock fell by exactly the units buyers were told they bought (give or take what failed requests may have bought)",
    ];
    if r.http.is_none() {
        checked.push("the ledger records exactly what the stock lost");
    }
    checked.push("no 'sold out' while stock was left");
    if r.pipeline.is_some() {
        checked.push("every order told bought is in PostgreSQL, once");
    }
    checked
}

/// The banner at the top: the verdict, the invariants it checked and the ones violated (or
/// why nothing could be claimed).
fn banner(reports: &[Report]) -> Markup {
    let word = verdict_word(overall_verdict(reports));
    html! {
        div class={ "banner " (word.to_lowercase()) } {
            h2 { (word) }
            @for r in reports {
                (banner_part(r, reports.len() > 1))
            }
        }
    }
}

/// One strategy's part of the banner, named when the page compares strategies.
fn banner_part(r: &Report, named: bool) -> Markup {
    let who = match named {
        true => format!("{}: ", r.run.strategy.name()),
        false => String::new(),
    };
    let checked = match r.verdict {
        Verdict::Pass => "checked, and every one held",
        Verdict::Fail => "checked (the ones above broke)",
        Verdict::Unknown => "would have checked",
    };
    html! {
        @match r.verdict {
            Verdict::Fail => {
                div { (who) "violated:" }
                ul { @for v in &r.violations { li { (v) } } }
            }
            Verdict::Unknown => {
                div {
                    (who) "nothing can be claimed: "
                    (r.unknown_because.as_deref().unwrap_or("the run could not be judged"))
                }
            }
            Verdict::Pass => {}
        }
        div { (who) (checked) ":" }
        ul { @for i in invariants(r) { li { (i) } } }
    }
}

/// The summary table, fastest strategy first: every column of the Markdown export.
fn summary_table(reports: &[Report]) -> Markup {
    // "slower than fastest" compares strategies: not for a single run.
    let compare = reports.len() > 1;
    html! {
        table {
            tr {
                th { "strategy" }
                th { "purchases/s" }
                @if compare { th { "slower than fastest" } }
                @for h in HEADINGS { th { (h) } }
            }
            @for (r, rel) in ranked(reports) {
                (summary_row(r, rel, compare))
            }
        }
    }
}

/// One strategy's row of the summary table, its verdict coloured.
fn summary_row(r: &Report, rel: f64, compare: bool) -> Markup {
    let mut cells = summary_cells(r, rel);
    let word = std::mem::take(&mut cells[15]);
    html! {
        tr {
            @for (i, c) in cells[..15].iter().enumerate() {
                @if compare || i != 2 { td { (c) } }
            }
            td class=(word.to_lowercase()) { (word) }
        }
    }
}

/// Every violation and note, as list items.
fn findings(reports: &[Report]) -> Markup {
    html! {
        @for r in reports {
            @for v in &r.violations {
                li class="fail" { (r.run.strategy.name()) ": " (v) }
            }
            @for n in &r.notes {
                li { (r.run.strategy.name()) ": " (n) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::fixtures::round;
    use lockctl_hammer::history::Fault;

    /// Text that would break out of an element or of either kind of attribute quote.
    fn hostile(field: &str) -> String {
        format!("{field}'\"<>&'><script>")
    }

    /// [`hostile`] as it must appear on the page: maud writes every attribute value in double
    /// quotes, so `'` cannot end one and is left as it is; `"`, `<`, `>` and `&` are entities.
    fn escaped(field: &str) -> String {
        format!("{field}'&quot;&lt;&gt;&amp;'&gt;&lt;script&gt;")
    }

    fn assert_escaped(html: &str, fields: &[&str]) {
        assert!(!html.contains("<script>"), "{html}");
        for f in fields {
            assert!(!html.contains(&hostile(f)), "{f} shown raw: {html}");
            assert!(html.contains(&escaped(f)), "{f} not shown escaped: {html}");
        }
    }

    #[test]
    fn every_field_the_hammer_page_shows_is_escaped() {
        let mut h = round(3, 3);
        h.facts.sku = hostile("sku");
        let mut failed = h.judge();
        failed.verdict = Verdict::Fail;
        failed.violations.push(hostile("violation"));
        failed.notes.push(hostile("note"));
        let mut unknown = h.judge();
        unknown.verdict = Verdict::Unknown;
        unknown.unknown_because = Some(hostile("unknown"));
        let context = Context {
            redis: hostile("redis"),
            redis_version: Some(hostile("version")),
            lockctl_version: hostile("lockctl"),
            started_at: hostile("date"),
            command_line: hostile("command"),
        };
        let html = hammer_html(&[failed, unknown], &context);
        assert_escaped(
            &html,
            &[
                "sku",
                "violation",
                "note",
                "unknown",
                "redis",
                "version",
                "lockctl",
                "date",
                "command",
            ],
        );
    }

    #[test]
    fn every_field_the_matrix_page_shows_is_escaped() {
        use lockctl_core::stock::Strategy;
        use lockctl_hunt::nemesis::FaultKind;
        use lockctl_hunt::own::{Cell, Matrix};
        let cell = |fault, verdict, violation, unjudged| Cell {
            strategy: Strategy::Lock,
            fault,
            rounds: 1,
            verdict,
            violation,
            unjudged,
        };
        let m = Matrix {
            seed: 1,
            cells: vec![
                cell(None, Verdict::Unknown, None, Some(hostile("unjudged"))),
                cell(
                    Some(FaultKind::PauseHolder),
                    Verdict::Fail,
                    Some(hostile("violation")),
                    None,
                ),
            ],
            elapsed: Duration::from_millis(1),
            interrupted: false,
        };
        let mut replay = crate::Replay::default();
        replay.command = hostile("replay");
        let html = crate::matrix_html(&m, &replay);
        assert_escaped(&html, &["unjudged", "violation", "replay"]);
    }

    #[test]
    fn every_field_the_timeline_shows_is_escaped() {
        let mut h = round(3, 3);
        h.facts.sku = hostile("sku");
        h.facts.run_id = hostile("run");
        h.faults.push(Fault {
            fault: hostile("fault"),
            start: Duration::from_millis(1),
            stop: Some(Duration::from_millis(2)),
            detail: hostile("detail"),
            took: true,
        });
        let mut report = h.judge();
        report.violations.push(hostile("violation"));
        let html = crate::timeline_html(&h, &report);
        assert_escaped(&html, &["sku", "run", "fault", "detail", "violation"]);
    }
}
