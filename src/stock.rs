//! Stock deduction: the seed's purchase and the strategies that fix or break it.
//!
//! The stock is `item:stock:<SKU>`, a string integer, as in the seed. Every deduction also
//! records the order in a per-SKU ledger (`item:orders:<SKU>`, order id -> units deducted), in
//! the same transaction or script as the deduction, so that stock consumed and ledger sum agree
//! whatever crashes: that equality is what the hammer and `status` check.
//!
//! The one idea that makes each strategy correct (or not):
//! - `lock` reads then writes under the lock, which is safe only while the lease outlives the
//!   work; past it (the seed's homework) two buyers read the same stock.
//! - `fenced` makes the write itself check the lease: one script deducts only while the lock
//!   still holds this buyer's token, so an expired buyer deducts nothing.
//! - `atomic` needs no lock: one script reads, checks and writes, and Redis runs scripts one at
//!   a time. It still yields to a lock held by anyone else, to stay safe beside lock users.
//! - `naive` reads then writes with no lock: the negative control that must be caught.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;
use std::thread;
use std::time::{Duration, Instant};

use redis::Script;
use serde::Serialize;

use crate::conn::{Conn, Target};
use crate::error::{Error, Result};
use crate::lock::{Acquire, Guard, Lock, LockOptions, Release};
use crate::metrics;
use crate::redlock::Quorum;
use crate::sku::{Sku, StockKeys};
use std::sync::Arc;

/// The largest stock `seed` accepts: well inside the range where Lua's numbers are exact.
pub const MAX_STOCK: u64 = 1_000_000_000_000_000;

/// Deducts `qty` and records the order, in one atomic step, after checking whatever the caller
/// asked for: a replayed order id, the lock, the per-user limit and the stock.
/// KEYS: 1 stock, 2 ledger, 3 lock, 4 buyers (user -> units), 5 sold counter.
/// ARGV: 1 token ('' = we hold no lock: yield while anyone does), 2 qty, 3 order id,
///       4 user ('' = no per-user limit), 5 the limit.
/// Returns {status, n, text}:
///   {'bought', stock left, ''}         {'replayed', units of the original order, stock now}
///   {'sold_out', stock, ''}            {'limit', units this user already has, ''}
///   {'busy', 0, ''}                    {'lease_lost', 0, ''}
///   {'unseeded', 0, ''}                {'bad_stock', 0, what the key holds}
/// The raw stock is matched against an integer pattern before use, because Lua's `tonumber`
/// accepts '1e3' and ' 7', and `nil`/`false` would otherwise read as "sold out".
const DEDUCT_LUA: &str = r"
local prior = redis.call('HGET', KEYS[2], ARGV[3])
if prior then
  return {'replayed', tonumber(prior), redis.call('GET', KEYS[1]) or ''}
end
local holder = redis.call('GET', KEYS[3])
if ARGV[1] == '' then
  if holder then return {'busy', 0, ''} end
elseif holder ~= ARGV[1] then
  return {'lease_lost', 0, ''}
end
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then return {'bad_stock', 0, 'a value of the wrong type'} end
if not raw then return {'unseeded', 0, ''} end
if not string.match(raw, '^%-?%d+$') or string.len(raw) > 17 then
  return {'bad_stock', 0, raw}
end
local stock = tonumber(raw)
local qty = tonumber(ARGV[2])
if ARGV[4] ~= '' then
  local had = tonumber(redis.call('HGET', KEYS[4], ARGV[4]) or '0')
  if had + qty > tonumber(ARGV[5]) then return {'limit', had, ''} end
end
if stock < qty then return {'sold_out', stock, ''} end
local left = redis.call('DECRBY', KEYS[1], qty)
redis.call('HSET', KEYS[2], ARGV[3], qty)
redis.call('INCRBY', KEYS[5], qty)
if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[4], ARGV[4], qty) end
return {'bought', left, ''}
";

static DEDUCT: LazyLock<Script> = LazyLock::new(|| Script::new(DEDUCT_LUA));

