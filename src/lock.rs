//! A lease-based Redis lock, compatible with the seed's PHP `DistributedLock`.
//!
//! The lock is the key `dist_lock:<name>` holding its owner's token (32 hex characters from 16
//! random bytes), set with `NX` and `PX`, exactly as the seed does, so a lock taken by the PHP
//! client and one taken here exclude each other. What makes it correct is that nothing but the
//! owner ever touches a held lock: release and renewal are scripts that compare the token and act
//! in one atomic step, and Redis runs one script at a time.
//!
//! Beyond the seed, every grant also takes the next number from `dist_lock_fence:<name>` in the
//! same script (a fencing token: a store downstream can refuse writes carrying an older number),
//! the release says whether the lease had already run out, and an optional watchdog renews the
//! lease while the owner lives. This module knows nothing of stock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::Script;

use crate::conn::{Conn, Target};
use crate::error::Result;
use crate::metrics;
use crate::redlock::Quorum;

/// Shared by the scripts that can hand the lock over: waiter bookkeeping and the grant.
///
/// Waiters are members `<token>/<ttl ms>` of two sorted sets: the queue, scored by arrival time
/// in microseconds (FIFO order), and the deadlines, scored by the server-clock millisecond after
/// which the waiter counts as gone unless it has refreshed its entry. Every waiter refreshes
/// well inside that time while it waits, so only a dead or departed waiter's entry ever runs
/// out, and `prune` removes those before anyone looks at the head of the queue. Server time is
/// used throughout so clients' clocks do not matter.
///
/// `grant_head` gives a free lock to the oldest live waiter: it sets the lock to that waiter's
/// token with that waiter's TTL, takes the next fencing token, and pushes the fencing token to
/// the waiter's own wake list (`<wake prefix><token>`), on which it is blocked with BLPOP. The
/// wake list expires with the grant, so a message for a waiter that died is not left behind;
/// a lock granted to a waiter that died after its last refresh expires by its TTL.
/// KEYS: 1 lock, 2 fence counter, 3 queue, 4 deadlines. ARGV[5] (in every caller): wake prefix.
const QUEUE_LUA: &str = r"
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function now_ms()
  return math.floor(now_us() / 1000)
end
local function token_of(member)
  return string.sub(member, 1, string.find(member, '/', 1, true) - 1)
end
local function prune(now)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)) do
    redis.call('ZREM', KEYS[3], m)
    redis.call('ZREM', KEYS[4], m)
    redis.call('DEL', ARGV[5] .. token_of(m))
  end
end
local function grant_head(now)
  prune(now)
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not head then return false end
  local sep = string.find(head, '/', 1, true)
  local token, ttl = string.sub(head, 1, sep - 1), string.sub(head, sep + 1)
  redis.call('SET', KEYS[1], token, 'PX', ttl)
  local fence = redis.call('INCR', KEYS[2])
  redis.call('ZREM', KEYS[3], head)
  redis.call('ZREM', KEYS[4], head)
  local wake = ARGV[5] .. token
  redis.call('RPUSH', wake, fence)
  redis.call('PEXPIRE', wake, ttl)
  return token
end
local function claim(wake)
  local fence = redis.call('LPOP', wake)
  redis.call('DEL', wake)
  return tonumber(fence or redis.call('GET', KEYS[2]))
end
";

/// Takes the lock if it is free and nobody is queued ahead; otherwise joins (or refreshes a
/// place in) the queue when asked to. A free lock with live waiters goes to the oldest of them,
/// so nobody overtakes the queue, except a client that knows nothing of it (the seed's plain
/// `SET NX PX`), which may; exclusion holds all the same.
/// KEYS: 1-4 as in QUEUE_LUA, 5 this waiter's wake list.
/// ARGV: 1 token, 2 TTL ms, 3 '1' to queue or '0' to try once, 4 waiter lease ms, 5 wake prefix.
/// Returns {1, fencing token} when the lock is now ours, {0, the lock's PTTL} when not.
const ACQUIRE_LUA: &str = r"
local arrival = now_us()
local now = math.floor(arrival / 1000)
local me = ARGV[1] .. '/' .. ARGV[2]
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return {1, claim(KEYS[5])}
end
if not holder then
  local granted = grant_head(now)
  if granted == ARGV[1] then
    return {1, claim(KEYS[5])}
  end
  if not granted then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return {1, redis.call('INCR', KEYS[2])}
  end
