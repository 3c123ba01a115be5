-- The lock's part of a script that ends by releasing the lock (see `releasing!` in
-- src/lock/scripts.rs): its nine keys are the call's last nine and its two arguments the
-- call's last two, so the script's own keys and arguments come first, named by its own file.
-- KEYS (last nine): LK the lock, FK the fence counter, QK the queue, DK the deadlines, GK the
--   grant key, HL the head list, HS the head listener, HK the declared wake list, CK the key a
--   hand-off carries (the lock key when none).
-- ARGV (last two): TOKEN the holder's token ('' leaves the lock held), WP the wake prefix.
local LK, FK, QK, DK, GK = KEYS[#KEYS - 8], KEYS[#KEYS - 7], KEYS[#KEYS - 6], KEYS[#KEYS - 5], KEYS[#KEYS - 4]
local HL, HS, HK, CK = KEYS[#KEYS - 3], KEYS[#KEYS - 2], KEYS[#KEYS - 1], KEYS[#KEYS]
local TOKEN, WP = ARGV[#ARGV - 1], ARGV[#ARGV]
