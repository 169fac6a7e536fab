-- What an airlockd holds on the host, read from the host itself for the specs and the bench:
-- its memory figures (/proc/<pid>/status), its cgroups (the root named after its state dir,
-- in every hierarchy) and the processes that name a path (e.g. its runsc root).
-- Lua 5.1-compatible.
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

-- A field of /proc/<pid>/status in kB (VmHWM, VmRSS), or nil when the process is gone.
function M.status_kb(pid, field)
  local status = proc.read_file("/proc/" .. pid .. "/status")
  return status and tonumber(status:match(field .. ":%s*(%d+) kB"))
end

-- Whether the process runs with AddressSanitizer, whose quarantine keeps freed memory on
-- purpose (its memory figures say nothing about airlockd's own).
function M.sanitized(pid)
  return (proc.read_file("/proc/" .. pid .. "/maps") or ""):find("libasan", 1, true) ~= nil
end

-- Sets VmHWM back to the current VmRSS, so the next reading is the peak from now on.
function M.reset_peak(pid)
  local f = io.open("/proc/" .. pid .. "/clear_refs", "w")
  if not f then return false end
  f:write("5")
  f:close()
  return true
end

-- The server's cgroup root name: "airlockd-" .. 16 hex of SHA-256(realpath(state dir)).
function M.cgroup_root(state_dir)
  local real = proc.output("realpath -e " .. q(state_dir)):gsub("%s+$", "")
  local sum = proc.output("printf %s " .. q(real) .. " | sha256sum"):match("^(%x+)")
  return "airlockd-" .. sum:sub(1, 16)
end

-- Every cgroup directory under the root, in every hierarchy (paths, sorted).
function M.cgroups_under(root)
  local out = proc.output("for h in /sys/fs/cgroup/*; do [ -d \"$h/" .. root .. "\" ] && "
    .. "find \"$h/" .. root .. "\" -mindepth 1 -type d; done 2>/dev/null | sort")
  local list = {}
  for line in out:gmatch("[^\n]+") do list[#list + 1] = line end
  return list
end

-- Whether the root exists in any hierarchy.
function M.cgroup_root_exists(root)
  return proc.output("ls -d /sys/fs/cgroup/*/" .. root .. " 2>/dev/null") ~= ""
end

-- Removes a cgroup root a test left (its processes killed, frozen groups thawed first), in
-- every hierarchy; for the teardown of a test that killed its server.
function M.remove_cgroup_root(root)
  os.execute("for h in /sys/fs/cgroup/*; do d=\"$h/" .. root .. "\"; [ -d \"$d\" ] || continue; "
    .. "for f in $(find \"$d\" -name freezer.state); do echo THAWED > $f; done; "
    .. "for p in $(cat $(find \"$d\" -name cgroup.procs)); do kill -9 $p; done; sleep 0.2; "
    .. "find \"$d\" -depth -type d -exec rmdir {} \\; ; done 2>/dev/null")
end

-- The pids whose command line contains text.
function M.pids_naming(text)
  local pids = {}
  for pid in proc.output("ls /proc"):gmatch("%d+") do
    local cmd = proc.read_file("/proc/" .. pid .. "/cmdline")
    if cmd and cmd:find(text, 1, true) then
      pids[#pids + 1] = tonumber(pid)
    end
  end
  return pids
end

-- The container ids of the gVisor sandboxes of the server whose id starts with prefix (the
-- last word of their runsc command lines), sorted: session sid's own sandbox is
-- "<sid>-s-<pid>-<n>" (prefix sid .. "-s-"), every sandbox made for it starts with sid.
function M.sandbox_ids(server, prefix)
  local ids = {}
  for _, pid in ipairs(M.pids_naming(server.dir .. "/state/runsc")) do
    local cmd = proc.read_file("/proc/" .. pid .. "/cmdline") or ""
    local id = cmd:match("%z(" .. prefix:gsub("%p", "%%%0") .. "[^%z]*)%z?$")
    if id then ids[id] = true end
  end
  local list = {}
  for id in pairs(ids) do list[#list + 1] = id end
  table.sort(list)
  return list
end

-- What of session sid the server holds on the host: {sandboxes = its runsc sandbox ids,
-- cgroups = its groups under the server's cgroup root, mounts = how many /proc/mounts lines
-- name it, as a string}.
function M.session_leftovers(server, sid)
  local groups = {}
  for _, g in ipairs(M.cgroups_under(M.cgroup_root(server.dir .. "/state"))) do
    if g:find(sid, 1, true) then groups[#groups + 1] = g end
  end
  return { sandboxes = M.sandbox_ids(server, sid), cgroups = groups,
           mounts = proc.output("grep -c " .. q(sid) .. " /proc/mounts || true"):gsub("%s+", "") }
end

-- How many `runsc ... run` processes use the runsc root of the server in dir (a child that
-- runsc forked and has not yet exec'd shows the same command line: not counted). A session's
-- own sandbox (SANDBOX_EXEC_MODE=session: `runsc run --detach=false`, its agent on runsc's stdio) counts while it
-- runs a command: neither frozen (idle) nor without a CPU quota (booting).
function M.runsc_runs(server)
  local runs = {}
  for _, pid in ipairs(M.pids_naming(server.dir .. "/state/runsc")) do
    local cmd = proc.read_file("/proc/" .. pid .. "/cmdline") or ""
    if cmd:find("\0run\0--bundle\0", 1, true)
      or (cmd:find("\0run\0--detach=false\0", 1, true) and not M.frozen(pid)
        and M.cpu_quota(pid) ~= "-1") then
      runs[pid] = true
    end
  end
  local n = 0
  for pid in pairs(runs) do
    local ppid = tonumber(((proc.read_file("/proc/" .. pid .. "/stat") or ""):match("^%d+ %b() %a (%d+)")))
    if not runs[ppid] then n = n + 1 end
  end
  return n
end

-- The sandboxes of the server's cgroup root that were booted ahead and wait, frozen, for their
-- command: their freezer groups (paths, sorted).
function M.waiting_sandboxes(root)
  local out = proc.output("for f in /sys/fs/cgroup/freezer/" .. root .. "/*/*/freezer.state; do "
    .. "[ -f \"$f\" ] && [ \"$(cat \"$f\")\" = FROZEN ] && dirname \"$f\"; done 2>/dev/null | sort")
  local list = {}
  for line in out:gmatch("[^\n]+") do list[#list + 1] = line end
  return list
end

-- The CPU quota (cpu.cfs_quota_us) of process pid's cpu group, nil when unknown.
function M.cpu_quota(pid)
  for controllers, path in (proc.read_file("/proc/" .. pid .. "/cgroup") or ""):gmatch("%d+:([^:\n]*):([^\n]*)") do
    if ("," .. controllers .. ","):find(",cpu,", 1, true) then
      return M.cgroup_value("/sys/fs/cgroup/cpu" .. path, "cpu.cfs_quota_us")
    end
  end
  return nil
end

-- Whether process pid is frozen: in a freezer group (a sandbox booted ahead waiting for its
-- command) whose state is FROZEN.
function M.frozen(pid)
  local path = (proc.read_file("/proc/" .. pid .. "/cgroup") or ""):match("%d+:freezer:([^\n]*)")
  return path ~= nil and M.cgroup_value("/sys/fs/cgroup/freezer" .. path, "freezer.state") == "FROZEN"
end

-- How many `runsc run --pass-fd ...` and `runsc run --detach=false ...` processes (sandboxes
-- booted ahead, waiting or running a command; a session's own) use the runsc root of the server
-- in dir.
function M.ahead_runs(server)
  local n = 0
  for _, pid in ipairs(M.pids_naming(server.dir .. "/state/runsc")) do
    local cmd = proc.read_file("/proc/" .. pid .. "/cmdline") or ""
    if cmd:find("\0run\0--pass-fd\0", 1, true) or cmd:find("\0run\0--detach=false\0", 1, true) then n = n + 1 end
  end
  return n
end

-- A control file of one cgroup directory, trimmed (nil when gone).
function M.cgroup_value(dir, file)
  local text = proc.read_file(dir .. "/" .. file)
  return text and (text:gsub("%s+$", ""))
end

return M
