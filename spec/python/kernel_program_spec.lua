-- The Python kernel program (src/kernel/python/airlock_kernel.py) under its own Python tests
-- (spec/python/test_airlock_kernel.py: the program driven over its stdin and stdout as
-- airlockd's agent drives it), run by the interpreter sandboxes get: the system's
-- /usr/bin/python3, not whichever python3 comes first on PATH.
local proc = require "support.proc"

describe("the Python kernel program", function()
  it("passes its Python tests under /usr/bin/python3", function()
    local cmd = "cd " .. proc.shell_quote(proc.repo_root())
      .. " && timeout 300 /usr/bin/python3 -m unittest -v spec/python/test_airlock_kernel.py 2>&1"
    local rc, out = proc.run_capture(cmd)
    -- unittest's report names each failure with its traceback and output
    assert.are.equal(0, rc, out)
    assert.is_truthy(out:find("\nOK"), out)
  end)
end)
