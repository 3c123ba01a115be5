-- What `status` reports on the queue, read only: {live waiters, entries that are not
-- lockctl's (a damaged queue)}. KEYS: 1-7 as in `prelude.lua`.
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
