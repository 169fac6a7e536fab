-- A raw HTTP client for the integration specs: one request with curl against a server from
-- support.airlockd (always loopback), returning status, lower-cased headers, body and the
-- decoded JSON. It sends exactly what the caller gives (no SDK in between), so specs can
-- check exact status codes, bodies and headers. Lua 5.1-compatible.
local cjson = require "cjson"
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote
local write_file = proc.write_file

-- One HTTP request with curl. opts: key, body (string, sent raw), content_type (false = none),
-- headers (list of "Name: value"), max_time (seconds, default 90).
-- The path is sent as is (no escaping; the caller encodes).
function M.request(server, method, path, opts)
  opts = opts or {}
  local max_time = tostring(opts.max_time or 90)
  local args = { "curl", "-s", "-i", "--max-time", max_time, "-X", method, "-H", "Expect:" }
  if method == "HEAD" then args = { "curl", "-s", "-i", "--max-time", "30", "-I", "-H", "Expect:" } end
  if opts.key then args[#args + 1] = "-H"; args[#args + 1] = "X-API-Key: " .. opts.key end
  for _, h in ipairs(opts.headers or {}) do args[#args + 1] = "-H"; args[#args + 1] = h end
  local tmp
  if opts.body then
    tmp = proc.temp_path()
    write_file(tmp, opts.body)
    if opts.content_type ~= false then
      args[#args + 1] = "-H"
      args[#args + 1] = "Content-Type: " .. (opts.content_type or "application/json")
    else
      args[#args + 1] = "-H"
      args[#args + 1] = "Content-Type:"
    end
    args[#args + 1] = "--data-binary"
    args[#args + 1] = "@" .. tmp
  end
  args[#args + 1] = "--path-as-is"
  args[#args + 1] = server.url .. path
  local words = {}
  for i, a in ipairs(args) do words[i] = q(a) end
  local raw = proc.output(table.concat(words, " ") .. " 2>/dev/null")
  if tmp then os.remove(tmp) end
  local head, body = raw:match("^(.-)\r\n\r\n(.*)$")
  assert(head, "no HTTP response for " .. method .. " " .. path .. ": " .. raw)
  local res = { headers = {}, body = body, raw = raw }
  local first = true
  for line in head:gmatch("[^\r\n]+") do
    if first then
      res.status = tonumber(line:match("^HTTP/%S+ (%d+)"))
      first = false
    else
      local k, v = line:match("^([^:]+):%s*(.*)$")
      if k then res.headers[k:lower()] = v end
    end
  end
  if (res.headers["content-type"] or ""):find("application/json", 1, true) and body ~= "" then
    res.json = cjson.decode(body)
  end
  return res
end

function M.urlencode(s)
  return (s:gsub("[^%w%-%._~/]", function(c) return string.format("%%%02X", c:byte()) end))
end

-- Convenience wrappers; each returns the response table.
function M.create(server, key, body)
  return M.request(server, "POST", "/v1/sessions", { key = key, body = body or "{}" })
end

function M.exec(server, key, id, command, timeout)
  local body = { command = command }
  if timeout then body.timeout_seconds = timeout end
  return M.request(server, "POST", "/v1/sessions/" .. id .. "/exec",
    { key = key, body = cjson.encode(body), max_time = (timeout or 15) + 60 })
end

function M.write(server, key, id, path, content)
  return M.request(server, "POST", "/v1/sessions/" .. id .. "/write",
    { key = key, body = cjson.encode({ path = path, content = content }) })
end

function M.read(server, key, id, path)
  return M.request(server, "GET", "/v1/sessions/" .. id .. "/read?path=" .. M.urlencode(path), { key = key })
end

-- Whether file path is in session id's workspace (a missing file's read is a 200 too, whose
-- content says so: contract 1.6).
function M.exists(server, key, id, path)
  local r = M.read(server, key, id, path)
  return r.status == 200 and r.json ~= nil and r.json.content ~= "Error: File '" .. path .. "' does not exist."
end

-- The start of a command that waits (up to `seconds`, default 60) until the Python expression
-- condition (os and re imported; no single quote) holds in its sandbox, polling every 50 ms in
-- one python3 process: a shell loop's every `sleep` is a process made in gVisor (~30 ms of CPU
-- each; measured in a session: 100 turns of `sleep 0.05` 5.5 CPU-s, the same wait here 0.5).
function M.until_in_sandbox(condition, seconds)
  assert(not condition:find("'", 1, true), "a condition with a single quote: " .. condition)
  return string.format("python3 -c 'import os, re, time\nuntil = time.time() + %d\n" ..
    "while not (%s) and time.time() < until: time.sleep(0.05)'; ", seconds or 60, condition)
end

-- ... until the file at path (relative to the workspace) exists
function M.until_file(path, seconds)
  return M.until_in_sandbox(string.format("os.path.exists(%q)", path), seconds)
end

-- ... until the file go in its workspace exists, which the spec writes (M.write) once it has
-- checked what it must while the command runs: a sleep could end first on a loaded machine.
function M.until_go(seconds)
  return M.until_file("go", seconds)
end

function M.delete(server, key, id)
  return M.request(server, "DELETE", "/v1/sessions/" .. id, { key = key })
end

-- Starts a POST of body (a table, sent as JSON) to path in the background (curl, loopback,
-- at most max_time seconds) and returns a handle: done() says whether curl has finished;
-- wait(max_seconds) waits for that (default 120 s) and gives the decoded response body (nil
-- if it never came) and the raw body.
function M.post_async(server, key, path, body, max_time)
  local out = proc.temp_path()
  local curl = string.format("curl -s -m %d -H "
    .. "'Content-Type: application/json' -H %s --data-binary %s %s > %s 2>/dev/null",
    max_time, q("X-API-Key: " .. key), q(cjson.encode(body)), q(server.url .. path), q(out .. ".body"))
  os.execute("(" .. curl .. "; echo done > " .. q(out) .. ") &")
  local handle = {}
  function handle.done()
    return (proc.read_file(out) or ""):find("done", 1, true) ~= nil
  end
  function handle.wait(max_seconds)
    proc.wait_until(max_seconds or 120, handle.done)
    local data = proc.read_file(out .. ".body") or ""
    os.remove(out)
    os.remove(out .. ".body")
    local ok, decoded = pcall(cjson.decode, data)
    return ok and decoded or nil, data
  end
  return handle
end

-- An exec in the background (see post_async).
function M.exec_async(server, key, id, command, timeout)
  return M.post_async(server, key, "/v1/sessions/" .. id .. "/exec",
    { command = command, timeout_seconds = timeout or 15 }, (timeout or 15) + 60)
end

return M
