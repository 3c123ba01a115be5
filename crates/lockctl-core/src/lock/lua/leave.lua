-- Leaves the queue for good. If the lock was granted to us just before, it is ours.
-- KEYS as `acquire.lua`'s. ARGV: 1 token, 2 TTL ms, 5 wake prefix.
-- Returns {1, fencing token, server ms now, server ms of the grant, carried, next, '', 0}
-- when the lock is ours after all, {0, 0, server ms now, 0, '', '', '', 0} when we left
-- without it.
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
