-- The OpenResty host (airlock.ngx) in a real nginx against a real airlockd: tasks belong to
-- the request that spawned them (the old crash: airlock.spawn + airlock.poll from many
-- requests at once resumed each other's coroutines and killed the worker), the client-side
-- command line works across requests and survives requests that end while they wait in it,
-- and no session outlives its request: bursts, client aborts with and without
-- lua_check_client_abort, errors and ngx.exit (log_by_lua finish()), and worker exits
-- (graceful: deleted; SIGTERM: left to the server's idle TTL). Sessions are counted on the
-- server.
local cjson = require "cjson"
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local nginx = require "support.hosts.nginx"
local burst = require "support.hosts.burst"

-- acme: room for everything; other: one command at a time (the client-side line)
local LIMITS = cjson.encode({
  ["*"] = { max_sessions = 64, requests_per_minute = 100000, max_concurrent_exec = 32 },
  other = { max_sessions = 64, requests_per_minute = 100000, max_concurrent_exec = 1 },
})
-- bursts open dozens of sessions at once: small workspace disks keep them to a few hundred MB
-- of the host (each session's disk is allocated in full)
local SMALL_DISKS = "16"

local HANDLERS = [[
  location = /with {
    content_by_lua_block {
      local airlock = require "airlock"
      local n = ngx.var.arg_n
      ngx.say(airlock.with({}, function(sbx) return sbx:run("echo " .. n).stdout end))
    }
  }
  # the scenario that crashed workers: tasks spawned and polled by many requests at once
  location = /spawn {
    content_by_lua_block {
      local airlock = require "airlock"
      local tasks = require "airlock.tasks"
      local n, ctx = ngx.var.arg_n, ngx.ctx
      local key = ngx.var.arg_key and os.getenv("OTHER_KEY") or nil
      local foreign, list = 0, {}
      -- after each wait: still in this request (its ngx.ctx, its query)?
      local function mine() if ngx.ctx ~= ctx or ngx.var.arg_n ~= n then foreign = foreign + 1 end end
      for i = 1, 3 do
        list[i] = airlock.spawn(function()
          return airlock.with({ api_key = key }, function(sbx)
            mine(); sbx.files:write("n.txt", n .. "-" .. i)
            mine(); local r = sbx:run("cat n.txt")
            mine(); return r.stdout
          end)
        end)
      end
      local polls = 0
      while airlock.poll(50) > 0 do polls = polls + 1 end
      local out = { foreign = foreign, results = {}, own = true }
      for i, t in ipairs(list) do
        local ok, v = t:result()
        out.results[i] = ok and v or ("failed: " .. tostring(v))
        out.own = out.own and t.owner == tasks.current()
      end
      ngx.say(require("cjson").encode(out))
    }
  }
  # a sandbox in a long command: the client gives up first
  location = /long {
    content_by_lua_block {
      local airlock = require "airlock"
      local key = ngx.var.arg_key and os.getenv("OTHER_KEY") or nil
      local sbx = airlock.sandbox{ api_key = key }
      local r = sbx:run("sleep " .. ngx.var.arg_s, { timeout = 30 })
      sbx:close()
      ngx.say(r.exit_code)
    }
    log_by_lua_block { require("airlock.ngx").finish() }
  }
  location = /long_with {
    content_by_lua_block {
      local airlock = require "airlock"
      airlock.with({}, function(sbx) sbx:run("sleep " .. ngx.var.arg_s, { timeout = 30 }) end)
      ngx.say("done")
    }
  }
  # sandboxes left open by ngx.exit, an error, or a light thread that ngx.exit kills
  location = /exit {
    content_by_lua_block { local sbx = require("airlock").sandbox{}; ngx.say(sbx.session_id); ngx.exit(200) }
    log_by_lua_block { require("airlock.ngx").finish() }
  }
  location = /error {
    content_by_lua_block { local sbx = require("airlock").sandbox{}; error("boom " .. sbx.session_id) }
    log_by_lua_block { require("airlock.ngx").finish() }
  }
  location = /killed_task {
    content_by_lua_block {
      local airlock = require "airlock"
      -- the light thread is killed once its command is in flight (it yields only in I/O: once
      -- started is set, its next yield is in the run's request)
      local started = false
      airlock.spawn(function() local sbx = airlock.sandbox{}; started = true; sbx:run("sleep 20", { timeout = 30 }) end)
      for _ = 1, 1200 do if started then break end; ngx.sleep(0.05) end
      ngx.exit(started and 200 or 504)
    }
    log_by_lua_block { require("airlock.ngx").finish() }
  }
  # a handle kept in a global, never closed, and no finish(): only the worker's exit deletes it
  location = /leak {
    content_by_lua_block {
      LEAKED = LEAKED or {}
      local sbx = require("airlock").sandbox{}
      LEAKED[#LEAKED + 1] = sbx
      ngx.say(sbx.session_id)
    }
  }
  # the same SDK code in a timer the handler starts: with, spawn and poll; the result lands in
  # a shared dict
  location = /in_timer {
    content_by_lua_block {
      local ok, err = ngx.timer.at(0, function()
        local airlock = require "airlock"
        local list = {}
        for i = 1, 2 do
          list[i] = airlock.spawn(function()
            return airlock.with({}, function(sbx) return sbx:run("echo timer " .. i).stdout end)
          end)
        end
        while airlock.poll(50) > 0 do end
        local out = { results = {}, phase = ngx.get_phase() }
        for i, t in ipairs(list) do
          local done, v = t:result()
          out.results[i] = tostring(done) .. " " .. tostring(v)
        end
        ngx.shared.probe:set("timer", require("cjson").encode(out))
      end)
      ngx.say(ok and "started" or ("failed: " .. tostring(err)))
    }
  }
  location = /probe {
    content_by_lua_block { ngx.say(ngx.shared.probe:get(ngx.var.arg_k) or "") }
  }
  location = /stats {
    content_by_lua_block { ngx.say(require("cjson").encode(require("airlock").stats())) }
  }
]]

describe("the OpenResty host", function()
  local server

  setup(function()
    server = airlockd.start({ env = { SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_WORKSPACE_QUOTA_MB = SMALL_DISKS } })
  end)
  teardown(function() if server then airlockd.stop(server) end end)

  local function sessions(tenant)
    return #airlock.list_sessions({ base_url = server.url, api_key = server.tenants[tenant or "acme"] })
  end

  -- Waits (at most `seconds`) until no session is left; returns how many are left.
  local function sessions_left(seconds)
    local n
    proc.wait_until(seconds or 10, function()
      n = sessions("acme") + sessions("other")
      return n == 0
    end, 0.2)
    return n
  end

  local function start(http)
    return nginx.start({
      env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme,
              OTHER_KEY = server.tenants.other },
      http = http or "", server = HANDLERS, shared_dicts = { probe = "1m" },
    })
  end

  local function stats(srv)
    return cjson.decode(burst.run(srv.url, { { path = "/stats" } })[1].body)
  end

  describe("in one nginx (lua_check_client_abort on)", function()
    local srv

    setup(function() srv = start("lua_check_client_abort on;") end)
    teardown(function()
      local log = srv and nginx.stop(srv, 15) or ""
      nginx.assert_no_crashes(log)
      assert.are.equal(0, nginx.sleep0_warnings(log))
    end)

    it("runs the same code in an ngx.timer callback: with, spawn and poll", function()
      assert.are.equal("started\n", burst.run(srv.url, { { path = "/in_timer" } })[1].body)
      local out
      proc.wait_until(30, function()
        out = burst.run(srv.url, { { path = "/probe?k=timer" } })[1].body
        return out ~= "\n"
      end, 0.2)
      assert.are.same({ results = { "true timer 1\n", "true timer 2\n" }, phase = "timer" }, cjson.decode(out))
      assert.are.equal(0, sessions_left())
    end)

    it("runs a burst of 16 requests, each with its own sandbox and answer; none left", function()
      local requests = {}
      for i = 1, 16 do requests[i] = { path = "/with?n=" .. i } end
      local results = burst.run(srv.url, requests)
      for i, r in ipairs(results) do
        assert.are.equal(200, r.status, r.body)
        assert.are.equal(i .. "\n\n", r.body)
      end
      assert.are.equal(0, sessions_left())
    end)

    it("lets 12 requests spawn and poll tasks at once: each resumes only its own", function()
      local requests = {}
      for i = 1, 12 do requests[i] = { path = "/spawn?n=" .. i } end
      local results = burst.run(srv.url, requests)
      for i, r in ipairs(results) do
        assert.are.equal(200, r.status, r.body)
        local out = cjson.decode(r.body)
        assert.are.same({ foreign = 0, own = true, results = { i .. "-1", i .. "-2", i .. "-3" } }, out)
      end
      assert.are.equal(0, sessions_left())
    end)

    it("queues commands across requests when the server runs one at a time; none fails", function()
      local requests = {}
      for i = 1, 4 do requests[i] = { path = "/spawn?key=other&n=" .. i } end
      local results = burst.run(srv.url, requests)
      for i, r in ipairs(results) do
        assert.are.equal(200, r.status, r.body)
        assert.are.same({ i .. "-1", i .. "-2", i .. "-3" }, cjson.decode(r.body).results)
      end
      local s = stats(srv)
      assert.is_true(s.server_full >= 1, "the server never said it was full")
      assert.are.equal(0, s.commands_running)
      assert.are.equal(0, s.commands_waiting)
      assert.are.equal(0, sessions_left())
    end)

    it("deletes the sandbox of a client that hangs up, at once (ngx.on_abort)", function()
      local results = burst.run(srv.url, { { path = "/long?s=20", max_time = 1 },
                                           { path = "/long_with?s=20", max_time = 1 } })
      assert.are.same({ 0, 0 }, { results[1].status, results[2].status })
      -- long before the 20 s commands would have ended
      assert.are.equal(0, sessions_left(10))
      assert.is_true(stats(srv).aborts >= 2)
    end)

    it("gives the place in the command line back when a waiting request is aborted", function()
      -- one command at a time: the first holds the place for 3 s, the second waits in line and
      -- its client gives up, the third must still get the place
      local results = burst.run(srv.url, {
        { path = "/long?key=1&s=3" },
        { path = "/long?key=1&s=1", max_time = 1.5, delay = 0.5 },
        { path = "/long?key=1&s=1", delay = 1 },
      })
      assert.are.same({ 200, 0, 200 }, { results[1].status, results[2].status, results[3].status })
      local s = stats(srv)
      assert.are.equal(0, s.commands_running)
      assert.are.equal(0, s.commands_waiting)
      assert.are.equal(0, sessions_left())
    end)

    it("deletes what ngx.exit, an error or a killed light thread left open (log_by_lua finish)", function()
      local results = burst.run(srv.url, { { path = "/exit" }, { path = "/error" }, { path = "/killed_task" } })
      assert.are.same({ 200, 500, 200 }, { results[1].status, results[2].status, results[3].status })
      assert.are.equal(0, sessions_left())
    end)
  end)

  it("without lua_check_client_abort, an aborted request runs to its end and closes its sandbox", function()
    local srv = start()
    local ok, err = pcall(function()
      local results = burst.run(srv.url, { { path = "/long_with?s=2", max_time = 0.5 } })
      assert.are.equal(0, results[1].status)
      assert.are.equal(0, sessions_left(20))
      assert.are.equal(0, stats(srv).aborts)
    end)
    nginx.assert_no_crashes(nginx.stop(srv))
    assert(ok, err)
  end)

  it("deletes the sessions a worker still has open when it stops gracefully", function()
    local srv = start()
    local results = burst.run(srv.url, { { path = "/leak" }, { path = "/leak" } })
    assert.are.same({ 200, 200 }, { results[1].status, results[2].status })
    assert.are.equal(2, sessions())
    local log = nginx.stop(srv, 15)   -- SIGQUIT: the SDK's timer runs early and deletes them
    nginx.assert_no_crashes(log)
    assert.are.equal(0, sessions_left(5))
  end)

  it("leaves them to the server's idle TTL on a fast stop (SIGTERM runs nothing)", function()
    local srv = start()
    local ok, err = pcall(function()
      local results = burst.run(srv.url, { { path = "/leak" } })
      assert.are.equal(200, results[1].status)
      os.execute("kill -TERM " .. nginx.master_pid(srv))
      assert.is_true(proc.wait_until(10, function() return not proc.alive(srv.pid) end, 0.05))
      assert.are.equal(1, sessions())
    end)
    nginx.stop(srv)
    for _, s in ipairs(airlock.list_sessions({ base_url = server.url, api_key = server.tenants.acme })) do
      airlock.attach(s.session_id, { base_url = server.url, api_key = server.tenants.acme }):close()
    end
    assert(ok, err)
  end)
end)
