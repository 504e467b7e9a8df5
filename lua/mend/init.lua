-- mend: durable workflows in Lua. The engine is C (mend.core); this file is the Lua face of
-- it, and the place for helpers that are best written in Lua. See docs/lua-api.md.
local core = require "mend.core"

local mend = {}
for k, v in pairs(core) do mend[k] = v end

return mend