/// How a purchase protects the stock. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// The seed: lock, GET, DECR if enough, release.
    Lock,
    /// The lock, but the deduction checks the lease atomically.
    Fenced,
    /// No lock: one script checks and deducts.
    Atomic,
    /// GET then DECR with no lock: the negative control.
    Naive,
}

impl Strategy {
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Lock => "lock",
            Strategy::Fenced => "fenced",
            Strategy::Atomic => "atomic",
            Strategy::Naive => "naive",
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
    /// Default: [`Strategy::Lock`], the seed's flow.
    pub strategy: Strategy,
    /// Units per purchase. Default: 1.
    pub qty: u64,
    /// Simulated business time between reading the stock and writing it. Default: zero.
    pub work: Duration,
    /// The lock's lease, wait and watchdog. Default: [`LockOptions::default`].
    pub lock: LockOptions,
    /// The most units one user may buy of the SKU in all; applies to purchases that name a
    /// user. Default: none.
    pub limit: Option<u64>,
}

impl Default for BuyOptions {
    fn default() -> Self {
        BuyOptions {
            strategy: Strategy::Lock,
            qty: 1,
            work: Duration::ZERO,
            lock: LockOptions::default(),
            limit: None,
        }
    }
}

/// What a purchase came to. Only [`Buy::Bought`] deducted anything (and a replayed order id
/// reports the original purchase without deducting again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buy {
    /// Deducted; `remaining` is the stock right after the deduction (or now, when replayed).
    Bought { remaining: i64 },
    /// Not enough stock; `remaining` is what there was.
    SoldOut { remaining: i64 },
    /// The lock was held by someone else for the whole wait.
    Busy,
    /// The lease ran out before the deduction; nothing was deducted.
    LeaseLost,
    /// The user already has `bought` units and may have at most `limit`; nothing was deducted.
    LimitReached { bought: u64, limit: u64 },
}

impl Buy {
    /// The contract's outcome name.
    pub fn name(&self) -> &'static str {
        match self {
            Buy::Bought { .. } => "bought",
            Buy::SoldOut { .. } => "sold_out",
            Buy::Busy => "busy",
            Buy::LeaseLost => "lease_lost",
            Buy::LimitReached { .. } => "limit_reached",
        }
    }

    /// The stock the buyer was told about, if any.
    pub fn remaining(&self) -> Option<i64> {
        match self {
            Buy::Bought { remaining } | Buy::SoldOut { remaining } => Some(*remaining),
            _ => None,
        }
    }
}

/// Where a purchase stands once the stock has been read.
enum Step {
    /// Decided without a write.
    Done(Buy),
    /// Enough stock and nothing against it: deduct.
    Deduct,
}

/// One purchase and what is known about how it went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Purchase {
    pub outcome: Buy,
    pub order_id: String,
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

/// Buys one SKU with fixed options. Cheap to create; use one per thread or share it.
#[derive(Clone, Debug)]
pub struct Buyer {
    sku: Sku,
    keys: StockKeys,
    lock: Lock,
    options: BuyOptions,
    meters: Meters,
}

/// This buyer's metrics, looked up once: a purchase then costs two atomic operations.
#[derive(Clone)]
struct Meters {
    /// One counter per outcome, in the order of [`OUTCOMES`].
    outcomes: Vec<prometheus_client::metrics::counter::Counter>,
    stock: prometheus_client::metrics::gauge::Gauge,
}

impl std::fmt::Debug for Meters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Meters")
    }
}

/// Every value of `lockctl_buy_total{outcome}`.
const OUTCOMES: [&str; 6] = [
    "bought",
    "sold_out",
    "busy",
    "lease_lost",
    "limit_reached",
    "error",
];

impl Meters {
    fn new(sku: &Sku) -> Meters {
        let m = metrics::global();
        Meters {
            outcomes: OUTCOMES.iter().map(|o| m.buy_counter(o)).collect(),
            stock: m.stock_gauge(sku.as_str()),
        }
    }

