-- airlockd's workspace disks and state, tested alone on the real kernel (root): the write that
-- runs out of space half-way (domain/quota), images, loops and mounts (disk/), the state
-- directory's marker and lock, the session state file (store/); spec/c/disk_units_test.c.
-- Lua 5.1-compatible (no <close>).
local c_unit = require "support.c_unit"

describe("airlockd C units (disk/, domain/quota, store/state_dir, store/session_state)", function()
  it("pass their checks", function()
    local out, ok = c_unit.run({ "spec/c/disk_units_test.c", "src/server/disk/image.c", "src/server/disk/loop.c",
      "src/server/disk/mounts.c", "src/server/domain/quota.c", "src/server/domain/paths.c",
      "src/server/store/state_dir.c", "src/server/store/session_state.c", "src/server/domain/session_id.c",
      "src/server/util/buf.c", "src/server/util/sync.c" }, "-ljansson")
    assert.truthy(out:find(" checks, 0 failures", 1, true), out)
    assert.is_true(ok, out)
  end)
end)
