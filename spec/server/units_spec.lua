-- airlockd's C units that every part builds on, tested alone: the growable buffer
-- (src/server/util/buf.c) and the tree walker (src/server/fs/walk.c). spec/c/server_units_test.c
-- is compiled with the same warnings as airlockd and run; it prints "N checks, 0 failures".
-- Lua 5.1-compatible (no <close>).
local proc = require "support.proc"

local q = proc.shell_quote

describe("airlockd C units (util/buf, fs/walk)", function()
  it("pass their checks", function()
    local bin = os.tmpname()
    local cmd = "cc -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -Isrc/server -o " .. q(bin) ..
      " spec/c/server_units_test.c src/server/fs/walk.c src/server/util/buf.c 2>&1 && timeout 120 " .. q(bin)
    local p = io.popen(cmd)
    local out = p:read("*a")
    local ok = { p:close() }
    os.remove(bin)
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok[1] == true or ok[1] == 0, out)
  end)
end)