    fn record(&self, outcome: &str, remaining: Option<i64>) {
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            self.outcomes[i].inc();
        }
        if let Some(left) = remaining {
            self.stock.set(left);
        }
    }
}

impl Buyer {
    pub fn new(target: &Target, sku: &Sku, options: BuyOptions) -> Buyer {
        Buyer {
            sku: sku.clone(),
            keys: StockKeys::new(sku),
            lock: Lock::new(target, sku.as_str(), options.lock.clone()),
            options,
            meters: Meters::new(sku),
        }
    }

    pub fn options(&self) -> &BuyOptions {
        &self.options
    }

    /// Takes the lock by Redlock quorum on `quorum`'s masters; the stock stays where it is.
    pub fn with_quorum(mut self, quorum: Arc<Quorum>) -> Buyer {
        self.lock = self.lock.with_quorum(quorum);
        self
    }

    /// One purchase under `order_id`, by `user` when the per-user limit should apply.
    pub fn buy(&self, conn: &mut Conn, order_id: &str, user: Option<&str>) -> Result<Purchase> {
        let result = self.buy_unmetered(conn, order_id, user);
        match &result {
            Ok(p) => self.meters.record(p.outcome.name(), p.outcome.remaining()),
            Err(_) => self.meters.record("error", None),
        }
        result
    }

    /// A purchase not yet made (busy until something better is known).
    fn new_purchase(&self, order_id: &str) -> Purchase {
        Purchase {
            outcome: Buy::Busy,
            order_id: order_id.to_string(),
            qty: self.options.qty,
            replayed: None,
            fence: None,
            overran_lease: false,
            lock_wait: None,
            lock_hold: None,
            renewals: 0,
        }
    }

    fn buy_unmetered(
        &self,
        conn: &mut Conn,
        order_id: &str,
        user: Option<&str>,
    ) -> Result<Purchase> {
        let user_limit = user.zip(self.options.limit);
        let mut p = self.new_purchase(order_id);
        match self.options.strategy {
            Strategy::Naive => {
                p.outcome = match self.read_and_decide(conn, user_limit, None)? {
                    Step::Done(b) => b,
                    Step::Deduct => self.deduct_unlocked(conn, order_id, user_limit)?,
                };
            }
            Strategy::Atomic => {
                thread::sleep(self.options.work);
                self.atomic(conn, user_limit, &mut p)?;
            }
            Strategy::Lock | Strategy::Fenced => self.locked(conn, user_limit, &mut p)?,
        }
        Ok(p)
    }

    fn locked(&self, conn: &mut Conn, ul: Option<(&str, u64)>, p: &mut Purchase) -> Result<()> {
        let started = Instant::now();
        let guard = match self.lock.acquire(conn)? {
            Acquire::Acquired(g) => g,
            Acquire::Busy => {
                p.lock_wait = Some(started.elapsed());
                return Ok(());
            }
        };
        p.lock_wait = Some(guard.waited());
        p.fence = Some(guard.fence());
        let outcome = match self.options.strategy {
            // The seed's read, then a write that checks the lease itself.
            Strategy::Fenced => self.in_stock(conn).and_then(|enough| match enough {
                Some(sold_out) => Ok(Step::Done(sold_out)),
                None => {
                    thread::sleep(self.options.work);
                    self.deduct_script(conn, guard.token(), ul, p)
                        .map(Step::Done)
                }
            }),
            _ => self.read_and_decide(conn, ul, Some(&guard)),
        };
        p.renewals = guard.renewals();
        // The seed's `finally`: release whatever happened in between. A failed release leaves
        // the lock to expire by its TTL; the purchase itself stands.
        let hold_started = Instant::now() - guard.held_for();
        let (outcome, released) = match outcome {
            Ok(Step::Deduct) => {
                // The write and the release travel together: one round trip fewer inside the
                // critical section.
                match guard.release_after(conn, &self.deduct_commands(&p.order_id, ul)) {
                    Ok((replies, released)) => (self.bought(conn, &replies), Some(released)),
                    Err(e) => (Err(e), None),
                }
            }
            Ok(Step::Done(b)) => (Ok(b), guard.release(conn).ok()),
            Err(e) => (Err(e), guard.release(conn).ok()),
        };
        p.lock_hold = Some(hold_started.elapsed());
        p.outcome = outcome?;
        if let (Buy::Bought { .. }, Some(Release::NotOwner | Release::Expired)) =
            (p.outcome, released)
        {
            p.overran_lease = p.replayed.is_none();
        }
        Ok(())
    }

