-- Starts spec/support/badserver.py (a misbehaving loopback HTTP server, see its header) and
-- stops it. Used only for the HTTP failure paths airlockd cannot produce.
local M = {}

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  return data
end

local function script_path()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return (src:gsub("badserver%.lua$", "badserver.py"))
end

function M.start()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
  assert(os.execute(string.format("python3 '%s' '%s/port' > '%s/log' 2>&1 & echo $! > '%s/pid'",
    script_path(), dir, dir, dir)))
  local server = { dir = dir, pid = tonumber((read_file(dir .. "/pid") or ""):match("%d+")) }
  for _ = 1, 200 do
    local port = tonumber((read_file(dir .. "/port") or ""):match("^(%d+)$"))
    if port then
      server.port = port
      server.url = "http://127.0.0.1:" .. port
      return server
    end
    os.execute("sleep 0.05")
  end
  M.stop(server)
  error("badserver did not start: " .. (read_file(dir .. "/log") or ""))
end

function M.stop(server)
  if server.pid then os.execute("kill " .. server.pid .. " 2>/dev/null") end
  server.pid = nil
  os.execute("rm -rf '" .. server.dir .. "'")
end

-- GET a control route with a plain, separate connection (lua-socket), decoded JSON.
function M.control(server, route, key)
  local http = require "socket.http"
  local cjson = require "cjson"
  local url = server.url .. route .. "?key=" .. key:gsub("[^%w]", function(c)
    return string.format("%%%02X", c:byte())
  end)
  local body, code = http.request(url)
  assert(code == 200, "control request failed: " .. tostring(code))
  return cjson.decode(body)
end

function M.count(server, key)
  return M.control(server, "/_count", key).count
end

function M.connections(server, key)
  return M.control(server, "/_count", key).connections
end

-- Connections still open whose last request used key.
function M.open(server, key)
  return M.control(server, "/_count", key).open
end

-- Sessions of key created and not deleted.
function M.sessions(server, key)
  return M.control(server, "/_count", key).sessions
end

function M.last(server, key)
  return M.control(server, "/_last", key)
end

return M
