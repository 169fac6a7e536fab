-- Starts a real airlockd on an ephemeral loopback port for the integration specs, and stops
-- it. Each server gets its own state directory and freshly generated keys.
local M = {}

local function random_hex(bytes)
  local f = assert(io.open("/dev/urandom", "rb"))
  local raw = f:read(bytes)
  f:close()
  return (raw:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end
M.random_hex = random_hex

local function shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.shell_quote = shell_quote

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  return data
end

local function sleep(seconds)
  os.execute("sleep " .. seconds)
end
M.sleep = sleep

local function binary()
  local bin = os.getenv("AIRLOCKD_BIN")
  if bin and bin ~= "" then return bin end
  return "build/airlockd"
end

-- opts.tenants: { acme = "key", ... } (default: tenants acme and other with random keys)
-- opts.env: extra environment variables for the server
-- opts.args: extra command-line arguments
function M.start(opts)
  opts = opts or {}
  local tenants = opts.tenants or { acme = "ak_" .. random_hex(16), other = "ok_" .. random_hex(16) }
  local pairs_list = {}
  for tenant, key in pairs(tenants) do pairs_list[#pairs_list + 1] = tenant .. ":" .. key end
  table.sort(pairs_list)

  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. shell_quote(dir)))

  local env = { SANDBOX_API_KEYS = table.concat(pairs_list, ",") }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local env_words = {}
  for k, v in pairs(env) do env_words[#env_words + 1] = k .. "=" .. shell_quote(v) end

  local cmd = string.format(
    "env %s %s --listen 127.0.0.1:0 --state-dir %s --port-file %s %s > %s 2>&1 & echo $! > %s",
    table.concat(env_words, " "), shell_quote(binary()), shell_quote(dir .. "/state"),
    shell_quote(dir .. "/port"), table.concat(opts.args or {}, " "),
    shell_quote(dir .. "/log"), shell_quote(dir .. "/pid"))
  assert(os.execute(cmd))

  local server = { dir = dir, tenants = tenants, log_path = dir .. "/log" }
  server.pid = tonumber((read_file(dir .. "/pid") or ""):match("%d+"))
  for _ = 1, 200 do
    local port = tonumber((read_file(dir .. "/port") or ""):match("^%s*(%d+)%s*$"))
    if port then
      server.port = port
      server.url = "http://127.0.0.1:" .. port
      break
    end
    if not M.alive(server) then break end
    sleep(0.05)
  end
  if not server.url then
    local log = read_file(dir .. "/log") or ""
    M.stop(server)
    error("airlockd did not start:\n" .. log, 2)
  end
  return server
end

function M.log(server)
  return read_file(server.log_path) or ""
end

local function succeeded(r) return r == true or r == 0 end

function M.alive(server)
  return server.pid ~= nil and succeeded(os.execute("kill -0 " .. server.pid .. " 2>/dev/null"))
end

function M.stop(server)
  if server.pid then
    os.execute("kill " .. server.pid .. " 2>/dev/null")
    for _ = 1, 100 do
      if not M.alive(server) then break end
      sleep(0.05)
    end
    os.execute("kill -9 " .. server.pid .. " 2>/dev/null")
    server.pid = nil
  end
  os.execute("rm -rf " .. shell_quote(server.dir))
end

return M
