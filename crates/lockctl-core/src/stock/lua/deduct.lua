-- Deducts `qty` and records the order, in one atomic step, after checking whatever the caller
-- asked for: a replayed order id, the lock, the per-user limit and the stock.
-- KEYS: STOCK, LEDGER, LOCK, BUYERS (user -> units), SOLD (the sold counter), EVENTS.
-- ARGV: HOLDER (the holder's token; '' = we hold no lock: yield while anyone does), QTY,
--       ORDER (the order id), USER ('' = no per-user limit), LIMIT (the per-user limit),
--       QUEUE ('1' to append the order to the events stream), FENCE (the fencing token, ''
--       without a lock), SKU.
-- Returns {status, n, text}:
--   {'bought', stock left, ''}         {'replayed', units of the original order, stock now}
--   {'sold_out', stock, ''}            {'limit', units this user already has, ''}
--   {'busy', 0, ''}                    {'lease_lost', 0, ''}
--   {'unseeded', 0, ''}                {'bad_stock', 0, what the key holds}
--   {'bad_data', 0, which key holds what}
-- The raw stock must be an integer written as Redis writes one (no '+', no leading zeros, no
-- '-0'), because Lua's `tonumber` accepts '1e3', ' 7' and '+5' while DECRBY refuses them,
-- and `nil`/`false` would otherwise read as "sold out".
-- Bound in this order, as `Deduct` (src/stock/calls.rs, the one Rust code that knows it) passes them:
local STOCK, LEDGER, LOCK, BUYERS, SOLD, EVENTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local HOLDER, QTY, ORDER, USER, LIMIT, QUEUE, FENCE, SKU = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local events = nil
if QUEUE == '1' then events = EVENTS end
local why, prior = bad_books(LEDGER, SOLD, BUYERS, ORDER, USER, events)
if why then return {'bad_data', 0, why} end
if prior then
  local now = redis.pcall('GET', STOCK)
  if type(now) == 'table' then return {'bad_stock', 0, 'a value of the wrong type'} end
  if not is_int(now) then return {'bad_stock', 0, quoted(now)} end
  return {'replayed', tonumber(prior), now or ''}
end
local holder = redis.call('GET', LOCK)
if HOLDER == '' then
  if holder then return {'busy', 0, ''} end
elseif holder ~= HOLDER then
  return {'lease_lost', 0, ''}
end
local raw = redis.pcall('GET', STOCK)
if type(raw) == 'table' then return {'bad_stock', 0, 'a value of the wrong type'} end
if not raw then return {'unseeded', 0, ''} end
if not is_int(raw) then return {'bad_stock', 0, quoted(raw)} end
local stock = tonumber(raw)
local qty = tonumber(QTY)
if USER ~= '' then
  local had = tonumber(redis.call('HGET', BUYERS, USER) or '0')
  if had + qty > tonumber(LIMIT) then return {'limit', had, ''} end
end
if stock < qty then return {'sold_out', stock, ''} end
if events then
  local refused = append_orders(events, SKU, qty, FENCE, {ORDER}, {USER})
  if refused then return {'bad_data', 0, refused} end
end
local left = redis.call('DECRBY', STOCK, qty)
redis.call('HSET', LEDGER, ORDER, qty)
redis.call('INCRBY', SOLD, qty)
if USER ~= '' then redis.call('HINCRBY', BUYERS, USER, qty) end
return {'bought', left, ''}
