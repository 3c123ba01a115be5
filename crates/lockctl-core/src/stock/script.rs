//! The one script every script-based deduction runs (fenced, atomic, and the batches of
//! group commit), so each decides a purchase the same way.

use std::sync::LazyLock;

use redis::Script;

use crate::lock::releasing;

/// Shared by every stock script: whether the books can take a write. A script is not a transaction
/// either: a write that fails halfway leaves the writes before it in place. So every key a
/// script will write is checked first (right type, integers where it counts), and a script
/// that finds hostile data returns before writing anything.
/// `hash_int(key, field)` reads a hash field that must hold an integer: why not, or nil and
/// its value. `bad_books(ledger, sold, buyers, order id, user, events stream or nil)` returns
/// why not, or
/// nil and what the ledger holds for the order id (read once, for the check and for replays).
/// A key the script will neither read nor write (the per-user totals of a purchase that names
/// no user) is not checked: every call from a script costs about a microsecond of the
/// server's single thread, and the deduction is what every buyer waits on. Integers must be
/// written as Redis writes them and within 2^53, where Lua's numbers are exact.
/// `append_orders(events, sku, qty, fence, orders, users)` appends bought orders to the events
/// stream (`--queue`), in the same script as the deduction and before any other write, and
/// returns why the stream refused one (say its last id is the largest there is), if it did,
/// and how many it took before that. A purchase whose event is refused is `bad_data` with
/// nothing written for it: there is no moment when the stock is gone and the event is not
/// there, and no event without its sale.
pub(crate) const BOOKS_LUA: &str = r#"
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
"#;

/// Deducts `qty` and records the order, in one atomic step, after checking whatever the caller
/// asked for: a replayed order id, the lock, the per-user limit and the stock.
/// KEYS: 1 stock, 2 ledger, 3 lock, 4 buyers (user -> units), 5 sold counter, 6 events.
/// ARGV: 1 token ('' = we hold no lock: yield while anyone does), 2 qty, 3 order id,
///       4 user ('' = no per-user limit), 5 the limit, 6 '1' to append the order to the events
///       stream, 7 the fencing token ('' without a lock), 8 the SKU.
/// Returns {status, n, text}:
///   {'bought', stock left, ''}         {'replayed', units of the original order, stock now}
///   {'sold_out', stock, ''}            {'limit', units this user already has, ''}
///   {'busy', 0, ''}                    {'lease_lost', 0, ''}
///   {'unseeded', 0, ''}                {'bad_stock', 0, what the key holds}
///   {'bad_data', 0, which key holds what}
/// The raw stock must be an integer written as Redis writes one (no '+', no leading zeros, no
/// '-0'), because Lua's `tonumber` accepts '1e3', ' 7' and '+5' while DECRBY refuses them,
/// and `nil`/`false` would otherwise read as "sold out".
const DEDUCT_BODY: &str = r"
local events = nil
if ARGV[6] == '1' then events = KEYS[6] end
local why, prior = bad_books(KEYS[2], KEYS[5], KEYS[4], ARGV[3], ARGV[4], events)
if why then return {'bad_data', 0, why} end
if prior then
  local now = redis.pcall('GET', KEYS[1])
  if type(now) == 'table' then return {'bad_stock', 0, 'a value of the wrong type'} end
  if not is_int(now) then return {'bad_stock', 0, quoted(now)} end
  return {'replayed', tonumber(prior), now or ''}
end
local holder = redis.call('GET', KEYS[3])
if ARGV[1] == '' then
  if holder then return {'busy', 0, ''} end
elseif holder ~= ARGV[1] then
  return {'lease_lost', 0, ''}
end
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then return {'bad_stock', 0, 'a value of the wrong type'} end
if not raw then return {'unseeded', 0, ''} end
if not is_int(raw) then return {'bad_stock', 0, quoted(raw)} end
local stock = tonumber(raw)
local qty = tonumber(ARGV[2])
if ARGV[4] ~= '' then
  local had = tonumber(redis.call('HGET', KEYS[4], ARGV[4]) or '0')
  if had + qty > tonumber(ARGV[5]) then return {'limit', had, ''} end
end
if stock < qty then return {'sold_out', stock, ''} end
if events then
  local refused = append_orders(events, ARGV[8], qty, ARGV[7], {ARGV[3]}, {ARGV[4]})
  if refused then return {'bad_data', 0, refused} end
