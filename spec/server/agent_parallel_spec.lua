-- luacheck: max line length 160
-- SANDBOX_EXEC_MODE=session (issue #19): commands of one session that run at the same time
-- run together inside the session's own sandbox, each in a container of its own (its own PID
-- namespace), up to the tenant's max_concurrent_exec, instead of a sandbox booted for the
-- second one. Real airlockd on 127.0.0.1 with gVisor. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"

local function sandboxes_of(server, sid)
  return host_state.sandbox_ids(server, sid)
end

describe("a session's parallel commands in its own sandbox (SANDBOX_EXEC_MODE=session)", function()
  local server, key, sid

  lazy_setup(function()
    server = airlockd.start({ tenants = { acme = "ak_" .. airlockd.random_hex(16) },
      env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WARM_NEW = "0" } })
    key = server.tenants.acme
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    sid = r.json.session_id
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  -- A command that says it started (its file in /workspace), waits until the other one did
  -- too (at most 40 s), then prints whether it saw it, its PID and its PID namespace.
  local function meeting(me, other)
    return string.format("echo $$ > /workspace/%s; ", me) .. http_client.until_file("/workspace/" .. other, 40)
      .. string.format("[ -e /workspace/%s ] && echo met; echo pid $$; readlink /proc/self/ns/pid; echo %s done; exit 7", other, me)
  end

  it("runs two long commands of one session at once, in different PID namespaces of the same sandbox", function()
    local first = http_client.exec(server, key, sid, "true")
    assert.are.equal(200, first.status, first.body)
    assert.is_true(proc.wait_until(30, function() return #sandboxes_of(server, sid) == 1 end))
    local box = sandboxes_of(server, sid)
    local a = http_client.exec_async(server, key, sid, meeting("a", "b"), 60)
    local b = http_client.exec_async(server, key, sid, meeting("b", "a"), 60)
    -- while both wait for each other, the session has still only its one sandbox
    local function started(name)
      local r = http_client.read(server, key, sid, name)
      return r.status == 200 and r.json.content:match("^%d+\n$") ~= nil
    end
    assert.is_true(proc.wait_until(60, function() return started("a") and started("b") end, 0.05))
    assert.are.same(box, sandboxes_of(server, sid))
    local ra, rb = a.wait(120), b.wait(120)
    assert.truthy(ra and rb)
    assert.are.equal(7, ra.exit_code, ra.output)
    assert.are.equal(7, rb.exit_code, rb.output)
    local ns_a = ra.stdout:match("^met\npid 1\n(pid:%[%d+%])\na done\n$")
    local ns_b = rb.stdout:match("^met\npid 1\n(pid:%[%d+%])\nb done\n$")
    assert.truthy(ns_a, ra.stdout)
    assert.truthy(ns_b, rb.stdout)
    assert.are_not.equal(ns_a, ns_b)
    assert.are.equal("", ra.stderr .. rb.stderr)
    assert.are.same(box, sandboxes_of(server, sid))
    -- and the session's next command still runs there, fresh
    local r = http_client.exec(server, key, sid, "echo $$; ls /proc | grep -c '^[0-9]'")
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("1\n", r.json.stdout:match("^1\n") and "1\n" or r.json.stdout)
    assert.are.same(box, sandboxes_of(server, sid))
  end)

  it("freezes the session's sandbox once no command runs (after its agent's next container is ready)", function()
    local root = host_state.cgroup_root(server.dir .. "/state")
    for _ = 1, 3 do
      local r = http_client.exec(server, key, sid, "echo hi")
      assert.are.equal("hi\n", r.json.stdout, r.body)
      assert.is_true(proc.wait_until(30, function() return #host_state.waiting_sandboxes(root) == 1 end, 0.02))
    end
  end)

  it("times out one of two parallel commands without touching the other", function()
    local a = http_client.exec_async(server, key, sid, "echo $$ > /workspace/c1; sleep 1000", 3)
    local b = http_client.exec_async(server, key, sid,
      http_client.until_file("/workspace/c1") .. "sleep 8; echo survived", 60)
    local ra, rb = a.wait(120), b.wait(120)
    assert.truthy(ra and rb)
    assert.is_true(ra.timed_out, ra.output)
    assert.is_false(rb.timed_out, rb.output)
    assert.are.equal("survived\n", rb.stdout)
    assert.are.equal(0, rb.exit_code)
  end)

  it("kills only the command whose client hung up; the session's next command runs whole", function()
    -- curl gives up after 2 s: airlockd tells the agent to kill that command
    local gone = http_client.post_async(server, key, "/v1/sessions/" .. sid .. "/exec",
      { command = "touch /workspace/began; sleep 6; touch /workspace/late", timeout_seconds = 60 }, 2)
    local function exists(name) -- (a missing file reads as 200 with the contract's error text)
      return not http_client.read(server, key, sid, name).json.content:find("does not exist", 1, true)
    end
    assert.is_true(proc.wait_until(30, function() return exists("began") end))
    gone.wait(30)
    -- the next command (in the worker that ran the first) outlives the first one's 6 s
    local r = http_client.exec(server, key, sid, "sleep 6; echo whole", 60)
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("whole\n", r.json.stdout, r.body)
    assert.are.equal(0, r.json.exit_code)
    assert.is_false(exists("late"), "the command whose client hung up ran on")
  end)
end)
