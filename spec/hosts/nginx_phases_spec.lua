-- What Debian's lua-nginx-module (0.10.23) lets Lua do in each phase, measured in a real
-- nginx: where cosockets and ngx.sleep work (the cosocket transport depends on it), what
-- ngx.get_phase() says there, where ngx.timer.at can hand work to a context that has them,
-- what happens on a client abort with and without lua_check_client_abort, and that pending
-- timers run early ("premature") with working cosockets when a worker shuts down gracefully.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local nginx = require "support.hosts.nginx"

-- init_by_lua: probe(tag) records in $PROBE_FILE, one JSON line per call, what works where it
-- is called: a cosocket connect to $PROBE_PORT (an airlockd on loopback), ngx.sleep,
-- ngx.timer.at, ngx.on_abort; and ngx.get_phase().
local PROBE = [[
  init_by_lua_block {
    local cjson = require "cjson"
    local path, port = os.getenv("PROBE_FILE"), tonumber(os.getenv("PROBE_PORT"))
    local function try(f)
      local ok, res, err = pcall(f)
      if not ok then return "raises: " .. tostring(res):gsub("^.-:%d+: ", "") end
      if res then return "ok" end
      return "fails: " .. tostring(err)
    end
    function probe(tag)
      local line = cjson.encode({
        tag = tag,
        phase = ngx.get_phase(),
        cosocket = try(function()
          local sock = ngx.socket.tcp()
          sock:settimeout(2000)
          local ok, err = sock:connect("127.0.0.1", port)
          if ok then sock:close() end
          return ok, err
        end),
        sleep = try(function() ngx.sleep(0.001); return true end),
        timer = try(function() return ngx.timer.at(0, function() end) end),
        on_abort = try(function() return ngx.on_abort(function() end) end),
      })
      local f = assert(io.open(path, "a"))
      f:write(line, "\n")
      f:close()
    end
    probe("init_by_lua")
  }
]]

local function read_probes(path)
  local probes = {}
  for line in (proc.read_file(path) or ""):gmatch("[^\n]+") do
    local p = cjson.decode(line)
    probes[p.tag] = p
  end
  return probes
end

