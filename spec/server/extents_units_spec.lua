-- A drain's disk stream tested alone on the real kernel (root): a sparse workspace sent as its
-- used blocks, its copy the same image, and every malformed stream refused;
-- spec/c/extents_units_test.c. Lua 5.1-compatible (no <close>).
local c_unit = require "support.c_unit"

describe("airlockd C units (drain/extents)", function()
  it("pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/extents_units_test.c", "src/server/drain/extents.c",
      "src/server/disk/image.c", "src/server/disk/loop.c" }, "-lext2fs -lcom_err")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)
