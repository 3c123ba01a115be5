//! The operation lines of a history read back: the facts, a nemesis's faults, a purchase's
//! completion. What is wrong with a line is a [`BadOp`]; [`super::read()`] adds its number.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::Value;

use super::{FactsValue, Op, VERSION};
use crate::history::Fault;
use crate::options::Mode;
use crate::report::{Ended, Sample};
use lockctl_core::error::ErrorKind;
use lockctl_core::stock::{Buy, Outcome};

/// Why an operation line cannot be read back.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadOp {
    #[error("a history starts with its facts (f: \"facts\"), not f '{f}'")]
    NotFacts { f: String },
    #[error("the facts line: {0}")]
    Facts(serde_json::Error),
    #[error("a history of version {found}, and this lockctl reads version {VERSION}")]
    Version { found: u64 },
    #[error("no request number in {value}")]
    NoRequest { value: Value },
    #[error("a nemesis operation lockctl does not know: '{f}'")]
    UnknownNemesis { f: String },
    #[error("a completion without an answer")]
    NoAnswer,
    #[error("an answer lockctl does not know: '{answer}'")]
    UnknownAnswer { answer: String },
    #[error("'answered' from lockctl's own buyer")]
    AnsweredOwnBuyer,
}

pub(super) fn first_line(op: &Op) -> Result<FactsValue, BadOp> {
    if op.f != "facts" {
        return Err(BadOp::NotFacts { f: op.f.clone() });
    }
    let fv: FactsValue = serde_json::from_value(op.value.clone()).map_err(BadOp::Facts)?;
    if fv.version != VERSION {
        return Err(BadOp::Version { found: fv.version });
    }
    Ok(fv)
}

pub(super) fn request_of(v: &Value) -> Result<u64, BadOp> {
    v["request"]
        .as_u64()
        .ok_or_else(|| BadOp::NoRequest { value: v.clone() })
}

pub(super) fn nemesis(faults: &mut Vec<Fault>, op: &Op) -> Result<(), BadOp> {
    let at = Duration::from_nanos(op.time);
    let name = op.value["fault"].as_str().unwrap_or_default().to_string();
    match op.f.as_str() {
        "start" => faults.push(Fault {
            fault: name,
            start: at,
            stop: None,
            detail: op.value["detail"].as_str().unwrap_or_default().into(),
            took: op.value["took"].as_bool().unwrap_or(true),
        }),
        "stop" => {
            if let Some(f) = faults
                .iter_mut()
                .rev()
                .find(|f| f.fault == name && f.stop.is_none())
            {
                f.stop = Some(at);
            }
        }
        other => {
            return Err(BadOp::UnknownNemesis {
                f: other.to_string(),
            });
        }
    }
    Ok(())
}

/// A completion read back into the record it was written from.
pub(super) fn sample(op: &Op, mode: Mode, sent: &HashMap<u64, u64>) -> Result<Sample, BadOp> {
    let v = &op.value;
    let index = request_of(v)?;
    let dur = |k: &str| v[k].as_u64().map(Duration::from_nanos);
    let answer = v["answer"].as_str().ok_or(BadOp::NoAnswer)?;
    let ended = match answer {
        "error" => Ended::Failed {
            kind: ErrorKind::from_name(v["error"]["kind"].as_str().unwrap_or("unknown")),
            indeterminate: v["error"]["indeterminate"].as_bool().unwrap_or(true),
            message: v["error"]["message"].as_str().unwrap_or_default().into(),
            hint: None,
        },
        // A retry told "bought" for an order that had bought: nothing deducted now.
        "bought" if mode == Mode::Http && v["replayed"] == true => Ended::Done {
            outcome: buy(answer, v)?,
            replayed: true,
            overran_lease: false,
        },
        _ if mode == Mode::Http => Ended::Answered {
            outcome: outcome(answer)?,
            remaining: v["remaining"].as_i64(),
            order: v["order_id"].as_str().map(str::to_string),
        },
        _ => Ended::Done {
            outcome: buy(answer, v)?,
            replayed: v["replayed"].as_bool().unwrap_or(false),
            overran_lease: v["overran_lease"].as_bool().unwrap_or(false),
        },
    };
    Ok(Sample {
        index,
        ended,
        latency: dur("latency_ns").unwrap_or_default(),
        lock_wait: dur("lock_wait_ns"),
        lock_hold: dur("lock_hold_ns"),
        sent: Duration::from_nanos(sent.get(&index).copied().unwrap_or(0)),
        at: Duration::from_nanos(op.time),
    })
}

fn outcome(answer: &str) -> Result<Option<Outcome>, BadOp> {
    if answer == "answered" {
        return Ok(None);
    }
    serde_json::from_value(Value::from(answer))
        .map(Some)
        .map_err(|_| BadOp::UnknownAnswer {
            answer: answer.to_string(),
        })
}

fn buy(answer: &str, v: &Value) -> Result<Buy, BadOp> {
    let remaining = || v["remaining"].as_i64().unwrap_or(0);
    Ok(match outcome(answer)?.ok_or(BadOp::AnsweredOwnBuyer)? {
        Outcome::Bought => Buy::Bought {
            remaining: remaining(),
        },
        Outcome::SoldOut => Buy::SoldOut {
            remaining: remaining(),
        },
        Outcome::Busy => Buy::Busy,
        Outcome::LeaseLost => Buy::LeaseLost,
        Outcome::LimitReached => Buy::LimitReached {
            bought: v["bought"].as_u64().unwrap_or(0),
            limit: v["limit"].as_u64().unwrap_or(0),
        },
    })
}
