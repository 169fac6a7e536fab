-- Builds a C unit test of airlockd's sources (with airlockd's warnings, -Werror) and runs it.
-- Such a test prints "N checks, 0 failures" and exits 0 when it passes. Lua 5.1-compatible.
local proc = require "support.proc"

local M = {}

-- The logger every file of src/server may call (src/server/log): linked into every test.
local LOGGER = "src/server/log/log.c"

-- sources: the test file first, then the src/server files it needs; flags: more compiler
-- and linker words (e.g. sanitizers, libraries). Returns the build and run output and whether
-- both succeeded.
function M.run(sources, flags)
  local bin = os.tmpname()
  local words, has_logger = {}, false
  for i, s in ipairs(sources) do
    words[i] = proc.shell_quote(s)
    has_logger = has_logger or s == LOGGER
  end
  if not has_logger then words[#words + 1] = LOGGER end
  local cmd = "cc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Isrc/server -o " .. proc.shell_quote(bin) ..
    " " .. table.concat(words, " ") .. " " .. (flags or "") .. " 2>&1 && timeout 120 " .. proc.shell_quote(bin)
  local p = io.popen(cmd)
  local out = p:read("*a")
  local status = { p:close() }
  os.remove(bin)
  return out, status[1] == true or status[1] == 0
end

return M
