-- mend: durable workflows in Lua. The engine is C (mend.core); this file is the Lua face of
-- it, and the place for helpers that are best written in Lua. See docs/lua-api.md.
local core = require "mend.core"

local mend = {}
for k, v in pairs(core) do
  if k:sub(1, 1) ~= "_" then mend[k] = v end
end

-- Calls a function of the program hosting mend (registered through the C API) and waits for
-- its answer without blocking other runs. The host's typed errors are raised as mend errors.
function mend.call(name, ...)
  local ok, value = core._call(name, ...)
  if ok then return value end
  error(value, 0)
end

return mend
