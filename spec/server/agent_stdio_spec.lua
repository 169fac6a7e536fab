-- luacheck: max line length 160
-- A session sandbox's agent speaks on its stdin and stdout (issue #26 item 1; the frames and
-- channels are src/agent/protocol.h's): every slot's frames share the one stdout, each slot
-- within its window (FRAME_CREDIT), read by whichever airlockd thread waits for them. Real
-- airlockd with gVisor (SANDBOX_EXEC_MODE=session): commands on every slot at once with
-- megabytes of output each, intact; a streamed command whose client reads slowly stalls
-- neither the session's other commands nor the agent; a command flooding its slot is killed
-- at its timeout and by its client's hang-up; and the point of it all: `runsc checkpoint`
-- of the session's sandbox, then `runsc restore` of it with new stdin and stdout, after which
-- the restored agent runs a command and answers on them. Loopback only.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"

local q = proc.shell_quote

local function runsc_path()
  return os.getenv("AIRLOCK_RUNSC") or proc.repo_root() .. "/.deps/runsc/usr/bin/runsc"
end

-- What `seq -f PREFIX%g 1 N` prints.
local function seq_text(prefix, n)
  local lines = {}
  for i = 1, n do lines[i] = prefix .. i .. "\n" end
  return table.concat(lines)
end

local function usage(server, key)
  return http_client.request(server, "GET", "/v1/usage", { key = key }).json
end

-- A little-endian u32, and a frame (protocol.h: type, slot, length, payload).
local function u32(n)
  return string.char(n % 256, math.floor(n / 256) % 256, math.floor(n / 65536) % 256, math.floor(n / 16777216) % 256)
end

