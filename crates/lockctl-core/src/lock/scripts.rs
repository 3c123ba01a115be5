//! The lock's Lua scripts, each with what it takes and what it returns.
//!
//! Every script that can hand the lock over shares [`QUEUE_LUA`]'s bookkeeping of waiters, so
//! a release, a forced unlock and an acquire that finds the lock free all grant it the same way.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

/// The caller's own command, run only while the lock holds the caller's token: the check and
/// the write are one script, so no pause of the caller between them can let a write land
/// after its lease ran out (which a check on the caller's side cannot promise).
///
/// KEYS[1] the lock; ARGV[1] the holder's token, ARGV[2..] the command and its arguments.
/// Returns `{1, reply}` (just `{1}` for a nil reply) after running the command, or `{0}`
/// without running it when the lock holds another token or none.
const FENCED_WRITE_LUA: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
return {1, redis.call(unpack(ARGV, 2))}
";

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
/// token with that waiter's TTL, takes the next fencing token, and pushes the grant to the
/// waiter's own wake list (`<wake prefix><token>`), on which it is blocked with BLPOP, as
/// `<fence>:<server ms of the grant>:<next>:<carried>`: the waiter can tell when its lease
/// began; `next` is the token of the waiter now at the head of the queue (or empty), the one
/// its own release will hand to; and `carried` is what the new holder reads first, read for it at the moment of the grant (the
/// stock, for a buyer), so that waking costs no extra round trip. It is `v<value>`, `n` (no
/// such key), `w` (a value of the wrong type) or empty (nothing asked). Nobody who respects the
/// lock can change that key between the grant and the holder's reading of it, so it is what a
/// `GET` after waking would return. The wake list expires with the grant, so a message for a
/// waiter that died is not left behind; a lock granted to a waiter that died after its last
/// refresh expires by its TTL.
///
/// Every key a script touches is declared in KEYS, as Redis-compatible servers that check
/// (Dragonfly, a Valkey cluster's scripts) require. A waiter's wake list is named by its
/// token, which only the queue knows, so the caller declares the wake list of the waiter it
/// expects at the head (HK: the `next` its own grant reported, or its own wake list for a
/// waiter's call). A waiter that finds itself at the head of the queue when it queues (the
/// queue was empty: nobody's grant could name it) says so in the head listener key (HS, its
/// token, for a waiter lease) and blocks on the head list (HL) too; a grant to it whose own list
/// was not declared goes to the head list, as `<token>:<message>`. A grant to a waiter that is
/// neither sets the lock all the same and names that waiter in `NOTIFY`, and the caller pushes
/// its wake message by [`NOTIFY_LUA`] in a second call. The hand-off is as safe either way (the lock is granted in
/// the script); a waiter whose message is late finds the lock its own at its next refresh. Every grant also records `<token>:<fence>:<server ms>` in the
/// grant key, for `status`. `release(token)` is the tutorial's compare-and-delete with the hand-off.
/// A member that does not parse as `<token>/<ttl ms>`, or that has no deadline, is not a
/// waiter lockctl wrote: `grant_head` drops it rather than fail on it (one hostile `ZADD`
/// must not lock a SKU out), and `repair` drops every such member at once. The fencing
/// counter is taken first and checked (an `INCR` that fails, or a counter that is not a
/// positive count within 2^53, where Lua's numbers are exact, stops the grant before the lock is set), so a damaged counter
/// never leaves a grant half made.
/// Keys by name (a prelude binds them, [`LOCK_PRELUDE`] for the lock's own scripts): LK the
/// lock, FK the fence counter, QK the queue, DK the deadlines, GK the grant key, HK the
/// declared wake list, CARRY the carried key or nil; WP the wake prefix (an argument: it names
/// keys only to compare with HK).
pub(crate) const QUEUE_LUA: &str = r"
local CARRY = nil
local NOTIFY = ''
local function carried()
  if not CARRY then return '' end
  local v = redis.pcall('GET', CARRY)
  if type(v) == 'table' then return 'w' end
  if not v then return 'n' end
  return 'v' .. v
