//! A history as JSON Lines, written and read back.
//!
//! Every line is one operation in Jepsen's shape: `type` (`invoke`, `ok`, `fail`, `info`),
//! `f`, `process`, `time` (nanoseconds from the run's start), `index` (the line's place) and
//! `value`. A purchase's `value` names the request, SKU, units, order id and user; its
//! completion adds the answer. `ok` is a sale; `fail` is an answer that sold nothing, or a
//! failure that cannot have deducted; `info` is a failure whose effect is unknown (it may have
//! deducted). The first line (`f: "facts"`) and the last (`f: "read"`) are lockctl's own.
//! The stock lockctl read during the run is `f: "read-stock"` of `process: "observer"`: an
//! `invoke` when the read was sent (`value` null) and an `ok` when it was answered (`value`
//! the stock), as Jepsen records a register's reads; the judgement does not use them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io::{self, BufRead, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Fault, History, HuntOrigin, MAX_STOCK_READS, ReadBack, StockRead};
use crate::readback::Restart;
use crate::report::{Ended, HttpFacts, PipelineReport, RunFacts, Sample};
use lockctl_core::stock::{Buy, Outcome};

mod ops;

/// The version of the history's shape, in its first line.
const VERSION: u64 = 1;

/// The longest line a history may have (1 MiB), beyond the room its last line's ledger needs:
/// a longer line is refused before it is read whole (parsed, it would cost several times its
/// length in memory).
pub const MAX_LINE: usize = 1 << 20;

/// The room the last line may take for each operation line before it: a ledger row
/// (`[request,units],`, at most 20 bytes within lockctl's bounds) for each request, whose
/// invoke and completion are two lines.
const LEDGER_BYTES_PER_OP: usize = 32;

/// A history that cannot be read: the line, and why.
#[derive(Debug, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct HistoryError {
    /// The line, counted from 1 (one past the last for a history cut short).
    pub line: usize,
    /// Why it cannot be read.
    pub reason: String,
}

/// One line.
#[derive(Serialize, Deserialize)]
struct Op {
    #[serde(rename = "type")]
    kind: String,
    f: String,
    process: Value,
    time: u64,
    index: u64,
    value: Value,
}

/// The first line's value.
#[derive(Serialize, Deserialize)]
struct FactsValue {
    version: u64,
    facts: RunFacts,
    stock_before: i64,
    elapsed_ns: u64,
    client_cpu_ns: Option<u64>,
    users: Option<u64>,
    server: String,
    client_max_rss_mb: Option<f64>,
    /// The hunt the round was part of (absent from a hammer's history, and from older ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hunt: Option<HuntOrigin>,
}

/// The last line's value.
#[derive(Serialize, Deserialize)]
struct ReadValue {
    #[serde(flatten)]
    read_back: ReadBack,
    went_up: Option<String>,
    restart: Option<Restart>,
    interrupted: Option<(u64, u64)>,
    notes: Vec<String>,
    #[serde(default)]
    findings: Vec<String>,
    #[serde(default)]
    unjudged: Option<String>,
    pipeline: Option<(PipelineReport, Vec<String>)>,
    http: Option<HttpFacts>,
}

fn ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

