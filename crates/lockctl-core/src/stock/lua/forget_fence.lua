-- Forgets the fencing counter a purchase of an unseeded SKU made, so that a mistyped SKU leaves
-- no key behind: only when the counter is still at that grant (nobody was granted the lock
-- since), nobody holds the lock, and there is no stock, so no write ever carried a fence of
-- this SKU and no holder is left to carry one.
-- KEYS: FENCE_KEY (the lock's fencing counter), STOCK, LOCK. ARGV: FENCE (the purchase's).
-- Returns 1 when it was forgotten, 0 when not.
local FENCE_KEY, STOCK, LOCK = KEYS[1], KEYS[2], KEYS[3]
local FENCE = ARGV[1]
if redis.call('EXISTS', STOCK) == 0 and redis.call('EXISTS', LOCK) == 0
    and redis.call('GET', FENCE_KEY) == FENCE then
  return redis.call('DEL', FENCE_KEY)
end
return 0
