//! The lock's Lua scripts, each with what it takes and what it returns.
//!
//! Every script that can hand the lock over shares [`QUEUE_LUA`]'s bookkeeping of waiters, so
//! a release, a forced unlock and an acquire that finds the lock free all grant it the same way.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

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
pub(super) const QUEUE_LUA: &str = r"
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
pub(super) const ACQUIRE_LUA: &str = r"
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
pub(super) const LEAVE_LUA: &str = r"
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
pub(super) const RELEASE_LUA: &str = r"
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
pub(super) const FORCE_LUA: &str = r"
local holder = redis.call('GET', KEYS[1])
if not holder then return false end
redis.call('DEL', KEYS[1])
grant_head(now_ms())
return holder
";

/// Extends the lease only if the lock still holds this token.
/// KEYS: 1 lock. ARGV: 1 token, 2 TTL in ms. Returns 1 renewed, 0 not the owner any more.
pub(super) const RENEW_LUA: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Counts the live waiters (those whose deadline has not passed on the server's clock).
/// KEYS: 4 deadlines (1-3 unused, passed so every key is declared). Returns the count.
pub(super) const WAITERS_LUA: &str = r"
return redis.call('ZCOUNT', KEYS[4], '(' .. now_ms(), '+inf')
";

fn with_queue(body: &str) -> Script {
    Script::new(&format!("{QUEUE_LUA}{body}"))
}

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| with_queue(ACQUIRE_LUA));
pub(super) static LEAVE: LazyLock<Script> = LazyLock::new(|| with_queue(LEAVE_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| with_queue(RELEASE_LUA));
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
pub(super) static WAITERS: LazyLock<Script> = LazyLock::new(|| with_queue(WAITERS_LUA));
pub(super) static FORCE: LazyLock<Script> = LazyLock::new(|| with_queue(FORCE_LUA));

/// How long a waiter's place lasts without a refresh, on the server's clock. A waiter that dies
/// leaves the queue at most this long after its last refresh.
pub const WAITER_LEASE: Duration = Duration::from_millis(1000);

/// How long a waiter blocks before refreshing its place: a third of the lease, so two refreshes
/// can be late before the place is lost.
pub(super) const WAITER_REFRESH: Duration = Duration::from_millis(333);
