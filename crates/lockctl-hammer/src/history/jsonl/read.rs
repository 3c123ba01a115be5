//! Reading a history back, one line at a time, each line no longer than its cap; a history no
//! run could have written is refused, not judged.

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::time::Duration;

use super::{
    FactsValue, HistoryError, LEDGER_BYTES_PER_OP, MAX_LINE, OBSERVER, Op, READ_STOCK, ReadValue,
    ops,
};
use crate::history::{Fault, History, MAX_STOCK_READS, StockRead};
use crate::report::Sample;

/// Reads a history written by [`write()`](super::write()) (or by anything that writes the same shape).
pub fn read(input: impl BufRead) -> Result<History, HistoryError> {
    let mut lines = Lines {
        input,
        buf: Vec::new(),
        read: 0,
    };
    let mut reading = Reading::default();
    // Read no further than the cap (and the line's end): a line read whole costs several times
    // its length once parsed.
    while let Some((line, text)) = lines.next(MAX_LINE + reading.ops * LEDGER_BYTES_PER_OP)? {
        if text.trim().is_empty() {
            continue;
        }
        reading.ops += usize::from(reading.facts.is_some());
        reading.take(line, text)?;
    }
    reading.finish(lines.read)
}

/// The lines of a history, each read no further than a cap.
struct Lines<R> {
    input: R,
    buf: Vec<u8>,
    /// How many lines were read.
    read: usize,
}

impl<R: BufRead> Lines<R> {
    /// The next line's number and text (without its line ending), or `None` at the end.
    fn next(&mut self, cap: usize) -> Result<Option<(usize, &str)>, HistoryError> {
        let line = self.read + 1;
        let fail = |reason: String| HistoryError { line, reason };
        self.buf.clear();
        let got = io::Read::take(&mut self.input, cap as u64 + 2)
            .read_until(b'\n', &mut self.buf)
            .map_err(|e| fail(format!("cannot be read: {e}")))?;
        if got == 0 {
            return Ok(None);
        }
        self.read = line;
        let buf = &mut self.buf;
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
        let text =
            std::str::from_utf8(buf).map_err(|_| fail("cannot be read: it is not UTF-8".into()))?;
        Ok(Some((line, text)))
    }
}

/// A history as far as it was read.
#[derive(Default)]
struct Reading {
    facts: Option<FactsValue>,
    last: Option<ReadValue>,
    /// When each request was sent, by its number.
    sent: HashMap<u64, u64>,
    samples: Vec<Sample>,
    faults: Vec<Fault>,
    reads: Vec<StockRead>,
    /// When the observer's read in flight was sent.
    reading: Option<u64>,
    /// How many operation lines were read after the facts.
    ops: usize,
}

impl Reading {
    /// Takes the text of line number `line`.
    fn take(&mut self, line: usize, text: &str) -> Result<(), HistoryError> {
        let fail = |reason: String| HistoryError { line, reason };
        if self.last.is_some() {
            return Err(fail(
                "an operation after the last line (f: \"read\")".into(),
            ));
        }
        let op: Op =
            serde_json::from_str(text).map_err(|e| fail(format!("not an operation: {e}")))?;
        let Some(fv) = &self.facts else {
            self.facts = Some(ops::first_line(&op).map_err(|e| fail(e.to_string()))?);
            return Ok(());
        };
        match (op.f.as_str(), op.process.as_str()) {
            ("read", Some("lockctl")) => {
                let v = serde_json::from_value(op.value)
                    .map_err(|e| fail(format!("the read-back line: {e}")))?;
                self.last = Some(v);
            }
            (_, Some("nemesis")) => {
                ops::nemesis(&mut self.faults, &op).map_err(|e| fail(e.to_string()))?
            }
            (READ_STOCK, Some(OBSERVER)) => self.observed(&op),
            ("buy", _) if op.kind == "invoke" => {
                let request = ops::request_of(&op.value).map_err(|e| fail(e.to_string()))?;
                self.sent.insert(request, op.time);
            }
            ("buy", _) => {
                let sample = ops::sample(&op, fv.facts.mode, &self.sent);
                self.samples.push(sample.map_err(|e| fail(e.to_string()))?);
            }
            (f, _) => return Err(fail(format!("an operation lockctl does not know: f '{f}'"))),
        }
        Ok(())
    }

    /// Takes one of the observer's reads of the stock: sent, or answered.
    fn observed(&mut self, op: &Op) {
        if op.kind == "invoke" {
            self.reading = Some(op.time);
            return;
        }
        // A read that failed, or one past the most kept, is left out.
        if let (Some(stock), Some(sent)) = (op.value.as_i64(), self.reading.take())
            && self.reads.len() < MAX_STOCK_READS
        {
            self.reads.push(StockRead {
                sent: Duration::from_nanos(sent),
                at: Duration::from_nanos(op.time),
                stock,
            });
        }
    }

    /// The history read, once all of its `lines` were: refused if it has no first or no last
    /// line, or numbers no run could have written.
    fn finish(self, lines: usize) -> Result<History, HistoryError> {
        let Some(fv) = self.facts else {
            return Err(HistoryError {
                line: 1,
                reason: "empty: a history starts with its facts (f: \"facts\")".into(),
            });
        };
        let Some(rv) = self.last else {
            return Err(HistoryError {
                line: lines + 1,
                reason: "no last line (f: \"read\"): the history was cut short, so nothing was read back to judge against".into(),
            });
        };
        check_bounds(&fv, &rv, &self.samples)?;
        let mut facts = fv.facts;
        facts.initial_stock = fv.stock_before;
        facts.elapsed = Duration::from_nanos(fv.elapsed_ns);
        facts.client_cpu = fv.client_cpu_ns.map(Duration::from_nanos);
        Ok(History {
            facts,
            users: fv.users,
            samples: self.samples,
            faults: self.faults,
            read_back: rv.read_back,
            stock_reads: self.reads,
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
