//! `lockctl hunt`'s report: what was tried, and the first violation with its round's shape,
//! faults and the command that replays it.

use std::fmt::Write as _;

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, PreEscaped, html};
use serde::Serialize;

use crate::Advice;
use crate::hammer::{hammer_json, hammer_text};
use lockctl_core::units::count;
use lockctl_hammer::{Report, Verdict};
use lockctl_hunt::own::Matrix;
use lockctl_hunt::{Came, HuntReport};

/// The command that replays a hunt, and the environment variables it takes its secrets from.
#[derive(Debug, Default)]
pub struct Replay {
    /// The command line, for `sh`: each secret written as `"${LOCKCTL_SECRET_N}"`.
    pub command: String,
    /// Each variable the command reads, with what it must hold (`the secret in --redis`).
    pub secrets: Vec<(String, String)>,
    /// The secrets themselves, so that one written twice is one variable; never shown.
    values: Vec<String>,
}

impl Replay {
    /// The variable that carries `value` (found in `flag`), a new one for a new value.
    pub fn secret(&mut self, value: &str, flag: &str) -> String {
        if let Some(i) = self.values.iter().position(|v| v == value) {
            return self.secrets[i].0.clone();
        }
        let name = format!("LOCKCTL_SECRET_{}", self.values.len() + 1);
        self.values.push(value.to_string());
        self.secrets
            .push((name.clone(), format!("the secret in {flag}")));
        name
    }

    /// The replay's lines of a text report: the command, then what to set first.
    fn text(&self, s: &mut String) {
        let _ = writeln!(s, "  replay    {}", self.command);
        if !self.secrets.is_empty() {
            let each: Vec<String> = self
                .secrets
                .iter()
                .map(|(name, what)| format!("{name} to {what}"))
                .collect();
            let _ = writeln!(s, "            (set {} first)", each.join(", "));
        }
    }

    /// `replay_env`: each variable with what it must hold.
    fn env(&self) -> BTreeMap<&str, &str> {
        self.secrets
            .iter()
            .map(|(name, what)| (name.as_str(), what.as_str()))
            .collect()
    }
}