end
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[3], 'NX', arrival, me)
  redis.call('ZADD', KEYS[4], now + tonumber(ARGV[4]), me)
end
return {0, redis.call('PTTL', KEYS[1])}
";

/// Leaves the queue for good. If the lock was granted to us just before, it is ours.
/// KEYS: 1-4 as in QUEUE_LUA, 5 this waiter's wake list. ARGV: 1 token, 2 TTL ms, 5 wake prefix.
/// Returns {1, fencing token} when the lock is ours after all, {0, 0} when we left without it.
const LEAVE_LUA: &str = r"
local me = ARGV[1] .. '/' .. ARGV[2]
redis.call('ZREM', KEYS[3], me)
redis.call('ZREM', KEYS[4], me)
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, claim(KEYS[5])}
end
redis.call('DEL', KEYS[5])
return {0, 0}
";

/// Releases the lock if it still holds this token (the seed's compare-and-delete), handing it
/// to the oldest live waiter instead of deleting it when anyone waits. A release that finds the
/// lock gone also hands it over, so waiters need not wait for their next timeout.
/// KEYS: 1-4 as in QUEUE_LUA. ARGV: 1 token, 5 wake prefix.
/// Returns 1 released, 0 held by another token, -1 no lock at all (the lease ran out).
const RELEASE_LUA: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  if not grant_head(now_ms()) then redis.call('DEL', KEYS[1]) end
  return 1
end
if holder then return 0 end
grant_head(now_ms())
return -1
";

/// The operator's escape hatch: deletes the lock whoever holds it, then hands it to the oldest
/// live waiter as a release would. KEYS: 1-4 as in QUEUE_LUA. ARGV: 5 wake prefix.
/// Returns the token that was removed, or nil when the lock was free.
const FORCE_LUA: &str = r"
local holder = redis.call('GET', KEYS[1])
if not holder then return false end
redis.call('DEL', KEYS[1])
grant_head(now_ms())
return holder
";

/// Extends the lease only if the lock still holds this token.
/// KEYS: 1 lock. ARGV: 1 token, 2 TTL in ms. Returns 1 renewed, 0 not the owner any more.
const RENEW_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Counts the live waiters (those whose deadline has not passed on the server's clock).
/// KEYS: 4 deadlines (1-3 unused, passed so every key is declared). Returns the count.
const WAITERS_LUA: &str = r"
return redis.call('ZCOUNT', KEYS[4], '(' .. now_ms(), '+inf')
";

fn with_queue(body: &str) -> Script {
    Script::new(&format!("{QUEUE_LUA}{body}"))
}

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| with_queue(ACQUIRE_LUA));
static LEAVE: LazyLock<Script> = LazyLock::new(|| with_queue(LEAVE_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| with_queue(RELEASE_LUA));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
static WAITERS: LazyLock<Script> = LazyLock::new(|| with_queue(WAITERS_LUA));
static FORCE: LazyLock<Script> = LazyLock::new(|| with_queue(FORCE_LUA));

/// How long a waiter's place lasts without a refresh, on the server's clock. A waiter that dies
/// leaves the queue at most this long after its last refresh.
pub const WAITER_LEASE: Duration = Duration::from_millis(1000);

/// How long a waiter blocks before refreshing its place: a third of the lease, so two refreshes
/// can be late before the place is lost.
const WAITER_REFRESH: Duration = Duration::from_millis(333);

/// How a lock is taken and held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOptions {
    /// Lease length: the lock frees itself this long after the last grant or renewal.
    /// Default: 5000 ms, as in the seed's demo.
    pub ttl: Duration,
    /// How long to keep trying when the lock is held. Default: zero, one try, as in the seed.
    pub wait: Duration,
    /// Renew the lease every TTL/3 while the guard lives. Default: off.
    pub watchdog: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_millis(5000),
            wait: Duration::ZERO,
            watchdog: false,
        }
    }
}

/// A holder's token: 32 lowercase hex characters from 16 random bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Token(String);

