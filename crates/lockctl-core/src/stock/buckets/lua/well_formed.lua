-- Whether a record of a move, `'<units> <to>'`, is one lockctl writes: units a positive
-- integer Lua holds exactly, `to` one of the `k` buckets. Checked before a script writes
-- anything, so a damaged record never stops a move that has taken units.
-- `sale_of(key, nonce)`: 'ok' when the bucket's sale key holds this sale's id, 'stale' when
-- another (or none), or why it is damaged. `count_of(key)`: why a stock or moved-out count is
-- damaged (not an integer as Redis writes one, or below zero: a bucket's books never go
-- below zero but by an oversale), or nil and its value.
local function well_formed(v, k)
  local units, to = string.match(v, '^([1-9]%d*) (%d+)$')
  return units ~= nil and string.len(units) <= 15 and string.len(to) <= 3
    and tonumber(to) < tonumber(k)
end
local function sale_of(key, nonce)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return key .. ' is not a string' end
  if v ~= nonce then return 'stale' end
  return 'ok'
end
local function count_of(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then return key .. ' is not a string' end
  if not is_int(v) then return key .. ' holds ' .. quoted(v) .. ', not an integer' end
  local n = tonumber(v or '0')
  if n < 0 then return key .. ' holds ' .. v .. ', below zero' end
  return nil, n
end