end
local left = redis.call('DECRBY', KEYS[1], qty)
redis.call('HSET', KEYS[2], ARGV[3], qty)
redis.call('INCRBY', KEYS[5], qty)
if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[4], ARGV[4], qty) end
return {'bought', left, ''}
";

/// The deduct script's text: [`BOOKS_LUA`], then its body.
pub(super) static DEDUCT_LUA: LazyLock<String> =
    LazyLock::new(|| format!("{BOOKS_LUA}{DEDUCT_BODY}"));
pub(super) static DEDUCT: LazyLock<Script> = LazyLock::new(|| Script::new(&DEDUCT_LUA));

/// The write of the tutorial's flow (`lock` and `naive`), decided beforehand by a `GET`: deducts
/// `qty` and records the order, all or nothing. A script rather than a `MULTI`, because a
/// `MULTI` does not roll back: a `DECRBY` that fails on a value that is not an integer would
/// leave the ledger and the sold counter incremented. It checks nothing else (not the lock,
/// not the stock): that is the read's job, and what the homework shows failing.
/// KEYS: 1 stock, 2 ledger, 3 sold counter, 4 buyers, 5 events. ARGV: 1 qty, 2 order id, 3 user
/// ('' = none), 4 '1' to append the order to the events stream, 5 the fencing token, 6 the SKU. Returns the stock left, or {'unseeded'} / {'bad_stock', reason} / {'bad_data',
/// reason} having written nothing.
const WRITE_BODY: &str = r"
local raw = redis.pcall('GET', KEYS[1])
if type(raw) == 'table' then return {'bad_stock', 'a value of the wrong type'} end
if not raw then return {'unseeded'} end
if not is_int(raw) then return {'bad_stock', quoted(raw)} end
local events = nil
if ARGV[4] == '1' then events = KEYS[5] end
local why = bad_books(KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3], events)
if why then return {'bad_data', why} end
if events then
  local refused = append_orders(events, ARGV[6], ARGV[1], ARGV[5], {ARGV[2]}, {ARGV[3]})
  if refused then return {'bad_data', refused} end
end
local left = redis.call('DECRBY', KEYS[1], ARGV[1])
redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[1])
redis.call('INCRBY', KEYS[3], ARGV[1])
if ARGV[3] ~= '' then redis.call('HINCRBY', KEYS[4], ARGV[3], ARGV[1]) end
return left
";

/// The write script's text, sent whole with EVAL inside the naive strategy's MULTI (the lock
/// strategy sends the same body with its release, as [`WRITE_RELEASE`]).
pub(super) static WRITE_LUA: LazyLock<String> =
    LazyLock::new(|| format!("{BOOKS_LUA}{WRITE_BODY}"));

/// The `lock` strategy's write, its release and the hand-off to the next waiter, as one script:
/// [`WRITE_BODY`] with the lock's release after it (see [`releasing`]). Its reply is
/// `{the write's reply, release code}`.
pub(super) static WRITE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&releasing(WRITE_BODY, BOOKS_LUA, 5, 6)));

/// The `fenced` strategy's deduction (the deduct script with the holder's token, so it writes
/// only while the lease is this holder's), its release and the hand-off, as one script.
pub(super) static FENCED_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(&releasing(DEDUCT_BODY, BOOKS_LUA, 6, 8)));

/// Forgets the fencing counter a purchase of an unseeded SKU made (KEYS: fence, stock, lock;
/// ARGV: the purchase's fence), so that a mistyped SKU leaves no key behind: only when the
/// counter is still at that grant (nobody was granted the lock since), nobody holds the lock,
/// and there is no stock, so no write ever carried a fence of this SKU and no holder is left
/// to carry one. 1 when it was forgotten.
pub(super) static FORGET_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[2]) == 0 and redis.call('EXISTS', KEYS[3]) == 0
    and redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
",
    )
});

