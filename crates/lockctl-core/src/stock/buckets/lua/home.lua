-- The home bucket of a borrowing purchase, checked before anything is taken for it, so that
-- a delivery into it cannot stop half way on a damaged key.
-- KEYS: 1 stock, 2 moves out not finished, 3 moves delivered, 4 units moved out, 5 the
-- bucket's sale, 6 the drained mark. ARGV: 1 the sale's nonce.
-- ARGV: 2 how many buckets there are.
-- Returns {status, units the drained mark holds, {id, '<units> <to>', ...} moves out of the
-- home not finished, its stock}: 'ok', 'drained', 'stale' (another sale's), 'bad' (damaged:
-- why).
local function bad(why) return {'bad', 0, {why}, 0} end
local pending = redis.pcall('HGETALL', KEYS[2])
if pending['err'] then return bad(not_a_hash(KEYS[2])) end
for i = 2, #pending, 2 do
  if not well_formed(pending[i], ARGV[2]) then
    return bad(KEYS[2] .. ' holds a move lockctl did not write')
  end
end
local t = redis.call('TYPE', KEYS[3])['ok']
if t ~= 'none' and t ~= 'hash' then return bad(not_a_hash(KEYS[3])) end
local sale = sale_of(KEYS[5], ARGV[1])
if sale == 'stale' then return {'stale', 0, pending, 0} end
if sale ~= 'ok' then return bad(sale) end
if redis.call('EXISTS', KEYS[1]) == 0 then return bad(KEYS[1] .. ' is missing') end
local why, stock = count_of(KEYS[1])
if why then return bad(why) end
why = count_of(KEYS[4])
if why then return bad(why) end
local mark = redis.pcall('GET', KEYS[6])
if type(mark) == 'table' then return bad(KEYS[6] .. ' is not a string') end
local ours = ARGV[1] .. ':'
if mark and string.sub(mark, 1, #ours) == ours then
  local units = string.sub(mark, #ours + 1)
  if string.match(units, '^%d+$') and string.len(units) <= 15 then
    return {'drained', tonumber(units), pending, stock}
  end
end
return {'ok', 0, pending, stock}
