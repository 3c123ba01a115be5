-- Counts up to ARGV[2] entries of the stream KEYS[1] from ARGV[1] (`(id`: after it) on the
-- server, and returns {how many, the last one's id}: a count needs no entry's fields, and
-- sending them only to be thrown away made a scrape of a 100,000-entry backlog take seconds.
local r = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', tonumber(ARGV[2]))
if #r == 0 then return {0, ''} end
return {#r, r[#r][1]}
