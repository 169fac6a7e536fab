-- Checks of the sandbox's root that hold on every backend (gVisor in either exec mode,
-- bubblewrap), given the spec's exec(command) → its decoded answer. Lua 5.1-compatible.
local luassert = require "luassert" -- busted's assert lives in the spec files' environment only

local M = {}

-- /etc/alternatives is the host's, bound read-only: awk resolves through it, and it cannot be
-- changed from inside.
function M.alternatives(exec)
  local r = exec("awk 'BEGIN { print 6 * 7 }'; readlink /usr/bin/awk; " ..
    "ln -sf /bin/sh /etc/alternatives/awk 2>/dev/null && echo CHANGED || echo denied; " ..
    "touch /etc/alternatives/x 2>/dev/null && echo WROTE || echo denied")
  luassert.are.equal("42\n/etc/alternatives/awk\ndenied\ndenied\n", r.stdout, r.stderr)
end

return M
