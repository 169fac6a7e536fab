-- Builds a C unit test of airlockd's sources (with airlockd's warnings, -Werror) and runs it.
-- Such a test prints "N checks, 0 failures" and exits 0 when it passes. Lua 5.1-compatible.
local proc = require "support.proc"

local M = {}

-- sources: the test file first, then the src/server files it needs; flags: more compiler
-- and linker words (e.g. sanitizers, libraries). Returns the build and run output and whether
-- both succeeded.
function M.run(sources, flags)
  local bin = os.tmpname()
  local words = {}
  for i, s in ipairs(sources) do words[i] = proc.shell_quote(s) end
  local cmd = "cc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Isrc/server -o " .. proc.shell_quote(bin) ..
    " " .. table.concat(words, " ") .. " " .. (flags or "") .. " 2>&1 && timeout 120 " .. proc.shell_quote(bin)
  local p = io.popen(cmd)
  local out = p:read("*a")
  local status = { p:close() }
  os.remove(bin)
  return out, status[1] == true or status[1] == 0
end

return M
