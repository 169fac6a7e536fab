-- Starts spec/support/badserver.py (a misbehaving loopback HTTP server, see its header) and
-- stops it. Used only for the HTTP failure paths airlockd cannot produce.
local proc = require "support.proc"

local M = {}

local function script_path()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return (src:gsub("badserver%.lua$", "badserver.py"))
end

function M.start()
  local dir = proc.make_temp_dir()
  return proc.start_server({
    name = "badserver", dir = dir, log = dir .. "/log",
    command = string.format("python3 %s %s", proc.shell_quote(script_path()), proc.shell_quote(dir .. "/port")),
  })
end

M.stop = proc.stop_server

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

-- DELETEs of key counted by the delfail mode (failed or not).
function M.deletes(server, key)
  return M.control(server, "/_count", key).deletes
end

function M.last(server, key)
  return M.control(server, "/_last", key)
end

return M
