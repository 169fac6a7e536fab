-- The SDK inside a real Neovim 0.7 (`nvim --headless`, spec/support/hosts/nvim.lua) against a
-- real airlockd: the libuv transport is the automatic choice there, task code after an SDK
-- call runs outside libuv's fast context (through vim.schedule), and nothing is left armed
-- when nothing is in flight. Then examples/neovim, driven as a user would: :AirlockRun on a
-- Python buffer returns at once, the editor keeps handling input and timers while the
-- command runs, the output arrives in a split; quitting while a run is in flight leaves no
-- session behind.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local common = require "support.hosts.common"
local nvim = require "support.hosts.nvim"

local function sessions_left(server)
  local airlock = require "airlock"
  return #airlock.list_sessions({ base_url = server.url, api_key = server.tenants.acme, transport = "curl" })
end

local function decoded(run)
  assert.are.equal(0, run.code, "nvim failed: " .. run.stderr .. run.stdout)
  return cjson.decode((assert(run.result, "no result from nvim: " .. run.stderr)))
end

describe("Neovim", function()
  local server, env
  setup(function()
    server = airlockd.start()
    env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme,
            AIRLOCK_EXAMPLES = common.top() .. "/examples" }
  end)
  teardown(function() if server then airlockd.stop(server) end end)

  it("drives tasks on vim.loop and resumes them where the editor API works", function()
    local run = nvim.run({ timeout = 60, env = env, code = [[
      local airlock = require "airlock"
      local report = require "support.hosts.report"
      local seen = { transport = airlock.stats().transport }
      local list = {}
      for i = 1, 3 do
        list[i] = airlock.spawn(function()
          local out = airlock.with({}, function(sbx) return sbx:run("echo from " .. i).stdout end)
          seen["fast" .. i] = vim.in_fast_event()
          vim.api.nvim_buf_set_lines(0, -1, -1, false, { (out:gsub("\n", "")) })
        end)
      end
      local timer = vim.loop.new_timer()
      timer:start(20, 20, vim.schedule_wrap(function()
        if airlock.stats().tasks > 0 then return end
        timer:close()
        for i = 1, 3 do seen["task" .. i] = list[i].status .. " " .. tostring(list[i].error) end
        seen.lines = vim.api.nvim_buf_get_lines(0, 1, -1, false)
        local s = airlock.stats()
        seen.watched, seen.timer_armed, seen.waiting = s.watched, s.timer_armed, s.waiting
        seen.wakeups = s.wakeups
        report.write(require("cjson").encode(seen))
        vim.cmd("qa!")
      end))
    ]] })
    local seen = decoded(run)
    assert.are.equal("uv", seen.transport)
    for i = 1, 3 do
      assert.are.equal("done nil", seen["task" .. i])
      assert.is_false(seen["fast" .. i])
    end
    table.sort(seen.lines)
    assert.are.same({ "from 1", "from 2", "from 3" }, seen.lines)
    assert.are.equal(0, seen.watched)
    assert.is_false(seen.timer_armed)
    assert.are.equal(0, seen.waiting)
    assert.is_true(seen.wakeups > 0)
    assert.are.equal(0, sessions_left(server))
  end)

  it("runs docs/hosts.md's SandboxHello as written, and shows a failed task with vim.notify", function()
    local doc = assert(io.open(common.top() .. "/docs/hosts.md")):read("*a")
    local snippet = assert(doc:match("```lua\n(%-%- a Neovim command that never freezes the editor\n.-)```"),
      "no SandboxHello snippet in docs/hosts.md")
    local run = nvim.run({ timeout = 60, env = env, code = [[
      local notified = {}
      vim.notify = function(msg, level)
        notified[#notified + 1] = { msg = msg, error = level == vim.log.levels.ERROR }
      end
    ]] .. snippet .. [[
      vim.cmd("SandboxHello")
      -- a task whose command the server refuses (a timeout over 60 s): nobody waits on it
      airlock.spawn(function()
        airlock.with({}, function(sbx) return sbx:run("true", { timeout = 600 }) end)
      end)
      local timer = vim.loop.new_timer()
      timer:start(20, 20, vim.schedule_wrap(function()
        if airlock.stats().tasks > 0 or #notified == 0 then return end
        timer:close()
        require("support.hosts.report").write(require("cjson").encode({
          lines = vim.api.nvim_buf_get_lines(0, 0, -1, false), notified = notified }))
        vim.cmd("qa!")
      end))
    ]] })
    local seen = decoded(run)
    assert.are.same({ "", "hello" }, seen.lines)
    assert.are.equal(1, #seen.notified, cjson.encode(seen.notified))
    assert.is_true(seen.notified[1].error)
    assert.matches("^airlock: a task failed: .*timeout", seen.notified[1].msg)
    assert.are.equal(0, sessions_left(server))
  end)

  describe("examples/neovim", function()
    -- Loads the plugin as Neovim would from its runtimepath.
    local LOAD_PLUGIN = [[
      vim.opt.runtimepath:append(os.getenv("AIRLOCK_EXAMPLES") .. "/neovim")
      vim.cmd("runtime plugin/airlock_run.lua")
    ]]

    it(":AirlockRun shows the output in a split while the editor keeps going", function()
      local run = nvim.run({ timeout = 60, env = env, code = LOAD_PLUGIN .. [[
        local report = require "support.hosts.report"
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "import time", "time.sleep(1)", "print(6 * 7)" })
        vim.bo.filetype = "python"
        local source_win = vim.api.nvim_get_current_win()
        local ticks = 0
        local timer = vim.loop.new_timer()
        timer:start(10, 10, function() ticks = ticks + 1 end)
        local seen = {}
        vim.api.nvim_create_autocmd("User", { pattern = "AirlockRunDone", once = true, callback = function()
          local plugin = require "airlock_run"
          seen.typed_before_output = vim.g.typed == 1
          seen.ticks_while_running = ticks - seen.ticks_at_command
          seen.windows = #vim.api.nvim_list_wins()
          seen.cursor_stayed = vim.api.nvim_get_current_win() == source_win
          seen.title = plugin.last.title
          seen.output = vim.api.nvim_buf_get_lines(plugin.last.buf, 0, -1, false)
          seen.running = plugin.running()
          timer:close()
          report.write(require("cjson").encode(seen))
          vim.cmd("qa!")
        end })
        vim.cmd("AirlockRun")
        seen.ticks_at_command = ticks
        -- typed while the command runs: handled by the editor before the output arrives
        vim.api.nvim_input(":let g:typed = 1<CR>")
      ]] })
      local seen = decoded(run)
      assert.is_true(seen.typed_before_output)
      -- a frozen editor would tick at most once (a late repeating timer fires once)
      assert.is_true(seen.ticks_while_running >= 10, "ticks while running: " .. seen.ticks_while_running)
      assert.are.equal(2, seen.windows)
      assert.is_true(seen.cursor_stayed)
      assert.are.equal("airlock://1/[No Name]", seen.title)
      assert.matches("^%$ python3 main%.py   %(exit 0, %d+%.%d s%)$", seen.output[1])
      assert.are.same({ "", "42" }, { seen.output[2], seen.output[3] })
      assert.are.equal(3, #seen.output)
      assert.are.equal(0, seen.running)
      assert.are.equal(0, sessions_left(server))
    end)

    it("says which filetypes it runs", function()
      local run = nvim.run({ timeout = 30, env = env, code = LOAD_PLUGIN .. [[
        local messages = {}
        vim.notify = function(msg) messages[#messages + 1] = msg end
        vim.bo.filetype = "text"
        local task = require("airlock_run").run()
        require("support.hosts.report").write(require("cjson").encode({ task = task == nil, messages = messages }))
        vim.cmd("qa!")
      ]] })
      assert.are.same({ task = true, messages = { "AirlockRun: no runner for filetype 'text' (python, sh, bash)" } },
        decoded(run))
    end)

    it("deletes the sandbox of a run in flight when Neovim quits", function()
      local run = nvim.run({ timeout = 40, env = env, code = LOAD_PLUGIN .. [[
        vim.api.nvim_buf_set_lines(0, 0, -1, false, { "sleep 30", "echo never" })
        vim.bo.filetype = "sh"
        vim.cmd("AirlockRun")
        local plugin = require "airlock_run"
        local timer = vim.loop.new_timer()
        timer:start(20, 20, vim.schedule_wrap(function()
          if plugin.running() == 0 then return end
          timer:close()
          require("support.hosts.report").write("quitting with " .. plugin.running() .. " run in flight")
          vim.cmd("qa!")
        end))
      ]] })
      assert.are.equal(0, run.code, run.stderr)
      assert.are.equal("quitting with 1 run in flight", run.result)
      assert.are.equal(0, sessions_left(server))
    end)
  end)
end)
