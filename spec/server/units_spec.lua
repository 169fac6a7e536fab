-- airlockd's C units, tested alone: the growable buffer (src/server/util/buf.c) and the tree
-- walker (src/server/fs/walk.c) in spec/c/server_units_test.c; the output capture, the
-- launcher's output budget and cancel descriptor, and the host-wide command slots
-- (src/server/sandbox/capture.c, sandbox/proc.c, domain/slots.c) in
-- spec/c/sandbox_units_test.c. Lua 5.1-compatible (no <close>).
local c_unit = require "support.c_unit"

describe("airlockd C units", function()
  it("util/buf and fs/walk pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/server_units_test.c", "src/server/fs/walk.c", "src/server/util/buf.c" })
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)

  it("sandbox/capture, sandbox/proc (budget, cancel_fd) and domain/slots pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/sandbox_units_test.c", "src/server/sandbox/capture.c",
      "src/server/sandbox/proc.c", "src/server/sandbox/cgroup.c", "src/server/domain/slots.c",
      "src/server/text/utf8.c", "src/server/util/buf.c" })
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)
