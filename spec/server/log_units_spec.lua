-- airlockd's logger as a C unit (spec/c/log_units_test.c), under ASan/UBSan: levels, text and
-- JSON lines, the context fields, escaping (JSON stays valid for any bytes), log_lines.
local c_unit = require "support.c_unit"

describe("airlockd's logger (log/log.c)", function()
  it("writes one whole line per call, text or JSON, with time, level and context", function()
    local out, ok = c_unit.run({ "spec/c/log_units_test.c", "src/server/log/log.c" },
      "-fsanitize=address,undefined -fno-sanitize-recover=undefined")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)