fn counts<K: std::fmt::Display>(m: &std::collections::BTreeMap<K, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The hunt for a person: what was tried, the verdict, and on a FAIL the round's report.
pub fn hunt_text(
    h: &HuntReport,
    replay: &Replay,
    color: bool,
    quiet: bool,
    advice: &dyn Advice,
) -> String {
    let mut s = String::new();
    let verdict = verdict_word(h.verdict);
    let paint = |text: &str| match (color, h.verdict) {
        (true, Verdict::Pass) => format!("\x1b[1;32m{text}\x1b[0m"),
        (true, Verdict::Fail) => format!("\x1b[1;31m{text}\x1b[0m"),
        (true, Verdict::Unknown) => format!("\x1b[1;33m{text}\x1b[0m"),
        (false, _) => text.to_string(),
    };
    if !quiet {
        tried_text(&mut s, h);
    }
    match &h.failure {
        Some(f) => {
            let shown = Shown {
                color,
                quiet,
                advice,
            };
            failure_text(&mut s, f, &paint(verdict), replay, &shown)
        }
        None => {
            let why = match h.verdict {
                Verdict::Pass => match h.orders_checked {
                    Some(n) => format!(
                        "nothing broke within the budget (order rows checked in {})",
                        count(n, "round", "rounds")
                    ),
                    None => "nothing broke within the budget".to_string(),
                },
                _ if h.interrupted && h.rounds == 0 => "interrupted before a round ended".into(),
                _ => "no round's books could be judged".into(),
            };
            let _ = writeln!(s, "  verdict   {}: {why}", paint(verdict));
            replay.text(&mut s);
        }
    }
    s
}

/// What the hunt tried: rounds, shapes, faults, the longest lease, what it cleaned up and
/// why rounds went unjudged.
fn tried_text(s: &mut String, h: &HuntReport) {
    let _ = writeln!(
        s,
        "hunt: seed {}, {} rounds ({} judged), {} requests in {:.1} s{}",
        h.seed,
        h.rounds,
        h.judged,
        h.requests,
        h.elapsed.as_secs_f64(),
        if h.interrupted { ", interrupted" } else { "" }
    );
    let _ = writeln!(s, "  shapes    {}", counts(&h.shapes));
    let faults = match h.faults_tried.is_empty() {
        true => "none".to_string(),
        false => {
            h.faults_tried
                .iter()
                .map(|(k, n)| format!("{k} {} of {n}", h.faults.get(k).copied().unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
                + " took effect"
        }
    };
    let _ = writeln!(s, "  faults    {faults}");
    if let Some(l) = &h.lease {
        let _ = writeln!(
            s,
            "  leases    the longest seen: {} with a TTL of {:.1} s; faults held up to {:.1} s",
            crate::terminal(&l.key),
            (l.ttl_ms as f64 / 100.0).ceil() / 10.0,
            h.longest_fault.as_secs_f64()
        );
    }
    let _ = writeln!(
        s,
        "  orders    {}",
        match h.orders_checked {
            None =>
                "not checked (no --orders-sql): the order rows were not held against the answers"
                    .to_string(),
            Some(n) => format!(
                "checked in {}: order rows held against the answers and the stock",
                count(n, "round", "rounds")
            ),
        }
    );
    cleaned_text(s, h);
    for u in &h.unknown {
        let _ = writeln!(s, "  unjudged  {}", crate::terminal(u));
    }
    let more = h.unjudged.saturating_sub(h.unknown.len() as u64);
    if more > 0 {
        let _ = writeln!(s, "  unjudged  and {more} more");
    }
}

/// What the hunt removed after itself, and what it left.
fn cleaned_text(s: &mut String, h: &HuntReport) {
    let Some(c) = &h.cleaned else {
        return;
    };
    let removed: Vec<String> = [(c.rows, "row", "rows"), (c.keys, "key", "keys")]
        .into_iter()
        .filter(|(n, ..)| *n > 0)
        .map(|(n, one, many)| count(n, one, many))
        .collect();
    let cleaned = match removed.is_empty() {
        true => "nothing the hunt created was left to remove".to_string(),
        false => format!(
            "removed {} the hunt created; --keep keeps them",
            removed.join(" and ")
        ),
    };
    let _ = writeln!(s, "  cleaned   {cleaned}");
    for left in &c.left {
        let _ = writeln!(s, "  left      {left}");
    }
}

/// How a text report is shown: in colour, quietly, and with whose words for a fix.
struct Shown<'a> {
    color: bool,
    quiet: bool,
    advice: &'a dyn Advice,
}

/// The failing round: its violations, faults, replay command and (unless quiet) its report.
fn failure_text(
    s: &mut String,
    f: &lockctl_hunt::Failure,
    verdict: &str,
    replay: &Replay,
    shown: &Shown<'_>,
) {
    let _ = writeln!(
        s,
        "  verdict   {verdict}: round {} broke a promise (SKU {}: stock {}, {} requests, {})",
        f.round.number, f.sku, f.round.stock, f.report.run.requests, f.round.shape
    );
    for v in &f.report.violations {
        let _ = writeln!(s, "              - {}", crate::terminal(v));
    }
    for fault in &f.faults {
        let _ = writeln!(
            s,
            "  fault     {} at {:.0} ms: {}{}",
            fault.fault,
            fault.start.as_secs_f64() * 1000.0,
            crate::terminal(&fault.detail),
            match f.came(fault) {
                Some(Came::Before) =>
                    " (before the requests the violation rests on were all answered)",
                Some(Came::After) => " (after every request the violation rests on was answered)",
                _ => "",
            }
        );
    }
    replay.text(s);
    if !shown.quiet {
        s.push_str("\nthe failing round:\n");
        s.push_str(&hammer_text(&f.report, shown.color, shown.advice));
    }
}

/// `hunt --json`: what was tried, the verdict, and the first failing round.
#[derive(Debug, Serialize)]
pub struct HuntJson<'a> {
    pub verdict: Verdict,
    pub seed: u64,
    /// The command that replays the hunt.
    pub replay: &'a str,
    /// Each variable the replay reads its secrets from, with what it must hold.
    pub replay_env: BTreeMap<&'a str, &'a str>,
    pub rounds: u64,
    pub judged: u64,
    pub requests: u64,
    pub elapsed_s: f64,
    /// Rounds per load shape.
    pub shapes: &'a BTreeMap<&'static str, u64>,
    /// Faults that took effect, per kind.
    pub faults: &'a BTreeMap<String, u64>,
    /// Faults tried, per kind.
    pub faults_tried: &'a BTreeMap<String, u64>,
    pub longest_lease: Option<LeaseJson<'a>>,
    pub longest_fault_ms: f64,
    /// Rounds whose order rows were held against the answers and the stock; `null` when no
    /// order rows were named.
    pub orders_checked_rounds: Option<u64>,
    pub interrupted: bool,
    /// Why rounds went unjudged (the first few).
    pub unjudged: &'a [String],
    pub unjudged_rounds: u64,
    pub cleaned: Option<CleanedJson<'a>>,
    pub failure: Option<FailureJson<'a>>,
}

/// The longest lease the hunt saw on the system's keys.
#[derive(Debug, Serialize)]
pub struct LeaseJson<'a> {
    pub key: &'a str,
    pub ttl_ms: u64,
}