impl Token {
    /// A fresh token from the thread-local cryptographic generator.
    pub fn random() -> Token {
        Token(hex::encode(rand::random::<[u8; 16]>()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The keys of one lock. Each prefix differs from the others before the name starts, so no
/// lock's key can equal another lock's key of a different kind.
#[derive(Clone, Debug)]
pub struct LockKeys {
    /// `dist_lock:<name>`: the lock itself, as in the seed.
    pub lock: String,
    /// `dist_lock_fence:<name>`: the fencing counter, one INCR per grant.
    pub fence: String,
    /// `dist_lock_queue:<name>`: waiters in arrival order.
    pub queue: String,
    /// `dist_lock_waiting:<name>`: each waiter's deadline on the server's clock.
    pub deadlines: String,
    /// `dist_lock_wake:<name>:`, followed by a waiter's token: the list it blocks on.
    pub wake_prefix: String,
}

impl LockKeys {
    pub fn new(name: &str) -> LockKeys {
        LockKeys {
            lock: format!("dist_lock:{name}"),
            fence: format!("dist_lock_fence:{name}"),
            queue: format!("dist_lock_queue:{name}"),
            deadlines: format!("dist_lock_waiting:{name}"),
            wake_prefix: format!("dist_lock_wake:{name}:"),
        }
    }

    /// The four keys every queue-aware script takes first, in order.
    fn queue_keys(&self) -> [&str; 4] {
        [&self.lock, &self.fence, &self.queue, &self.deadlines]
    }

    /// The arguments every queue-aware script takes, in order: token, TTL ms, '1' to queue,
    /// the waiter lease in ms, the wake prefix (see the scripts' comments).
    fn queue_argv(&self, token: &str, ttl_ms: u64, queue: bool) -> [String; 5] {
        [
            token.to_string(),
            ttl_ms.to_string(),
            if queue { "1" } else { "0" }.to_string(),
            WAITER_LEASE.as_millis().to_string(),
            self.wake_prefix.clone(),
        ]
    }

    /// A queue-aware script call: the four keys (and this waiter's wake list, when `waiter`
    /// names one), then the standard arguments.
    fn invocation<'a>(
        &self,
        script: &'a Script,
        token: &str,
        ttl_ms: u64,
        queue: bool,
        waiter: bool,
    ) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        for k in self.queue_keys() {
            inv.key(k);
        }
        if waiter {
            inv.key(format!("{}{token}", self.wake_prefix));
        }
        inv.arg(&self.queue_argv(token, ttl_ms, queue));
        inv
    }
}

/// The result of asking for the lock.
#[derive(Debug)]
pub enum Acquire {
    /// The lock is ours until the guard is released or the lease runs out.
    Acquired(Guard),
    /// Someone else held it for the whole wait.
    Busy,
}

/// What releasing found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// We still held it, and now nobody does.
    Released,
    /// Someone else holds it: our lease ran out and was taken over. Left in place.
    NotOwner,
    /// Nobody holds it: our lease ran out.
    Expired,
}

/// A named lock on one Redis server.
#[derive(Clone, Debug)]
pub struct Lock {
    keys: Arc<LockKeys>,
    options: LockOptions,
    target: Target,
    /// Started the first time a waiter needs it; shared by every clone of this lock.
    expiry_poker: Arc<OnceLock<Option<ExpiryPoker>>>,
    /// Redlock's voting masters, when the lock is taken by quorum.
    quorum: Option<Arc<Quorum>>,
}

impl Lock {
    /// The lock `dist_lock:<name>` on `target` (the watchdog opens its own connection there).
    pub fn new(target: &Target, name: &str, options: LockOptions) -> Lock {
        Lock {
            keys: Arc::new(LockKeys::new(name)),
            options,
            target: target.clone(),
            expiry_poker: Arc::new(OnceLock::new()),
            quorum: None,
        }
    }

    /// Takes the lock by Redlock quorum on `quorum`'s masters (and on `target`, the data node).
    pub fn with_quorum(mut self, quorum: Arc<Quorum>) -> Lock {
        self.quorum = Some(quorum);
        self
    }

