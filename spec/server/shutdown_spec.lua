-- luacheck: max line length 160
-- airlockd's orderly stop and client hang-ups (issue #8, deliverable 6; README "Limits"):
-- SIGTERM closes the listening socket at once, lets running commands finish within
-- SANDBOX_SHUTDOWN_GRACE and delivers their results, keeps the workspaces, then exits; the end
-- of the grace period or a second signal stops what still runs (503, sandboxes gone). A client
-- that hangs up mid-exec gets its command killed and its concurrency slot freed. Real
-- sandboxes; bounds are generous (they prove "did not wait for the command"), never timings.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"
local socket = require "socket"
local cjson = require "cjson"

local q = proc.shell_quote

-- Processes of this server's sandboxes (runsc, its sandbox and gofer: their --root is in the
-- state directory), those whose command line also holds `also` when given.
-- (but_waiting: not counting the frozen ones of a sandbox booted ahead for a next command)
local function sandbox_processes(server, also, but_waiting)
  local n = 0
  for line in proc.output("ps -eo pid=,args="):gmatch("[^\n]+") do
    if line:find(server.dir .. "/state/runsc", 1, true) and (not also or line:find(also, 1, true))
      and not (but_waiting and host_state.frozen(line:match("^%s*(%d+)"))) then
      n = n + 1
    end
  end
  return n
end

-- Commands running: their `runsc run`.
-- Sandboxes running a command: one per command, or (SANDBOX_EXEC_MODE=session) a session's
-- own sandbox while it runs one (host_state.runsc_runs).
local function running_commands(server)
  return host_state.runsc_runs(server)
end