/// What the hunt removed after itself, and what it left.
#[derive(Debug, Serialize)]
pub struct CleanedJson<'a> {
    pub rows: u64,
    pub keys: u64,
    pub left: &'a [String],
}

/// The first round that broke a promise.
#[derive(Debug, Serialize)]
pub struct FailureJson<'a> {
    pub round: u64,
    pub sku: &'a str,
    pub stock: u64,
    pub requests: u64,
    pub shape: String,
    pub faults: Vec<FaultJson<'a>>,
    pub violations: &'a [String],
    /// The round's hammer report.
    pub report: Report,
}

/// One fault of the failing round, its times from the round's start.
#[derive(Debug, Serialize)]
pub struct FaultJson<'a> {
    pub fault: &'a str,
    pub detail: &'a str,
    pub start_ms: f64,
    pub stop_ms: Option<f64>,
    /// `before` or `after` the requests the violations rest on were all answered; `null`
    /// when the round kept no history.
    pub came: Option<&'static str>,
}

/// The [`HuntJson`] of `h`, the failing round's first error worded by `advice`.
pub fn hunt_json<'a>(h: &'a HuntReport, replay: &'a Replay, advice: &dyn Advice) -> HuntJson<'a> {
    let failure = h.failure.as_ref().map(|f| FailureJson {
        round: f.round.number,
        sku: &f.sku,
        stock: f.round.stock,
        requests: f.report.run.requests,
        shape: f.round.shape.to_string(),
        faults: f
            .faults
            .iter()
            .map(|x| FaultJson {
                fault: &x.fault,
                detail: &x.detail,
                start_ms: x.start.as_secs_f64() * 1000.0,
                stop_ms: x.stop.map(|d| d.as_secs_f64() * 1000.0),
                came: f.came(x).map(|c| match c {
                    Came::Before => "before",
                    _ => "after",
                }),
            })
            .collect(),
        violations: &f.report.violations,
        report: hammer_json(&f.report, advice),
    });
    HuntJson {
        verdict: h.verdict,
        seed: h.seed,
        replay: &replay.command,
        replay_env: replay.env(),
        rounds: h.rounds,
        judged: h.judged,
        requests: h.requests,
        elapsed_s: h.elapsed.as_secs_f64(),
        shapes: &h.shapes,
        faults: &h.faults,
        faults_tried: &h.faults_tried,
        longest_lease: h.lease.as_ref().map(|l| LeaseJson {
            key: &l.key,
            ttl_ms: l.ttl_ms,
        }),
        longest_fault_ms: h.longest_fault.as_secs_f64() * 1000.0,
        orders_checked_rounds: h.orders_checked,
        interrupted: h.interrupted,
        unjudged: &h.unknown,
        unjudged_rounds: h.unjudged,
        cleaned: h.cleaned.as_ref().map(|c| CleanedJson {
            rows: c.rows,
            keys: c.keys,
            left: &c.left,
        }),
        failure,
    }
}

/// The verdict as a word in capitals (PASS, FAIL, UNKNOWN).
pub(crate) fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "PASS",
        Verdict::Fail => "FAIL",
        Verdict::Unknown => "UNKNOWN",
    }
}

/// `hunt --strategy` for a person: the strategy x fault matrix, then each failing cell's first
/// violation.
pub fn matrix_text(m: &Matrix, replay: &Replay) -> String {
    let mut columns: Vec<String> = Vec::new();
    for c in &m.cells {
        let name = c
            .fault
            .map_or("no fault".to_string(), |f| f.name().to_string());
        if !columns.contains(&name) {
            columns.push(name);
        }
    }
    let mut s = format!(
        "hunt: lockctl's own strategies, seed {}, {:.1} s{}\n",
        m.seed,
        m.elapsed.as_secs_f64(),
        if m.interrupted { ", interrupted" } else { "" }
    );
    let _ = write!(s, "  {:<10}", "strategy");
    for c in &columns {
        let _ = write!(s, "  {c:<14}");
    }
    s.push('\n');
    let mut strategies: Vec<_> = m.cells.iter().map(|c| c.strategy).collect();
    strategies.dedup();
    for strategy in strategies {
        let _ = write!(s, "  {:<10}", strategy.name());
        for c in m.cells.iter().filter(|c| c.strategy == strategy) {
            let cell = format!("{} ({})", verdict_word(c.verdict), c.rounds);
            let _ = write!(s, "  {cell:<14}");
        }
        s.push('\n');
    }
    for c in m
        .cells
        .iter()
        .filter(|c| c.violation.is_none() && c.unjudged.is_some())
    {
        let _ = writeln!(
            s,
            "  {} under {}, a round not judged: {}",
            c.strategy.name(),
            c.fault.map_or("no fault", |f| f.name()),
            c.unjudged.as_deref().unwrap_or_default()
        );
    }
    for c in m.cells.iter().filter(|c| c.violation.is_some()) {
        let _ = writeln!(
            s,
            "  {} under {}: {}",
            c.strategy.name(),
            c.fault.map_or("no fault", |f| f.name()),
            c.violation.as_deref().unwrap_or_default()
        );
    }
    let _ = writeln!(
        s,
        "  verdict   {} (rounds in parentheses)",
        verdict_word(m.verdict())
    );
    replay.text(&mut s);
    s
}