    fn atomic(&self, conn: &mut Conn, ul: Option<(&str, u64)>, p: &mut Purchase) -> Result<()> {
        let started = Instant::now();
        loop {
            p.outcome = self.deduct_script(conn, "", ul, p)?;
            let left = self.options.lock.wait.saturating_sub(started.elapsed());
            if p.outcome != Buy::Busy || left.is_zero() {
                return Ok(());
            }
            thread::sleep(Duration::from_micros(rand::random_range(500..5_000)).min(left));
        }
    }

    /// The seed's `GET`: `Some(SoldOut)` when there is not enough for this purchase, `None`
    /// when there is.
    fn in_stock(&self, conn: &mut Conn) -> Result<Option<Buy>> {
        let stock = read_stock(conn, &self.sku, &self.keys)?.ok_or_else(|| Error::Unseeded {
            sku: self.sku.to_string(),
        })?;
        Ok((stock < self.options.qty as i64).then_some(Buy::SoldOut { remaining: stock }))
    }

    /// The seed's flow up to the write: GET, and if there is enough, work, then the checks
    /// that may still refuse. Under a lock when `guard` is given, with no protection at all
    /// when not. Nothing here checks that the stock read is still current: that is the lock's
    /// job.
    fn read_and_decide(
        &self,
        conn: &mut Conn,
        ul: Option<(&str, u64)>,
        guard: Option<&Guard>,
    ) -> Result<Step> {
        if let Some(sold_out) = self.in_stock(conn)? {
            return Ok(Step::Done(sold_out));
        }
        thread::sleep(self.options.work);
        if guard.is_some_and(Guard::lease_lost) {
            return Ok(Step::Done(Buy::LeaseLost));
        }
        if let Some((user, limit)) = ul {
            let had: Option<u64> =
                conn.query(redis::cmd("HGET").arg(&self.keys.buyers).arg(user))?;
            let had = had.unwrap_or(0);
            if had.saturating_add(self.options.qty) > limit {
                return Ok(Step::Done(Buy::LimitReached { bought: had, limit }));
            }
        }
        Ok(Step::Deduct)
    }

    /// The seed's DECR, with the order recorded: to run inside one MULTI/EXEC. The first reply
    /// is the stock left.
    fn deduct_commands(&self, order_id: &str, ul: Option<(&str, u64)>) -> Vec<redis::Cmd> {
        let qty = self.options.qty;
        let mut cmds = vec![
            redis::Cmd::decr(&self.keys.stock, qty),
            redis::Cmd::hincr(&self.keys.ledger, order_id, qty),
            redis::Cmd::incr(&self.keys.sold, qty),
        ];
        if let Some((user, _)) = ul {
            cmds.push(redis::Cmd::hincr(&self.keys.buyers, user, qty));
        }
        cmds
    }

    /// Reads the stock left from the transaction's replies.
    fn bought(&self, conn: &Conn, replies: &[redis::Value]) -> Result<Buy> {
        match replies.first() {
            Some(redis::Value::Int(left)) => Ok(Buy::Bought { remaining: *left }),
            other => Err(conn.unexpected(format!("DECRBY answered {other:?}"))),
        }
    }

    /// The naive strategy's write: the same transaction, with no lock around it.
    fn deduct_unlocked(
        &self,
        conn: &mut Conn,
        order_id: &str,
        ul: Option<(&str, u64)>,
    ) -> Result<Buy> {
        let (replies, _): (Vec<redis::Value>, _) =
            conn.transaction(&self.deduct_commands(order_id, ul), None)?;
        self.bought(conn, &replies)
    }

