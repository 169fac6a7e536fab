-- luacheck: max line length 140
-- A bare `runsc run` with the flags src/server/sandbox/gvisor.c uses, on an OCI bundle of our
-- own over an airlockd's generated root: the baseline the benchmarks put airlockd beside.
-- Needs root (runsc). Lua 5.1-compatible.
local proc = require "support.proc"
local cjson = require "cjson"

local M = {}

local q = proc.shell_quote

M.runsc = os.getenv("AIRLOCK_RUNSC") or ".deps/runsc/usr/bin/runsc"

-- The OCI config src/server/sandbox/oci.c writes, minus nothing that costs time: same mounts, limits,
-- namespaces, user and empty capability sets.
function M.config(rootfs, workspace, command, cgroups_path)
  local function m(dst, typ, src, opts) return { destination = dst, type = typ, source = src, options = opts } end
  local tmp = { "nosuid", "nodev", "noexec", "size=64m", "mode=1777" }
  local json = cjson.encode({
    ociVersion = "1.0.2",
    process = {
      terminal = false, user = { uid = 1000, gid = 1000 }, args = { "/bin/bash", "-c", command },
      env = { "HOME=/tmp", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }, cwd = "/workspace",
      rlimits = { { type = "RLIMIT_NPROC", hard = 64, soft = 64 }, { type = "RLIMIT_NOFILE", hard = 65536, soft = 65536 },
        { type = "RLIMIT_CORE", hard = 0, soft = 0 } },
      noNewPrivileges = true,
    },
    root = { path = rootfs, readonly = true },
    hostname = "sandbox",
    mounts = {
      m("/proc", "proc", "proc", { "nosuid", "noexec", "nodev" }),
      m("/dev", "tmpfs", "tmpfs", { "nosuid", "strictatime", "mode=755", "size=65536k" }),
      m("/dev/pts", "devpts", "devpts", { "nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620" }),
      m("/dev/shm", "tmpfs", "shm", tmp),
      m("/sys", "sysfs", "sysfs", { "nosuid", "noexec", "nodev", "ro" }),
      m("/usr", "bind", "/usr", { "rbind", "ro", "nosuid", "nodev" }),
      m("/workspace", "bind", workspace, { "rbind", "rw", "nosuid", "nodev" }),
      m("/tmp", "tmpfs", "tmpfs", tmp),
    },
    linux = { namespaces = { { type = "pid" }, { type = "network" }, { type = "ipc" }, { type = "uts" }, { type = "mount" } },
      cgroupsPath = cgroups_path },
  })
  -- every capability set empty (lua-cjson encodes an empty table as an object, so splice it in)
  local caps = '"capabilities":{"bounding":[],"effective":[],"inheritable":[],"permitted":[],"ambient":[]},'
  local spliced, count = json:gsub('"noNewPrivileges":true,?', function(w) return caps .. w end, 1)
  assert(count == 1, "cannot place capabilities in the OCI config")
  return spliced
end

