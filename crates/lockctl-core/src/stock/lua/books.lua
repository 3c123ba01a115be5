-- Shared by every stock script: whether the books can take a write. A script is not a transaction
-- either: a write that fails halfway leaves the writes before it in place. So every key a
-- script will write is checked first (right type, integers where it counts), and a script
-- that finds hostile data returns before writing anything.
-- `hash_int(key, field)` reads a hash field that must hold an integer: why not, or nil and
-- its value. `bad_books(ledger, sold, buyers, order id, user, events stream or nil)` returns
-- why not, or
-- nil and what the ledger holds for the order id (read once, for the check and for replays).
-- A key the script will neither read nor write (the per-user totals of a purchase that names
-- no user) is not checked: every call from a script costs about a microsecond of the
-- server's single thread, and the deduction is what every buyer waits on. Integers must be
-- written as Redis writes them and within 2^53, where Lua's numbers are exact.
-- `append_orders(events, sku, qty, fence, orders, users)` appends bought orders to the events
-- stream (when the orders queue is on), in the same script as the deduction and before any other write, and
-- returns why the stream refused one (say its last id is the largest there is), if it did,
-- and how many it took before that. A purchase whose event is refused is `bad_data` with
-- nothing written for it: there is no moment when the stock is gone and the event is not
-- there, and no event without its sale.
local function is_int(v)
  return v == false or v == nil or v == '0'
    or (string.match(v, '^%-?[1-9]%d*$') ~= nil and string.len(v) <= 17
      and math.abs(tonumber(v)) <= 9007199254740991)
end
local function quoted(v)
  if string.len(v) > 40 then v = string.sub(v, 1, 40) .. '...' end
  return "'" .. v .. "'"
end
local function not_a_hash(key)
  return key .. ' is a ' .. redis.call('TYPE', key)['ok'] .. ', not a hash'
end
local function not_int_field(key)
  return key .. ' holds a field that is not an integer'
end
local function hash_int(key, field)
  local v = redis.pcall('HGET', key, field)
  if type(v) == 'table' then return not_a_hash(key) end
  if not is_int(v) then return not_int_field(key) end
  return nil, v
end
local function bad_books(ledger, sold, buyers, order, user, events)
  local why, prior = hash_int(ledger, order)
  if why then return why end
  if user ~= '' then
    why = hash_int(buyers, user)
    if why then return why end
  end
  if events then
    local t = redis.call('TYPE', events)['ok']
    if t ~= 'none' and t ~= 'stream' then return events .. ' is a ' .. t .. ', not a stream' end
  end
  local n = redis.pcall('GET', sold)
  if type(n) == 'table' then return sold .. ' is not a string' end
  if not is_int(n) then return sold .. ' holds ' .. quoted(n) .. ', not an integer' end
  return nil, prior
end
local function append_orders(events, sku, qty, fence, orders, users)
  local t = redis.call('TIME')
  local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  for i, order in ipairs(orders) do
    local id = redis.pcall('XADD', events, '*', 'order_id', order, 'sku', sku, 'qty', qty,
      'user', users[i], 'fence', fence, 'at', at)
    if type(id) == 'table' then
      return events .. ' refused the order: ' .. tostring(id['err']), i - 1
    end
  end
  return nil, #orders
end
