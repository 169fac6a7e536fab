-- The SDK's real hosts, driven from the specs (spec/support/hosts): nginx with the Lua module
-- (cosockets to a loopback airlockd, lua-cjson and the LuaJIT build of the C core on its
-- paths), `nvim --headless` (vim.loop timers, the rule that makes vim.schedule necessary) and
-- LÖVE headless (love.update frames, a result file). Each harness also has to catch what goes
-- wrong: a worker that crashes, a host that never ends.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local common = require "support.hosts.common"
local nginx = require "support.hosts.nginx"
local nvim = require "support.hosts.nvim"
local love = require "support.hosts.love"

local CORE = common.top() .. "/build/luajit/airlock/core.so"

-- Lua run in a LuaJIT host: cjson and the LuaJIT build of airlock.core both load.
local LOADS = [[
local loads = {}
for _, name in ipairs({ "cjson", "airlock.core" }) do
  local ok, mod = pcall(require, name)
  loads[name] = ok and type(mod) == "table" or tostring(mod)
end
]]

describe("host harness", function()
  setup(function()
    assert(proc.run("test -f " .. proc.shell_quote(CORE)), CORE .. " is missing: run make luajit-core")
  end)

  describe("nginx with the Lua module", function()
    local server

    setup(function() server = airlockd.start() end)
    teardown(function() if server then airlockd.stop(server) end end)

    it("answers from content_by_lua with cjson and a cosocket request to airlockd", function()
      local handler = [[
        location = /health {
          content_by_lua_block {
            local cjson = require "cjson"
            ]] .. LOADS .. [[
            local host, port = os.getenv("SANDBOX_API_URL"):match("^http://([%d.]+):(%d+)$")
            local sock = ngx.socket.tcp()
            sock:settimeout(5000)
            assert(sock:connect(host, tonumber(port)))
            assert(sock:send("GET /healthz HTTP/1.1\r\nHost: " .. host .. "\r\nConnection: close\r\n\r\n"))
            local raw = assert(sock:receive("*a"))
            sock:close()
            local status = tonumber(raw:match("^HTTP/1%.%d (%d+)"))
            local health = cjson.decode(raw:match("\r\n\r\n(.*)$"))
            ngx.header["Content-Type"] = "application/json"
            ngx.say(cjson.encode({ phase = ngx.get_phase(), status = status, health = health.status,
                                   loads = loads, sum = 2 + 40 }))
          }
        }]]
      local log = nginx.with({ server = handler, workers = 2,
                               env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme } },
        function(srv)
          for _ = 1, 4 do
            local res = http_client.request(srv, "GET", "/health", { max_time = 10 })
            assert.are.equal(200, res.status)
            assert.are.same({ phase = "content", status = 200, health = "healthy",
                              loads = { cjson = true, ["airlock.core"] = true }, sum = 42 }, res.json)
          end
          assert.are.equal(2, #nginx.worker_pids(srv))
        end)
      assert.matches("using inherited sockets", log)
      assert.are.same({}, nginx.crashes(log))
    end)

    it("reports a worker that crashed, and stops every process", function()
      local srv = nginx.start({ server = [[
        location = /crash { content_by_lua_block { require("ffi").cast("int *", 0)[0] = 1 } }
      ]] })
      finally(function() nginx.stop(srv) end)
      local master = nginx.master_pid(srv)
      local workers = nginx.worker_pids(srv)
      assert.are.equal(1, #workers)
      pcall(http_client.request, srv, "GET", "/crash", { max_time = 5 })  -- no answer: the worker died
      -- the master starts a new worker after the crash; the harness still answers
      assert.is_true(proc.wait_until(5, function()
        local now = nginx.worker_pids(srv)
        return #now == 1 and now[1] ~= workers[1]
      end))
      local log = nginx.stop(srv)
      local crashes = nginx.crashes(log)
      assert.is_true(#crashes >= 1)
      assert.matches("worker process " .. workers[1] .. " exited on signal 11", crashes[1], 1, true)
      assert.has_error(function() nginx.assert_no_crashes(log) end)
      assert.is_false(proc.alive(master))
      assert.is_false(proc.alive(workers[1]))
    end)

    it("stops nginx when the function given to with() fails, and passes the failure on", function()
      local master, workers
      local ok, err = pcall(nginx.with, {}, function(srv)
        master, workers = nginx.master_pid(srv), nginx.worker_pids(srv)
        error({ reason = "the spec failed" })
      end)
      assert.is_false(ok)
      assert.are.same({ reason = "the spec failed" }, err)
      assert.is_false(proc.alive(master))
      assert.is_false(proc.alive(workers[1]))
    end)

    it("says why nginx did not start", function()
      local ok, err = pcall(nginx.start, { server = "no_such_directive on;" })
      assert.is_false(ok)
      assert.matches('unknown directive "no_such_directive"', err, 1, true)
    end)
  end)

  describe("nvim --headless", function()
    it("runs vim.loop timers; API calls from their callbacks need vim.schedule", function()
      local run = nvim.run({ timeout = 20, code = LOADS .. [[
        local report = require "support.hosts.report"
        local cjson = require "cjson"
        local uv = vim.loop
        local started, ticks = uv.now(), 0
        local timer = uv.new_timer()
        timer:start(10, 10, function()
          ticks = ticks + 1
          if ticks < 5 then return end
          timer:stop()
          timer:close()
          -- a libuv callback is a "fast" context: the editor API is off limits there
          local direct_ok, direct_err = pcall(vim.api.nvim_buf_set_lines, 0, 0, -1, false, { "x" })
          vim.schedule(function()
            vim.api.nvim_buf_set_lines(0, 0, -1, false, { "ticks " .. ticks })
            report.write(cjson.encode({
              ticks = ticks, waited_enough = uv.now() - started >= 50, loads = loads,
              direct_ok = direct_ok, direct_err = tostring(direct_err),
              buffer = vim.api.nvim_buf_get_lines(0, 0, -1, false)[1],
              version = vim.version().major .. "." .. vim.version().minor,
            }))
            io.stdout:write("printed from nvim\n")
            vim.cmd("qa!")
          end)
        end)
      ]] })
      assert.are.equal(0, run.code, run.stderr)
      assert.are.equal("printed from nvim\n", run.stdout)
      local result = cjson.decode((assert(run.result, "no result: " .. run.stderr)))
      assert.are.equal(5, result.ticks)
      assert.is_true(result.waited_enough)
      assert.are.same({ cjson = true, ["airlock.core"] = true }, result.loads)
      assert.is_false(result.direct_ok)
      assert.matches("E5560", result.direct_err, 1, true)
      assert.are.equal("ticks 5", result.buffer)
      assert.are.equal("0.7", result.version)
    end)

    it("ends with status 3 and the traceback when the script fails", function()
      local run = nvim.run({ timeout = 20, code = "error('script failed here')" })
      assert.are.equal(3, run.code)
      assert.matches("script failed here", run.stderr, 1, true)
    end)

    it("kills a script that never ends at the time limit", function()
      local marker = "airlock-harness-" .. airlockd.random_hex(6)
      local run = nvim.run({ timeout = 2, env = { HARNESS_MARKER = marker }, code = [[
        vim.fn.jobstart({ "sleep", "300" })  -- inherits HARNESS_MARKER
      ]] })
      assert.is_true(run.timed_out)
      -- nvim and the job it started are gone
      assert.are.equal("", proc.output("grep -l " .. marker .. " /proc/[0-9]*/environ 2>/dev/null"))
    end)
  end)

  describe("LÖVE headless", function()
    it("runs love.update for N frames and hands back a result", function()
      local run = love.run({ timeout = 20, code = LOADS .. [[
        local report = require "support.hosts.report"
        local frames, elapsed = 0, 0
        function love.update(dt)
          frames = frames + 1
          elapsed = elapsed + dt
          if frames == 30 then
            report.write(require("cjson").encode({
              frames = frames, loads = loads, version = (love.getVersion()),
              graphics = love.graphics ~= nil, window = love.window ~= nil, jit = jit.version,
            }))
            love.event.quit(0)
          end
        end
      ]] })
      assert.are.equal(0, run.code, run.stdout .. run.stderr)
      local result = cjson.decode((assert(run.result, "no result: " .. run.stdout .. run.stderr)))
      assert.are.same({ frames = 30, loads = { cjson = true, ["airlock.core"] = true }, version = 11,
                        graphics = false, window = false, jit = result.jit }, result)
      assert.matches("^LuaJIT 2%.1", result.jit)
    end)

    it("quits after opts.frames frames, and reports an error with status 1", function()
      local counted = love.run({ timeout = 20, frames = 12, code = [[
        local n = 0
        function love.update() n = n + 1; require("support.hosts.report").write(tostring(n)) end
      ]] })
      assert.are.equal(0, counted.code)
      assert.are.equal("12", counted.result)
      local failed = love.run({ timeout = 20, code = "function love.update() error('game failed here') end" })
      assert.are.equal(1, failed.code)
      assert.matches("game failed here", failed.stdout, 1, true)
    end)
  end)
end)