end
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function now_ms()
  return math.floor(now_us() / 1000)
end
local function parse(member)
  local token, ttl = string.match(member, '^(%w+)/([1-9]%d*)$')
  if token and string.len(ttl) <= 12 then return token, ttl end
  return nil
end
local function drop(m)
  redis.call('ZREM', QK, m)
  redis.call('ZREM', DK, m)
end
local function head_token()
  local head = redis.call('ZRANGE', QK, 0, 0)[1]
  if not head then return '' end
  return parse(head) or ''
end
local function prune(now)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', DK, '-inf', now)) do drop(m) end
end
local function next_fence()
  local f = redis.pcall('INCR', FK)
  if type(f) == 'table' or f < 1 or f > 9007199254740991 then
    error({err = 'ERR ' .. FK .. ' is damaged (not a fencing counter): set it to a number ' ..
      'above every fence handed out, e.g. the current Unix time in ms'})
  end
  return f
end
local function grant_head(now)
  prune(now)
  for _ = 1, 1000 do
    local head = redis.call('ZRANGE', QK, 0, 0)[1]
    if not head then return false end
    local token, ttl = parse(head)
    if token and redis.call('ZSCORE', DK, head) then
      local fence = next_fence()
      redis.call('SET', LK, token, 'PX', ttl)
      redis.call('SET', GK, token .. ':' .. fence .. ':' .. now)
      redis.call('ZREM', QK, head)
      redis.call('ZREM', DK, head)
      local message = fence .. ':' .. now .. ':' .. head_token() .. ':' .. carried()
      -- pcall: a listener key of another type (hostile data) is nobody listening.
      local listening = redis.pcall('GET', HS) == token
      if listening then redis.call('DEL', HS) end
      if WP .. token == HK then
        redis.call('RPUSH', HK, message)
        redis.call('PEXPIRE', HK, ttl)
      elseif listening then
        redis.call('DEL', HL)
        redis.call('RPUSH', HL, token .. ':' .. message)
        redis.call('PEXPIRE', HL, ttl)
      else
        NOTIFY = token
      end
      return token
    end
    drop(head)
  end
  return false
