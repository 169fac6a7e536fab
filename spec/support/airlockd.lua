-- Starts a real airlockd on an ephemeral loopback port for the integration specs, and stops
-- it. Each server gets its own state directory and freshly generated keys.
local log_secrets = require "support.log_secrets"
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

-- The test run's shared template bases ($AIRLOCK_TEST_TEMPLATE_BASES, set by scripts/test.sh)
-- put in env as SANDBOX_TEMPLATE_BASES, unless spec_env builds from other apt sources or names
-- bases of its own: the servers of one run then make the base every template starts from once,
-- not each its own (airlockd orders them with a file lock).
function M.shared_template_bases(env, spec_env)
  local shared = os.getenv("AIRLOCK_TEST_TEMPLATE_BASES")
  spec_env = spec_env or {}
  if shared and shared ~= "" and not spec_env.SANDBOX_TEMPLATE_SOURCES and not spec_env.SANDBOX_TEMPLATE_BASES then
    env.SANDBOX_TEMPLATE_BASES = shared
  end
end

-- opts.tenants: { acme = "key", ... } (default: tenants acme and other with random keys)
-- opts.env: extra environment variables for the server
-- opts.args: extra command-line arguments
-- opts.dir: the directory of a stopped server to start again on (its state in <dir>/state);
--   default a fresh one
-- opts.launcher: a command line put before airlockd's (e.g. "prlimit --nofile=256 --")
-- opts.wait: seconds to wait for it to listen (default 30)
-- opts.binary: the airlockd to run (default M.binary(); an A/B bench runs two builds)
-- opts.lean: for a spec that runs no command (sessions, files, keys, the SDK's handles): its
--   sessions get no sandbox of their own and no spares are made ahead (each is a gVisor boot:
--   most of the CPU of such a spec); SANDBOX_EXEC_MODE=command, SANDBOX_WARM_NEW=0
-- opts.private_template_bases: the server keeps its own cached template base (in its state)
--   instead of the run's shared one ($AIRLOCK_TEST_TEMPLATE_BASES, see M.shared_template_bases)
function M.start(opts)
  opts = opts or {}
  local tenants = opts.tenants or { acme = "ak_" .. random_hex(16), other = "ok_" .. random_hex(16) }
  local pairs_list = {}
  for tenant, key in pairs(tenants) do pairs_list[#pairs_list + 1] = tenant .. ":" .. key end
  table.sort(pairs_list)

  local dir = opts.dir or proc.make_temp_dir()
  os.remove(dir .. "/port") -- a killed predecessor's port file would be read as this one's

  -- Each session's workspace is a fully allocated disk image (546 MB at the default 512 MB
  -- quota): a test server may take at most 8 GB of the host's disk (15 such sessions at once),
  -- whatever its specs do, since other test runs share the machine. DNS for the egress proxy:
  -- never this machine's resolver; a spec that needs names brings its own server
  -- (support.egress_upstream), the others get lookups that fail at once. A spec's own setting wins.
  local env = { SANDBOX_API_KEYS = table.concat(pairs_list, ","), SANDBOX_DISK_TOTAL_MB = "8192",
                SANDBOX_EGRESS_DNS = "127.0.0.1:1" }
  if not opts.private_template_bases then M.shared_template_bases(env, opts.env) end
  if opts.lean then -- no sandbox booted per session nor per spare: a spec that runs no command
    env.SANDBOX_EXEC_MODE, env.SANDBOX_WARM_NEW = "command", "0"
  end
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local env_words = {}
  for k, v in pairs(env) do env_words[#env_words + 1] = k .. "=" .. shell_quote(v) end

  local server = proc.start_server({
    name = "airlockd", dir = dir, log = dir .. "/log", stop = M.stop, give_up_on_exit = true, wait = opts.wait,
    command = string.format("%s env %s %s --listen 127.0.0.1:0 --state-dir %s --port-file %s %s",
      opts.launcher or "", table.concat(env_words, " "), shell_quote(opts.binary or M.binary()),
      shell_quote(dir .. "/state"), shell_quote(dir .. "/port"), table.concat(opts.args or {}, " ")),
  })
  server.tenants = tenants
  server.log_path = dir .. "/log"
  server.secrets = log_secrets.from_env(env, tenants)
  return server
end

function M.log(server)
  return proc.read_file(server.log_path) or ""
end

-- text with the time and level taken off the front of each text log line ("<time> info  airlockd:
-- msg" -> "airlockd: msg"), for specs that compare whole lines.
function M.messages(text)
  return (text:gsub("%d%d%d%d%-%d%d%-%d%dT[%d:.]+Z %a+ +airlockd", "airlockd"))
end

function M.alive(server)
  return proc.alive(server.pid)
end

-- What of a server's state directory is still mounted or attached on the host: the mount points
-- under dir (from /proc/self/mountinfo, in its order) and the loop devices backed by files under
-- dir ({ "/dev/loop7", ... }).
function M.host_objects(dir)
  local mounts, loops = {}, {}
  local prefix = dir .. "/"
  for line in io.lines("/proc/self/mountinfo") do
    local mp = line:match("^%S+ %S+ %S+ %S+ (%S+)")
    mp = mp and mp:gsub("\\(%d%d%d)", function(o) return string.char(tonumber(o, 8)) end)
    if mp and mp:sub(1, #prefix) == prefix then mounts[#mounts + 1] = mp end
  end
  local p = io.popen("ls /sys/block 2>/dev/null")
  for name in p:lines() do
    local f = name:match("^loop%d+$") and io.open("/sys/block/" .. name .. "/loop/backing_file")
    if f then
      local back = (f:read("*l") or ""):gsub(" %(deleted%)$", "")
      f:close()
      if back:sub(1, #prefix) == prefix then loops[#loops + 1] = "/dev/" .. name end
    end
  end
  p:close()
  return { mounts = mounts, loops = loops }
end

-- host_objects(dir) once its loop devices are down to `loops` (default 0) and its mounts to
-- `mounts` (default 0), or after `seconds` (default 5): a loop detaches itself asynchronously
-- once its mount is gone.
function M.settled(dir, loops, mounts, seconds)
  local left
  proc.wait_until(seconds or 5, function()
    left = M.host_objects(dir)
    return #left.loops <= (loops or 0) and #left.mounts <= (mounts or 0)
  end)
  return left
end

-- Unmounts and detaches whatever a killed server left under dir (deepest first), so that
-- removing the directory never reaches into a workspace disk and no loop device lingers.
function M.release_host_objects(dir)
  for _ = 1, 4 do
    local left = M.host_objects(dir)
    if #left.mounts == 0 and #left.loops == 0 then return end
    for i = #left.mounts, 1, -1 do os.execute("umount -l " .. shell_quote(left.mounts[i]) .. " 2>/dev/null") end
    for _, dev in ipairs(left.loops) do os.execute("losetup -d " .. dev .. " 2>/dev/null") end
    proc.sleep(0.1)
  end
end

-- Stops it (SIGKILL after 5 s), releases what it left mounted, and removes its directory;
-- then errors if its log held a secret it was started with (support.log_secrets).
-- M.start (opts as there) with an admin key and a SQLite key store in a folder of its own:
-- server.admin is the admin key, server.keydir the folder, which M.stop removes.
function M.start_with_admin(opts)
  local keydir = proc.make_temp_dir()
  local admin = "adm_" .. random_hex(20)
  local with = { env = { SANDBOX_KEYSTORE = "sqlite:" .. keydir .. "/keys.db", SANDBOX_ADMIN_KEY = admin } }
  for k, v in pairs(opts or {}) do
    if k ~= "env" then with[k] = v end
  end
  for k, v in pairs((opts or {}).env or {}) do with.env[k] = v end
  local ok, server = pcall(M.start, with)
  if not ok then
    proc.remove_tree(keydir)
    error(server, 0)
  end
  server.admin, server.keydir = admin, keydir
  return server
end

function M.stop(server)
  proc.stop_process(server.pid, 5)
  server.pid = nil
  local leak = server.secrets and log_secrets.leaks(M.log(server), server.secrets, "airlockd's log " .. server.log_path)
  M.release_host_objects(server.dir)
  proc.remove_tree(server.dir)
  if server.keydir then proc.remove_tree(server.keydir) end
  if leak then error(leak, 2) end
end

return M
