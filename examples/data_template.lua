-- A data template (airlockd): numpy, pandas and matplotlib from Debian's packages, built once
-- into a read-only root, then a session on it plots a sine from a pandas frame and the PNG
-- comes back. Needs
-- SANDBOX_API_URL and SANDBOX_API_KEY (`scripts/with-airlockd.sh` sets both). The first run
-- builds the template (a few minutes: ~100 packages); the next ones find it built at once.
-- Runs on Lua 5.1 through 5.4 and LuaJIT.
local airlock = require "airlock"

local t = airlock.templates.build{
  name = "data",
  packages = { "python3-numpy", "python3-pandas", "python3-matplotlib" },
  -- run once at build time, as root, without network
  setup = { "python3 -c 'import matplotlib.font_manager'" },
}
t:wait{ on_progress = function(p)
  io.stderr:write(string.format("\r%-8s %3d%%  %d/%d packages", p.phase, p.percent, p.packages_installed,
    p.packages_total))
end }
io.stderr:write("\n")

local png = os.tmpname()
airlock.with({ template = "data" }, function(sbx)
  sbx.files:write("plot.py", [[
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
x = np.linspace(0, 2 * np.pi, 200)
frame = pd.DataFrame({"x": x, "sin": np.sin(x)})
plt.plot(frame["x"], frame["sin"])
plt.savefig("sine.png")
print("numpy", np.__version__, "pandas", pd.__version__)
]])
  local r = sbx:run("python3 plot.py"):check()
  io.write(r.stdout)
  sbx.files:download("sine.png", png)
end)

local f = assert(io.open(png, "rb"))
local head = f:read(8)
f:close()
os.remove(png)
print(head == "\137PNG\r\n\26\n" and "sine.png is a PNG" or "sine.png is not a PNG")
