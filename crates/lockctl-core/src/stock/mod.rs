//! Stock deduction: the tutorial's purchase and the strategies that fix or break it.
//!
//! The stock is `item:stock:<SKU>`, a string integer, as in the tutorial. Every deduction also
//! records the order in a per-SKU ledger (`item:orders:<SKU>`, order id -> units deducted), in
//! the same transaction or script as the deduction, so that stock consumed and ledger sum agree
//! whatever crashes: that equality is what the hammer and `status` check.
//!
//! The one idea that makes each strategy correct (or not):
//! - `lock` reads then writes under the lock, which is safe only while the lease outlives the
//!   work; past it (the tutorial's homework) two buyers read the same stock.
//! - `fenced` makes the write itself check the lease: one script deducts only while the lock
//!   still holds this buyer's token, so an expired buyer deducts nothing.
//! - `atomic` needs no lock: one script reads, checks and writes, and Redis runs scripts one at
//!   a time. It still yields to a lock held by anyone else, to stay safe beside lock users.
//! - `naive` reads then writes with no lock: the negative control that must be caught.
//!
//! Layout: the purchase itself in `buyer` ([`Buyer`]), the deduct script in `script`; this
//! file holds the types they share and the plain reads and writes (seed, stock, ledger).

mod batch;
pub mod buckets;
mod buyer;
mod calls;
mod script;

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use batch::{Answer, Batcher, Submitter};
pub use buyer::{AtomicAttempt, AtomicNext, Buyer};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::keys::StockKeys;
use crate::lock::{Carried, LockOptions};
use crate::sku::Sku;

/// The largest stock `seed` accepts: well inside the range where Lua's numbers are exact.
pub const MAX_STOCK: u64 = 1_000_000_000_000_000;

/// How a purchase protects the stock. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// The tutorial's flow: lock, GET, DECR if enough, release.
    Lock,
    /// The lock, but the deduction checks the lease atomically.
    Fenced,
    /// No lock: one script checks and deducts.
    Atomic,
    /// GET then DECR with no lock: the negative control.
    Naive,
    /// Atomic, with the concurrent purchases of one process coalesced into one script call
    /// (group commit); each purchase is still decided, ledgered and answered on its own.
    Batch,
}

impl Strategy {
    /// Every strategy, in the order the help lists them.
    pub const ALL: [Strategy; 5] = [
        Strategy::Lock,
        Strategy::Fenced,
        Strategy::Atomic,
        Strategy::Naive,
        Strategy::Batch,
    ];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Lock => "lock",
            Strategy::Fenced => "fenced",
            Strategy::Atomic => "atomic",
            Strategy::Naive => "naive",
            Strategy::Batch => "batch",
        }
    }

    /// Whether this strategy takes the lock.
    pub fn locks(self) -> bool {
        matches!(self, Strategy::Lock | Strategy::Fenced)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How to buy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuyOptions {
    /// Default: [`Strategy::Lock`], the tutorial's flow.
    pub strategy: Strategy,
    /// Units per purchase. Default: 1.
    pub qty: u64,
    /// The lock's lease, wait and watchdog. Default: [`LockOptions::default`].
    pub lock: LockOptions,
    /// The most units one user may buy of the SKU in all; applies to purchases that name a
    /// user. Default: none.
    pub limit: Option<u64>,
    /// Append each bought order to the SKU's events stream, in the same script as the
    /// deduction (`--queue`). Default: off.
    pub queue: bool,
    /// How the `batch` strategy groups purchases. Default: [`BatchOptions::default`].
    pub batch: BatchOptions,
    /// Replicas that must have every deduction before its purchase is answered bought
    /// (`--require-replicas N`: `WAIT N` after the deduction, for at most the call limit). A
    /// deduction fewer replicas took in time is an indeterminate error: it happened on the
    /// master, and a failover may lose it. Default: 0, no wait.
    pub require_replicas: u32,
}

impl Default for BuyOptions {
    fn default() -> Self {
        BuyOptions {
            strategy: Strategy::Lock,
            qty: 1,
            lock: LockOptions::default(),
            limit: None,
            queue: false,
            batch: BatchOptions::default(),
            require_replicas: 0,
        }
    }
}

impl BuyOptions {
    /// Options that suit a service answering buyers (rather than the command line, whose
    /// defaults follow the tutorial): `strategy`, with the lock's waits queued as
    /// [`LockOptions::for_service`] says (a buyer waits up to 5 s in the lock's FIFO queue
    /// instead of being turned away busy at the first try). The rest as
    /// [`BuyOptions::default`].
    pub fn for_service(strategy: Strategy) -> BuyOptions {
        BuyOptions {
            strategy,
            lock: LockOptions::for_service(),
            ..BuyOptions::default()
        }
    }
}

/// How the `batch` strategy groups purchases (see [`Batcher`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// The longest a purchase waits for its batch to leave while another batch is on its way
    /// (`--batch-ms`). A purchase that finds nothing in flight leaves at once. Default: 1 ms.
    pub window: Duration,
    /// The most purchases in one script call (`--batch-max`). Default: 256.
    pub max: usize,
}

