
local r = work()
if TOKEN == '' then return {r, 2, ''} end
CARRY = CK
local ok, code = pcall(release, TOKEN)
if not ok then code = -2 end
return {r, code, NOTIFY}