/// Writes `h` as JSON Lines.
pub fn write(h: &History, out: &mut impl Write) -> io::Result<()> {
    let f = &h.facts;
    let mut lines: Vec<(u64, u8, String, Value, Value)> = Vec::new();
    let lanes = lanes(&h.samples);
    for (s, lane) in h.samples.iter().zip(lanes) {
        let value = request_value(h, s.index);
        lines.push((ns(s.sent), 1, "invoke".into(), lane.into(), value.clone()));
        let (kind, value) = completion(s, value);
        lines.push((ns(s.at), 0, kind.into(), lane.into(), value));
    }
    for fault in &h.faults {
        let value = json!({ "fault": fault.fault, "detail": fault.detail, "took": fault.took });
        lines.push((
            ns(fault.start),
            2,
            "start".into(),
            "nemesis".into(),
            value.clone(),
        ));
        if let Some(stop) = fault.stop {
            lines.push((ns(stop), 2, "stop".into(), "nemesis".into(), value));
        }
    }
    for r in &h.stock_reads {
        let observer = Value::from(OBSERVER);
        lines.push((
            ns(r.sent),
            1,
            "invoke".into(),
            observer.clone(),
            Value::Null,
        ));
        lines.push((ns(r.at), 0, "ok".into(), observer, r.stock.into()));
    }
    // By time; at one moment, what ended before what began, so a lane is free again.
    lines.sort_by_key(|l| (l.0, l.1));
    let facts = FactsValue {
        version: VERSION,
        facts: f.clone(),
        stock_before: f.initial_stock,
        elapsed_ns: ns(f.elapsed),
        client_cpu_ns: f.client_cpu.map(ns),
        users: h.users,
        server: h.server.clone(),
        client_max_rss_mb: h.client_max_rss_mb,
        hunt: h.hunt.clone(),
    };
    let mut index = 0;
    let mut line = |out: &mut dyn Write, kind: &str, f: &str, process: Value, time, value| {
        let op = Op {
            kind: kind.into(),
            f: f.into(),
            process,
            time,
            index,
            value,
        };
        index += 1;
        serde_json::to_writer(&mut *out, &op)?;
        out.write_all(b"\n")
    };
    let lockctl = Value::from("lockctl");
    line(out, "info", "facts", lockctl.clone(), 0, to_value(&facts)?)?;
    for (time, _, kind, process, value) in lines {
        let (kind, f) = match process.as_str() {
            Some("nemesis") => ("info".to_string(), kind),
            Some(OBSERVER) => (kind, READ_STOCK.to_string()),
            _ => (kind, "buy".to_string()),
        };
        line(out, &kind, &f, process, time, value)?;
    }
    let read = ReadValue {
        read_back: h.read_back.clone(),
        went_up: h.went_up.clone(),
        restart: h.restart.clone(),
        interrupted: h.interrupted,
        notes: h.notes.clone(),
        findings: h.findings.clone(),
        unjudged: h.unjudged.clone(),
        pipeline: h.pipeline.clone(),
        http: h.http.clone(),
    };
    let end = h
        .samples
        .iter()
        .map(|s| ns(s.at))
        .chain(h.stock_reads.iter().map(|r| ns(r.at)))
        .max()
        .unwrap_or(0);
    line(out, "info", "read", lockctl, end, to_value(&read)?)?;
    out.flush()
}

/// The process of lockctl's own reads of the stock during the run.
const OBSERVER: &str = "observer";
/// Their `f`.
const READ_STOCK: &str = "read-stock";

fn to_value(v: &impl Serialize) -> io::Result<Value> {
    serde_json::to_value(v).map_err(io::Error::other)
}

/// A lane for each request, in Jepsen's sense of a process: requests in one lane never
/// overlap in time. The fewest lanes, each request the lowest lane free when it was sent.
pub fn lanes(samples: &[Sample]) -> Vec<u64> {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&i| (samples[i].sent, samples[i].index));
    let mut busy: BinaryHeap<Reverse<(Duration, u64)>> = BinaryHeap::new();
    let mut free: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut next = 0;
    let mut lane = vec![0; samples.len()];
    for i in order {
        let s = &samples[i];
        while let Some(Reverse((end, l))) = busy.peek().copied() {
            if end > s.sent {
                break;
            }
            busy.pop();
            free.push(Reverse(l));
        }
        let l = free.pop().map(|Reverse(l)| l).unwrap_or_else(|| {
            next += 1;
            next - 1
        });
        lane[i] = l;
        busy.push(Reverse((s.at.max(s.sent), l)));
    }
    lane
}

/// What an operation on request `index` was asked: the same in its invoke and completion.
fn request_value(h: &History, index: u64) -> Value {
    let f = &h.facts;
    json!({
        "request": index,
        "sku": f.sku,
        "qty": f.qty,
        "order": h.order_of(index),
        "user": h.user_of(index),
    })
}

