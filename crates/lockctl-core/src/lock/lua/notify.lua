-- Wakes the waiter a grant went to when the script that made it could not declare its wake
-- list: pushes the grant's message (as `grant_head` would have) if the lock still holds that
-- waiter's token, the grant key records that grant, and nothing waits in the list yet.
-- KEYS as `release.lua`'s, 8 being that waiter's wake list. ARGV: 1 its token.
-- Returns 1 pushed, 0 not needed any more (the waiter claimed it, or the lock moved on).
local token = ARGV[1]
if token == '' or redis.call('GET', LK) ~= token then return 0 end
if names(redis.pcall('LINDEX', HL, 0), token) then return 0 end
local g = redis.call('GET', GK)
if type(g) ~= 'string' or string.sub(g, 1, #token + 1) ~= token .. ':' then return 0 end
local fence, at = string.match(string.sub(g, #token + 2), '^(%d+):(%d+)$')
if not fence or redis.call('EXISTS', HK) == 1 then return 0 end
redis.call('RPUSH', HK, fence .. ':' .. at .. ':' .. head_token() .. ':' .. carried())
redis.call('PEXPIRE', HK, math.max(redis.call('PTTL', LK), 1))
return 1
