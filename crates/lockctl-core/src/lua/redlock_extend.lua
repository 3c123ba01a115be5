-- Compare-and-extend. KEYS: 1 lock. ARGV: 1 token, 2 TTL ms. Returns 1 extended or 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
