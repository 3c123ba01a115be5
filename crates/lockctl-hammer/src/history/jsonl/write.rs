//! Writing a history: the facts, every operation by time (each request in its lane), and what
//! was read back.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::{FactsValue, OBSERVER, Op, READ_STOCK, ReadValue, VERSION, ns};
use crate::history::History;
use crate::report::{Ended, Sample};
use lockctl_core::stock::{Buy, Outcome};

/// Writes `h` as JSON Lines: the facts, every operation by time, and what was read back.
pub fn write(h: &History, out: &mut impl Write) -> io::Result<()> {
    let mut out = Numbered { out, index: 0 };
    let lockctl = Value::from("lockctl");
    out.line(
        "info",
        "facts",
        lockctl.clone(),
        0,
        to_value(&facts_value(h))?,
    )?;
    for Timed {
        time,
        kind,
        process,
        value,
        ..
    } in timeline(h)
    {
        let (kind, f) = match process.as_str() {
            Some("nemesis") => ("info".to_string(), kind),
            Some(OBSERVER) => (kind, READ_STOCK.to_string()),
            _ => (kind, "buy".to_string()),
        };
        out.line(&kind, &f, process, time, value)?;
    }
    out.line(
        "info",
        "read",
        lockctl,
        end_time(h),
        to_value(&read_value(h))?,
    )?;
    out.out.flush()
}

/// An operation before it is written: when, its rank among those at one moment, its type, its
/// process and its value.
struct Timed {
    time: u64,
    rank: u8,
    kind: String,
    process: Value,
    value: Value,
}

impl Timed {
    fn new(time: Duration, rank: u8, kind: &str, process: Value, value: Value) -> Self {
        Timed {
            time: ns(time),
            rank,
            kind: kind.into(),
            process,
            value,
        }
    }
}

/// Every request's invoke and completion, every fault's start and stop and every read of the
/// stock, by time; at one moment, what ended before what began, so a lane is free again.
fn timeline(h: &History) -> Vec<Timed> {
    let mut lines = Vec::new();
    for (s, lane) in h.samples.iter().zip(lanes(&h.samples)) {
        let value = request_value(h, s.index);
        lines.push(Timed::new(s.sent, 1, "invoke", lane.into(), value.clone()));
        let (kind, value) = completion(s, value);
        lines.push(Timed::new(s.at, 0, kind, lane.into(), value));
    }
    for fault in &h.faults {
        let value = json!({ "fault": fault.fault, "detail": fault.detail, "took": fault.took });
        let nemesis = Value::from("nemesis");
        lines.push(Timed::new(
            fault.start,
            2,
            "start",
            nemesis.clone(),
            value.clone(),
        ));
        if let Some(stop) = fault.stop {
            lines.push(Timed::new(stop, 2, "stop", nemesis, value));
        }
    }
    for r in &h.stock_reads {
        let observer = Value::from(OBSERVER);
        lines.push(Timed::new(
            r.sent,
            1,
            "invoke",
            observer.clone(),
            Value::Null,
        ));
        lines.push(Timed::new(r.at, 0, "ok", observer, r.stock.into()));
    }
    lines.sort_by_key(|l| (l.time, l.rank));
    lines
}

/// The writer of the lines, each numbered in turn (`index`).
struct Numbered<'a, W> {
    out: &'a mut W,
    index: u64,
}

impl<W: Write> Numbered<'_, W> {
    fn line(
        &mut self,
        kind: &str,
        f: &str,
        process: Value,
        time: u64,
        value: Value,
    ) -> io::Result<()> {
        let op = Op {
            kind: kind.into(),
            f: f.into(),
            process,
            time,
            index: self.index,
            value,
        };
        self.index += 1;
        serde_json::to_writer(&mut *self.out, &op)?;
        self.out.write_all(b"\n")
    }
}

/// The first line's value: the run's facts and the stock before.
fn facts_value(h: &History) -> FactsValue {
    let f = &h.facts;
    FactsValue {
        version: VERSION,
        facts: f.clone(),
        stock_before: f.initial_stock,
        elapsed_ns: ns(f.elapsed),
        client_cpu_ns: f.client_cpu.map(ns),
        users: h.users,
        server: h.server.clone(),
        client_max_rss_mb: h.client_max_rss_mb,
        hunt: h.hunt.clone(),
    }
}

/// The last line's value: what was read back, and what was noted of the run.
fn read_value(h: &History) -> ReadValue {
    ReadValue {
        read_back: h.read_back.clone(),
        went_up: h.went_up.clone(),
        restart: h.restart.clone(),
        interrupted: h.interrupted,
        notes: h.notes.clone(),
        findings: h.findings.clone(),
        unjudged: h.unjudged.clone(),
        pipeline: h.pipeline.clone(),
        http: h.http.clone(),
    }
}

/// The time of the last line: the last answer, to a request or to a read of the stock.
fn end_time(h: &History) -> u64 {
    h.samples
        .iter()
        .map(|s| ns(s.at))
        .chain(h.stock_reads.iter().map(|r| ns(r.at)))
        .max()
        .unwrap_or(0)
}

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
