//! After the run: the stock and this run's ledger entries, read back from Redis.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use crate::ledger_check::LedgerCheck;
use crate::report::{Subject, Verdict};
use crate::tally::Tally;
use lockctl_core::conn::{Conn, Target};
use lockctl_core::error::{Error, Result};
use lockctl_core::sku::Sku;
use lockctl_core::stock;
use lockctl_core::stock::buckets::{self, Buckets};

/// What the run found in Redis afterwards.
#[derive(Clone, Debug, Default)]
pub struct Readback {
    /// The stock read back after the run.
    pub final_stock: i64,
    /// This run's ledger entries: request index -> units recorded under its order id.
    pub ledger: HashMap<u64, i64>,
    /// Why the stock may have gone up during the run (a restart, a read that found it higher
    /// than the one before), if anything says so; `None`: nothing put stock back, as far as
    /// lockctl could see.
    pub went_up: Option<String>,
}

/// Which process the Redis server was when the run began (`INFO server`'s `run_id`), so that
/// the read-back can tell a stock deducted during the run from one a restart brought back
/// from an older snapshot. Not kept for a cluster, whose nodes each have their own.
pub(crate) struct Incarnation(Option<String>);

impl Incarnation {
    pub(crate) fn of(target: &Target, conn: &mut Conn) -> Incarnation {
        Incarnation(match target.is_cluster() {
            true => None,
            false => run_id(conn),
        })
    }

    /// Whether the server is still the process it was, asked on a fresh connection.
    pub(crate) fn restart(&self, target: &Target) -> Restart {
        let Some(before) = &self.0 else {
            return Restart::Untold;
        };
        let mut conn = match target.connect() {
            Ok(c) => c,
            Err(_) => return Restart::Unasked,
        };
        match run_id(&mut conn) {
            Some(now) if &now == before => Restart::No,
            Some(_) => Restart::Yes {
                keeps: keeps_anything(&mut conn),
            },
            None => Restart::Unasked,
        }
    }
}

/// Whether the Redis server restarted during the run, as far as can be told.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Restart {
    /// The same process before and after.
    No,
    /// Another process afterwards (its `run_id` changed). `keeps`: whether it saves anything
    /// to disk (RDB snapshots or an AOF), when its settings could be read.
    Yes {
        /// Whether it saves anything to disk; `None` when its settings could not be read.
        keeps: Option<bool>,
    },
    /// It could not be asked afterwards.
    Unasked,
    /// Not known at the start (a cluster, or `INFO` refused).
    Untold,
}

impl Restart {
    /// Why, as far as this tells, the stock may have gone up during the run: a restart can
    /// bring back a stock from before sales (an older snapshot), and one that cannot be ruled
    /// out may have. `None` when the server is known not to have restarted.
    pub(crate) fn may_have_restocked(&self) -> Option<&'static str> {
        match self {
            Restart::No => None,
            Restart::Yes { .. } => Some("Redis restarted during the run"),
            Restart::Unasked => Some("Redis could not be asked after the run whether it restarted"),
            Restart::Untold => Some("whether Redis restarted during the run cannot be told"),
        }
    }

    /// The note for a report that came to `verdict` on `subject`: what a restart means for
    /// that verdict (the verdict stands: deductions a restart lost are lost to the shop too),
    /// or that the server could not be asked. `None` when there is nothing to say.
    pub(crate) fn note(&self, addr: &str, verdict: Verdict, subject: Subject) -> Option<String> {
        let keeps = match self {
            Restart::No | Restart::Untold => return None,
            Restart::Unasked => {
                return Some(format!(
                    "could not ask Redis at {addr} after the run whether it restarted during it (INFO server did not answer)"
                ));
            }
            Restart::Yes { keeps } => *keeps,
        };
        let lost = match keeps {
            Some(false) => {
                "it keeps nothing across a restart (no RDB snapshots, no AOF), so all it held went with it: stock, deductions and orders alike"
            }
            _ => {
                "what it had not saved to disk before it went down is gone, deductions and orders alike"
            }
        };
        let whose = match subject {
            Subject::Endpoint => "the endpoint's".to_string(),
            Subject::Strategy(s) => format!("the {} strategy's", s.name()),
        };
        let meaning = match verdict {
            Verdict::Pass => "the books above add up all the same".to_string(),
            Verdict::Fail => format!(
                "the FAIL stands, since what the buyers were told does not add up with what is left, but the loss may be the restart's rather than {whose}"
            ),
            Verdict::Unknown => "the verdict is unknown".to_string(),
        };
        Some(format!(
            "Redis at {addr} restarted during the run (its run_id changed): {lost}; {meaning}"
        ))
    }
}