/// Group commit (`batch`): decides a batch of purchases in arrival order, each exactly as the
/// deduct script decides one without a lock (the same checks in the same order, the same
/// answers), then writes what they bought at once. Facts that cannot change while the script
/// runs (the lock's holder, the stock's raw value, the sold counter, the events stream's type)
/// are read once, the orders' ledger fields with one HMGET, each user's total once; the stock,
/// the users' totals and the orders seen so far are carried in Lua from one purchase to the
/// next, so a later purchase of the batch sees what an earlier one bought, and an order id
/// given twice is bought once and replayed once. Every call from a script costs the server's
/// one thread about a microsecond, and a batch of 256 would otherwise make thousands.
/// KEYS: as the deduct script's (1 stock, 2 ledger, 3 lock, 4 buyers, 5 sold, 6 events).
/// ARGV: 1 qty, 2 the per-user limit, 3 '1' to append bought orders to the events stream,
///       4 the SKU, then each purchase's order id and user ('' = no per-user limit).
/// Returns one answer per purchase, in order, each the deduct script's {status, n, text} in
/// one string, `<code><n>:<text>` (see [`BATCH_CODES`]): a batch's reply is as many strings
/// as purchases, not three times as many values.
const BATCH_BODY: &str = r"
local qty = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local events = nil
if ARGV[3] == '1' then events = KEYS[6] end
local why_all = nil
if events then
  local t = redis.call('TYPE', events)['ok']
  if t ~= 'none' and t ~= 'stream' then why_all = events .. ' is a ' .. t .. ', not a stream' end
end
local n_sold = redis.pcall('GET', KEYS[5])
if why_all then
elseif type(n_sold) == 'table' then why_all = KEYS[5] .. ' is not a string'
elseif not is_int(n_sold) then why_all = KEYS[5] .. ' holds ' .. quoted(n_sold) .. ', not an integer'
end
local sold0 = 0
if not why_all then sold0 = tonumber(n_sold or '0') end
local holder = redis.call('GET', KEYS[3])
local raw = redis.pcall('GET', KEYS[1])
local stock, refused = nil, nil
if type(raw) == 'table' then refused = 'x0:a value of the wrong type'; raw = ''
elseif not raw then refused = 'u0:'; raw = ''
elseif not is_int(raw) then refused = 'x0:' .. quoted(raw)
else stock = tonumber(raw) end
local orders = {}
for i = 5, #ARGV, 2 do orders[#orders + 1] = ARGV[i] end
local priors = redis.pcall('HMGET', KEYS[2], unpack(orders))
local ledger_bad = nil
if priors['err'] then ledger_bad = 'd0:' .. not_a_hash(KEYS[2]) end
local seen, had, total, b_orders, b_users, had0 = {}, {}, 0, {}, {}, {}
local events_refused, allowance = nil, 0
local function decide(k, order, user)
  local prior = seen[order]
  if prior == nil then
    if ledger_bad then return ledger_bad end
    prior = priors[k]
    if not is_int(prior) then return 'd0:' .. not_int_field(KEYS[2]) end
  end
  if user ~= '' and had[user] == nil then
    local why, v = hash_int(KEYS[4], user)
    if why then return 'd0:' .. why end
    had[user] = tonumber(v or '0')
    had0[user] = had[user]
  end
  if why_all then return 'd0:' .. why_all end
  -- The sold counter as this purchase finds it, after those before it in the batch, held to
  -- the bound is_int holds a read counter to.
  if math.abs(sold0 + total) > 9007199254740991 then
    local now = string.format('%d', sold0 + total)
    return 'd0:' .. KEYS[5] .. ' holds ' .. quoted(now) .. ', not an integer'
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
  seen[order] = ARGV[1]
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
  events_refused, allowance = append_orders(events, ARGV[4], qty, '', b_orders, b_users)
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
  redis.call('DECRBY', KEYS[1], total)
  local fields, users = {}, {}
  for i, o in ipairs(b_orders) do
    fields[2 * i - 1] = o
    fields[2 * i] = ARGV[1]
    local u = b_users[i]
    if u ~= '' then users[u] = (users[u] or 0) + qty end
  end
  redis.call('HSET', KEYS[2], unpack(fields))
  redis.call('INCRBY', KEYS[5], total)
  for u, k in pairs(users) do redis.call('HINCRBY', KEYS[4], u, k) end
end
return out
";

/// The batch script's answer codes, and the deduct script's status each stands for.
pub(super) const BATCH_CODES: [(u8, &str); 8] = [
    (b'b', "bought"),
    (b's', "sold_out"),
    (b'r', "replayed"),
    (b'l', "limit"),
    (b'y', "busy"),
    (b'u', "unseeded"),
    (b'x', "bad_stock"),
    (b'd', "bad_data"),
];

/// The batch script's text and handle.
pub(super) static BATCH_LUA: LazyLock<String> =
    LazyLock::new(|| format!("{BOOKS_LUA}{BATCH_BODY}"));
pub(super) static BATCH: LazyLock<Script> = LazyLock::new(|| Script::new(&BATCH_LUA));
