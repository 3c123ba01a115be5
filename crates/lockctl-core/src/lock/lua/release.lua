-- Releases the lock if it still holds this token (the tutorial's compare-and-delete), handing it
-- to the oldest live waiter instead of deleting it when anyone waits. A release that finds the
-- lock gone also hands it over, so waiters need not wait for their next timeout.
-- KEYS: 1-7 as in `prelude.lua`, 8 the wake list of the waiter expected at the head, 9
-- (optional) the key whose value the hand-off carries to the next holder. ARGV: 1 token, 5
-- wake prefix.
-- Returns {1 released, 0 held by another token, -1 no lock at all (the lease ran out); the
-- waiter to notify or ''}.
local code = release(ARGV[1])
return {code, NOTIFY}
