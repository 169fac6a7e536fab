-- What the host harnesses (nginx, nvim, love) share: where the checkout is, the package
-- paths a LuaJIT host needs to find the SDK, the specs' support modules and the core built
-- for LuaJIT (build/luajit), and running a host to completion under a time limit with its
-- output captured and every process it left behind killed. Lua 5.1-compatible.
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

-- The checkout's absolute path, from where this file lives (spec/support/hosts/common.lua).
function M.top()
  local source = debug.getinfo(1, "S").source:gsub("^@", "")
  if source:sub(1, 1) ~= "/" then source = (os.getenv("PWD") or ".") .. "/" .. source end
  local top = source:gsub("/spec/support/hosts/common%.lua$", "")
  return top
end

-- package.path / package.cpath entries for a LuaJIT host, ending in ";;" (the host's default
-- path follows: Debian's lua-cjson is in LuaJIT's default cpath).
function M.lua_path()
  local top = M.top()
  return table.concat({ top .. "/lua/?.lua", top .. "/lua/?/init.lua", top .. "/spec/?.lua" }, ";") .. ";;"
end

function M.lua_cpath()
  return M.top() .. "/build/luajit/?.so;;"
end

-- "K1='v1' K2='v2' ..." for `env` on a shell command line (sorted: stable command lines).
function M.env_words(env)
  local words = {}
  for k, v in pairs(env or {}) do
    assert(tostring(k):match("^[%a_][%w_]*$"), "not an environment variable name: " .. tostring(k))
    words[#words + 1] = k .. "=" .. q(v)
  end
  table.sort(words)
  return table.concat(words, " ")
end

-- Kills every process of process group pgid (a `timeout` started by this module leads one).
function M.kill_group(pgid, signal)
  if pgid then os.execute(string.format("kill -%s -- -%d 2>/dev/null", signal or "KILL", pgid)) end
end

-- Runs `command` (a quoted shell command line) to completion, at most `seconds` (then
-- SIGTERM, SIGKILL 3 s later), under coreutils `timeout`, which leads its own process group:
-- whatever the command left running in that group is killed afterwards, also when it timed
-- out. stdin is /dev/null. Returns { code, timed_out, stdout, stderr }.
function M.run_bounded(command, seconds, env)
  local dir = proc.make_temp_dir()
  local out, err, pid_file, rc_file = dir .. "/stdout", dir .. "/stderr", dir .. "/pid", dir .. "/rc"
  local line = string.format("env %s timeout -k 3 %d %s < /dev/null > %s 2> %s & echo $! > %s; wait $!; echo $? > %s",
    M.env_words(env), math.ceil(seconds), command, q(out), q(err), q(pid_file), q(rc_file))
  os.execute(line)
  M.kill_group(tonumber((proc.read_file(pid_file) or ""):match("%d+")))
  local code = tonumber((proc.read_file(rc_file) or ""):match("%d+"))
  local result = {
    code = code,
    -- timeout's own codes: 124 after SIGTERM, 137 (128 + 9) after SIGKILL
    timed_out = code == 124 or code == 137,
    stdout = proc.read_file(out) or "",
    stderr = proc.read_file(err) or "",
  }
  proc.remove_tree(dir)
  return result
end

-- Runs a host (`command`, a quoted shell command line) on one script with run_bounded.
-- opts.script (a path) or opts.code (Lua source, written to <temp>/<file_name>); opts.timeout
-- (seconds, default 30); opts.env and env: more environment variables. The host reads the
-- script's path from $AIRLOCK_HOST_SCRIPT and the checkout's paths from $LUA_PATH/$LUA_CPATH;
-- what it hands to support.hosts.report comes back as .result. Its XDG data directory is a
-- temporary one, so nothing lands in the user's.
function M.run_host(command, opts, file_name, env)
  assert(opts.script or opts.code, "give opts.script or opts.code")
  local dir = proc.make_temp_dir()
  local script = opts.script
  if opts.code then
    script = dir .. "/" .. file_name
    proc.write_file(script, opts.code)
  end
  if script:sub(1, 1) ~= "/" then script = (os.getenv("PWD") or ".") .. "/" .. script end
  local result_file = dir .. "/result"
  local all_env = { LUA_PATH = M.lua_path(), LUA_CPATH = M.lua_cpath(), AIRLOCK_HOST_SCRIPT = script,
                    AIRLOCK_HOST_RESULT = result_file, XDG_DATA_HOME = dir .. "/data" }
  for _, more in ipairs({ env or {}, opts.env or {} }) do
    for k, v in pairs(more) do all_env[k] = v end
  end
  local run = M.run_bounded(command, opts.timeout or 30, all_env)
  run.result = proc.read_file(result_file)
  proc.remove_tree(dir)
  return run
end

return M