/// The largest `--batch-max`: a batch's arguments must fit Lua's stack (two per purchase).
pub const MAX_BATCH: usize = 1000;

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            window: Duration::from_millis(1),
            max: 256,
        }
    }
}

/// What a purchase came to. Only [`Buy::Bought`] deducted anything (and a replayed order id
/// reports the original purchase without deducting again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buy {
    /// Deducted; `remaining` is the stock right after the deduction (or now, when replayed).
    Bought {
        /// The stock right after (or, when sold out, what there was).
        remaining: i64,
    },
    /// Not enough stock; `remaining` is what there was.
    SoldOut {
        /// The stock right after (or, when sold out, what there was).
        remaining: i64,
    },
    /// The lock was held by someone else for the whole wait.
    Busy,
    /// The lease ran out before the deduction; nothing was deducted.
    LeaseLost,
    /// The user already has `bought` units and may have at most `limit`; nothing was deducted.
    LimitReached {
        /// Units this user was sold already.
        bought: u64,
        /// The most units one user may buy.
        limit: u64,
    },
}

impl Buy {
    /// Which of the outcomes this is, without its data.
    pub fn outcome(&self) -> Outcome {
        match self {
            Buy::Bought { .. } => Outcome::Bought,
            Buy::SoldOut { .. } => Outcome::SoldOut,
            Buy::Busy => Outcome::Busy,
            Buy::LeaseLost => Outcome::LeaseLost,
            Buy::LimitReached { .. } => Outcome::LimitReached,
        }
    }

    /// The contract's outcome name.
    pub fn name(&self) -> &'static str {
        self.outcome().as_str()
    }

    /// The stock the buyer was told about, if any.
    pub fn remaining(&self) -> Option<i64> {
        match self {
            Buy::Bought { remaining } | Buy::SoldOut { remaining } => Some(*remaining),
            _ => None,
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = UnknownStrategy;

    fn from_str(s: &str) -> std::result::Result<Strategy, UnknownStrategy> {
        Strategy::ALL
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| UnknownStrategy {
                name: s.to_string(),
            })
    }
}

/// A strategy name that is none of [`Strategy::ALL`]'s; the message lists them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown strategy '{name}'; one of: {}", strategy_names())]
pub struct UnknownStrategy {
    /// The name as given.
    pub name: String,
}

/// Every strategy's name, comma-separated.
fn strategy_names() -> String {
    let names: Vec<&str> = Strategy::ALL.iter().map(|st| st.name()).collect();
    names.join(", ")
}

/// The name of a purchase outcome: the contract's `outcome` field and the label of
/// `lockctl_buy_total{outcome}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Deducted.
    Bought,
    /// Not enough stock.
    SoldOut,
    /// The lock was held by someone else for the whole wait.
    Busy,
    /// The lease ran out before the deduction; nothing was deducted.
    LeaseLost,
    /// The user's per-user limit was reached; nothing was deducted.
    LimitReached,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 5] = [
        Outcome::Bought,
        Outcome::SoldOut,
        Outcome::Busy,
        Outcome::LeaseLost,
        Outcome::LimitReached,
    ];

    /// The outcome's name, as in JSON and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Bought => "bought",
            Outcome::SoldOut => "sold_out",
            Outcome::Busy => "busy",
            Outcome::LeaseLost => "lease_lost",
            Outcome::LimitReached => "limit_reached",
        }
    }
}

