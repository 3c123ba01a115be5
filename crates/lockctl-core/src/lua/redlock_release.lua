-- Compare-and-delete, as on a single node. KEYS: 1 lock. ARGV: 1 token. Returns 1 or 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
