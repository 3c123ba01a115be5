
local LK, FK, QK, DK, GK = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local HL, HS, HK = KEYS[6], KEYS[7], KEYS[8]
local WP = ARGV[5]
