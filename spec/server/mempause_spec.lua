-- luacheck: max line length 160
-- Pause with memory (issue #26 item 2): a session with a kernel is paused by `runsc checkpoint`
-- of its sandbox into an image (state/images/<id>.ckpt), nothing of it left running on the
-- host; a resume (explicit, or the next cell's) `runsc restore`s it, and the kernel's state is
-- there (x = 41 before, x + 1 is 42 after), the idle reaper pauses it the same way. A deleted
-- paused session leaves no image; a pause
-- while a cell runs is refused; an image that cannot be restored (damaged) gives a 500 naming
-- why, the session stays paused with its image (nothing of it on the host) and a resume after
-- the image is put right restores it, or discard_memory=1 gives the files; after a restart (SIGTERM or kill -9) the image is restored by the new
-- process, the kernel under its id with its x; one made by another runsc version is refused (409, the
-- session stays paused) until resume?discard_memory=1 takes the files only, also when runsc is
-- replaced under a running server (its version is asked again once its file changes). A pause
-- or memory snapshot whose save fails (its image directory full) leaves the session whole, as
-- its 500 says; one whose sandbox then cannot be resumed says its kernels' memory is lost, which
-- their next cell shows. Real
-- airlockd with gVisor (SANDBOX_EXEC_MODE=session, runsc through a wrapper script the spec can
-- replace), loopback only.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local kernel_client = require "support.kernel_client"
local proc = require "support.proc"
require "support.eventually"

local q = proc.shell_quote

describe("pause with memory (kernels)", function()
  local server, key, runsc_dir

  -- the server's runsc: a script that runs the real one, or answers --version with `version`;
  -- faults it makes once each, when their file is in runsc_dir: "fault-full" (the next checkpoint's
  -- image directory is a 2 MB filesystem: the save fails, no space left) and "fault-resume" (the
  -- next `runsc resume` fails)
  local real_runsc = os.getenv("AIRLOCK_RUNSC") or ".deps/runsc/usr/bin/runsc"
  if real_runsc:sub(1, 1) ~= "/" then real_runsc = proc.output("pwd"):gsub("%s+$", "") .. "/" .. real_runsc end
  local function install_runsc(version)
    local script = "#!/bin/sh\n"
    if version then
      script = script .. 'if [ "$1" = --version ]; then echo "runsc version ' .. version .. '"; exit 0; fi\n'
    end
    local full, resume = q(runsc_dir .. "/fault-full"), q(runsc_dir .. "/fault-resume")
    script = script .. table.concat({
      "dir=; prev=; verb=",
      'for a in "$@"; do [ "$prev" = --image-path ] && dir=$a; case "$a" in checkpoint|resume) verb=$a;; esac; prev=$a; done',
      'if [ "$verb" = checkpoint ] && [ -n "$dir" ] && rm ' .. full .. ' 2>/dev/null; then',
      '  mount -t tmpfs -o size=2m airlock-fault-full "$dir" || exit 99',
      '  ' .. q(real_runsc) .. ' "$@"; rc=$?; umount -l "$dir"; exit $rc',
      'fi',
      'if [ "$verb" = resume ] && rm ' .. resume .. ' 2>/dev/null; then echo "resume refused (a fault the spec made)" >&2; exit 1; fi',
      "",
    }, "\n")
    proc.write_file(runsc_dir .. "/runsc.new", script .. "exec " .. q(real_runsc) .. ' "$@"\n')
    -- a new file in its place (never one runsc half written while the server runs it)
    assert.is_true(proc.run("chmod 755 " .. q(runsc_dir .. "/runsc.new") .. " && mv " .. q(runsc_dir .. "/runsc.new") .. " "
      .. q(runsc_dir .. "/runsc")))
  end
  local function env()
    return { SANDBOX_EXEC_MODE = "session", AIRLOCK_RUNSC = runsc_dir .. "/runsc" }
  end

  local kc = kernel_client.new(function() return server, key end)
  local call, cell, session_with_x41 = kc.call, kc.cell, kc.session_with_x41

  local function image_dir(sid)
    return server.dir .. "/state/images/" .. sid .. ".ckpt"
  end

  -- what of sid runs or is mounted on the host
  local function leftovers(sid) return host_state.session_leftovers(server, sid) end

  local function pause(sid)
    local p = kc.pause(sid)
    assert.is_true(p.image_bytes > 0, cjson.encode(p))
    return p
  end

  lazy_setup(function()
    key = "ak_" .. airlockd.random_hex(16)
    runsc_dir = proc.make_temp_dir()
    install_runsc()
    server = airlockd.start({ tenants = { acme = key }, env = env() })
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
    if runsc_dir then proc.remove_tree(runsc_dir) end
  end)

  it("pauses a session with a kernel into a memory image and resumes it with the kernel's state", function()
    local sid, kid = session_with_x41()
    assert.are.equal(0, http_client.exec(server, key, sid, "echo kept > /workspace/f").json.exit_code)
    pause(sid)
    assert.is_true(proc.run("test -s " .. q(image_dir(sid)) .. "/checkpoint.img || ls " .. q(image_dir(sid)) .. " | grep -q ."))
    -- its sandbox's spec beside it (the bundles are cleared at a start): its workspace's mount
    local spec = cjson.decode(proc.output("cat " .. q(image_dir(sid) .. "/sandbox.json")))
    local workspace
    for _, m in ipairs(spec.mounts) do
      if m.destination == "/workspace" then workspace = m.source end
    end
    assert.truthy(workspace and workspace:find(sid, 1, true), cjson.encode(spec.mounts))
    assert.eventually(function()
      local left = leftovers(sid)
      return #left.sandboxes == 0 and #left.cgroups == 0 and left.mounts == "0", left
    end, { timeout = 20, what = "nothing of the paused session running or mounted" })
    -- marked as made with an agent that answers a ping: the restore is checked with one
    assert.is_true(proc.run("test -e " .. q(image_dir(sid) .. "/agent_pings")))
    -- (the resume primes the kernel's wait for its cgroup join by moving airlockd where it is: it stays there)
    local groups = proc.read_file("/proc/" .. server.pid .. "/cgroup")
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(200, r.status, r.body)
    assert.are.equal(groups, proc.read_file("/proc/" .. server.pid .. "/cgroup"))
    assert.is_true(r.json.resumed)
    assert.truthy(airlockd.log(server):find("session " .. sid .. " resumed in %d+ ms %(disk %d+ ms; sandbox restored[^,]*, its "
      .. "agent checked with a ping and 1 kernel%(s%) with theirs"), "the resume's check")
    assert.are.equal("42", cell(sid, kid, "x + 1").results[1]["text/plain"])
    assert.are.equal("kept\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    assert.is_false(proc.run("test -e " .. q(image_dir(sid))), "the image outlived its restore")
    -- (set aside at the resume, removed after it answered: nothing of it stays)
    assert.eventually(function()
      local left = proc.output("ls " .. q(server.dir .. "/state/images") .. " | grep -F " .. q(sid .. ".ckpt") .. " || true")
      return left == "", left
    end, { timeout = 20, what = "the restored image removed" })
    -- again, resumed by its next cell this time, from an image without the marks (as an older
    -- build's, whose agent and kernel do not know the ping): checked with a command
    cell(sid, kid, "x = x + 100")
    pause(sid)
    assert.is_true(proc.run("rm " .. q(image_dir(sid) .. "/agent_pings")))
    local listed = image_dir(sid) .. "/kernels.json"
    local unmarked = proc.read_file(listed):gsub(',"pings":true', "")
    assert.is_nil(unmarked:find("pings", 1, true), unmarked)
    proc.write_file(listed, unmarked)
    assert.are.equal("142", cell(sid, kid, "x + 1").results[1]["text/plain"])
    assert.truthy(airlockd.log(server):find("session " .. sid .. " resumed in %d+ ms %(disk %d+ ms; sandbox restored[^,]*, its "
      .. "agent checked with a command and 0 kernel%(s%) with theirs"), "the resume's check of an unmarked image")
    -- the restored sandbox is in the session's cgroups (runsc restores it where airlockd started
    -- it): its memory limit (256 MB) still ends a kernel that goes past it
    local big = call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute",
      { code = "b = bytearray(400 * 1024 * 1024)", timeout = 30 }, 90)
    assert.are.equal(200, big.status, big.body)
    assert.is_true(big.json.oom_killed, big.body)
    assert.is_true(big.json.kernel_restarted, big.body)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("answers a pause or memory snapshot whose save failed as it left the session: whole when resumed, its kernels' memory lost when not", function()
    local sid, kid = session_with_x41()
    assert.are.equal(0, http_client.exec(server, key, sid, "echo kept > /workspace/f").json.exit_code)
    local function fault(...)
      for _, name in ipairs({ ... }) do proc.write_file(runsc_dir .. "/fault-" .. name, "") end
    end
    local function faults_used()
      return not proc.run("ls " .. q(runsc_dir) .. " | grep -q '^fault-'")
    end
    -- the save fails (no space in its image directory): runsc held it paused, it is resumed, whole
    fault("full")
    local p = call("POST", "/v1/sessions/" .. sid .. "/pause", nil, 90)
    assert.are.equal(500, p.status, p.body)
    assert.is_true(faults_used())
    assert.truthy(p.json.detail:find("no space left on device", 1, true) and p.json.detail:find("still active, its kernels as they were", 1, true), p.body)
    assert.are.equal("active", call("GET", "/v1/sessions/" .. sid).json.state)
    local c = cell(sid, kid, "x + 1")
    assert.are.equal("42", (c.results[1] or {})["text/plain"], cjson.encode(c))
    assert.is_false(c.kernel_restarted)
    assert.is_false(proc.run("test -e " .. q(image_dir(sid))), "the failed image was kept")
    -- a memory snapshot's save the same
    fault("full")
    local s = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true }, 90)
    assert.are.equal(500, s.status, s.body)
    assert.is_true(faults_used())
    assert.truthy(s.json.detail:find("the session is untouched", 1, true), s.body)
    assert.are.equal("42", (cell(sid, kid, "x + 1").results[1] or {})["text/plain"])
    assert.are.equal(0, #call("GET", "/v1/snapshots").json.snapshots)
    -- the save fails and its sandbox cannot be resumed: it is ended, and the answer says its kernels' memory is lost
    fault("full", "resume")
    p = call("POST", "/v1/sessions/" .. sid .. "/pause", nil, 90)
    assert.are.equal(500, p.status, p.body)
    assert.is_true(faults_used())
    assert.truthy(p.json.detail:find("Its sandbox ended with the failed save", 1, true), p.body)
    assert.are.equal("active", call("GET", "/v1/sessions/" .. sid).json.state)
    c = cell(sid, kid, "x + 1")
    assert.is_true(c.kernel_restarted, cjson.encode(c))
    assert.are.equal("NameError", cell(sid, kid, "x").error.name)
    assert.are.equal("kept\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    -- a snapshot the same
    assert.are.equal(cjson.null, cell(sid, kid, "x = 5").error)
    fault("full", "resume")
    s = call("POST", "/v1/sessions/" .. sid .. "/snapshots", { memory = true }, 90)
    assert.are.equal(500, s.status, s.body)
    assert.truthy(s.json.detail:find("sandbox ended with the failed save", 1, true), s.body)
    assert.is_true(cell(sid, kid, "1").kernel_restarted)
    -- and it pauses and resumes with its memory as before
    assert.are.equal(cjson.null, cell(sid, kid, "x = 41").error)
    pause(sid)
    assert.are.equal("42", (cell(sid, kid, "x + 1").results[1] or {})["text/plain"])
    assert.are.equal("", proc.output("grep airlock-fault-full /proc/self/mounts || true"))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("leaves nothing of a deleted paused session, its image included", function()
    local sid = session_with_x41()
    pause(sid)
    assert.is_true(proc.run("test -d " .. q(image_dir(sid))))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    assert.eventually(function()
      local left = leftovers(sid)
      return #left.sandboxes == 0 and #left.cgroups == 0 and left.mounts == "0" and not proc.run("test -e " .. q(image_dir(sid))), left
    end, { timeout = 20, what = "nothing of the deleted paused session left" })
  end)

  it("keeps the image of a restore that failed (still paused, 500 naming why, nothing on the host) for another try", function()
    local sid, kid = session_with_x41()
    assert.are.equal(0, http_client.exec(server, key, sid, "echo kept > /workspace/f").json.exit_code)
    pause(sid)
    -- damaged: its state file cut short (its bytes kept aside, to be put back)
    local img = image_dir(sid) .. "/checkpoint.img"
    local aside = server.dir .. "/checkpoint.aside"
    assert.is_true(proc.run("cp " .. q(img) .. " " .. q(aside) .. " && truncate -s 4096 " .. q(img)))
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(500, r.status, r.body)
    assert.truthy(r.body:find("memory could not be restored", 1, true) and r.body:find("stays paused", 1, true), r.body)
    assert.are.equal("paused", call("GET", "/v1/sessions/" .. sid).json.state)
    assert.is_true(proc.run("test -s " .. q(img)), "the image went with the failed restore")
    assert.eventually(function()
      local left = leftovers(sid)
      return #left.sandboxes == 0 and #left.cgroups == 0 and left.mounts == "0", left
    end, { timeout = 20, what = "nothing of the session left on the host after the failed restore" })
    -- a call that resumes it says the same; it stays paused
    local c = call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute", { code = "x + 1" }, 90)
    assert.are.equal(500, c.status, c.body)
    assert.truthy(c.body:find("stays paused", 1, true), c.body)
    assert.are.equal("paused", call("GET", "/v1/sessions/" .. sid).json.state)
    -- the operator puts the image right: the next resume restores it, x and files there
    assert.is_true(proc.run("cp " .. q(aside) .. " " .. q(img)))
    r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(200, r.status, r.body .. airlockd.log(server):sub(-2500))
    assert.are.equal("42", cell(sid, kid, "x + 1").results[1]["text/plain"])
    assert.are.equal("kept\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    assert.is_false(proc.run("test -e " .. q(image_dir(sid))), "the image outlived its restore")
    -- damaged again: resume?discard_memory=1 still gives the files, the image then goes
    pause(sid)
    assert.is_true(proc.run("truncate -s 4096 " .. q(img)))
    assert.are.equal(500, call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90).status)
    r = call("POST", "/v1/sessions/" .. sid .. "/resume?discard_memory=1", nil, 90)
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("kept\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    assert.are.equal(404, call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute", { code = "1" }).status)
    assert.is_false(proc.run("test -e " .. q(image_dir(sid))), "the discarded image is still there")
    os.remove(aside)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("resumes a paused session once for calls that come together (two cells and a command): each waits for that resume, x kept", function()
    local sid, kid = session_with_x41()
    for round = 1, 2 do
      pause(sid)
      local cell_path = "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute"
      local calls = {
        http_client.post_async(server, key, cell_path, { code = "x + 1", timeout = 30 }, 120),
        http_client.post_async(server, key, cell_path, { code = "x + 1", timeout = 30 }, 120),
        http_client.exec_async(server, key, sid, "echo hi", 30),
      }
      for i = 1, 2 do
        local r, raw = calls[i].wait(150)
        assert.truthy(r and r.results, "round " .. round .. ", cell " .. i .. ": " .. tostring(raw))
        assert.are.equal("42", r.results[1] and r.results[1]["text/plain"], raw)
        assert.is_false(r.kernel_restarted, raw)
      end
      local e, raw = calls[3].wait(150)
      assert.are.equal("hi\n", e and e.stdout, raw)
    end
    local resumes = select(2, airlockd.log(server):gsub("session " .. sid .. " resumed in", ""))
    assert.are.equal(2, resumes, "one resume a round")
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("checks each restored kernel with a ping: one that does not answer fails the restore (500 naming it, still paused, image kept)", function()
    local sid, kid = session_with_x41()
    assert.are.equal(0, http_client.exec(server, key, sid, "echo kept > /workspace/f").json.exit_code)
    -- the kernel stopped (SIGSTOP) by a child of its own, which says so after it: saved stopped, restored stopped
    assert.are.equal(cjson.null, cell(sid, kid, "import subprocess\nsubprocess.Popen(['sh', '-c', "
      .. "'while [ ! -e /workspace/go ]; do sleep 0.05; done; kill -STOP $PPID; touch /workspace/stopped'])").error)
    assert.are.equal(0, http_client.exec(server, key, sid, "touch /workspace/go").json.exit_code)
    assert.eventually(function() return http_client.exec(server, key, sid, "test -e /workspace/stopped").json.exit_code == 0 end,
      { timeout = 30, what = "the kernel stopped" })
    pause(sid)
    local kernels = cjson.decode(proc.output("cat " .. q(image_dir(sid) .. "/kernels.json")))
    assert.are.same({ { kernel_id = kid, language = "python", slot = kernels[1].slot, pings = true } }, kernels)
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 120)
    assert.are.equal(500, r.status, r.body)
    assert.truthy(r.body:find("kernel " .. kid .. " did not answer its ping within 30 s of the restore", 1, true)
      and r.body:find("stays paused", 1, true), r.body)
    assert.are.equal("paused", call("GET", "/v1/sessions/" .. sid).json.state)
    assert.is_true(proc.run("test -s " .. q(image_dir(sid) .. "/checkpoint.img")), "the image went with the failed restore")
    assert.eventually(function()
      local left = leftovers(sid)
      return #left.sandboxes == 0 and #left.cgroups == 0 and left.mounts == "0", left
    end, { timeout = 20, what = "nothing of the session left on the host after the failed restore" })
    -- its files, without its memory
    r = call("POST", "/v1/sessions/" .. sid .. "/resume?discard_memory=1", nil, 90)
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("kept\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("refuses to pause a session whose kernel's cell runs (409 naming it), and pauses it once the cell ended", function()
    local sid, kid = session_with_x41()
    local body = cjson.encode({ code = "import time; time.sleep(4)", timeout = 20 })
    os.execute(string.format("curl -s -m 60 -H %s -H 'Content-Type: application/json' --data-binary %s %s >/dev/null 2>&1 &",
      q("X-API-Key: " .. key), q(body), q(server.url .. "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute")))
    assert.eventually(function()
      local p = call("POST", "/v1/sessions/" .. sid .. "/pause", nil, 90)
      return p.status == 409, p.body
    end, { timeout = 10, what = "a pause refused while the cell runs" })
    assert.eventually(function()
      local p = call("POST", "/v1/sessions/" .. sid .. "/pause", nil, 90)
      return p.status == 200 and p.json.image_bytes > 0, p.body
    end, { timeout = 30, what = "a pause once the cell ended" })
    local c = cell(sid, kid, "x + 1")
    assert.are.equal("42", (c.results[1] or {})["text/plain"], cjson.encode(c) .. airlockd.log(server):sub(-2500))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("pauses an idle session of on_idle pause with its kernel's memory (the idle reaper), and resumes it with x", function()
    local idle = airlockd.start({ tenants = { acme = key }, env = { SANDBOX_EXEC_MODE = "session", SANDBOX_SESSION_TTL = "3" } })
    local ok, err = pcall(function()
      local function icall(method, path, body)
        return http_client.request(idle, method, path, { key = key, body = body and cjson.encode(body), max_time = 60 })
      end
      local r = http_client.create(idle, key, '{"on_idle": "pause"}')
      assert.are.equal(201, r.status, r.body)
      local sid = r.json.session_id
      local kid = icall("POST", "/v1/sessions/" .. sid .. "/kernels", { language = "python" }).json.kernel_id
      assert.truthy(kid)
      assert.are.equal(200, icall("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute", { code = "x = 41" }).status)
      -- (its state says "paused" from the pause's start: the log says when it ended, and how)
      assert.eventually(function()
        return airlockd.log(idle):find("session " .. sid .. " paused in %d+ ms %(with its memory%)") ~= nil
      end, { timeout = 30, what = "the idle session paused with its memory" })
      assert.are.equal("paused", icall("GET", "/v1/sessions/" .. sid).json.state)
      assert.is_true(proc.run("test -d " .. q(idle.dir .. "/state/images/" .. sid .. ".ckpt")))
      local c = icall("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute", { code = "x + 1" })
      assert.are.equal(200, c.status, c.body)
      assert.are.equal("42", (c.json.results[1] or {})["text/plain"], c.body)
    end)
    airlockd.stop(idle)
    assert(ok, err)
  end)

  it("asks runsc's version again once its file changes: an image of the runsc before is refused, then resumed with it", function()
    local sid, kid = session_with_x41()
    pause(sid)
    install_runsc("0.0-replaced") -- another runsc put in place while the server runs
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(409, r.status, r.body)
    assert.truthy(r.body:find("this server runs runsc version 0.0-replaced", 1, true), r.body)
    assert.are.equal("paused", call("GET", "/v1/sessions/" .. sid).json.state)
    install_runsc() -- the one that made the image, back
    local c = cell(sid, kid, "x + 1")
    assert.are.equal("42", (c.results[1] or {})["text/plain"], cjson.encode(c))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  local function restart(signal, between)
    os.execute("kill -" .. signal .. " " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    if between then between() end
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = env(), wait = 60 })
  end

  it("refuses an image of another runsc version (409 naming both, still paused) until resume?discard_memory=1", function()
    local sid, kid = session_with_x41()
    assert.are.equal(0, http_client.exec(server, key, sid, "echo kept > /workspace/f").json.exit_code)
    pause(sid)
    restart("TERM", function()
      -- the image outlives the shutdown; its record now names a runsc this server is not
      assert.is_true(proc.run("test -s " .. q(image_dir(sid)) .. "/checkpoint.img"), "the shutdown removed the image")
      local path = server.dir .. "/state/sessions.json"
      local f = assert(io.open(path))
      local text = f:read("a")
      f:close()
      local edited, n = text:gsub('("runsc_version"%s*:%s*")[^"]*"', '%1runsc version 0.0-other"')
      assert.are.equal(1, n, text)
      f = assert(io.open(path, "w"))
      f:write(edited)
      f:close()
    end)
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(409, r.status, r.body)
    assert.truthy(r.body:find("runsc version 0.0-other", 1, true), r.body)
    assert.truthy(r.body:find("this server runs runsc version ", 1, true), r.body)
    assert.truthy(r.body:find("discard_memory=1", 1, true), r.body)
    -- a call that would resume it is refused the same way; nothing of it changed
    assert.are.equal(409, http_client.exec(server, key, sid, "true").status)
    assert.are.equal("paused", call("GET", "/v1/sessions/" .. sid).json.state)
    assert.is_true(proc.run("test -s " .. q(image_dir(sid)) .. "/checkpoint.img"))
    assert.are.equal(400, call("POST", "/v1/sessions/" .. sid .. "/resume?discard_memory=maybe", nil, 90).status)
    r = call("POST", "/v1/sessions/" .. sid .. "/resume?discard_memory=1", nil, 90)
    assert.are.equal(200, r.status, r.body)
    assert.is_true(r.json.resumed)
    assert.are.equal("kept\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    assert.are.equal(404, call("POST", "/v1/sessions/" .. sid .. "/kernels/" .. kid .. "/execute", { code = "1" }).status)
    assert.is_false(proc.run("test -e " .. q(image_dir(sid))), "the discarded image is still there")
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)

  it("after an airlockd SIGTERM or kill -9, resumes the memory image in the new process: the kernel's x is there", function()
    local sid, kid = session_with_x41()
    assert.are.equal(0, http_client.exec(server, key, sid, "echo kept > /workspace/f").json.exit_code)
    pause(sid)
    restart("TERM", function()
      assert.is_true(proc.run("test -s " .. q(image_dir(sid)) .. "/checkpoint.img"), "the shutdown removed the image")
    end)
    local r = call("POST", "/v1/sessions/" .. sid .. "/resume", nil, 90)
    assert.are.equal(200, r.status, r.body .. airlockd.log(server):sub(-2500))
    assert.is_true(r.json.resumed)
    assert.are.equal("42", cell(sid, kid, "x + 1").results[1]["text/plain"])
    assert.are.equal("kept\n", http_client.exec(server, key, sid, "cat /workspace/f").json.stdout)
    assert.is_false(proc.run("test -e " .. q(image_dir(sid))), "the image outlived its restore")
    -- paused again in this process, resumed by its next cell
    pause(sid)
    assert.are.equal("43", cell(sid, kid, "x + 2").results[1]["text/plain"])
    assert.are.equal(200, http_client.delete(server, key, sid).status)
    -- and after kill -9: resumed by its next cell
    sid, kid = session_with_x41()
    pause(sid)
    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(30, function() return not airlockd.alive(server) end))
    assert.is_true(proc.run("test -d " .. q(image_dir(sid))))
    server = airlockd.start({ dir = server.dir, tenants = server.tenants, env = env(), wait = 60 })
    assert.are.equal("paused", call("GET", "/v1/sessions/" .. sid).json.state)
    local c = cell(sid, kid, "x + 1")
    assert.are.equal("42", (c.results[1] or {})["text/plain"], cjson.encode(c) .. airlockd.log(server):sub(-2500))
    assert.is_false(proc.run("test -e " .. q(image_dir(sid))))
    assert.are.equal(200, http_client.delete(server, key, sid).status)
  end)
end)
