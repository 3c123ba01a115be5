//! This run's ledger held against what its buyers were told, one entry at a time: what the
//! read-back feeds and the judge reads.

use crate::tally::{Bits, Tally};

/// This run's ledger, held against the buyers' answers one entry at a time: each entry must
/// belong to a buyer told "bought" with the same units (or to a request that failed
/// indeterminately), and each such buyer must have one. Keeps the first few mismatches in
/// words and counts the rest.
pub struct LedgerCheck {
    run_id: String,
    seen: Bits,
    /// Whether to look for orders told "bought" that the ledger lacks (not when the ledger
    /// could not be read at all).
    look_for_missing: bool,
    /// This run's orders in the ledger (the entries read).
    pub orders: u64,
    /// The units of this run's orders in the ledger, summed.
    pub units: i64,
    mismatches: Vec<String>,
    more: u64,
    /// Every entry read (request, units), when the tally keeps a history.
    rows: Option<Vec<(u64, i64)>>,
}

/// How many order mismatches a report lists in words.
const SHOWN: usize = 5;

impl LedgerCheck {
    /// An empty check of the run `run_id`'s ledger against the answers folded into `t`.
    pub fn new(t: &Tally, run_id: &str) -> LedgerCheck {
        LedgerCheck {
            run_id: run_id.to_string(),
            seen: Bits::new(t.told_bought.len()),
            look_for_missing: true,
            orders: 0,
            units: 0,
            mismatches: Vec::new(),
            more: 0,
            rows: t.kept().map(|_| Vec::new()),
        }
    }

    fn mismatch(&mut self, text: String) {
        if self.mismatches.len() < SHOWN {
            self.mismatches.push(text);
        } else {
            self.more += 1;
        }
    }

    /// One ledger entry of this run: request `index` recorded `units`.
    pub fn entry(&mut self, t: &Tally, index: u64, units: i64) {
        self.orders += 1;
        self.units = self.units.saturating_add(units);
        if let Some(rows) = &mut self.rows {
            rows.push((index, units));
        }
        self.seen.set(index);
        let (run, q) = (self.run_id.clone(), t.qty as i64);
        if t.told_bought.get(index) {
            if units > q {
                self.mismatch(format!(
                    "order {run}-{index} was deducted {} times ({units} units for a {q}-unit order)",
                    units / q.max(1)
                ));
            } else if units < q {
                self.mismatch(format!(
                    "order {run}-{index} was told it bought {q} but the ledger has {units}"
                ));
            }
        } else if !(t.maybe_applied.get(index) && units == q) {
            self.mismatch(format!(
                "order {run}-{index} is in the ledger ({units} units) but its buyer was not told it bought"
            ));
        }
    }

    /// Every entry read (request, units), when the tally keeps a history.
    pub fn rows(&self) -> Option<&[(u64, i64)]> {
        self.rows.as_deref()
    }

    /// The mismatches, sorted, with those told "bought" that the ledger lacks.
    pub(crate) fn finish(mut self, t: &Tally) -> (u64, i64, Vec<String>) {
        if self.look_for_missing {
            let missing: Vec<u64> = t.told_bought.minus(&self.seen).collect();
            for index in missing {
                let run = self.run_id.clone();
                self.mismatch(format!(
                    "order {run}-{index} was told it bought but is not in the ledger"
                ));
            }
        }
        self.mismatches.sort();
        if self.more > 0 {
            let more = self.more;
            self.mismatches
                .push(format!("... and {more} more order mismatches"));
        }
        (self.orders, self.units, self.mismatches)
    }
}
