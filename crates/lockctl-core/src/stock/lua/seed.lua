-- Starts a sale of `count`: sets the stock and the seed record, clears the SKU's ledger, sold
-- counter and per-user totals, and records in `item:sale:<SKU>` the id every order of the
-- new sale comes after: the stream's last id, or the last id the server's clock allows
-- before now, whichever is later (a stream deleted since the last sale starts again at the
-- clock; its entries will have ids from now on). The books of this sale leave out the rows
-- earlier sales left in PostgreSQL. One script, so no purchase falls between that id and the
-- clearing of the ledger.
-- The seed is a seed generation of its own (see [`crate::keys::StockKeys::seed_gen`]): a
-- bucketed seed that started before it does not publish its map after it.
-- KEYS: 1 stock, 2 seed record, 3 sold counter, 4 ledger, 5 per-user totals, 6 events
-- stream, 7 sale, 8 bucket map (an unbucketed seed ends a bucketed sale), 9 seed generations.
-- ARGV: 1 the count. Returns the stream id the sale starts after and the bucket map it
-- replaced ('' when none), whose buckets the caller ends.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local after = string.format('%d', now - 1) .. '-18446744073709551615'
if redis.call('TYPE', KEYS[6])['ok'] == 'stream' then
  local info = redis.call('XINFO', 'STREAM', KEYS[6])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      local ms = tonumber(string.match(info[i + 1], '^(%d+)-'))
      if ms and ms >= now - 1 then after = info[i + 1] end
    end
  end
end
local old = redis.pcall('GET', KEYS[8])
if type(old) ~= 'string' then old = '' end
local g = redis.pcall('HINCRBY', KEYS[9], 'taken', 1)
if type(g) == 'number' then redis.call('HSET', KEYS[9], 'published', g) end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], 0)
redis.call('DEL', KEYS[4], KEYS[5], KEYS[8])
redis.call('SET', KEYS[7], after)
return {after, old}
