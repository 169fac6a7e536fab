-- Files, shell commands and background processes for the specs, the support servers and the
-- bench: shell quoting, reading and writing files, sleeping, running a command and capturing
-- its exit status and output, starting a server that writes its port to a file and waiting
-- for it, and stopping a process. Lua 5.1-compatible (LuaJIT and 5.4; no <close>).
local M = {}

-- s as one word for /bin/sh, in single quotes.
function M.shell_quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
local q = M.shell_quote

-- The whole file, or nil if it cannot be opened.
function M.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  return data
end

function M.write_file(path, data)
  local f = assert(io.open(path, "wb"))
  f:write(data)
  f:close()
end

function M.sleep(seconds)
  os.execute("sleep " .. seconds)
end

-- Whether os.execute's result means success: true on 5.2+, 0 on 5.1/LuaJIT.
function M.succeeded(status)
  return status == true or status == 0
end

-- Runs cmd; true when it exits 0.
function M.run(cmd)
  return M.succeeded(os.execute(cmd))
end

-- Runs cmd and returns what it writes to stdout.
function M.output(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("*a")
  p:close()
  return out
end

-- Runs cmd with stderr joined to stdout; returns its exit status and that output.
function M.run_capture(cmd)
  local out = M.output(cmd .. " 2>&1; echo \"__rc=$?\"")
  local rc = tonumber(out:match("__rc=(%d+)%s*$"))
  return rc, (out:gsub("__rc=%d+%s*$", ""))
end

-- The interpreter running this, as a command: luajit, lua5.4, lua5.1, ...
function M.lua_interpreter()
  if type(jit) == "table" then return "luajit" end
  return (_VERSION:gsub("^Lua ", "lua"))
end

-- The repository's top directory (absolute), from where this file is.
function M.repo_root()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  local dir = src:match("^(.*)/spec/support/[^/]*$")
  if not dir or dir == "" then dir = "." end
  if dir:sub(1, 1) ~= "/" then dir = os.getenv("PWD") .. "/" .. dir end
  return dir
end

-- A fresh name for a temporary file, in one directory of this process that goes when the
-- interpreter closes (busted closes it at exit on Lua 5.4 and LuaJIT), so files of background
-- jobs nobody collected (a failed test's) are not left in /tmp.
local scratch, scratch_guard, scratch_n = nil, nil, 0
function M.temp_path()
  if not scratch then
    scratch = M.make_temp_dir()
    local dir = scratch
    local function remove() os.execute("rm -rf --one-file-system " .. q(dir)) end
    local newproxy = rawget(_G, "newproxy")
    if newproxy then -- Lua 5.1 / LuaJIT: a userdata's __gc
      scratch_guard = newproxy(true)
      getmetatable(scratch_guard).__gc = remove
    else
      scratch_guard = setmetatable({}, { __gc = remove })
    end
  end
  scratch_n = scratch_n + 1
  return scratch .. "/" .. scratch_n
end

-- A fresh, empty temporary directory.
function M.make_temp_dir()
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. q(dir)))
  return dir
end

function M.remove_tree(dir)
  os.execute("rm -rf " .. q(dir))
end

-- Calls pred every step seconds (default 0.1) until it answers true or about `seconds` have
-- passed; returns its last answer.
function M.wait_until(seconds, pred, step)
  step = step or 0.1
  for _ = 1, math.ceil(seconds / step) do
    if pred() then return true end
    M.sleep(step)
  end
  return pred()
end

-- Whether pid is running. A zombie counts as ended: a process whose parent has gone waits as
-- a zombie until PID 1 reaps it, which here can take over a second.
function M.alive(pid)
  if pid == nil then return false end
  local stat = M.read_file("/proc/" .. pid .. "/stat")
  if stat then return stat:match("^%d+ %b() (%a)") ~= "Z" end
  return M.succeeded(os.execute("kill -0 " .. pid .. " 2>/dev/null"))
end

-- Sends pid SIGTERM. With grace_seconds, waits that long for it to end, then sends SIGKILL.
function M.stop_process(pid, grace_seconds)
  if not pid then return end
  os.execute("kill " .. pid .. " 2>/dev/null")
  if grace_seconds then
    M.wait_until(grace_seconds, function() return not M.alive(pid) end, 0.05)
    os.execute("kill -9 " .. pid .. " 2>/dev/null")
  end
end

-- Stops a server from start_server (see stop_process for grace_seconds) and removes its directory.
function M.stop_server(server, grace_seconds)
  M.stop_process(server.pid, grace_seconds)
  server.pid = nil
  M.remove_tree(server.dir)
end

-- Starts command (a quoted shell command line, without redirections) in the background with
-- stdout and stderr in log_path; its pid is written to pid_path, and returned.
function M.spawn(command, log_path, pid_path)
  assert(os.execute(string.format("%s > %s 2>&1 & echo $! > %s", command, q(log_path), q(pid_path))))
  return tonumber((M.read_file(pid_path) or ""):match("%d+"))
end

-- Starts a loopback server that writes the port it listens on to <dir>/port, and waits up to
-- opts.wait seconds (default 30: a start at the height of a loaded CI run took over 10) for that port. opts:
--   name     names the server in the error
--   dir      a fresh directory of the server's own (its pid goes to <dir>/pid)
--   command  the shell command line, quoted, without redirections
--   log      the file its stdout and stderr go to
--   stop     stop(server) for a server that did not start (default: stop_server)
--   give_up_on_exit  stop waiting as soon as the process has ended
-- Returns { dir, pid, port, url = "http://127.0.0.1:<port>" }.
function M.start_server(opts)
  local server = { dir = opts.dir, pid = M.spawn(opts.command, opts.log, opts.dir .. "/pid") }
  for _ = 1, math.ceil((opts.wait or 30) / 0.05) do
    local port = tonumber((M.read_file(opts.dir .. "/port") or ""):match("^%s*(%d+)%s*$"))
    if port then
      server.port = port
      server.url = "http://127.0.0.1:" .. port
      return server
    end
    if opts.give_up_on_exit and not M.alive(server.pid) then break end
    M.sleep(0.05)
  end
  local log = M.read_file(opts.log) or ""
  local stop = opts.stop or M.stop_server
  stop(server)
  error(opts.name .. " did not start:\n" .. log, 3)
end

return M
