-- Puts one dead letter's order back on the queue and deletes the dead letter, in one step.
-- KEYS: 1 the dead-letter stream, 2 the events stream. ARGV: 1 the dead letter's id.
-- The entry keeps its fields and gains `requeued_from`, the id of the entry the deduction
-- first appended (kept across requeues), which is what PostgreSQL stores. A dead letter
-- written before lockctl kept the entry has none of its fields: its entry is looked up in
-- the events stream, where it may still be. Returns the new entry's id, `'gone'` when the
-- dead letter is no longer there (already requeued), or `'no_entry'` when neither it nor the
-- stream has the entry, or it names no id of its deduction (not a dead letter lockctl wrote).
local d = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if not d[1] then return 'gone' end
local kv = d[1][2]
local fields, origin, first = {}, nil, nil
for i = 1, #kv, 2 do
  local name = kv[i]
  if name == 'stream_id' then origin = kv[i + 1] end
  if string.sub(name, 1, 6) == 'entry.' then
    local f = string.sub(name, 7)
    if f == 'requeued_from' then first = kv[i + 1]
    else
      fields[#fields + 1] = f
      fields[#fields + 1] = kv[i + 1]
    end
  end
end
if #fields == 0 and origin then
  local e = redis.call('XRANGE', KEYS[2], origin, origin)
  if e[1] then
    local ekv = e[1][2]
    for i = 1, #ekv, 2 do
      if ekv[i] == 'requeued_from' then first = ekv[i + 1]
      else
        fields[#fields + 1] = ekv[i]
        fields[#fields + 1] = ekv[i + 1]
      end
    end
  end
end
if #fields == 0 or not (first or origin) then return 'no_entry' end
fields[#fields + 1] = 'requeued_from'
fields[#fields + 1] = first or origin
local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
