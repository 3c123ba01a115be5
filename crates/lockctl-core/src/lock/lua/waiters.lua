-- Counts the live waiters (those whose deadline has not passed on the server's clock).
-- KEYS: 4 deadlines (the others unused, passed as to every queue script). Returns the count.
return redis.call('ZCOUNT', DK, '(' .. now_ms(), '+inf')
