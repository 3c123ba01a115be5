//! After the run: the stock and this run's ledger entries, read back from Redis.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

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

/// How long the read-back keeps trying a server that is down (restarting, failing over).
pub const READ_BACK_PATIENCE: Duration = Duration::from_secs(5);

/// Reads the results back, on fresh connections and with pauses if the first try fails, for
/// at most [`READ_BACK_PATIENCE`]: a fault at the end of a run should not cost the verdict.
pub(super) fn read_back_patiently(
    target: &Target,
    conn: &mut Conn,
    sku: &Sku,
    keys: &StockKeys,
    run_id: &str,
) -> Result<Readback> {
    let deadline = Instant::now() + READ_BACK_PATIENCE;
    let mut result = read_back(conn, sku, keys, run_id);
    while result.is_err() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
        result = target
            .connect()
            .and_then(|mut c| read_back(&mut c, sku, keys, run_id));
    }
    result
}

fn read_back(conn: &mut Conn, sku: &Sku, keys: &StockKeys, run_id: &str) -> Result<Readback> {
    let final_stock = stock::read_stock(conn, sku, keys)?.ok_or_else(|| Error::Unseeded {
        sku: sku.to_string(),
    })?;
    let prefix = format!("{run_id}-");
    let ledger = stock::ledger(conn, sku)?
        .into_iter()
        .filter_map(|(order, units)| {
            let index = order.strip_prefix(&prefix)?.parse().ok()?;
            Some((index, units))
        })
        .collect();
    Ok(Readback {
        final_stock,
        ledger,
    })
}
