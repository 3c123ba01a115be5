-- The write of the tutorial's flow (`lock` and `naive`), decided beforehand by a `GET`: deducts
-- `qty` and records the order, all or nothing. A script rather than a `MULTI`, because a
-- `MULTI` does not roll back: a `DECRBY` that fails on a value that is not an integer would
-- leave the ledger and the sold counter incremented. It checks nothing else (not the lock,
-- not the stock): that is the read's job, and what the homework shows failing.
-- KEYS: STOCK, LEDGER, SOLD (the sold counter), BUYERS, EVENTS.
-- ARGV: QTY, ORDER (the order id), USER ('' = none), QUEUE ('1' to append the order to the
--       events stream), FENCE (the fencing token), SKU.
-- Returns the stock left, or {'unseeded'} / {'bad_stock', reason} / {'bad_data',
-- reason} having written nothing.
-- Bound in this order, as `Write` (src/stock/calls.rs, the one Rust code that knows it) passes them:
local STOCK, LEDGER, SOLD, BUYERS, EVENTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local QTY, ORDER, USER, QUEUE, FENCE, SKU = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local raw = redis.pcall('GET', STOCK)
if type(raw) == 'table' then return {'bad_stock', 'a value of the wrong type'} end
if not raw then return {'unseeded'} end
if not is_int(raw) then return {'bad_stock', quoted(raw)} end
local events = nil
if QUEUE == '1' then events = EVENTS end
local why = bad_books(LEDGER, SOLD, BUYERS, ORDER, USER, events)
if why then return {'bad_data', why} end
if events then
  local refused = append_orders(events, SKU, QTY, FENCE, {ORDER}, {USER})
  if refused then return {'bad_data', refused} end
end
local left = redis.call('DECRBY', STOCK, QTY)
redis.call('HINCRBY', LEDGER, ORDER, QTY)
redis.call('INCRBY', SOLD, QTY)
if USER ~= '' then redis.call('HINCRBY', BUYERS, USER, QTY) end
return left
