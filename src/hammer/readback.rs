//! After the run: the stock and this run's ledger entries, read back from Redis.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use super::judge::LedgerCheck;
use super::tally::Tally;
use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::sku::Sku;
use crate::stock;

/// What the run found in Redis afterwards.
#[derive(Clone, Debug, Default)]
pub struct Readback {
    pub final_stock: i64,
    /// This run's ledger entries: request index -> units recorded under its order id.
    pub ledger: HashMap<u64, i64>,
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

    /// A note for the report when the server is not the process it was: the verdict stands
    /// (deductions a restart lost are lost to the shop too), and the note says where to
    /// look. `None` when it is the same, or could not be told apart at the start; a server
    /// that cannot be asked afterwards is said to be unknown, not restarted.
    pub(crate) fn restart_note(&self, target: &Target) -> Option<String> {
        let before = self.0.as_ref()?;
        let addr = target.addr();
        match target.connect().ok().and_then(|mut c| run_id(&mut c)) {
            Some(now) if &now == before => None,
            Some(_) => Some(format!(
                "Redis at {addr} restarted during the run (its run_id changed): what it had not saved to disk before it went down is gone, deductions and orders alike, and the books above show it"
            )),
            None => Some(format!(
                "could not ask Redis at {addr} after the run whether it restarted during it (INFO server did not answer)"
            )),
        }
    }
}

fn run_id(conn: &mut Conn) -> Option<String> {
    let info: String = conn.query(redis::cmd("INFO").arg("server")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|id| id.trim().to_string())
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
    let keys = StockKeys::new(sku);
    let final_stock = stock::read_stock(conn, sku, &keys)?.ok_or_else(|| Error::Unseeded {
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
