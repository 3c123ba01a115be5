-- The caller's own command, run only while the lock holds the caller's token: the check and
-- the write are one script, so no pause of the caller between them can let a write land
-- after its lease ran out (which a check on the caller's side cannot promise).
--
-- KEYS[1] the lock; ARGV[1] the holder's token, ARGV[2..] the command and its arguments.
-- Returns `{1, reply}` (just `{1}` for a nil reply) after running the command, or `{0}`
-- without running it when the lock holds another token or none.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
return {1, redis.call(unpack(ARGV, 2))}
