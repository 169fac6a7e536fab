-- Many HTTP requests at once against a loopback server (curl processes started together from
-- one shell, then waited for), for the OpenResty specs and bench: bursts of concurrent
-- requests and clients that give up early (a client abort). Lua 5.1-compatible.
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

-- burst.run(url, requests) → results: requests[i] = { method = "POST", path = "/x", body = "...",
-- max_time = seconds (default 120; a client that gives up earlier aborts its request),
-- delay = seconds before it starts }; results[i] = { status (0: no answer, the client gave up),
-- body, seconds (curl's time_total) }.
function M.run(url, requests)
  local dir = proc.make_temp_dir()
  local lines = {}
  for i, r in ipairs(requests) do
    local args = { "curl", "-s", "-o", dir .. "/" .. i .. ".out", "-w", "%{http_code} %{time_total}",
                   "--max-time", tostring(r.max_time or 120), "-X", r.method or "GET", "-H", "Expect:" }
    if r.body then
      proc.write_file(dir .. "/" .. i .. ".req", r.body)
      local file = dir .. "/" .. i .. ".req"
      for _, a in ipairs({ "-H", "Content-Type: application/json", "--data-binary", "@" .. file }) do
        args[#args + 1] = a
      end
    end
    args[#args + 1] = url .. r.path
    local words = {}
    for k, a in ipairs(args) do words[k] = q(a) end
    local delay = r.delay and ("sleep " .. r.delay .. "; ") or ""
    lines[#lines + 1] = string.format("(%s%s > %s 2>/dev/null) &", delay, table.concat(words, " "),
      q(dir .. "/" .. i .. ".code"))
  end
  lines[#lines + 1] = "wait"
  proc.write_file(dir .. "/run.sh", table.concat(lines, "\n") .. "\n")
  os.execute("sh " .. q(dir .. "/run.sh"))
  local results = {}
  for i = 1, #requests do
    local code, seconds = (proc.read_file(dir .. "/" .. i .. ".code") or ""):match("^(%d+) ([%d.]+)")
    results[i] = { status = tonumber(code) or 0, seconds = tonumber(seconds),
                   body = proc.read_file(dir .. "/" .. i .. ".out") or "" }
  end
  proc.remove_tree(dir)
  return results
end

return M
