-- Ends a bucket of a seed that was never published, if it is still that seed's.
-- KEYS: 1 the bucket's sale nonce, then every book of the bucket (not its orders stream or
-- dead letters). ARGV: 1 that seed's nonce. Returns 1 when ended, 0 when the bucket is not
-- that seed's (another sale's, by a chance of tags).
local sale = redis.pcall('GET', KEYS[1])
if sale ~= ARGV[1] then return 0 end
redis.call('DEL', unpack(KEYS))
return 1
