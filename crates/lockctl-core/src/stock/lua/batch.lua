-- Group commit (`batch`): decides a batch of purchases in arrival order, each exactly as the
-- deduct script decides one without a lock (the same checks in the same order, the same
-- answers: `a_purchase_finds_the_same_answer_in_batch_and_atomic_whatever_its_keys_hold`),
-- then writes what they bought at once. Facts that cannot change while the script
-- runs (the lock's holder, the stock's raw value, the sold counter, the events stream's type)
-- are read once, the orders' ledger fields with one HMGET, each user's total once; the stock,
-- the users' totals and the orders seen so far are carried in Lua from one purchase to the
-- next, so a later purchase of the batch sees what an earlier one bought, and an order id
-- given twice is bought once and replayed once. Every call from a script costs the server's
-- one thread about a microsecond, and a batch of 256 would otherwise make thousands.
-- KEYS: as the deduct script's: STOCK, LEDGER, LOCK, BUYERS, SOLD, EVENTS.
-- ARGV: QTY, LIMIT (the per-user limit), QUEUE ('1' to append bought orders to the events
--       stream), SKU, then each purchase's order id and user ('' = no per-user limit).
-- Returns one answer per purchase, in order, each the deduct script's {status, n, text} in
-- one string, `<code><n>:<text>` (see `BatchCode` in src/stock/calls.rs): a batch's reply is as many strings
-- as purchases, not three times as many values.
-- Bound in this order, as `Batch` (src/stock/calls.rs, the one Rust code that knows it) passes them:
local STOCK, LEDGER, LOCK, BUYERS, SOLD, EVENTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local QTY, LIMIT, QUEUE, SKU = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local qty = tonumber(QTY)
local limit = tonumber(LIMIT)
local events = nil
if QUEUE == '1' then events = EVENTS end
local why_all = nil
if events then
  local t = redis.call('TYPE', events)['ok']
  if t ~= 'none' and t ~= 'stream' then why_all = events .. ' is a ' .. t .. ', not a stream' end
end
local n_sold = redis.pcall('GET', SOLD)
if why_all then
elseif type(n_sold) == 'table' then why_all = SOLD .. ' is not a string'
elseif not is_int(n_sold) then why_all = SOLD .. ' holds ' .. quoted(n_sold) .. ', not an integer'
end
local sold0 = 0
if not why_all then sold0 = tonumber(n_sold or '0') end
local holder = redis.call('GET', LOCK)
local raw = redis.pcall('GET', STOCK)
local stock, refused = nil, nil
if type(raw) == 'table' then refused = 'x0:a value of the wrong type'; raw = ''
elseif not raw then refused = 'u0:'; raw = ''
elseif not is_int(raw) then refused = 'x0:' .. quoted(raw)
else stock = tonumber(raw) end
local orders = {}
for i = 5, #ARGV, 2 do orders[#orders + 1] = ARGV[i] end
local priors = redis.pcall('HMGET', LEDGER, unpack(orders))
local ledger_bad = nil
if priors['err'] then ledger_bad = 'd0:' .. not_a_hash(LEDGER) end
local seen, had, total, b_orders, b_users, had0 = {}, {}, 0, {}, {}, {}
local events_refused, allowance = nil, 0
local function decide(k, order, user)
  local prior = seen[order]
  if prior == nil then
    if ledger_bad then return ledger_bad end
    prior = priors[k]
    if not is_int(prior) then return 'd0:' .. not_int_field(LEDGER) end
  end
  if user ~= '' and had[user] == nil then
    local why, v = hash_int(BUYERS, user)
    if why then return 'd0:' .. why end
    had[user] = tonumber(v or '0')
    had0[user] = had[user]
  end
  if why_all then return 'd0:' .. why_all end
  -- The sold counter as this purchase finds it, after those before it in the batch, held to
  -- the bound is_int holds a read counter to.
  if math.abs(sold0 + total) > 9007199254740991 then
    local now = string.format('%d', sold0 + total)
    return 'd0:' .. SOLD .. ' holds ' .. quoted(now) .. ', not an integer'
  end
  if prior then
    if refused and refused ~= 'u0:' then return refused end
    local now = raw
    if stock then now = string.format('%d', stock) end
    return 'r' .. prior .. ':' .. now
  end
  if holder then return 'y0:' end
  if refused then return refused end
  if user ~= '' and had[user] + qty > limit then return 'l' .. string.format('%d', had[user]) .. ':' end
  if stock < qty then return 's' .. string.format('%d', stock) .. ':' end
  if events_refused then
    if allowance == 0 then return 'd0:' .. events_refused end
    allowance = allowance - 1
  end
  stock = stock - qty
  total = total + qty
  seen[order] = QTY
  if user ~= '' then had[user] = had[user] + qty end
  b_orders[#b_orders + 1] = order
  b_users[#b_users + 1] = user
  return 'b' .. string.format('%d', stock) .. ':'
end
local function decide_all()
  local out = {}
  for k = 1, #orders do
    out[k] = decide(k, orders[k], ARGV[4 + 2 * k])
  end
  return out
end
local out = decide_all()
if total > 0 and events then
  events_refused, allowance = append_orders(events, SKU, qty, '', b_orders, b_users)
  if events_refused then
    -- The stream took the first `allowance` orders and refused the next: decide again as the
    -- deduct script would one purchase at a time. The same first purchases buy (their events
    -- are in), and every later one is refused where it would deduct.
    if stock then stock = tonumber(raw) end
    seen, total, b_orders, b_users = {}, 0, {}, {}
    for u, n in pairs(had0) do had[u] = n end
    out = decide_all()
  end
end
if total > 0 then
  redis.call('DECRBY', STOCK, total)
  local fields, users = {}, {}
  for i, o in ipairs(b_orders) do
    fields[2 * i - 1] = o
    fields[2 * i] = QTY
    local u = b_users[i]
    if u ~= '' then users[u] = (users[u] or 0) + qty end
  end
  redis.call('HSET', LEDGER, unpack(fields))
  redis.call('INCRBY', SOLD, total)
  for u, k in pairs(users) do redis.call('HINCRBY', BUYERS, u, k) end
end
return out
