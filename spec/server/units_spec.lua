-- airlockd's C units that every part builds on, tested alone: the growable buffer
-- (src/server/util/buf.c) and the tree walker (src/server/fs/walk.c), in
-- spec/c/server_units_test.c. Lua 5.1-compatible (no <close>).
local c_unit = require "support.c_unit"

describe("airlockd C units (util/buf, fs/walk)", function()
  it("pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/server_units_test.c", "src/server/fs/walk.c", "src/server/util/buf.c" })
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)
