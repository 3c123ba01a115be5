-- Trims the stream `KEYS[1]` to what its consumer groups still need, in one atomic step:
-- for each group the bound is its oldest pending entry or, with nothing pending, its last
-- delivered one, and every entry older than the smallest bound goes. Being one script, no
-- worker can read a batch between the reading of the bounds and the trim (a batch read
-- there would be trimmed while still pending: paid orders lost). Returns the MINID it
-- trimmed to, or false when the stream or its groups do not exist.
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return false end
local function less(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local floor = nil
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local f = {}
  for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
  local bound = f['last-delivered-id']
  local pending = redis.call('XPENDING', KEYS[1], f['name'])
  if pending[2] then bound = pending[2] end
  if floor == nil or less(bound, floor) then floor = bound end
end
if floor == nil then return false end
redis.call('XTRIM', KEYS[1], 'MINID', floor)
return floor