-- An exec in the background with curl; returns its pid and the file its answer goes to.
local function exec_in_background(server, key, id, command, timeout)
  -- (in this process's scratch directory: removed at exit even if nobody collects the job)
  local dir = proc.temp_path()
  assert(os.execute("mkdir " .. q(dir)))
  local body = cjson.encode({ command = command, timeout_seconds = timeout or 40 })
  local cmd = string.format("curl -s -m 120 -o %s -w '%%{http_code}' -H 'Content-Type: application/json' -H %s --data-binary %s %s",
    q(dir .. "/body"), q("X-API-Key: " .. key), q(body), q(server.url .. "/v1/sessions/" .. id .. "/exec"))
  local pid = proc.spawn(cmd, dir .. "/code", dir .. "/pid")
  local job = { pid = pid }
  function job.done() return not proc.alive(pid) end
  function job.result(seconds)
    proc.wait_until(seconds or 60, job.done)
    local code = tonumber(proc.read_file(dir .. "/code") or "")
    local raw = proc.read_file(dir .. "/body") or ""
    proc.remove_tree(dir)
    local ok, decoded = pcall(cjson.decode, raw)
    return code, ok and decoded or nil, raw
  end
  return job
end

-- Runs fn(server, key, session id) against a fresh airlockd started with env; stops it after.
local function with_server(env, fn)
  local server = airlockd.start({ env = env })
  local key = server.tenants.acme
  local ok, err = pcall(function() fn(server, key, http_client.create(server, key).json.session_id) end)
  airlockd.stop(server)
  assert(ok, err)
end

local function wait_gone(server, seconds)
  return proc.wait_until(seconds, function() return not airlockd.alive(server) end, 0.05)
end

describe("airlockd on SIGTERM", function()
  it("refuses new connections, lets a running command finish and answer, keeps the workspace, then exits", function()
    with_server(nil, function(server, key, id)
      -- the command runs until the spec puts go in its workspace (from the host: airlockd
      -- takes no new connection now), so it is still running whatever the machine's load
      local job = exec_in_background(server, key, id, http_client.until_go(40) .. "echo done")
      assert.is_true(proc.wait_until(30, function() return running_commands(server) >= 1 end))
      os.execute("kill -TERM " .. server.pid)
      -- the listening socket is closed at once: a new client is refused, not queued
      assert.is_true(proc.wait_until(5, function()
        return not proc.run("curl -s -m 2 -o /dev/null " .. q(server.url .. "/healthz"))
      end, 0.1))
      assert.is_true(airlockd.alive(server), "it waits for the command")
      assert.is_false(job.done())
      proc.write_file(server.dir .. "/state/workspaces/" .. id .. "/w/go", "") -- the disk's w/ is /workspace
      local code, res, raw = job.result(60)
      assert.are.equal(200, code, raw)
      assert.are.equal("done\n", res.stdout)
      assert.are.equal(0, res.exit_code)
      assert.is_true(wait_gone(server, 15), airlockd.log(server))
      assert.is_true(proc.run("test -d " .. q(server.dir .. "/state/workspaces/" .. id)))
      local log = airlockd.log(server)
      assert.truthy(log:find("waiting up to 70 s for 1 running requests", 1, true), log)
    end)
  end)

  it("stops what still runs when the grace period ends: 503, sandbox gone", function()
    with_server({ SANDBOX_SHUTDOWN_GRACE = "1" }, function(server, key, id)
      local job = exec_in_background(server, key, id, "sleep 30")
      assert.is_true(proc.wait_until(30, function() return running_commands(server) >= 1 end))
      os.execute("kill -TERM " .. server.pid)
      local code, res, raw = job.result(30)
      assert.are.equal(503, code, raw)
      assert.are.equal("The server is shutting down; the request was stopped. Retry later.", res.detail)
      assert.is_true(wait_gone(server, 15), airlockd.log(server))
      assert.is_true(proc.wait_until(10, function() return sandbox_processes(server) == 0 end))
      assert.truthy(airlockd.log(server):find("stopping 1 running requests", 1, true))
    end)
  end)

  it("stops what runs at once on a second signal", function()
    with_server(nil, function(server, key, id)
      local job = exec_in_background(server, key, id, "sleep 30")
      assert.is_true(proc.wait_until(30, function() return running_commands(server) >= 1 end))
      os.execute("kill -TERM " .. server.pid)
      assert.is_true(proc.wait_until(5, function() return airlockd.log(server):find("waiting up to", 1, true) ~= nil end))
      os.execute("kill -INT " .. server.pid)
      local code, res, raw = job.result(30)
      assert.are.equal(503, code, raw)
      assert.truthy(res.detail:find("shutting down", 1, true))
      assert.is_true(wait_gone(server, 15), airlockd.log(server))
      assert.is_true(proc.wait_until(10, function() return sandbox_processes(server) == 0 end))
    end)
  end)
end)

describe("a client that hangs up mid-exec", function()
  it("gets its command killed and its concurrency slot freed", function()
    with_server({ SANDBOX_TENANT_LIMITS = '{"*":{"max_concurrent_exec":1}}' }, function(server, key, id)
      local job = exec_in_background(server, key, id, "sleep 30")
      assert.is_true(proc.wait_until(30, function() return running_commands(server) >= 1 end))
      -- the one slot is taken
      local busy = http_client.exec(server, key, id, "true")
      assert.are.equal(429, busy.status, busy.body)
      os.execute("kill -9 " .. job.pid)
      local t0 = socket.gettime()
      assert.is_true(proc.wait_until(10, function()
        return http_client.request(server, "GET", "/v1/usage", { key = key }).body:find('"commands_running":0', 1, true) ~= nil
      end, 0.05))
      print(string.format("slot free %.2f s after the client hung up", socket.gettime() - t0))
      -- the next command from the same tenant gets the slot
      local r = http_client.exec(server, key, id, "echo next")
      assert.are.equal(200, r.status, r.body)
      assert.are.equal("next\n", r.json.stdout)
      -- and nothing of the first sandbox is left (the session's next one may wait, frozen)
      assert.is_true(proc.wait_until(10, function() return sandbox_processes(server, nil, true) == 0 end))
      assert.truthy(airlockd.log(server):find("stopped: its client hung up", 1, true))
    end)
  end)
end)