end
local function names(h, me)
  return type(h) == 'string' and string.sub(h, 1, #me + 1) == me .. ':'
end
local function claim(wake, me)
  local payload = redis.call('LPOP', wake)
  redis.call('DEL', wake)
  -- A head-list message naming us goes too, whichever list told us (a second copy may have
  -- come by NOTIFY): none may outlive the grant it reports.
  local h = redis.pcall('LINDEX', HL, 0)
  if names(h, me) then
    payload = payload or string.sub(h, #me + 2)
    redis.call('DEL', HL)
  end
  if payload then
    local fence, at, nxt = string.match(payload, '^(%d+):(%d+):(%w*):')
    if fence then return tonumber(fence), tonumber(at), nxt end
  end
  return tonumber(redis.call('GET', FK)), -1, head_token()
end
local function release(token)
  local holder = redis.call('GET', LK)
  if holder == token then
    if not grant_head(now_ms()) then redis.call('DEL', LK, GK) end
    return 1
  end
  if holder then return 0 end
  grant_head(now_ms())
  return -1
end
local function repair()
  local dropped = 0
  for _, key in ipairs({QK, DK}) do
    local t = redis.call('TYPE', key)['ok']
    if t ~= 'none' and t ~= 'zset' then
      redis.call('DEL', key)
      dropped = dropped + 1
    end
  end
  for _, m in ipairs(redis.call('ZRANGE', QK, 0, -1)) do
    if not parse(m) or not redis.call('ZSCORE', DK, m) then
      drop(m)
      dropped = dropped + 1
    end
  end
  for _, m in ipairs(redis.call('ZRANGE', DK, 0, -1)) do
    if not parse(m) then
      drop(m)
      dropped = dropped + 1
    end
  end
  return dropped
end
";

/// Takes the lock if it is free and nobody is queued ahead; otherwise joins (or refreshes a
/// place in) the queue when asked to. A free lock with live waiters goes to the oldest of them,
/// so nobody overtakes the queue, except a client that knows nothing of it (the tutorial's plain
/// `SET NX PX`), which may; exclusion holds all the same.
/// KEYS: 1-7 as in [`LOCK_PRELUDE`], 8 this waiter's wake list, 9 (optional) the key whose
/// value a grant carries (see [`QUEUE_LUA`]'s `carried`).
/// ARGV: 1 token, 2 TTL ms, 3 '1' to queue or '0' to try once, 4 waiter lease ms, 5 wake prefix.
/// Returns {1, fencing token, server ms now, server ms of the grant (-1: unknown), carried,
/// the next waiter's token or '', '', 0} when the lock is now ours, {0, the lock's PTTL,
/// server ms now, 0, '', '', the waiter to notify or '' (a free lock this call granted to the
/// head of the queue, whose wake list it could not declare), 1 when this waiter is at the head
/// of the queue and now listens on the head list too} when not.
pub(super) const ACQUIRE_LUA: &str = r"
local arrival = now_us()
local now = math.floor(arrival / 1000)
local me = ARGV[1] .. '/' .. ARGV[2]
local holder = redis.call('GET', LK)
if holder == ARGV[1] then
  local fence, at, nxt = claim(HK, ARGV[1])
  return {1, fence, now, at, carried(), nxt, '', 0}
end
if not holder then
  local granted = grant_head(now)
  if granted == ARGV[1] then
    local fence, at, nxt = claim(HK, ARGV[1])
    return {1, fence, now, at, carried(), nxt, '', 0}
  end
  if not granted then
    local fence = next_fence()
    redis.call('SET', LK, ARGV[1], 'PX', ARGV[2])
    redis.call('SET', GK, ARGV[1] .. ':' .. fence .. ':' .. now)
    return {1, fence, now, now, carried(), '', '', 0}
  end
end
local at_head = 0
if ARGV[3] == '1' then
  redis.call('ZADD', QK, 'NX', arrival, me)
  redis.call('ZADD', DK, now + tonumber(ARGV[4]), me)
  if redis.call('ZRANK', QK, me) == 0 then
    redis.call('SET', HS, ARGV[1], 'PX', ARGV[4])
    at_head = 1
  end
end
return {0, redis.call('PTTL', LK), now, 0, '', '', NOTIFY, at_head}
";

/// Leaves the queue for good. If the lock was granted to us just before, it is ours.
/// KEYS as [`ACQUIRE_LUA`]'s. ARGV: 1 token, 2 TTL ms, 5 wake prefix.
/// Returns {1, fencing token, server ms now, server ms of the grant, carried, next, '', 0}
/// when the lock is ours after all, {0, 0, server ms now, 0, '', '', '', 0} when we left
/// without it.
pub(super) const LEAVE_LUA: &str = r"
local me = ARGV[1] .. '/' .. ARGV[2]
redis.call('ZREM', QK, me)
redis.call('ZREM', DK, me)
if redis.call('GET', HS) == ARGV[1] then redis.call('DEL', HS) end
if redis.call('GET', LK) == ARGV[1] then
  local fence, at, nxt = claim(HK, ARGV[1])
  return {1, fence, now_ms(), at, carried(), nxt, '', 0}
end
redis.call('DEL', HK)
return {0, 0, now_ms(), 0, '', '', '', 0}
";

/// Releases the lock if it still holds this token (the tutorial's compare-and-delete), handing it
/// to the oldest live waiter instead of deleting it when anyone waits. A release that finds the
/// lock gone also hands it over, so waiters need not wait for their next timeout.
/// KEYS: 1-7 as in [`LOCK_PRELUDE`], 8 the wake list of the waiter expected at the head, 9
/// (optional) the key whose value the hand-off carries to the next holder. ARGV: 1 token, 5
/// wake prefix.
/// Returns {1 released, 0 held by another token, -1 no lock at all (the lease ran out); the
/// waiter to notify or ''}.
pub(super) const RELEASE_LUA: &str = r"
local code = release(ARGV[1])
return {code, NOTIFY}
";

/// Wakes the waiter a grant went to when the script that made it could not declare its wake
/// list: pushes the grant's message (as `grant_head` would have) if the lock still holds that
/// waiter's token, the grant key records that grant, and nothing waits in the list yet.
/// KEYS as [`RELEASE_LUA`]'s, 8 being that waiter's wake list. ARGV: 1 its token.
/// Returns 1 pushed, 0 not needed any more (the waiter claimed it, or the lock moved on).
pub(super) const NOTIFY_LUA: &str = r"
local token = ARGV[1]
if token == '' or redis.call('GET', LK) ~= token then return 0 end
if names(redis.pcall('LINDEX', HL, 0), token) then return 0 end
local g = redis.call('GET', GK)
if type(g) ~= 'string' or string.sub(g, 1, #token + 1) ~= token .. ':' then return 0 end
local fence, at = string.match(string.sub(g, #token + 2), '^(%d+):(%d+)$')
if not fence or redis.call('EXISTS', HK) == 1 then return 0 end
redis.call('RPUSH', HK, fence .. ':' .. at .. ':' .. head_token() .. ':' .. carried())
redis.call('PEXPIRE', HK, math.max(redis.call('PTTL', LK), 1))
return 1
";

/// The operator's escape hatch: deletes the lock whoever holds it (whatever the key holds), and
/// empties the queue instead of handing the lock on: right after a crash the queue is full of
/// waiters that died within the last second, and a hand-off would give the lock to one of them
/// for a whole TTL. Live waiters queue again on their next refresh (a third of a second). The
/// head list and its listener go too (whatever they hold): a wake there is for nobody now.
/// KEYS: 1-7 as in [`LOCK_PRELUDE`] (8, a wake list, unused). ARGV: 5 wake prefix.
/// Returns {the token removed or '', waiters removed, damaged entries removed}.
pub(super) const FORCE_LUA: &str = r"
local damaged = repair()
local holder = ''
local t = redis.call('TYPE', LK)['ok']
if t == 'string' then
  holder = redis.call('GET', LK)
elseif t ~= 'none' then
  holder = 'a ' .. t .. ' (not a lock)'
end
redis.call('DEL', LK, HL, HS)
local waiters = redis.call('ZRANGE', QK, 0, -1)
for _, m in ipairs(waiters) do drop(m) end
return {holder, #waiters, damaged}
";

/// What `status` reports on the queue, read only: {live waiters, entries that are not
/// lockctl's (a damaged queue)}. KEYS: 1-7 as in [`LOCK_PRELUDE`].
pub(super) const HEALTH_LUA: &str = r"
local damaged = 0
for _, key in ipairs({QK, DK}) do
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= 'zset' then return {0, -1} end
end
local now = now_ms()
local live = 0
for _, m in ipairs(redis.call('ZRANGE', QK, 0, -1)) do
  local deadline = redis.call('ZSCORE', DK, m)
  if not parse(m) or not deadline then
    damaged = damaged + 1
  elseif tonumber(deadline) > now then
    live = live + 1
  end
end
for _, m in ipairs(redis.call('ZRANGE', DK, 0, -1)) do
  if not parse(m) then damaged = damaged + 1 end
end
return {live, damaged}
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
/// KEYS: 4 deadlines (the others unused, passed as to every queue script). Returns the count.
pub(super) const WAITERS_LUA: &str = r"
return redis.call('ZCOUNT', DK, '(' .. now_ms(), '+inf')
";

/// Names the queue's keys for [`QUEUE_LUA`] in the lock's own scripts: KEYS 1-9 (1 the lock,
/// 2 the fencing counter, 3 the queue, 4 the deadlines, 5 the grant key, 6 the head list, 7 the
/// head listener, 8 the declared wake list, 9 the carried key if any) and ARGV 5 (the wake
/// prefix). A script that takes other keys first (the fenced deduction) names them its own way.
pub(crate) const LOCK_PRELUDE: &str = r"
local LK, FK, QK, DK, GK = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local HL, HS, HK = KEYS[6], KEYS[7], KEYS[8]
local WP = ARGV[5]
";

/// A script of another module's that ends by releasing the lock, as one step with its own work
/// (the write and the hand-off travel together): its own `n_keys` keys come first, then the
/// lock's nine as in [`LOCK_PRELUDE`] (the carried key always: the lock key stands in for
/// none); its own `n_args` arguments, then the holder's token ('' to leave the lock held: under
/// Redlock the quorum is given back first) and the wake prefix. `body` is the script's own
/// work, ending in a `return`; the whole returns `{body's reply, release code, the waiter to
/// notify or ''}`, the code as [`RELEASE_LUA`]'s, 2 when not asked to release, -2 when the
/// release failed (a damaged fencing counter; the lock then stays with the holder, whose own
/// release reports why). The body's effects stand whatever the release does.
pub(crate) fn releasing(body: &str, preamble: &str, n_keys: usize, n_args: usize) -> String {
    let k = |i: usize| format!("KEYS[{}]", n_keys + i);
    let a = |i: usize| format!("ARGV[{}]", n_args + i);
    format!(
        "local LK, FK, QK, DK, GK = {}, {}, {}, {}, {}\n\
         local HL, HS, HK, CK = {}, {}, {}, {}\n\
         local TOKEN, WP = {}, {}\n\
         {QUEUE_LUA}{preamble}\nlocal function work()\n{body}\nend\n{RELEASE_TAIL}",
        k(1),
        k(2),
        k(3),
        k(4),
        k(5),
        k(6),
        k(7),
        k(8),
        k(9),
        a(1),
        a(2),
    )
}

/// The end of a [`releasing`] script.
const RELEASE_TAIL: &str = r"
local r = work()
if TOKEN == '' then return {r, 2, ''} end
CARRY = CK
local ok, code = pcall(release, TOKEN)
if not ok then code = -2 end
return {r, code, NOTIFY}
";

/// A lock script: the prelude, the queue's functions, the carried key bound (KEYS[9], if
/// given), then `body`.
fn with_queue(body: &str) -> Script {
    Script::new(&format!("{LOCK_PRELUDE}{QUEUE_LUA}CARRY = KEYS[9]\n{body}"))
}

pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| with_queue(ACQUIRE_LUA));
pub(super) static LEAVE: LazyLock<Script> = LazyLock::new(|| with_queue(LEAVE_LUA));
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| with_queue(RELEASE_LUA));
pub(super) static NOTIFY: LazyLock<Script> = LazyLock::new(|| with_queue(NOTIFY_LUA));
pub(super) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
pub(super) static FENCED_WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(FENCED_WRITE_LUA));
pub(super) static WAITERS: LazyLock<Script> = LazyLock::new(|| with_queue(WAITERS_LUA));
pub(super) static FORCE: LazyLock<Script> = LazyLock::new(|| with_queue(FORCE_LUA));
pub(super) static HEALTH: LazyLock<Script> = LazyLock::new(|| with_queue(HEALTH_LUA));

/// How long a waiter's place lasts without a refresh, on the server's clock. A waiter that dies
/// leaves the queue at most this long after its last refresh.
pub const WAITER_LEASE: Duration = Duration::from_millis(1000);

/// How long a waiter blocks before refreshing its place: a third of the lease, so two refreshes
/// can be late before the place is lost.
pub(super) const WAITER_REFRESH: Duration = Duration::from_millis(333);
