//! The one script every script-based deduction runs (fenced, atomic, and the batches of
//! group commit), so each decides a purchase the same way.

use std::sync::LazyLock;

use redis::Script;

/// Deducts `qty` and records the order, in one atomic step, after checking whatever the caller
/// asked for: a replayed order id, the lock, the per-user limit and the stock.
/// KEYS: 1 stock, 2 ledger, 3 lock, 4 buyers (user -> units), 5 sold counter.
/// ARGV: 1 token ('' = we hold no lock: yield while anyone does), 2 qty, 3 order id,
///       4 user ('' = no per-user limit), 5 the limit.
/// Returns {status, n, text}:
///   {'bought', stock left, ''}         {'replayed', units of the original order, stock now}
///   {'sold_out', stock, ''}            {'limit', units this user already has, ''}
///   {'busy', 0, ''}                    {'lease_lost', 0, ''}
///   {'unseeded', 0, ''}                {'bad_stock', 0, what the key holds}
/// The raw stock is matched against an integer pattern before use, because Lua's `tonumber`
/// accepts '1e3' and ' 7', and `nil`/`false` would otherwise read as "sold out".
pub(super) const DEDUCT_LUA: &str = r"
local prior = redis.call('HGET', KEYS[2], ARGV[3])
if prior then
  return {'replayed', tonumber(prior), redis.call('GET', KEYS[1]) or ''}
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
if not string.match(raw, '^%-?%d+$') or string.len(raw) > 17 then
  return {'bad_stock', 0, raw}
end
local stock = tonumber(raw)
local qty = tonumber(ARGV[2])
if ARGV[4] ~= '' then
  local had = tonumber(redis.call('HGET', KEYS[4], ARGV[4]) or '0')
  if had + qty > tonumber(ARGV[5]) then return {'limit', had, ''} end
end
if stock < qty then return {'sold_out', stock, ''} end
local left = redis.call('DECRBY', KEYS[1], qty)
redis.call('HSET', KEYS[2], ARGV[3], qty)
redis.call('INCRBY', KEYS[5], qty)
if ARGV[4] ~= '' then redis.call('HINCRBY', KEYS[4], ARGV[4], qty) end
return {'bought', left, ''}
";

pub(super) static DEDUCT: LazyLock<Script> = LazyLock::new(|| Script::new(DEDUCT_LUA));