/// The completion's type and value: the answer added to what was asked.
fn completion(s: &Sample, mut value: Value) -> (&'static str, Value) {
    let v = &mut value;
    v["latency_ns"] = ns(s.latency).into();
    if let Some(w) = s.lock_wait {
        v["lock_wait_ns"] = ns(w).into();
    }
    if let Some(h) = s.lock_hold {
        v["lock_hold_ns"] = ns(h).into();
    }
    let kind = match &s.ended {
        Ended::Done {
            outcome,
            replayed,
            overran_lease,
        } => {
            v["answer"] = json!(outcome.outcome());
            match *outcome {
                Buy::Bought { remaining } | Buy::SoldOut { remaining } => {
                    v["remaining"] = remaining.into()
                }
                Buy::LimitReached { bought, limit } => {
                    v["bought"] = bought.into();
                    v["limit"] = limit.into();
                }
                Buy::Busy | Buy::LeaseLost => {}
            }
            v["replayed"] = (*replayed).into();
            v["overran_lease"] = (*overran_lease).into();
            sold(outcome.outcome())
        }
        Ended::Answered {
            outcome,
            remaining,
            order,
        } => {
            v["answer"] = outcome.map_or(json!("answered"), |o| json!(o));
            v["remaining"] = json!(remaining);
            if let Some(order) = order {
                v["order_id"] = json!(order);
            }
            outcome.map_or("info", sold)
        }
        Ended::Failed {
            kind,
            indeterminate,
            message,
            ..
        } => {
            v["answer"] = "error".into();
            v["error"] = json!({
                "kind": kind,
                "message": message,
                "indeterminate": indeterminate,
            });
            if *indeterminate { "info" } else { "fail" }
        }
    };
    (kind, value)
}

fn sold(o: Outcome) -> &'static str {
    match o {
        Outcome::Bought => "ok",
        _ => "fail",
    }
}

/// Reads a history written by [`write()`] (or by anything that writes the same shape).
pub fn read(input: impl BufRead) -> Result<History, HistoryError> {
    let mut facts: Option<FactsValue> = None;
    let mut last: Option<(usize, ReadValue)> = None;
    let mut sent: HashMap<u64, u64> = HashMap::new();
    let mut samples = Vec::new();
    let mut faults: Vec<Fault> = Vec::new();
    let mut reads: Vec<StockRead> = Vec::new();
    let mut reading: Option<u64> = None;
    let mut lines_read = 0;
    let (mut input, mut buf, mut ops) = (input, Vec::new(), 0usize);
    loop {
        let line = lines_read + 1;
        let fail = |reason: String| HistoryError { line, reason };
        // Read no further than the cap (and the line's end): a line read whole costs several
        // times its length once parsed.
        let cap = MAX_LINE + ops * LEDGER_BYTES_PER_OP;
        buf.clear();
        let got = io::Read::take(&mut input, cap as u64 + 2)
            .read_until(b'\n', &mut buf)
            .map_err(|e| fail(format!("cannot be read: {e}")))?;
        if got == 0 {
            break;
        }
        lines_read = line;
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        }
        if buf.len() > cap {
            return Err(fail(format!(
                "longer than {cap} bytes, the most a line of this history may be ({MAX_LINE} bytes, 1 MiB, and {LEDGER_BYTES_PER_OP} more for each operation before it, room for the ledger of the last line)"
            )));
        }
        let text = std::str::from_utf8(&buf)
            .map_err(|_| fail("cannot be read: it is not UTF-8".into()))?;
        if text.trim().is_empty() {
            continue;
        }
        ops += usize::from(facts.is_some());
        if last.is_some() {
            return Err(fail(
                "an operation after the last line (f: \"read\")".into(),
            ));
        }
        let op: Op =
            serde_json::from_str(text).map_err(|e| fail(format!("not an operation: {e}")))?;
        let Some(fv) = &facts else {
            facts = Some(ops::first_line(&op).map_err(|e| fail(e.to_string()))?);
            continue;
        };
        match (op.f.as_str(), op.process.as_str()) {
            ("read", Some("lockctl")) => {
                let v = serde_json::from_value(op.value)
                    .map_err(|e| fail(format!("the read-back line: {e}")))?;
                last = Some((line, v));
            }
            (_, Some("nemesis")) => {
                ops::nemesis(&mut faults, &op).map_err(|e| fail(e.to_string()))?
            }
            (READ_STOCK, Some(OBSERVER)) => match op.kind.as_str() {
                "invoke" => reading = Some(op.time),
                // A read that failed, or one past the most kept, is left out.
                _ => match (op.value.as_i64(), reading.take()) {
                    (Some(stock), Some(sent)) if reads.len() < MAX_STOCK_READS => {
                        reads.push(StockRead {
                            sent: Duration::from_nanos(sent),
                            at: Duration::from_nanos(op.time),
                            stock,
                        });
                    }
                    _ => {}
                },
            },
            ("buy", _) if op.kind == "invoke" => {
                sent.insert(
                    ops::request_of(&op.value).map_err(|e| fail(e.to_string()))?,
                    op.time,
                );
            }
            ("buy", _) => {
                let mode = fv.facts.mode;
                samples.push(ops::sample(&op, mode, &sent).map_err(|e| fail(e.to_string()))?);
            }
            (f, _) => return Err(fail(format!("an operation lockctl does not know: f '{f}'"))),
        }
    }
    let Some(fv) = facts else {
        return Err(HistoryError {
            line: 1,
            reason: "empty: a history starts with its facts (f: \"facts\")".into(),
        });
    };
    let Some((_, rv)) = last else {
        return Err(HistoryError {
            line: lines_read + 1,
            reason: "no last line (f: \"read\"): the history was cut short, so nothing was read back to judge against".into(),
        });
    };
    check_bounds(&fv, &rv, &samples)?;
    let mut facts = fv.facts;
    facts.initial_stock = fv.stock_before;
    facts.elapsed = Duration::from_nanos(fv.elapsed_ns);
    facts.client_cpu = fv.client_cpu_ns.map(Duration::from_nanos);
    Ok(History {
        facts,
        users: fv.users,
        samples,
        faults,
        read_back: rv.read_back,
        stock_reads: reads,
        hunt: fv.hunt,
        went_up: rv.went_up,
        restart: rv.restart,
        server: fv.server,
        interrupted: rv.interrupted,
        notes: rv.notes,
        findings: rv.findings,
        unjudged: rv.unjudged,
        pipeline: rv.pipeline,
        http: rv.http,
        client_max_rss_mb: fv.client_max_rss_mb,
    })
}

