-- Deducts `qty` and records the order, in one atomic step, after checking whatever the caller
-- asked for: the lock, the stock, the per-user limit and a replayed order id.
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
--
-- Each answer reads only what it needs (every call from a script costs the server's one
-- thread a few tenths of a microsecond, and this script is what every buyer waits on; measured
-- by `scripts/bench --only script`): a purchase that does not buy reads the lock, the stock
-- and the ledger's entry for its order id, nothing it would have written; one that buys
-- checks what it writes first, and its ledger entry is written by HSETNX, which is also the
-- check that the order id is new. An order id found in the ledger is answered as the replay
-- it is, whatever else the purchase would have come to.
-- Bound in this order, as `Deduct` (src/stock/calls.rs, the one Rust code that knows it) passes them:
local STOCK, LEDGER, LOCK, BUYERS, SOLD, EVENTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local HOLDER, QTY, ORDER, USER, LIMIT, QUEUE, FENCE, SKU = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
-- The stock as read (`nil` until it is, `false` when the key is missing).
local raw = nil
-- A purchase that buys nothing: `reply`, unless its order id was bought before.
local function unless_replayed(reply)
  local why, prior = hash_int(LEDGER, ORDER)
  if why then return {'bad_data', 0, why} end
  if not prior then return reply end
  if raw == nil then raw = redis.pcall('GET', STOCK) end
  if type(raw) == 'table' then return {'bad_stock', 0, 'a value of the wrong type'} end
  if not is_int(raw) then return {'bad_stock', 0, quoted(raw)} end
  return {'replayed', tonumber(prior), raw or ''}
end
local holder = redis.call('GET', LOCK)
if HOLDER == '' then
  if holder then return unless_replayed({'busy', 0, ''}) end
elseif holder ~= HOLDER then
  return unless_replayed({'lease_lost', 0, ''})
end
raw = redis.pcall('GET', STOCK)
if type(raw) == 'table' then return {'bad_stock', 0, 'a value of the wrong type'} end
if not raw then return unless_replayed({'unseeded', 0, ''}) end
if not is_int(raw) then return {'bad_stock', 0, quoted(raw)} end
local stock = tonumber(raw)
local qty = tonumber(QTY)
if USER ~= '' then
  local why, had = hash_int(BUYERS, USER)
  if why then return {'bad_data', 0, why} end
  had = tonumber(had or '0')
  if had + qty > tonumber(LIMIT) then return unless_replayed({'limit', had, ''}) end
end
if stock < qty then return unless_replayed({'sold_out', stock, ''}) end
-- It buys, unless its order id is in the ledger: what it writes is checked before the first write.
local events = nil
if QUEUE == '1' then events = EVENTS end
local why = sold_or_stream_refused(SOLD, events)
if why then return {'bad_data', 0, why} end
local new = redis.pcall('HSETNX', LEDGER, ORDER, QTY)
if type(new) == 'table' then return {'bad_data', 0, not_a_hash(LEDGER)} end
if new == 0 then return unless_replayed({'bad_data', 0, LEDGER .. ' holds the order and does not'}) end
if events then
  local refused = append_orders(events, SKU, qty, FENCE, {ORDER}, {USER})
  if refused then
    redis.call('HDEL', LEDGER, ORDER)
    return {'bad_data', 0, refused}
  end
end
local left = redis.call('DECRBY', STOCK, qty)
redis.call('INCRBY', SOLD, qty)
if USER ~= '' then redis.call('HINCRBY', BUYERS, USER, qty) end
return {'bought', left, ''}