-- A runner of commands under bare runsc beside the airlockd `server` (its generated root),
-- with its own runsc root, bundles and workspace under <server dir>/bare<tag>. run(command,
-- pipe) returns what the command wrote to stdout, through `pipe` when given (e.g. "wc -c").
-- With cgroup_root (a name), each run gets a memory-limited (256 MB) cgroup
-- /<cgroup_root>/<id> named in linux.cgroupsPath, without --ignore-cgroups, as airlockd runs
-- runsc; otherwise runsc gets --ignore-cgroups (and the sandbox sees the host's memory).
function M.runner(server, tag, cgroup_root)
  local rootfs = server.dir .. "/state/sandbox-root"
  local dir = server.dir .. "/bare" .. (tag or "")
  assert(proc.run("mkdir -p " .. q(dir .. "/ws") .. " " .. q(dir .. "/root") .. " && chown 1000:1000 " .. q(dir .. "/ws")))
  local n = 0
  return function(command, pipe)
    n = n + 1
    local id = "bench-bare" .. (tag or "") .. "-" .. n
    local bundle = dir .. "/b" .. n
    assert(proc.run("mkdir -p " .. q(bundle)))
    local cg = cgroup_root and ("/" .. cgroup_root .. "/" .. id)
    proc.write_file(bundle .. "/config.json", M.config(rootfs, dir .. "/ws", command, cg))
    local prefix = ""
    if cg then
      assert(proc.run("for c in memory pids cpu; do mkdir -p /sys/fs/cgroup/$c" .. cg .. "; done && echo 268435456 > "
        .. "/sys/fs/cgroup/memory" .. cg .. "/memory.limit_in_bytes"))
      prefix = "for c in memory pids cpu; do echo $$ > /sys/fs/cgroup/$c" .. cg .. "/cgroup.procs; done; exec "
    end
    local out = proc.output("sh -c " .. q(prefix .. table.concat({ q(M.runsc), "--root", q(dir .. "/root"), "--platform=systrap",
      "--network=none", "--overlay2=none", cg and "" or "--ignore-cgroups", "--host-uds=none", "run", "--bundle", q(bundle), id }, " ")
      .. " 2>&1") .. (pipe and (" | " .. pipe) or ""))
    if cg then
      os.execute("for h in /sys/fs/cgroup/*; do rmdir $h" .. cg .. " 2>/dev/null; done")
    end
    proc.remove_tree(bundle)
    return out
  end
end

-- A bare `runsc restore` beside the airlockd `server`, as the issue measured one: a Python
-- process holding x = 41 that answers each line of its stdin with eval(line), run once under
-- bare runsc (the runner's flags, --ignore-cgroups; its stdout a pipe, as a restored one's is)
-- and checkpointed (--compression=none, as airlockd's are). restore() brings that image back
-- under a new id with "x + 1" on its stdin and returns what it wrote ("42\n"): the restore, the
-- answer and its end (the end of its stdin ends it), as `runsc run true` is a boot and an end.
-- stop() removes what it made.
function M.restorer(server, tag)
  local rootfs = server.dir .. "/state/sandbox-root"
  local dir = server.dir .. "/restore" .. (tag or "")
  local flags = table.concat({ q(M.runsc), "--root", q(dir .. "/root"), "--platform=systrap", "--network=none",
    "--overlay2=none", "--ignore-cgroups", "--host-uds=none" }, " ")
  assert(proc.run("mkdir -p " .. q(dir .. "/ws") .. " " .. q(dir .. "/root") .. " " .. q(dir .. "/b") .. " "
    .. q(dir .. "/img") .. " && chown 1000:1000 " .. q(dir .. "/ws") .. " && mkfifo " .. q(dir .. "/in")))
  local program = "exec python3 -c 'import sys\nx = 41\nprint(\"ready\", flush=True)\n"
    .. "for line in sys.stdin:\n    print(eval(line), flush=True)'"
  proc.write_file(dir .. "/b/config.json", M.config(rootfs, dir .. "/ws", program, nil))
  -- its stdin a FIFO held open by a sleep of ours (ended by its pid once checkpointed)
  assert(proc.run("sh -c " .. q("sleep 600 > " .. q(dir .. "/in") .. " & echo $! > " .. q(dir .. "/sleep.pid") .. "; "
    .. flags .. " run --bundle " .. q(dir .. "/b") .. " base < " .. q(dir .. "/in") .. " 2>&1 | cat > "
    .. q(dir .. "/run.out") .. " &")))
  -- checkpointed once it waits for its input (it said "ready" just before)
  local ready = proc.wait_until(60, function() return (proc.read_file(dir .. "/run.out") or ""):find("ready") end, 0.1)
  local saved = ready and proc.run(flags .. " checkpoint --compression=none --image-path " .. q(dir .. "/img")
    .. " base >/dev/null 2>&1")
  local sleeper = tonumber(proc.read_file(dir .. "/sleep.pid") or "")
  if sleeper then os.execute("kill " .. sleeper .. " 2>/dev/null") end
  assert(saved, "the bare Python process could not be checkpointed")
  local n = 0
  local function restore()
    n = n + 1
    return proc.output("echo 'x + 1' | " .. flags .. " restore --image-path " .. q(dir .. "/img") .. " --bundle "
      .. q(dir .. "/b") .. " r" .. n .. " 2>&1")
  end
  local function stop()
    proc.remove_tree(dir)
  end
  return restore, stop
end

-- A bare `runsc restore` of a copy of an airlockd session's memory image (image_dir, taken
-- while its session is paused), outside airlockd: its kept spec (sandbox.json) with no cgroup
-- (--ignore-cgroups, as the runner's) and its workspace an empty directory of its own. restore()
-- brings it back under a new id with a FRAME_PING (src/agent/protocol.h) on its agent's stdin
-- and returns the agent's first frame ("!" and a zero slot and length: its FRAME_PONG), the end of
-- its stdin ending it: runsc's own cost of restoring that very sandbox to its first answer.
-- Needs an image made by a build whose agent answers a ping (its agent_pings mark). stop()
-- removes the copy.
function M.image_restorer(server, image_dir, tag)
  local dir = server.dir .. "/image-restore" .. (tag or "")
  assert(proc.run("mkdir -p " .. q(dir .. "/ws") .. " " .. q(dir .. "/root") .. " " .. q(dir .. "/b") .. " && chown 1000:1000 "
    .. q(dir .. "/ws") .. " && cp -a " .. q(image_dir) .. " " .. q(dir .. "/img") .. " && test -e " .. q(dir .. "/img/agent_pings")))
  -- (rewritten by the host's python3: lua-cjson would write its empty capability lists as objects)
  assert(proc.run("python3 -c " .. q("import json, sys\n"
    .. "spec = json.load(open(sys.argv[1]))\n"
    .. "spec['linux'].pop('cgroupsPath', None)\n"
    .. "for m in spec['mounts']:\n"
    .. "    if m['destination'] == '/workspace': m['source'] = sys.argv[2]\n"
    .. "json.dump(spec, open(sys.argv[3], 'w'))") .. " " .. q(dir .. "/img/sandbox.json") .. " " .. q(dir .. "/ws") .. " "
    .. q(dir .. "/b/config.json")))
  local flags = table.concat({ q(M.runsc), "--root", q(dir .. "/root"), "--platform=systrap", "--network=none",
    "--overlay2=none", "--ignore-cgroups", "--host-uds=none" }, " ")
  local n = 0
  local function restore()
    n = n + 1
    return proc.output("printf '?\\001\\000\\000\\000\\000' | " .. flags .. " restore --image-path " .. q(dir .. "/img")
      .. " --bundle " .. q(dir .. "/b") .. " i" .. n .. " 2>/dev/null | head -c 6 | od -An -c | tr -s ' \\n' ' '")
  end
  local function stop()
    proc.remove_tree(dir)
  end
  return restore, stop
end

-- Removes what runners with cgroup_root left (its tenant-less root in every hierarchy).
function M.remove_cgroup_root(cgroup_root)
  os.execute("for h in /sys/fs/cgroup/*; do [ -d $h/" .. cgroup_root .. " ] && rmdir $h/" .. cgroup_root .. "; done 2>/dev/null")
end

return M