fn run_id(conn: &mut Conn) -> Option<String> {
    conn.info("server").ok()?.get::<String>("run_id")
}

/// Whether the server saves anything to disk: RDB snapshots (`save` not empty) or an AOF
/// (`appendonly yes`). `None` when CONFIG is not allowed.
fn keeps_anything(conn: &mut Conn) -> Option<bool> {
    let mut get = |name: &str| -> Option<String> {
        let pair: Vec<String> = conn.query(redis::cmd("CONFIG").arg("GET").arg(name)).ok()?;
        pair.get(1).cloned()
    };
    let snapshots = !get("save")?.trim().is_empty();
    let aof = get("appendonly")? == "yes";
    Some(snapshots || aof)
}

/// How long the read-back keeps trying a server that is down (restarting, failing over).
pub const READ_BACK_PATIENCE: Duration = Duration::from_secs(5);

/// Reads the results back, on fresh connections and with pauses if the first try fails, for
/// at most [`READ_BACK_PATIENCE`]: a fault at the end of a run should not cost the verdict.
/// Returns the stock now and this run's ledger, checked against the tally entry by entry as
/// HSCAN pages it in (the ledger is never held in memory whole).
pub(super) fn read_back_patiently(
    target: &Target,
    conn: &mut Conn,
    sku: &Sku,
    run_id: &str,
    t: &Tally,
) -> Result<(i64, LedgerCheck)> {
    let deadline = Instant::now() + READ_BACK_PATIENCE;
    let mut result = read_back(conn, sku, run_id, t);
    while result.is_err() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
        result = target
            .connect()
            .and_then(|mut c| read_back(&mut c, sku, run_id, t));
    }
    result
}

fn read_back(conn: &mut Conn, sku: &Sku, run_id: &str, t: &Tally) -> Result<(i64, LedgerCheck)> {
    // A move its buyer left unfinished (a buyer killed mid-move) is finished first: its
    // units then count where buyers would have found them.
    if let Some(b) = Buckets::read(conn, sku)? {
        buckets::finish_moves(conn, &b)?;
    }
    let final_stock = buckets::stock_of(conn, sku)?.ok_or_else(|| Error::Unseeded {
        sku: sku.to_string(),
    })?;
    let prefix = format!("{run_id}-");
    let mut check = LedgerCheck::new(t, run_id);
    stock::scan_ledger(conn, sku, |order, units| {
        if let Some(index) = order.strip_prefix(&prefix).and_then(|i| i.parse().ok()) {
            check.entry(t, index, units);
        }
    })?;
    Ok((final_stock, check))
}

/// The stock a run starts from, read at `key`: `None` when there is no such key; below zero is
/// refused (the run's books would show an oversale from before it).
pub(crate) fn starting_stock_at(
    conn: &mut Conn,
    sku: &Sku,
    key: &str,
) -> crate::error::Result<Option<i64>> {
    match stock::read_stock_at(conn, sku, key)? {
        Some(n) if n < 0 => Err(crate::error::Error::NegativeStock {
            sku: sku.to_string(),
            key: key.to_string(),
            value: n,
        }),
        read => Ok(read),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockctl_core::stock::Strategy;

    #[test]
    fn a_restart_note_says_what_the_restart_means_for_the_verdict_reached() {
        let gone = Restart::Yes { keeps: Some(false) };
        let lock = Subject::Strategy(Strategy::Lock);
        let note = |r: &Restart, v| r.note("127.0.0.1:6379", v, lock).unwrap();
        let fail = note(&gone, Verdict::Fail);
        assert!(fail.contains("keeps nothing across a restart"), "{fail}");
        assert!(fail.contains("the FAIL stands"), "{fail}");
        assert!(fail.contains("the lock strategy's"), "{fail}");
        assert!(!fail.contains("unknown"), "{fail}");
        let pass = note(&Restart::Yes { keeps: Some(true) }, Verdict::Pass);
        assert!(
            pass.contains("not saved to disk") || pass.contains("had not saved"),
            "{pass}"
        );
        assert!(
            pass.contains("add up all the same") && !pass.contains("unknown"),
            "{pass}"
        );
        assert!(note(&gone, Verdict::Unknown).contains("the verdict is unknown"));
        assert!(note(&Restart::Unasked, Verdict::Pass).contains("could not ask"));
        assert_eq!(Restart::No.note("a", Verdict::Fail, lock), None);
        assert_eq!(Restart::Untold.note("a", Verdict::Fail, lock), None);
    }
}