    pub fn keys(&self) -> &LockKeys {
        &self.keys
    }

    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// Takes the lock, waiting up to `wait` in the lock's FIFO queue.
    ///
    /// A waiter does not poll: it blocks on its own wake list, and the holder's release hands
    /// the lock straight to the oldest live waiter and wakes it, so a released lock changes
    /// hands in about one round trip. A waiter also wakes when the holder's lease is due to run
    /// out (a holder that died never releases) and to refresh its place in the queue.
    ///
    /// If a call fails in a way that may have been applied (a timeout), the waiter leaves the
    /// queue and releases the lock by token, best effort, and the error is returned: the lock
    /// is never considered held after an error.
    pub fn acquire(&self, conn: &mut Conn) -> Result<Acquire> {
        let started = Instant::now();
        let token = Token::random();
        let outcome = match &self.quorum {
            None => self
                .wait_for_grant(conn, &token, started)
                .map(|f| f.map(|f| (f, None))),
            Some(q) => self.wait_for_quorum(conn, q, &token, started),
        };
        let result = match outcome {
            Ok(Some(_)) => "acquired",
            Ok(None) => "busy",
            Err(_) => "error",
        };
        metrics::global().observe_wait(started.elapsed(), result);
        let (fence, valid_until) = match outcome {
            Ok(Some(granted)) => granted,
            Ok(None) => return Ok(Acquire::Busy),
            Err(e) => return Err(e),
        };
        let acquired_at = Instant::now();
        let mut guard = Guard {
            keys: self.keys.clone(),
            token,
            fence,
            ttl: self.options.ttl,
            waited: acquired_at - started,
            acquired_at,
            watchdog: None,
            quorum: self.quorum.clone().zip(valid_until),
        };
        if self.options.watchdog {
            match Watchdog::start(&self.target, &guard) {
                Ok(w) => guard.watchdog = Some(w),
                Err(e) => {
                    let _ = guard.release(conn);
                    return Err(e);
                }
            }
        }
        Ok(Acquire::Acquired(guard))
    }

    /// Redlock's acquire loop. The lock key on the data node comes first, through its FIFO
    /// queue: it keeps single-node clients such as the seed's PHP code excluded, gives the
    /// fenced write a token to check where the stock lives, and lets lockctl's buyers take
    /// turns instead of splitting the votes (simultaneous Redlock rounds that each win a
    /// minority, release, and retry are Redlock's known livelock). Then a majority of the lock
    /// nodes, which keeps the lock even if the data node fails over and forgets its key. A
    /// round that misses the majority gives the data-node lock back and tries again after a
    /// random pause, until the wait runs out.
    fn wait_for_quorum(
        &self,
        conn: &mut Conn,
        q: &Quorum,
        token: &Token,
        started: Instant,
    ) -> Result<Option<(u64, Option<Instant>)>> {
        let ttl = self.options.ttl;
        loop {
            let Some(fence) = self.wait_for_grant(conn, token, started)? else {
                return Ok(None);
            };
            let round = Instant::now();
            if let Some(validity) = q.try_acquire(&self.keys.lock, token.as_str(), ttl) {
                return Ok(Some((fence, Some(round + validity))));
            }
            release_token(conn, &self.keys, token)?;
            let left = self.options.wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            thread::sleep(Duration::from_micros(rand::random_range(1_000..20_000)).min(left));
        }
    }

    /// The acquire loop: `Some(fencing token)` when granted, `None` when the wait ran out.
    ///
    /// On an error the waiter leaves the queue and releases the lock by token, best effort.
    fn wait_for_grant(
        &self,
        conn: &mut Conn,
        token: &Token,
        started: Instant,
    ) -> Result<Option<u64>> {
        let mut queued = false;
        let outcome = self.wait_in_queue(conn, token, started, &mut queued);
        if outcome.is_err() {
            let _ = self.call(conn, &LEAVE, token, false);
            let _ = release_token(conn, &self.keys, token);
        }
        outcome
    }

    fn wait_in_queue(
        &self,
        conn: &mut Conn,
        token: &Token,
        started: Instant,
        queued: &mut bool,
    ) -> Result<Option<u64>> {
        let call_timeout = conn.call_timeout();
        loop {
            let left = self.options.wait.saturating_sub(started.elapsed());
            let (granted, n) = self.call(conn, &ACQUIRE, token, !left.is_zero())?;
            if granted == 1 {
                return Ok(Some(n.max(0) as u64));
            }
            if left.is_zero() {
                if !*queued {
                    return Ok(None);
                }
                // Leaving may find the lock granted to us a moment ago: then it is ours.
                let (granted, fence) = self.call(conn, &LEAVE, token, false)?;
                return Ok((granted == 1).then_some(fence.max(0) as u64));
            }
            *queued = true;
            // Block until woken or until our place needs refreshing. When the holder's lease
            // (n is its PTTL; negative when it has none) runs out before that, ask the expiry
            // poker to hand the lock over the moment it does: a BLPOP timeout would fire only
            // on the server's next clock tick (1/hz, 100 ms by default), late.
            let block = left.min(WAITER_REFRESH);
            if n >= 0 && (n as u128) < block.as_millis() {
                self.poke_at(Instant::now() + Duration::from_millis(n as u64 + 1));
            }
            conn.set_call_timeout(call_timeout + block)?;
            let woken: Result<Option<(String, u64)>> = conn.query(
                redis::cmd("BLPOP")
                    .arg(format!("{}{}", self.keys.wake_prefix, token.as_str()))
                    .arg(format!("{:.3}", block.as_secs_f64().max(0.001))),
            );
            conn.set_call_timeout(call_timeout)?;
            if let Some((_, fence)) = woken? {
                return Ok(Some(fence));
            }
        }
    }

