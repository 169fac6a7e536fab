-- luacheck: max line length 160
-- SANDBOX_EXEC_MODE=session with egress (issue #19): a session with egress rules gets its own
-- long-lived sandbox on the session's egress network (booted with it, the network kept while
-- the sandbox lives), and each command, in its fresh container there, reaches the allowed
-- hosts through the session's proxy and nothing else. Real airlockd, real pip, the loopback
-- stand-ins of support.egress_upstream. Lua 5.1-compatible.
local cjson = require "cjson"
local egress = require "support.egress"
local host_state = require "support.host_state"
local proc = require "support.proc"

local function session_sandboxes(server, sid)
  return host_state.sandbox_ids(server, sid .. "-s-")
end

describe("egress through a session's own sandbox (SANDBOX_EXEC_MODE=session)", function()
  local ctx, server, key

  lazy_setup(function()
    ctx = egress.start({ env = { SANDBOX_EXEC_MODE = "session", SANDBOX_WARM_NEW = "0" } })
    server, key = ctx.server, ctx.key
  end)

  lazy_teardown(function()
    if ctx then egress.stop(ctx) end
  end)

  -- session sid's own sandbox, once booted (with the session: no command needed)
  local function own_sandbox(sid)
    assert.is_true(proc.wait_until(60, function() return #session_sandboxes(server, sid) == 1 end))
    return session_sandboxes(server, sid)
  end

  it("runs an egress session's commands in its one sandbox: pip reaches pypi, the next command sees it fresh", function()
    local sid = egress.session(server, key, { "pypi" })
    local box = own_sandbox(sid)
    local r = egress.exec(server, key, sid, "pip install --retries 1 --timeout 10 airlock-egress-probe && echo $$ && ls /tmp | wc -l")
    assert.are.equal(0, r.exit_code, r.output)
    assert.truthy(r.stdout:find("Successfully installed airlock-egress-probe-0.1.0\n1\n", 1, true), r.output)
    assert.are.same(box, session_sandboxes(server, sid))
    local again = egress.exec(server, key, sid, "python3 -c 'import airlock_egress_probe as m; print(m.VALUE)'; echo $$; ls -A /tmp | wc -l")
    assert.are.equal("egress works\n1\n0\n", again.stdout, again.output)
    assert.are.same(box, session_sandboxes(server, sid))
    local events = egress.events(server, key, sid)
    assert.are.equal(2, #events, cjson.encode(events))
    for _, e in ipairs(events) do
      assert.are.equal("allow", e.decision)
      assert.are.equal(sid, e.session)
    end
  end)

  it("denies a host the session does not allow, from its own sandbox", function()
    local sid = egress.session(server, key, { "npm" })
    local box = own_sandbox(sid)
    local r = egress.exec(server, key, sid, "pip install --retries 1 --timeout 10 airlock-egress-probe")
    assert.are_not.equal(0, r.exit_code)
    assert.truthy(r.stderr:find("Tunnel connection failed: 403 Forbidden", 1, true), r.output)
    assert.are.same(box, session_sandboxes(server, sid))
    local events = egress.events(server, key, sid)
    assert.truthy(#events >= 1)
    for _, e in ipairs(events) do assert.are.equal("deny", e.decision, cjson.encode(e)) end
  end)
end)