    fn deduct_script(
        &self,
        conn: &mut Conn,
        token: &str,
        ul: Option<(&str, u64)>,
        p: &mut Purchase,
    ) -> Result<Buy> {
        let (user, limit) = ul.unwrap_or(("", 0));
        let reply: (String, i64, String) = conn.script(
            DEDUCT
                .key(&self.deduct_keys())
                .arg(token)
                .arg(self.options.qty)
                .arg(&p.order_id)
                .arg(user)
                .arg(limit),
        )?;
        self.deduct_outcome(conn, reply, limit, p)
    }

    /// The deduct script's keys, in its order.
    fn deduct_keys(&self) -> [&str; 5] {
        [
            &self.keys.stock,
            &self.keys.ledger,
            &self.lock.keys().lock,
            &self.keys.buyers,
            &self.keys.sold,
        ]
    }

    /// What the deduct script's `{status, n, text}` reply means.
    fn deduct_outcome(
        &self,
        conn: &Conn,
        (status, n, text): (String, i64, String),
        limit: u64,
        p: &mut Purchase,
    ) -> Result<Buy> {
        Ok(match status.as_str() {
            "bought" => Buy::Bought { remaining: n },
            "replayed" => {
                p.replayed = Some(n.max(0) as u64);
                Buy::Bought {
                    remaining: text.parse().unwrap_or(0),
                }
            }
            "sold_out" => Buy::SoldOut { remaining: n },
            "limit" => Buy::LimitReached {
                bought: n.max(0) as u64,
                limit,
            },
            "busy" => Buy::Busy,
            "lease_lost" => Buy::LeaseLost,
            "unseeded" => {
                return Err(Error::Unseeded {
                    sku: self.sku.to_string(),
                });
            }
            "bad_stock" => return Err(self.bad_stock(format!("'{text}'"))),
            other => return Err(conn.unexpected(format!("the deduct script answered '{other}'"))),
        })
    }

    /// The atomic strategy's purchase as one command, for a caller that drives many connections
    /// from one thread (send on each, then read each reply with [`Buyer::atomic_reply`]). Uses
    /// EVALSHA without loading: call [`Buyer::load_scripts`] first.
    pub fn atomic_command(&self, order_id: &str, user: Option<&str>) -> redis::Cmd {
        let (user, limit) = user.zip(self.options.limit).unwrap_or(("", 0));
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(DEDUCT.get_hash())
            .arg(5)
            .arg(&self.deduct_keys())
            .arg("")
            .arg(self.options.qty)
            .arg(order_id)
            .arg(user)
            .arg(limit);
        cmd
    }

    /// Makes sure the server knows the atomic strategy's script.
    pub fn load_scripts(&self, conn: &mut Conn) -> Result<()> {
        let sha: String = conn.query(redis::cmd("SCRIPT").arg("LOAD").arg(DEDUCT_LUA))?;
        debug_assert_eq!(sha, DEDUCT.get_hash());
        Ok(())
    }

    /// The purchase an [`Buyer::atomic_command`] reply stands for, counted in the metrics like
    /// [`Buyer::buy`]. `Ok(None)` when the purchase must be made again the ordinary way: the
    /// server had lost the script (a flush or a restart), or the lock was held and this buyer
    /// has a wait to spend.
    pub fn atomic_reply(
        &self,
        conn: &Conn,
        reply: Result<(String, i64, String)>,
        order_id: &str,
        user: Option<&str>,
    ) -> Result<Option<Purchase>> {
        let mut p = self.new_purchase(order_id);
        let limit = user.zip(self.options.limit).map_or(0, |(_, l)| l);
        let result = match reply {
            Err(Error::Redis { code: Some(c), .. }) if c == "NOSCRIPT" => return Ok(None),
            Err(e) => Err(e),
            Ok(r) => self.deduct_outcome(conn, r, limit, &mut p),
        };
        match result {
            Ok(Buy::Busy) if !self.options.lock.wait.is_zero() => Ok(None),
            Ok(outcome) => {
                p.outcome = outcome;
                self.meters.record(outcome.name(), outcome.remaining());
                Ok(Some(p))
            }
            Err(e) => {
                self.meters.record("error", None);
                Err(e)
            }
        }
    }

