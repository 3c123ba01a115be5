-- Extends the lease only if the lock still holds this token.
-- KEYS: 1 lock. ARGV: 1 token, 2 TTL in ms. Returns 1 renewed, 0 not the owner any more.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
