-- Sessions kept busy for the template benches: each of ids runs `true` back to back through
-- its own curl loop (a client per session, as agents would be) for `seconds`; the commands
-- per second they ran in all.
local proc = require "support.proc"

local M = {}

function M.rate(server, key, ids, seconds)
  local dir = proc.make_temp_dir()
  for i, id in ipairs(ids) do
    local cmd = string.format(
      "end=$(( $(date +%%s) + %d )); n=0; while [ $(date +%%s) -lt $end ]; do " ..
      "curl -s -o /dev/null -w '%%{http_code}' -H 'X-API-Key: %s' -H 'Content-Type: application/json' " ..
      "--data '{\"command\":\"true\"}' %s/v1/sessions/%s/exec | grep -q 200 && n=$((n+1)); done; echo $n > %s/%d",
      seconds, key, server.url, id, dir, i)
    os.execute("(" .. cmd .. ") >/dev/null 2>&1 &")
  end
  proc.wait_until(seconds + 60, function()
    for i = 1, #ids do
      if not proc.read_file(dir .. "/" .. i) then return false end
    end
    return true
  end, 0.5)
  local total = 0
  for i = 1, #ids do total = total + (tonumber(proc.read_file(dir .. "/" .. i)) or 0) end
  proc.remove_tree(dir)
  return total / seconds
end

return M
