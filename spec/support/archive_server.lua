-- Starts spec/support/archive_server.py (a loopback stand-in for GitHub's archive
-- downloads, see its header) over a root directory of repositories, and stops it.
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

local function script_path()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return (src:gsub("archive_server%.lua$", "archive_server.py"))
end

-- root: directory holding <owner>/<repo>/ trees.
function M.start(root)
  local dir = proc.make_temp_dir()
  return proc.start_server({
    name = "archive_server", dir = dir, log = dir .. "/log",
    command = string.format("python3 %s %s %s", q(script_path()), q(root), q(dir .. "/port")),
  })
end

-- How many requests reached path (e.g. "/acme/hello/archive/HEAD.tar.gz").
function M.count(server, path)
  local body = proc.output("curl -s --max-time 10 " .. q(server.url .. "/_count?path=" .. path))
  return tonumber(body:match('"count":%s*(%d+)')) or -1
end

M.stop = proc.stop_server

return M