/// One purchase and what is known about how it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Purchase {
    /// What the purchase came to.
    pub outcome: Buy,
    /// The order id (the idempotency key).
    pub order_id: String,
    /// Units.
    pub qty: u64,
    /// The units of the original order, when this order id had already bought: nothing was
    /// deducted this time.
    pub replayed: Option<u64>,
    /// The fencing token of the lock grant, for the lock strategies.
    pub fence: Option<u64>,
    /// The lock strategy deducted, and then the release found the lease gone: the buyer worked
    /// past its lease, and another may have been inside the critical section too.
    pub overran_lease: bool,
    /// Time spent acquiring the lock (also when it ended busy).
    pub lock_wait: Option<Duration>,
    /// Time the lock was held.
    pub lock_hold: Option<Duration>,
    /// Watchdog renewals while held.
    pub renewals: u64,
}

/// Reads the stock: `None` when the key does not exist, an error when it holds anything but an
/// integer.
pub fn read_stock(conn: &mut Conn, sku: &Sku, keys: &StockKeys) -> Result<Option<i64>> {
    read_stock_at(conn, sku, &keys.stock)
}

/// Reads a stock counter kept at `key` (another program's, for `hammer --url --stock-key`)
/// by the same rules as [`read_stock`].
pub fn read_stock_at(conn: &mut Conn, sku: &Sku, key: &str) -> Result<Option<i64>> {
    stock_value(sku, key, got_stock(conn.query(redis::cmd("GET").arg(key)))?)
}

/// What a `GET` of a stock key answered, as a read: a value of another type is a read too.
pub(crate) fn got_stock(got: Result<Option<String>>) -> Result<Carried> {
    match got {
        Ok(Some(raw)) => Ok(Carried::Value(raw)),
        Ok(None) => Ok(Carried::Missing),
        Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => Ok(Carried::WrongType),
        Err(e) => Err(e),
    }
}

/// A stock read (by `GET`, or carried by a lock's grant) as a count, by the rules of
/// [`parse_stock`]: `None` when there is no such key.
pub(crate) fn stock_value(sku: &Sku, key: &str, read: Carried) -> Result<Option<i64>> {
    let bad = |value: String| Error::BadStock {
        sku: sku.to_string(),
        key: key.to_string(),
        value,
    };
    match read {
        Carried::Missing => Ok(None),
        Carried::WrongType => Err(bad("a value of the wrong type".into())),
        Carried::Value(s) => parse_stock(&s).map(Some).ok_or_else(|| {
            // A line break or a terminal escape in the key is shown, not acted on.
            let shown: String = s
                .chars()
                .take(40)
                .flat_map(|c| match c.is_control() {
                    true => c.escape_default().collect::<Vec<_>>(),
                    false => vec![c],
                })
                .collect();
            bad(format!(
                "'{shown}{}'",
                if shown.len() < s.len() { "..." } else { "" }
            ))
        }),
    }
}

/// A stock value as Redis itself reads an integer: an optional '-', then digits with no
/// leading zero ('0' alone is zero). '+5', '05', '-0', ' 7' and '1e3' are not stock, and
/// neither is a number beyond the range Lua counts exactly ([`LUA_EXACT`]).
pub fn parse_stock(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = s == "0"
        || (!digits.is_empty()
            && s.len() <= 17
            && !digits.starts_with('0')
            && digits.bytes().all(|b| b.is_ascii_digit()));
    canonical
        .then(|| s.parse::<i64>().ok())
        .flatten()
        .filter(|n| n.unsigned_abs() <= LUA_EXACT)
}

/// The largest magnitude Lua's numbers (doubles) hold exactly, 2^53 - 1: the scripts refuse a
/// count beyond it, and so does [`parse_stock`], so that every strategy judges a value alike.
pub const LUA_EXACT: u64 = (1 << 53) - 1;

/// What it takes and answers: the header comment of `lua/seed.lua`.
const SEED_LUA: &str = include_str!("lua/seed.lua");

static SEED: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(SEED_LUA));