    /// Runs a queue-aware script with this lock's keys and the standard arguments.
    fn call(
        &self,
        conn: &mut Conn,
        script: &Script,
        token: &Token,
        queue: bool,
    ) -> Result<(i64, i64)> {
        let ttl_ms = self.options.ttl.as_millis() as u64;
        conn.script(
            &self
                .keys
                .invocation(script, token.as_str(), ttl_ms, queue, true),
        )
    }

    fn poke_at(&self, due: Instant) {
        let poker = self
            .expiry_poker
            .get_or_init(|| ExpiryPoker::start(&self.target, self.keys.clone()).ok());
        if let Some(p) = poker {
            p.poke_at(due);
        }
    }

    /// Who holds the lock now and for how much longer: `(token, remaining TTL)`.
    pub fn holder(&self, conn: &mut Conn) -> Result<Option<(String, Duration)>> {
        let ((token, pttl), _): ((Option<String>, i64), _) = conn.transaction(
            &[
                redis::Cmd::get(&self.keys.lock),
                redis::cmd("PTTL").arg(&self.keys.lock).clone(),
            ],
            None,
        )?;
        Ok(token.map(|t| (t, Duration::from_millis(pttl.max(0) as u64))))
    }

    /// Deletes the lock whoever holds it (a holder that is stuck, not one that is working: its
    /// writes are no longer excluded), handing it to the next waiter. Returns the token removed.
    pub fn force_unlock(&self, conn: &mut Conn) -> Result<Option<String>> {
        conn.script(&self.keys.invocation(&FORCE, "", 0, false, false))
    }

    /// Releases the lock only if `token` still holds it: the safe form of the escape hatch.
    pub fn release_by_token(&self, conn: &mut Conn, token: &str) -> Result<Release> {
        release_token(conn, &self.keys, &Token(token.to_string()))
    }

    /// The current value of the fencing counter (the last grant's fencing token).
    pub fn last_fence(&self, conn: &mut Conn) -> Result<u64> {
        let v: Option<u64> = conn.query(redis::cmd("GET").arg(&self.keys.fence))?;
        Ok(v.unwrap_or(0))
    }

    /// Clients waiting in the queue right now (live entries only): the wait-queue length.
    pub fn waiters(&self, conn: &mut Conn) -> Result<u64> {
        conn.script(&self.keys.invocation(&WAITERS, "", 0, false, false))
    }
}

fn release_token(conn: &mut Conn, keys: &LockKeys, token: &Token) -> Result<Release> {
    let inv = keys.invocation(&RELEASE, token.as_str(), 0, false, false);
    Ok(release_code(conn.script(&inv)?))
}

/// Proof of holding the lock. Release it with [`Guard::release`]; a guard that is dropped
/// instead stops its watchdog and leaves the lock to expire by its TTL.
#[derive(Debug)]
pub struct Guard {
    keys: Arc<LockKeys>,
    token: Token,
    fence: u64,
    ttl: Duration,
    waited: Duration,
    acquired_at: Instant,
    watchdog: Option<Watchdog>,
    /// Redlock's nodes and the end of the validity of the grant (or of its last extension).
    quorum: Option<(Arc<Quorum>, Instant)>,
}

impl Guard {
    /// The value stored in the lock key.
    pub fn token(&self) -> &str {
        self.token.as_str()
    }

    /// The fencing token of this grant: larger than that of every earlier grant of this lock.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// How long acquiring took.
    pub fn waited(&self) -> Duration {
        self.waited
    }