    fn bad_stock(&self, value: String) -> Error {
        Error::BadStock {
            sku: self.sku.to_string(),
            key: self.keys.stock.clone(),
            value,
        }
    }
}

/// Reads the stock: `None` when the key does not exist, an error when it holds anything but an
/// integer.
pub fn read_stock(conn: &mut Conn, sku: &Sku, keys: &StockKeys) -> Result<Option<i64>> {
    let bad = |value: String| Error::BadStock {
        sku: sku.to_string(),
        key: keys.stock.clone(),
        value,
    };
    let raw: Option<String> = match conn.query(redis::cmd("GET").arg(&keys.stock)) {
        Ok(raw) => raw,
        Err(Error::Redis { code: Some(c), .. }) if c == "WRONGTYPE" => {
            return Err(bad("a value of the wrong type".into()));
        }
        Err(e) => return Err(e),
    };
    match raw {
        None => Ok(None),
        Some(s) => s
            .parse::<i64>()
            .map(Some)
            .map_err(|_| bad(format!("'{s}'"))),
    }
}

/// Sets the stock to `count` and clears the SKU's ledger, sold counter and per-user totals,
/// in one MULTI.
pub fn seed(conn: &mut Conn, sku: &Sku, count: u64) -> Result<()> {
    let keys = StockKeys::new(sku);
    conn.transaction::<redis::Value>(
        &[
            redis::Cmd::set(&keys.stock, count),
            redis::Cmd::set(&keys.seeded, count),
            redis::Cmd::set(&keys.sold, 0),
            redis::Cmd::del(&keys.ledger),
            redis::Cmd::del(&keys.buyers),
        ],
        None,
    )?;
    metrics::global().set_stock(sku.as_str(), count as i64);
    Ok(())
}

/// The ledger of one SKU: order id -> units deducted under it. Read with HSCAN, a page at a
/// time, so a large ledger does not block the server.
pub fn ledger(conn: &mut Conn, sku: &Sku) -> Result<HashMap<String, i64>> {
    let keys = StockKeys::new(sku);
    let mut out = HashMap::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<(String, i64)>) = conn.query(
            redis::cmd("HSCAN")
                .arg(&keys.ledger)
                .arg(cursor)
                .arg("COUNT")
                .arg(1000),
        )?;
        out.extend(page);
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

/// Every key lockctl uses for `sku` (a waiter's wake list stands in for all of them).
pub fn keys_of(sku: &Sku) -> Vec<String> {
    let s = StockKeys::new(sku);
    let l = crate::lock::LockKeys::new(sku.as_str());
    vec![
        s.stock,
        s.ledger,
        s.seeded,
        s.buyers,
        s.sold,
        l.lock,
        l.fence,
        l.queue,
        l.deadlines,
        format!("{}{}", l.wake_prefix, "0".repeat(32)),
    ]
}

/// In a Redis Cluster, a script or transaction can only touch keys of one slot: checks that
/// all of `sku`'s keys share one, and says how to make them when they do not.
pub fn check_one_slot(sku: &Sku) -> std::result::Result<u16, String> {
    let keys = keys_of(sku);
    let first = crate::sku::key_slot(&keys[0]);
    match keys.iter().find(|k| crate::sku::key_slot(k) != first) {
        None => Ok(first),
        Some(other) => Err(format!(
            "in a Redis Cluster the keys of '{sku}' fall in different slots ('{}' in slot {first}, '{other}' in slot {}); write the SKU with a hash tag, '{{{sku}}}', so that all its keys share one slot",
            keys[0],
            crate::sku::key_slot(other)
        )),
    }
}

/// A fresh order id: `o-` and 16 random hex characters.
pub fn new_order_id() -> String {
    format!("o-{}", hex::encode(rand::random::<[u8; 8]>()))
}
