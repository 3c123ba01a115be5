-- Publishes a bucketed seed: its map, its count and a move counter at zero, and the SKU's
-- own stock key deleted (a reader that knows no buckets finds it unseeded rather than a wrong
-- count), all at once, unless a seed of the same or a later generation published first.
-- KEYS: 1 seed generations, 2 bucket map, 3 seed record, 4 move counter, 5 the SKU's stock.
-- ARGV: 1 this seed's generation, 2 its map, 3 its count.
-- Returns {'published', the map replaced or ''}, {'outrun', ''} or {'bad', why}.
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then return {'bad', KEYS[1] .. ' is not a hash'} end
local last = tonumber(redis.call('HGET', KEYS[1], 'published') or '0') or 0
if last >= tonumber(ARGV[1]) then return {'outrun', ''} end
local old = redis.pcall('GET', KEYS[2])
if type(old) ~= 'string' then old = '' end
redis.call('HSET', KEYS[1], 'published', ARGV[1])
redis.call('DEL', KEYS[5])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('SET', KEYS[4], 0)
redis.call('SET', KEYS[2], ARGV[2])
return {'published', old}