/// `hunt --strategy --json`: the strategy x fault matrix.
#[derive(Debug, Serialize)]
pub struct MatrixJson<'a> {
    pub verdict: Verdict,
    pub seed: u64,
    pub replay: &'a str,
    pub replay_env: BTreeMap<&'a str, &'a str>,
    pub elapsed_s: f64,
    pub interrupted: bool,
    pub matrix: Vec<CellJson<'a>>,
}

/// One strategy under one fault (or none).
#[derive(Debug, Serialize)]
pub struct CellJson<'a> {
    pub strategy: &'static str,
    pub fault: Option<&'static str>,
    pub rounds: u64,
    pub verdict: Verdict,
    pub violation: Option<&'a str>,
    pub unjudged: Option<&'a str>,
}

/// The [`MatrixJson`] of `m`.
pub fn matrix_json<'a>(m: &'a Matrix, replay: &'a Replay) -> MatrixJson<'a> {
    MatrixJson {
        verdict: m.verdict(),
        seed: m.seed,
        replay: &replay.command,
        replay_env: replay.env(),
        elapsed_s: m.elapsed.as_secs_f64(),
        interrupted: m.interrupted,
        matrix: m
            .cells
            .iter()
            .map(|c| CellJson {
                strategy: c.strategy.name(),
                fault: c.fault.map(|f| f.name()),
                rounds: c.rounds,
                verdict: c.verdict,
                violation: c.violation.as_deref(),
                unjudged: c.unjudged.as_deref(),
            })
            .collect(),
    }
}

/// The matrix page's style sheet: a constant, so it goes into the page as it is.
const MATRIX_STYLE: &str = "body{font-family:sans-serif;margin:20px} \
    td,th{padding:6px 12px;border:1px solid #ccc} table{border-collapse:collapse}";

/// `hunt --strategy --export-html`: the matrix as one self-contained page.
pub fn matrix_html(m: &Matrix, replay: &Replay) -> String {
    let mut columns: Vec<Option<lockctl_hunt::nemesis::FaultKind>> = Vec::new();
    for c in &m.cells {
        if !columns.contains(&c.fault) {
            columns.push(c.fault);
        }
    }
    let mut strategies: Vec<_> = m.cells.iter().map(|c| c.strategy).collect();
    strategies.dedup();
    let page = html! {
        (DOCTYPE)
        html {
            head {
                meta charset="utf-8";
                title { "lockctl: strategies under faults" }
                style { (PreEscaped(MATRIX_STYLE)) }
            }
            body {
                h1 { "lockctl's own strategies under faults: " (verdict_word(m.verdict())) }
                p {
                    "Seed " (m.seed) ", " (format!("{:.1}", m.elapsed.as_secs_f64()))
                    " s; rounds in parentheses. Replay: " code { (replay.command) }
                }
                table {
                    tr {
                        th { "strategy" }
                        @for f in &columns { th { (f.map_or("no fault", |f| f.name())) } }
                    }
                    @for strategy in strategies {
                        tr {
                            th { (strategy.name()) }
                            @for c in m.cells.iter().filter(|c| c.strategy == strategy) {
                                (matrix_cell(c))
                            }
                        }
                    }
                }
                h2 { "First violations" }
                ul {
                    @for c in m.cells.iter().filter(|c| c.violation.is_some()) {
                        li {
                            (c.strategy.name()) " under " (c.fault.map_or("no fault", |f| f.name()))
                            ": " (c.violation.as_deref().unwrap_or_default())
                        }
                    }
                }
            }
        }
    };
    page.into_string() + "\n"
}

/// One strategy under one fault: its verdict and rounds, coloured, with its first violation
/// (or why a round went unjudged) as the tooltip.
fn matrix_cell(c: &lockctl_hunt::own::Cell) -> Markup {
    let colour = match c.verdict {
        Verdict::Pass => "#cfc",
        Verdict::Fail => "#fcc",
        Verdict::Unknown => "#eee",
    };
    let title = c
        .violation
        .as_deref()
        .or(c.unjudged.as_deref())
        .unwrap_or_default();
    html! {
        td style={ "background:" (colour) } title=(title) {
            (verdict_word(c.verdict)) " (" (c.rounds) ")"
        }
    }
}

#[cfg(test)]
mod tests;
