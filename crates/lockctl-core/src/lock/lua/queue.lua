-- Shared by the scripts that can hand the lock over: waiter bookkeeping and the grant.
--
-- Waiters are members `<token>/<ttl ms>` of two sorted sets: the queue, scored by arrival time
-- in microseconds (FIFO order), and the deadlines, scored by the server-clock millisecond after
-- which the waiter counts as gone unless it has refreshed its entry. Every waiter refreshes
-- well inside that time while it waits, so only a dead or departed waiter's entry ever runs
-- out, and `prune` removes those before anyone looks at the head of the queue. Server time is
-- used throughout so clients' clocks do not matter.
--
-- `grant_head` gives a free lock to the oldest live waiter: it sets the lock to that waiter's
-- token with that waiter's TTL, takes the next fencing token, and pushes the grant to the
-- waiter's own wake list (`<wake prefix><token>`), on which it is blocked with BLPOP, as
-- `<fence>:<server ms of the grant>:<next>:<carried>`: the waiter can tell when its lease
-- began; `next` is the token of the waiter now at the head of the queue (or empty), the one
-- its own release will hand to; and `carried` is what the new holder reads first, read for it at the moment of the grant (the
-- stock, for a buyer), so that waking costs no extra round trip. It is `v<value>`, `n` (no
-- such key), `w` (a value of the wrong type) or empty (nothing asked). Nobody who respects the
-- lock can change that key between the grant and the holder's reading of it, so it is what a
-- `GET` after waking would return. The wake list expires with the grant, so a message for a
-- waiter that died is not left behind; a lock granted to a waiter that died after its last
-- refresh expires by its TTL.
--
-- Every key a script touches is declared in KEYS, as Redis-compatible servers that check
-- (Dragonfly, a Valkey cluster's scripts) require. A waiter's wake list is named by its
-- token, which only the queue knows, so the caller declares the wake list of the waiter it
-- expects at the head (HK: the `next` its own grant reported, or its own wake list for a
-- waiter's call). A waiter that finds itself at the head of the queue when it queues (the
-- queue was empty: nobody's grant could name it) says so in the head listener key (HS, its
-- token, for a waiter lease) and blocks on the head list (HL) too; a grant to it whose own list
-- was not declared goes to the head list, as `<token>:<message>`. A grant to a waiter that is
-- neither sets the lock all the same and names that waiter in `NOTIFY`, and the caller pushes
-- its wake message by `notify.lua` in a second call. The hand-off is as safe either way (the lock is granted in
-- the script); a waiter whose message is late finds the lock its own at its next refresh. Every grant also records `<token>:<fence>:<server ms>` in the
-- grant key, for `status`. `release(token)` is the tutorial's compare-and-delete with the hand-off.
-- A member that does not parse as `<token>/<ttl ms>`, or that has no deadline, is not a
-- waiter lockctl wrote: `grant_head` drops it rather than fail on it (one hostile `ZADD`
-- must not lock a SKU out), and `repair` drops every such member at once. The fencing
-- counter is taken first and checked (an `INCR` that fails, or a counter that is not a
-- positive count within 2^53, where Lua's numbers are exact, stops the grant before the lock is set), so a damaged counter
-- never leaves a grant half made.
-- Keys by name (a prelude binds them, `prelude.lua` for the lock's own scripts): LK the
-- lock, FK the fence counter, QK the queue, DK the deadlines, GK the grant key, HK the
-- declared wake list, CARRY the carried key or nil; WP the wake prefix (an argument: it names
-- keys only to compare with HK).
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
