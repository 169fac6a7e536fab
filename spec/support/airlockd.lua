-- Starts a real airlockd on an ephemeral loopback port for the integration specs, and stops
-- it. Each server gets its own state directory and freshly generated keys.
local proc = require "support.proc"

local M = {}

local function random_hex(bytes)
  local f = assert(io.open("/dev/urandom", "rb"))
  local raw = f:read(bytes)
  f:close()
  return (raw:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end
M.random_hex = random_hex

local shell_quote = proc.shell_quote
M.shell_quote = shell_quote
M.sleep = proc.sleep

-- The airlockd to run: $AIRLOCKD_BIN, else build/airlockd.
function M.binary()
  local bin = os.getenv("AIRLOCKD_BIN")
  if bin and bin ~= "" then return bin end
  return "build/airlockd"
end

-- opts.tenants: { acme = "key", ... } (default: tenants acme and other with random keys)
-- opts.env: extra environment variables for the server
-- opts.args: extra command-line arguments
-- opts.dir: the directory of a stopped server to start again on (its state in <dir>/state);
--   default a fresh one
-- opts.launcher: a command line put before airlockd's (e.g. "prlimit --nofile=256 --")
-- opts.wait: seconds to wait for it to listen (default 10)
function M.start(opts)
  opts = opts or {}
  local tenants = opts.tenants or { acme = "ak_" .. random_hex(16), other = "ok_" .. random_hex(16) }
  local pairs_list = {}
  for tenant, key in pairs(tenants) do pairs_list[#pairs_list + 1] = tenant .. ":" .. key end
  table.sort(pairs_list)

  local dir = opts.dir or proc.make_temp_dir()
  os.remove(dir .. "/port") -- a killed predecessor's port file would be read as this one's

  -- DNS for the egress proxy: never this machine's resolver; a spec that needs names brings
  -- its own server (support.egress_upstream), the others get lookups that fail at once
  local env = { SANDBOX_API_KEYS = table.concat(pairs_list, ","), SANDBOX_EGRESS_DNS = "127.0.0.1:1" }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local env_words = {}
  for k, v in pairs(env) do env_words[#env_words + 1] = k .. "=" .. shell_quote(v) end

  local server = proc.start_server({
    name = "airlockd", dir = dir, log = dir .. "/log", stop = M.stop, give_up_on_exit = true, wait = opts.wait,
    command = string.format("%s env %s %s --listen 127.0.0.1:0 --state-dir %s --port-file %s %s",
      opts.launcher or "", table.concat(env_words, " "), shell_quote(M.binary()), shell_quote(dir .. "/state"),
      shell_quote(dir .. "/port"), table.concat(opts.args or {}, " ")),
  })
  server.tenants = tenants
  server.log_path = dir .. "/log"
  return server
end

function M.log(server)
  return proc.read_file(server.log_path) or ""
end

function M.alive(server)
  return proc.alive(server.pid)
end

-- Stops it (SIGKILL after 5 s) and removes its directory.
function M.stop(server)
  proc.stop_server(server, 5)
end

return M