    /// How long the lock has been held so far.
    pub fn held_for(&self) -> Duration {
        self.acquired_at.elapsed()
    }

    /// The lease length this guard was granted with.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// True once the watchdog has failed to renew: the lease may be gone, so the holder must
    /// not write. Without a watchdog the guard cannot know (use a fenced write for that).
    pub fn lease_lost(&self) -> bool {
        self.watchdog
            .as_ref()
            .is_some_and(|w| w.lost.load(Ordering::SeqCst))
    }

    /// Renewals the watchdog has made so far.
    pub fn renewals(&self) -> u64 {
        self.watchdog
            .as_ref()
            .map_or(0, |w| w.renewals.load(Ordering::Relaxed))
    }

    /// Stops the watchdog (waiting for any renewal in flight, so none can follow), then
    /// releases the lock if it still holds this token, handing it to the next waiter if any.
    pub fn release(mut self, conn: &mut Conn) -> Result<Release> {
        let dog_lost = self.stop_watchdog();
        self.release_quorum();
        let released = release_token(conn, &self.keys, &self.token);
        self.record(released.as_ref().ok().copied(), dog_lost);
        released
    }

    /// Runs `commands` as one MULTI/EXEC transaction and releases the lock, in a single round
    /// trip: the release runs whatever the transaction does, as a `finally` would, and the next
    /// waiter gets the lock one round trip sooner than with a write followed by a release.
    ///
    /// Returns EXEC's replies (one per command) and what the release found.
    pub fn release_after(
        mut self,
        conn: &mut Conn,
        commands: &[redis::Cmd],
    ) -> Result<(Vec<redis::Value>, Release)> {
        let dog_lost = self.stop_watchdog();
        let mut release = redis::cmd("EVALSHA");
        release
            .arg(RELEASE.get_hash())
            .arg(4)
            .arg(&self.keys.queue_keys())
            .arg(&self.keys.queue_argv(self.token.as_str(), 0, false));
        // Under Redlock the quorum must be given back before the data-node lock is handed to
        // the next waiter, or that waiter's round finds our keys and fails: there the release
        // cannot ride with the write.
        let piggyback = self.quorum.is_none();
        let outcome =
            conn.transaction::<Vec<redis::Value>>(commands, piggyback.then_some(&release));
        self.release_quorum();
        let released = match &outcome {
            Ok((_, Some(redis::Value::Int(code)))) => release_code(*code),
            // Under Redlock, after a failed transaction, or when the script cache was flushed
            // (a restart, SCRIPT FLUSH) and the release did not run: run it now, loading the
            // script if needed.
            _ => release_token(conn, &self.keys, &self.token)?,
        };
        self.record(Some(released), dog_lost);
        outcome.map(|(values, _)| (values, released))
    }

    /// Feeds the metrics once the release is done: the hold time, and a lost lease if the
    /// watchdog lost it or the release found it gone.
    fn record(&self, released: Option<Release>, dog_lost: bool) {
        let m = metrics::global();
        m.observe_hold(self.held_for());
        if dog_lost || matches!(released, Some(Release::NotOwner | Release::Expired)) {
            m.lease_lost();
        }
    }

    fn release_quorum(&self) {
        if let Some((q, _)) = &self.quorum {
            q.release(&self.keys.lock, self.token.as_str(), self.ttl);
        }
    }

