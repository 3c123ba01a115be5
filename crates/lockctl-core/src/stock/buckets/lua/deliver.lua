-- Delivers a move into its destination, once.
-- KEYS: 1 stock, 2 moves delivered (id -> units), 3 the bucket's sale nonce.
-- ARGV: 1 the move's id, 2 units, 3 the sale's nonce.
-- Returns 'done', 'again' (delivered before), 'stale' (the bucket is another sale's now: the
-- units belonged to a sale that is over) or 'bad: <why>'.
local sale = sale_of(KEYS[3], ARGV[3])
if sale ~= 'ok' and sale ~= 'stale' then return 'bad: ' .. sale end
if sale == 'stale' then return 'stale' end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 'again' end
local raw = redis.pcall('GET', KEYS[1])
if type(raw) ~= 'string' or not is_int(raw) then
  return 'bad: ' .. KEYS[1] .. ' is not a stock counter'
end
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 'done'
