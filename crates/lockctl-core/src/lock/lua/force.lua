-- The operator's escape hatch: deletes the lock whoever holds it (whatever the key holds), and
-- empties the queue instead of handing the lock on: right after a crash the queue is full of
-- waiters that died within the last second, and a hand-off would give the lock to one of them
-- for a whole TTL. Live waiters queue again on their next refresh (a third of a second). The
-- head list and its listener go too (whatever they hold): a wake there is for nobody now.
-- KEYS: 1-7 as in `prelude.lua` (8, a wake list, unused). ARGV: 5 wake prefix.
-- Returns {the token removed or '', waiters removed, damaged entries removed}.
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