    /// Stops the watchdog and says whether it had lost the lease.
    fn stop_watchdog(&mut self) -> bool {
        match self.watchdog.take() {
            Some(mut w) => {
                w.stop();
                w.lost.load(Ordering::SeqCst)
            }
            None => false,
        }
    }
}

fn release_code(code: i64) -> Release {
    match code {
        1 => Release::Released,
        0 => Release::NotOwner,
        _ => Release::Expired,
    }
}

fn thread_error(target: &Target, what: &str, e: std::io::Error) -> crate::error::Error {
    crate::error::Error::Redis {
        addr: target.addr().to_string(),
        reason: format!("could not start the {what} thread: {e}"),
        code: None,
        indeterminate: false,
    }
}

/// Hands an expired lock to the next waiter on time.
///
/// Waiters block in BLPOP, whose timeout Redis only checks on its clock tick (every 100 ms at
/// the default hz of 10), so a waiter relying on it would notice a dead or late holder's lease
/// ending up to a tick late. Instead, a waiter that expects the lease to end before its next
/// refresh registers the moment here, and this thread, with its own connection, runs the
/// release script with a token nobody holds at that moment: a no-op while the lock is held,
/// and a hand-off to the oldest live waiter (waking it at once) when it is free.
#[derive(Debug)]
struct ExpiryPoker {
    due: mpsc::Sender<Instant>,
}

impl ExpiryPoker {
    fn start(target: &Target, keys: Arc<LockKeys>) -> Result<ExpiryPoker> {
        let mut conn = target.connect()?;
        let (due, rx) = mpsc::channel::<Instant>();
        thread::Builder::new()
            .name("lockctl-expiry".into())
            .spawn(move || {
                let nobody = Token(String::new());
                let mut pending = std::collections::BTreeSet::<Instant>::new();
                loop {
                    let next = match pending.first() {
                        Some(&at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                        None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                    };
                    match next {
                        Ok(at) => {
                            pending.insert(at);
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            let now = Instant::now();
                            // One poke serves every waiter due within the same millisecond.
                            pending.retain(|&at| at > now + Duration::from_millis(1));
                            let _ = release_token(&mut conn, &keys, &nobody);
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .map_err(|e| thread_error(target, "expiry", e))?;
        Ok(ExpiryPoker { due })
    }

    fn poke_at(&self, at: Instant) {
        let _ = self.due.send(at);
    }
}

/// The lease renewer: a thread with its own connection that extends the lease every TTL/3.
///
/// TTL/3 (Redisson's choice) leaves two more renewals' worth of slack before the lease runs
/// out, so one slow or lost renewal does not lose the lock; any renewal that fails or finds
/// another token marks the lease lost at once, and the thread ends.
#[derive(Debug)]
struct Watchdog {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    lost: Arc<AtomicBool>,
    renewals: Arc<AtomicU64>,
}

impl Watchdog {
    fn start(target: &Target, guard: &Guard) -> Result<Watchdog> {
        let period = guard.ttl / 3;
        let mut conn = target.connect()?;
        // A renewal that cannot finish within one period is as good as failed.
        conn.set_call_timeout(period.min(target.options().call_timeout))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let lost = Arc::new(AtomicBool::new(false));
        let renewals = Arc::new(AtomicU64::new(0));
        let (key, token, ttl_ms) = (
            guard.keys.lock.clone(),
            guard.token.clone(),
            guard.ttl.as_millis() as u64,
        );
        let (lost_w, renewals_w) = (lost.clone(), renewals.clone());
        let mut quorum = guard.quorum.clone();
        let ttl = guard.ttl;
        let thread = thread::Builder::new()
            .name("lockctl-watchdog".into())
            .spawn(move || {
                // Any message or a dropped sender means the guard is done with us.
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    let started = Instant::now();
                    let mut renewed = conn
                        .script::<i64>(RENEW.key(&key).arg(token.as_str()).arg(ttl_ms))
                        .unwrap_or(0);
                    // Under Redlock the extension counts only if a majority extends while the
                    // current validity lasts; the new validity runs from before the round.
                    if let Some((q, valid_until)) = &mut quorum {
                        let left = valid_until.saturating_duration_since(started);
                        if q.extend(&key, token.as_str(), ttl, left) {
                            *valid_until = started + ttl - (ttl / 100 + Duration::from_millis(2));
                        } else {
                            renewed = 0;
                        }
                    }
                    if renewed != 1 {
                        lost_w.store(true, Ordering::SeqCst);
                        return;
                    }
                    renewals_w.fetch_add(1, Ordering::Relaxed);
                    metrics::global().renewed();
                }
            })
            .map_err(|e| thread_error(target, "watchdog", e))?;
        Ok(Watchdog {
            stop: Some(stop),
            thread: Some(thread),
            lost,
            renewals,
        })
    }

    fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_hex_chars_and_distinct() {
        let a = Token::random();
        let b = Token::random();
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn lock_keys_follow_the_seed() {
        let k = LockKeys::new("sku_886");
        assert_eq!(k.lock, "dist_lock:sku_886");
        assert_eq!(k.fence, "dist_lock_fence:sku_886");
        for key in [&k.fence, &k.queue, &k.deadlines] {
            assert!(key.ends_with(":sku_886"), "{key}");
        }
        assert_eq!(k.wake_prefix, "dist_lock_wake:sku_886:");
    }
}
