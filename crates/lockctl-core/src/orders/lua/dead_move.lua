-- Moves one entry to the dead letters and acknowledges it, in one step.
-- KEYS: 1 the events stream, 2 the dead-letter stream. ARGV: 1 the group, 2 the entry's id,
-- 3 the reason. Copies at most 100 of the entry's fields (an entry with more is not an order;
-- `truncated` then says how many it had). Returns the dead letter's id, or
-- `{'wrongtype', type}` having changed nothing when the dead-letter key is not a stream.
local t = redis.call('TYPE', KEYS[2])['ok']
if t ~= 'none' and t ~= 'stream' then return {'wrongtype', t} end
local fields = {'stream_id', ARGV[2], 'reason', ARGV[3]}
local found = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if found[1] then
  local kv = found[1][2]
  for i = 1, math.min(#kv, 200), 2 do
    fields[#fields + 1] = 'entry.' .. kv[i]
    fields[#fields + 1] = kv[i + 1]
  end
  if #kv > 200 then
    fields[#fields + 1] = 'truncated'
    fields[#fields + 1] = tostring(#kv / 2)
  end
end
local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return id