/// Sets the stock to `count` and starts a new sale (see `SEED_LUA`).
pub fn seed(conn: &mut Conn, sku: &Sku, count: u64) -> Result<()> {
    let keys = StockKeys::new(sku);
    // An unbucketed seed of a bucketed SKU ends its buckets too (see `buckets::retire`): the
    // map goes with the seed, and a process still holding it must not sell the old buckets.
    // The map is the one the script replaced (a bucketed seed may publish one meanwhile);
    // without scripts, the one read before.
    let mut old = buckets::Buckets::read(conn, sku).ok().flatten();
    let mut inv = SEED.prepare_invoke();
    inv.key(&keys.stock)
        .key(&keys.seeded)
        .key(&keys.sold)
        .key(&keys.ledger)
        .key(&keys.buyers)
        .key(&keys.events)
        .key(&keys.sale)
        .key(&keys.buckets)
        .key(&keys.seed_gen)
        .arg(count);
    let seeded: Result<(String, String)> = conn.script(&inv);
    match seeded {
        Ok((_, replaced)) => old = buckets::Buckets::parse(sku, &replaced).ok(),
        // A user not allowed scripts still seeds, as before sales were recorded (in one
        // MULTI, without a sale record: its books then hold every row of the SKU).
        Err(Error::Redis { code: Some(c), .. }) if c == "NOPERM" => {
            conn.transaction::<redis::Value>(
                &[
                    redis::Cmd::set(&keys.stock, count),
                    redis::Cmd::set(&keys.seeded, count),
                    redis::Cmd::set(&keys.sold, 0),
                    redis::Cmd::del(&keys.ledger),
                    redis::Cmd::del(&keys.buyers),
                    redis::Cmd::del(&keys.sale),
                    redis::Cmd::del(&keys.buckets),
                ],
                None,
            )?;
        }
        Err(e) => return Err(e),
    }
    if let Some(old) = old {
        buckets::retire(conn, &old, &[])?;
    }
    // Who serves the sale, for `status` to hold against whoever serves it later. A server
    // that keeps INFO from this user has no record, and no check.
    match conn.master_replid(&keys.stock)? {
        Some(id) => conn.query::<()>(redis::cmd("SET").arg(&keys.origin).arg(id))?,
        None => conn.query::<()>(redis::cmd("DEL").arg(&keys.origin))?,
    }
    if let Some(m) = conn.metrics() {
        m.set_stock(sku.as_str(), count as i64);
    }
    Ok(())
}

/// The ledger of one SKU: order id -> units deducted under it. See [`scan_ledger`].
pub fn ledger(conn: &mut Conn, sku: &Sku) -> Result<HashMap<String, i64>> {
    let mut out = HashMap::new();
    scan_ledger(conn, sku, |order, units| {
        out.insert(order, units);
    })?;
    Ok(out)
}

/// Calls `visit` with each order id of the SKU's ledger and the units deducted under it,
/// reading with HSCAN a page at a time, so a large ledger neither blocks the server nor has to
/// fit in memory at once. A ledger that is not a hash, or units that are not an integer, are
/// damaged books ([`Error::BadData`]).
/// Of a bucketed SKU, every bucket's ledger in turn.
pub fn scan_ledger(conn: &mut Conn, sku: &Sku, mut visit: impl FnMut(String, i64)) -> Result<()> {
    match buckets::Buckets::read(conn, sku)? {
        Some(b) => {
            for bucket in &b.skus {
                scan_one_ledger(conn, bucket, &mut visit)?;
            }
            Ok(())
        }
        None => scan_one_ledger(conn, sku, &mut visit),
    }
}

fn scan_one_ledger(conn: &mut Conn, sku: &Sku, visit: &mut impl FnMut(String, i64)) -> Result<()> {
    let keys = StockKeys::new(sku);
    let damaged = |reason: String| Error::BadData {
        sku: sku.to_string(),
        reason,
    };
    let mut cursor: u64 = 0;
    loop {
        let page = conn.query(
            redis::cmd("HSCAN")
                .arg(&keys.ledger)
                .arg(cursor)
                .arg("COUNT")
                .arg(1000),
        );
        let (next, page): (u64, Vec<(String, String)>) = match page {
            Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
                return Err(damaged(format!("{} is not a hash", keys.ledger)));
            }
            other => other?,
        };
        for (order, units) in page {
            match parse_stock(&units) {
                Some(n) => visit(order, n),
                None => {
                    return Err(damaged(format!(
                        "{} holds '{}' units for order '{}'",
                        keys.ledger,
                        units.escape_debug(),
                        order.escape_debug()
                    )));
                }
            }
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// A fresh order id: `o-` and 16 random hex characters.
pub fn new_order_id() -> String {
    format!("o-{}", hex::encode(rand::random::<[u8; 8]>()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_reads_back_from_its_name_and_no_other_name_does() {
        for st in Strategy::ALL {
            assert_eq!(st.name().parse::<Strategy>(), Ok(st));
        }
        let err = "optimistic".parse::<Strategy>().unwrap_err();
        assert_eq!(err.name, "optimistic");
        let words = err.to_string();
        assert!(
            Strategy::ALL.iter().all(|st| words.contains(st.name())),
            "{words}"
        );
    }
}