local function frame(type, slot, payload)
  return type .. string.char(slot) .. u32(#payload) .. payload
end

-- The frames in data, complete ones only: { type, slot, payload } each.
local function frames_in(data)
  local out, pos = {}, 1
  while #data - pos + 1 >= 6 do
    local b1, b2, b3, b4 = data:byte(pos + 2, pos + 5)
    local len = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    if #data - pos + 1 < 6 + len then break end
    out[#out + 1] = { type = data:sub(pos, pos), slot = data:byte(pos + 1), payload = data:sub(pos + 6, pos + 5 + len) }
    pos = pos + 6 + len
  end
  return out
end

describe("a session sandbox's agent on stdin and stdout (SANDBOX_EXEC_MODE=session)", function()
  local server, key, sid

  lazy_setup(function()
    server = airlockd.start({ tenants = { acme = "ak_" .. airlockd.random_hex(16) },
      env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WARM_NEW = "0", SANDBOX_OUTPUT_MAX_KB = "8192" } })
    key = server.tenants.acme
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    sid = r.json.session_id
    r = http_client.exec(server, key, sid, "true")
    assert.are.equal(200, r.status, r.body)
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("runs four commands at once (the tenant's max_concurrent_exec), each one's megabytes of output intact and in order", function()
    local box = host_state.sandbox_ids(server, sid)
    assert.are.equal(1, #box)
    -- each says it started, waits for the other three, then writes its lines (and some stderr)
    local counts = { 200000, 200000, 200000, 600000 }
    local runs = {}
    for i, n in ipairs(counts) do
      local cmd = string.format("touch /workspace/m%d; ", i)
        .. http_client.until_in_sandbox([[len([f for f in os.listdir("/workspace") if re.fullmatch("m[0-9]", f)]) == 4]])
        .. string.format("seq -f 's%d-%%g' 1 %d; seq -f 'e%d-%%g' 1 1000 >&2; exit %d", i, n, i, i)
      runs[i] = http_client.exec_async(server, key, sid, cmd, 60)
    end
    for i, n in ipairs(counts) do
      local r, raw = runs[i].wait(240)
      assert.truthy(r, raw and raw:sub(1, 300))
      assert.are.equal(i, r.exit_code, cjson.encode(r):sub(1, 400))
      assert.is_true(r.stdout == seq_text("s" .. i .. "-", n), "slot output " .. i .. " not intact (" .. #r.stdout .. " bytes)")
      assert.are.equal(seq_text("e" .. i .. "-", 1000), r.stderr)
    end
    assert.are.same(box, host_state.sandbox_ids(server, sid))
    assert.are.equal(0, http_client.exec(server, key, sid, "rm /workspace/m?").json.exit_code)
  end)

  it("lets a client read one command's stream slowly without stalling the session's other commands", function()
    -- curl reads 10 KB/s of a stream that could be 100 MB (its pid in a file, to hang up)
    local base = proc.temp_path()
    local body = cjson.encode({ command = "yes slow | head -c 100000000", stream = true, timeout_seconds = 60 })
    os.execute(string.format("(curl -sN --limit-rate 10K -m 90 -H %s -H %s --data-binary %s %s > %s & echo $! > %s; wait $!; "
      .. "echo done > %s) >/dev/null 2>&1 &",
      q("X-API-Key: " .. key), q("Content-Type: application/json"), q(body),
      q(server.url .. "/v1/sessions/" .. sid .. "/exec"), q(base .. ".out"), q(base .. ".pid"), q(base .. ".done")))
    finally(function() -- (a failure below leaves no stream holding a slot for the next tests)
      local left = tonumber(proc.read_file(base .. ".pid") or "")
      if left and not proc.read_file(base .. ".done") then os.execute("kill " .. left .. " 2>/dev/null") end
    end)
    assert.is_true(proc.wait_until(60, function() return #(proc.read_file(base .. ".out") or "") > 20000 end, 0.1))
    -- meanwhile the session's other commands, each more than a window of output, run whole
    for i = 1, 3 do
      local r = http_client.exec(server, key, sid, "seq -f 'n%g' 1 60000; echo " .. i .. " >&2", 60)
      assert.are.equal(200, r.status, r.body)
      -- (should it fail: how the command ended, and the server's last lines, CI keeping 8 of a failure)
      local function how()
        local tail = {}
        for line in airlockd.log(server):gmatch("[^\n]+") do tail[#tail + 1] = airlockd.messages(line):sub(1, 200) end
        return string.format("command %d: exit %s, %d bytes of stdout, stderr %q, warnings %s\n%s", i, tostring(r.json.exit_code),
          #(r.json.stdout or ""), tostring(r.json.stderr), cjson.encode(r.json.warnings or {}),
          table.concat(tail, "\n", math.max(1, #tail - 4)))
      end
      if r.json.stdout ~= seq_text("n", 60000) or r.json.stderr ~= i .. "\n" then error(how(), 0) end
    end
    assert.is_nil(proc.read_file(base .. ".done"), "the slow stream ended early")
    assert.are.equal(1, usage(server, key).commands_running)
    -- the slow client hangs up: its command is killed, its slot free again
    local pid = tonumber(proc.read_file(base .. ".pid"))
    assert.truthy(pid)
    os.execute("kill " .. pid)
    assert.is_true(proc.wait_until(30, function() return usage(server, key).commands_running == 0 end, 0.5)) -- (0.5 s: the tenant has 120 requests a minute)
    assert.is_true(proc.wait_until(30, function() return proc.read_file(base .. ".done") ~= nil end))
    assert.are.equal("ok\n", http_client.exec(server, key, sid, "echo ok").json.stdout)
    for _, ext in ipairs({ ".pid", ".out", ".done" }) do os.remove(base .. ext) end
  end)

  it("kills a command that floods its slot at its timeout, while another slot's command runs on", function()
    local flood = http_client.exec_async(server, key, sid, "yes flood", 3)
    local other = http_client.exec_async(server, key, sid, "sleep 5; echo fine", 60)
    local rf, ro = flood.wait(120), other.wait(120)
    assert.truthy(rf and ro)
    assert.is_true(rf.timed_out, rf.output and rf.output:sub(1, 200))
    assert.is_false(ro.timed_out)
    assert.are.equal("fine\n", ro.stdout)
    assert.is_true(proc.wait_until(30, function() return usage(server, key).commands_running == 0 end, 0.5)) -- (0.5 s: the tenant has 120 requests a minute)
    assert.are.equal("ok\n", http_client.exec(server, key, sid, "echo ok").json.stdout)
  end)

  it("survives runsc checkpoint and runsc restore: the restored agent answers on its new stdin and stdout", function()
    assert.are.equal(0, http_client.exec(server, key, sid, "echo before > /workspace/marker").json.exit_code)
    local root = host_state.cgroup_root(server.dir .. "/state")
    local id = host_state.sandbox_ids(server, sid .. "-s-")[1]
    assert.truthy(id)
    -- idle and frozen by airlockd; thawed here for the checkpoint (a frozen sandbox cannot be saved)
    assert.is_true(proc.wait_until(30, function() return #host_state.waiting_sandboxes(root) == 1 end, 0.05))
    local freezer = proc.output("find /sys/fs/cgroup/freezer/" .. root .. " -type d -name " .. q(id)):gsub("%s+$", "")
    assert.truthy(freezer ~= "", "no freezer group for " .. id)
    local dir = proc.make_temp_dir()
    -- its bundle, without airlockd's cgroup (the restored sandbox runs outside it)
    local text = proc.read_file(server.dir .. "/state/sandbox-bundles/" .. id .. "/config.json")
    assert.truthy(text, "no bundle for " .. id)
    local config, cut = text:gsub(',%s*"cgroupsPath"%s*:%s*"[^"]*"', "")
    assert.are.equal(1, cut, text)
    assert.is_true(proc.run("mkdir -p " .. q(dir .. "/bundle") .. " " .. q(dir .. "/image") .. " " .. q(dir .. "/root")))
    proc.write_file(dir .. "/bundle/config.json", config)
    proc.write_file(freezer .. "/freezer.state", "THAWED")
    local runsc = runsc_path()
    local ok = proc.run(string.format("%s --root %s checkpoint --image-path %s %s", q(runsc), q(server.dir .. "/state/runsc"),
      q(dir .. "/image"), q(id)))
    assert.is_true(ok, "runsc checkpoint failed")
    -- restored under a root of its own, its stdin a FIFO written here, its stdout a file
    assert.is_true(proc.run("mkfifo " .. q(dir .. "/in")))
    os.execute(string.format("(timeout 60 %s --root %s --platform=systrap --network=none --overlay2=none --host-uds=none restore "
      .. "--image-path %s --bundle %s %s < %s > %s 2> %s; echo $? > %s) &",
      q(runsc), q(dir .. "/root"), q(dir .. "/image"), q(dir .. "/bundle"), q(id), q(dir .. "/in"), q(dir .. "/out"),
      q(dir .. "/err"), q(dir .. "/rc")))
    local stdin = assert(io.open(dir .. "/in", "wb"))
    local payload = u32(20000) .. "cat /workspace/marker; echo restored; echo err >&2; exit 5\0" .. "PATH=/usr/bin:/bin\0"
    stdin:write(frame("C", 2, payload))
    stdin:flush()
    local got, answered
    proc.wait_until(60, function()
      got = frames_in(proc.read_file(dir .. "/out") or "")
      for _, f in ipairs(got) do
        if f.type == "X" and f.slot == 2 then answered = true end
      end
      return answered or proc.read_file(dir .. "/rc") ~= nil
    end, 0.05)
    stdin:close() -- end of file: the agent, and the restored sandbox, end
    local out, err, exit = {}, {}, nil
    for _, f in ipairs(got or {}) do
      if f.slot == 2 and f.type == "1" then out[#out + 1] = f.payload end
      if f.slot == 2 and f.type == "2" then err[#err + 1] = f.payload end
      if f.slot == 2 and f.type == "X" then exit = f.payload end
    end
    assert.is_true(proc.wait_until(30, function() return proc.read_file(dir .. "/rc") ~= nil end))
    os.execute(string.format("%s --root %s delete --force %s >/dev/null 2>&1", q(runsc), q(dir .. "/root"), q(id)))
    local log = proc.read_file(dir .. "/err") or ""
    proc.remove_tree(dir)
    assert.is_true(answered, "no answer after the restore: " .. #got .. " frames; runsc: " .. log)
    assert.are.equal("before\nrestored\n", table.concat(out))
    assert.are.equal("err\n", table.concat(err))
    assert.are.equal(u32(5) .. "\0", exit)
  end)
end)
