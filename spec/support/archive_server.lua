-- Starts spec/support/archive_server.py (a loopback stand-in for GitHub's archive
-- downloads, see its header) over a root directory of repositories, and stops it.
local M = {}

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  return data
end

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function script_path()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return (src:gsub("archive_server%.lua$", "archive_server.py"))
end

-- root: directory holding <owner>/<repo>/ trees.
function M.start(root)
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. q(dir)))
  assert(os.execute(string.format("python3 %s %s %s > %s 2>&1 & echo $! > %s",
    q(script_path()), q(root), q(dir .. "/port"), q(dir .. "/log"), q(dir .. "/pid"))))
  local server = { dir = dir, pid = tonumber((read_file(dir .. "/pid") or ""):match("%d+")) }
  for _ = 1, 200 do
    local port = tonumber((read_file(dir .. "/port") or ""):match("^(%d+)%s*$"))
    if port then
      server.port = port
      server.url = "http://127.0.0.1:" .. port
      return server
    end
    os.execute("sleep 0.05")
  end
  M.stop(server)
  error("archive_server did not start: " .. (read_file(dir .. "/log") or ""))
end

-- How many requests reached path (e.g. "/acme/hello/archive/HEAD.tar.gz").
function M.count(server, path)
  local p = assert(io.popen("curl -s --max-time 10 " .. q(server.url .. "/_count?path=" .. path)))
  local body = p:read("*a")
  p:close()
  return tonumber(body:match('"count":%s*(%d+)')) or -1
end

function M.stop(server)
  if server.pid then os.execute("kill " .. server.pid .. " 2>/dev/null") end
  server.pid = nil
  os.execute("rm -rf " .. q(server.dir))
end

return M
