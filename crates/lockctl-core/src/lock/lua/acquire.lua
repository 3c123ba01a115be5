-- Takes the lock if it is free and nobody is queued ahead; otherwise joins (or refreshes a
-- place in) the queue when asked to. A free lock with live waiters goes to the oldest of them,
-- so nobody overtakes the queue, except a client that knows nothing of it (the tutorial's plain
-- `SET NX PX`), which may; exclusion holds all the same.
-- KEYS: 1-7 as in `prelude.lua`, 8 this waiter's wake list, 9 (optional) the key whose
-- value a grant carries (see `queue.lua`'s `carried`).
-- ARGV: 1 token, 2 TTL ms, 3 '1' to queue or '0' to try once, 4 waiter lease ms, 5 wake prefix.
-- Returns {1, fencing token, server ms now, server ms of the grant (-1: unknown), carried,
-- the next waiter's token or '', '', 0} when the lock is now ours, {0, the lock's PTTL,
-- server ms now, 0, '', '', the waiter to notify or '' (a free lock this call granted to the
-- head of the queue, whose wake list it could not declare), 1 when this waiter is at the head
-- of the queue and now listens on the head list too} when not.
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
