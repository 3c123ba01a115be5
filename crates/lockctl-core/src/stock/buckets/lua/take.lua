-- Takes units from a donor bucket, for a purchase at another.
-- KEYS: 1 stock, 2 moves out not finished, 3 units moved out, 4 the bucket's sale nonce,
-- 5 the bucket's lock. ARGV: 1 units needed, 2 the move's id, 3 the destination bucket,
-- 4 the sale's nonce, 5 the token of the lock the taker holds ('' = none), 6 how many
-- buckets there are.
-- Returns {status, units taken, stock left, {id, '<units> <to>', ...} unfinished}:
-- 'took', 'empty' (nothing to take), 'locked' (another holds the lock: a holder may have
-- read the stock and be about to write it), 'stale' (another sale), 'bad' (damaged keys).
-- Takes half of the donor's stock, at least what is needed (all there is, if less).
-- The stock must be an integer by the purchase scripts' rule (`is_int` of `books.lua`:
-- as Redis writes it, within 2^53), so that a donor is never read otherwise than a purchase
-- would read it.
local pending = redis.pcall('HGETALL', KEYS[2])
if pending['err'] then return {'bad', 0, 0, {not_a_hash(KEYS[2])}} end
for i = 2, #pending, 2 do
  if not well_formed(pending[i], ARGV[6]) then
    return {'bad', 0, 0, {KEYS[2] .. ' holds a move lockctl did not write'}}
  end
end
local sale = sale_of(KEYS[4], ARGV[4])
if sale == 'stale' then return {'stale', 0, 0, pending} end
if sale ~= 'ok' then return {'bad', 0, 0, {sale}} end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'bad', 0, 0, {KEYS[1] .. ' is missing'}}
end
local why, stock = count_of(KEYS[1])
if why then return {'bad', 0, 0, {why}} end
why = count_of(KEYS[3])
if why then return {'bad', 0, 0, {why}} end
if stock == 0 then return {'empty', 0, stock, pending} end
local holder = redis.call('GET', KEYS[5])
if holder and holder ~= ARGV[5] then return {'locked', 0, stock, pending} end
local take = math.min(stock, math.max(tonumber(ARGV[1]), math.floor(stock / 2)))
redis.call('DECRBY', KEYS[1], take)
redis.call('HSET', KEYS[2], ARGV[2], string.format('%d %s', take, ARGV[3]))
redis.call('INCRBY', KEYS[3], take)
return {'took', take, stock - take, pending}