/// The most requests a history may say it made (the hammer's own bound on -n).
const MAX_REQUESTS: u64 = 100_000_000;
/// The most units a request may stand for (the bound on --qty).
const MAX_QTY: u64 = 1_000_000;

/// Numbers a run could have written: counts and stocks within lockctl's own bounds, every
/// completion a request of the run, once. A history that says otherwise was not written by a
/// run and is refused, not judged (nor allowed to overflow the judgement).
fn check_bounds(fv: &FactsValue, rv: &ReadValue, samples: &[Sample]) -> Result<(), HistoryError> {
    let fail = |reason: String| Err(HistoryError { line: 1, reason });
    let f = &fv.facts;
    let stock = lockctl_core::stock::MAX_STOCK;
    if f.requests > MAX_REQUESTS || f.qty == 0 || f.qty > MAX_QTY {
        return fail(format!(
            "{} requests of {} units: a run makes at most {MAX_REQUESTS} requests of 1 to {MAX_QTY} units",
            f.requests, f.qty
        ));
    }
    let stocks = [Some(fv.stock_before), rv.read_back.stock_after];
    if stocks
        .into_iter()
        .flatten()
        .any(|s| s.unsigned_abs() > stock)
    {
        return fail(format!("a stock beyond {stock} either side of zero"));
    }
    if let Some(rows) = &rv.read_back.ledger {
        let mut orders = std::collections::HashSet::new();
        if rows
            .iter()
            .any(|(i, u)| *i >= f.requests || u.unsigned_abs() > stock || !orders.insert(*i))
        {
            return fail(
                "a ledger row of a request the run did not make, twice, or beyond any stock".into(),
            );
        }
    }
    let mut seen = std::collections::HashSet::new();
    for s in samples {
        if s.index >= f.requests || !seen.insert(s.index) {
            return Err(HistoryError {
                line: 1,
                reason: format!(
                    "request {} completes {}: a run of {} requests completes each of 0..{} once",
                    s.index,
                    if s.index >= f.requests {
                        "beyond the run"
                    } else {
                        "twice"
                    },
                    f.requests,
                    f.requests
                ),
            });
        }
    }
    Ok(())
}