describe("nginx Lua phases (lua-nginx-module 0.10.23)", function()
  local server, dir

  setup(function()
    server = airlockd.start()
    dir = proc.make_temp_dir()
  end)
  teardown(function()
    if server then airlockd.stop(server) end
    if dir then proc.remove_tree(dir) end
  end)

  it("has cosockets and ngx.sleep only in rewrite, access, content and timer contexts", function()
    local file = dir .. "/phases"
    local log = nginx.with({
      env = { PROBE_FILE = file, PROBE_PORT = tostring(server.port) },
      http = PROBE .. [[
        init_worker_by_lua_block {
          probe("init_worker_by_lua")
          ngx.timer.at(0, function() probe("ngx.timer.at") end)
          -- a timer still pending when the worker shuts down gracefully runs early
          ngx.timer.at(3600, function(premature) probe(premature and "premature timer" or "late timer") end)
        }
        exit_worker_by_lua_block { probe("exit_worker_by_lua") }
      ]],
      server = [[
        server_rewrite_by_lua_block { probe("server_rewrite_by_lua") }
        location = /probe {
          set_by_lua_block $unused { probe("set_by_lua"); return "" }
          rewrite_by_lua_block { probe("rewrite_by_lua") }
          access_by_lua_block { probe("access_by_lua") }
          content_by_lua_block { probe("content_by_lua"); ngx.say("probed") }
          header_filter_by_lua_block { probe("header_filter_by_lua") }
          body_filter_by_lua_block { if ngx.arg[2] then probe("body_filter_by_lua") end }
          log_by_lua_block { probe("log_by_lua") }
        }
      ]],
    }, function(srv)
      assert.are.equal("probed\n", http_client.request(srv, "GET", "/probe").body)
      assert.is_true(proc.wait_until(5, function() return read_probes(file).log_by_lua ~= nil end))
    end)
    assert.are.same({}, nginx.crashes(log))

    local probes = read_probes(file)
    local with = { "server_rewrite_by_lua", "rewrite_by_lua", "access_by_lua", "content_by_lua",
                   "ngx.timer.at", "premature timer" }
    local without = { "init_worker_by_lua", "set_by_lua", "header_filter_by_lua", "body_filter_by_lua",
                      "log_by_lua", "exit_worker_by_lua" }
    local phase_of = {
      server_rewrite_by_lua = "server_rewrite", rewrite_by_lua = "rewrite", access_by_lua = "access",
      content_by_lua = "content", ["ngx.timer.at"] = "timer", ["premature timer"] = "timer",
      init_by_lua = "init", init_worker_by_lua = "init_worker", set_by_lua = "set",
      header_filter_by_lua = "header_filter", body_filter_by_lua = "body_filter", log_by_lua = "log",
      exit_worker_by_lua = "exit_worker",
    }
    for tag, phase in pairs(phase_of) do
      assert(probes[tag], "no probe from " .. tag)
      assert.are.equal(phase, probes[tag].phase, tag)
    end
    for _, tag in ipairs(with) do
      assert.are.equal("ok", probes[tag].cosocket, tag)
      assert.are.equal("ok", probes[tag].sleep, tag)
    end
    for _, tag in ipairs(without) do
      assert.are.equal("raises: API disabled in the context of " .. tag .. "*", probes[tag].cosocket, tag)
      assert.are.equal("raises: API disabled in the context of " .. tag .. "*", probes[tag].sleep, tag)
    end
    -- init_by_lua runs in the master, before any request: there the error is another one
    assert.are.equal("raises: no request found", probes.init_by_lua.cosocket)
    assert.are.equal("raises: no request found", probes.init_by_lua.sleep)
    -- where cosockets are missing, a timer hands the work on (except at exit and in init)
    for _, tag in ipairs({ "init_worker_by_lua", "set_by_lua", "header_filter_by_lua", "body_filter_by_lua",
                           "log_by_lua", "rewrite_by_lua", "content_by_lua", "ngx.timer.at" }) do
      assert.are.equal("ok", probes[tag].timer, tag)
    end
    assert.matches("^raises:", probes.exit_worker_by_lua.timer)
    assert.matches("^raises:", probes.init_by_lua.timer)
    -- ngx.on_abort: only with lua_check_client_abort on, and only in request handlers
    assert.are.equal("fails: lua_check_client_abort is off", probes.content_by_lua.on_abort)
    assert.are.equal("raises: API disabled in the context of ngx.timer", probes["ngx.timer.at"].on_abort)
    assert.is_nil(probes["late timer"])
  end)

  -- A client that gives up after 0.5 s on a handler that works for 1.5 s.
  local function abort_case(check_client_abort, register_on_abort)
    local file = dir .. "/abort-" .. check_client_abort .. tostring(register_on_abort)
    local log = nginx.with({
      env = { PROBE_FILE = file },
      http = "lua_check_client_abort " .. check_client_abort .. ";",
      server = [[
        location = /slow {
          content_by_lua_block {
            local function note(what)
              local f = assert(io.open(os.getenv("PROBE_FILE"), "a")); f:write(what, "\n"); f:close()
            end
            if ]] .. tostring(register_on_abort) .. [[ then
              note("on_abort returned " .. tostring((ngx.on_abort(function() note("on_abort ran") end))))
            end
            ngx.sleep(1.5)
            note("handler went on")
          }
          log_by_lua_block {
            local status = ngx.status
            ngx.timer.at(0, function()
              local f = assert(io.open(os.getenv("PROBE_FILE"), "a"))
              f:write("cleanup timer after status ", status, "\n")
              f:close()
            end)
          }
        }
      ]],
    }, function(srv)
      proc.run("curl -s -m 0.5 " .. proc.shell_quote(srv.url .. "/slow") .. " >/dev/null")
      assert.is_true(proc.wait_until(10, function()
        return (proc.read_file(file) or ""):find("cleanup timer", 1, true) ~= nil
      end))
    end)
    assert.are.same({}, nginx.crashes(log))
    return proc.read_file(file)
  end

  it("ends the request on a client abort only with lua_check_client_abort on", function()
    assert.are.equal("on_abort returned nil\nhandler went on\ncleanup timer after status 200\n",
      abort_case("off", true))
    assert.are.equal("on_abort returned 1\non_abort ran\nhandler went on\ncleanup timer after status 200\n",
      abort_case("on", true))
    -- on, with no on_abort callback: the handler is stopped where it waits, status 499
    assert.are.equal("cleanup timer after status 499\n", abort_case("on", false))
  end)
end)
