-- airlockd's bounded HTTP parts and path resolution, tested alone (spec/c/http_units_test.c):
-- the counter table, the body budget, the worker pool, the connection table's eviction near
-- its cap, and domain/paths (Python's realpath results, the 4,096-byte / 256-level bounds,
-- and a 2 MB path of 400,000 "q/" and as many "../" resolved in time linear in its length).
-- Lua 5.1-compatible (no <close>).
local c_unit = require "support.c_unit"

describe("airlockd C units (http/tally, http/budget, http/pool, http/conns, domain/paths)", function()
  it("pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/http_units_test.c", "src/server/http/tally.c", "src/server/http/budget.c",
      "src/server/http/pool.c", "src/server/http/conns.c", "src/server/domain/paths.c", "src/server/util/buf.c",
      "-pthread" })
    print(out:match("resolved 400000[^\n]*") or out)
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)
