-- The agent examples, run for real as subprocesses: examples/agent_openai.lua,
-- examples/agent_anthropic.lua and examples/agent_kernel.lua against a real airlockd and the
-- scripted provider endpoint spec/support/fake_llm.py (which stands in for OpenAI/Anthropic
-- only; --script csv for the kernel example's data analyst). Checks the
-- transcript, what the sandbox ended up with, and the exact messages sent back to the model.
local airlockd = require "support.airlockd"
local fake_llm = require "support.fake_llm"
local proc = require "support.proc"
local tools = require "airlock.tools"
local airlock = require "airlock"
local cjson = require "cjson"

local q = proc.shell_quote
local read_file = proc.read_file

-- The interpreter running these specs runs the examples too (lua5.4 or luajit).
local interpreter = proc.lua_interpreter

local FIXED_CALC = "def add(a, b):\n    return a + b\n"
local TEST_COMMAND = "python3 -m unittest -q test_calc > result.txt 2>&1; echo exit=$?"
local FINAL_TEXT = "Fixed calc.add: it subtracted instead of adding. The test passes now."
local TASK = "Make the failing test in this workspace pass. Run the tests with `python3 -m unittest -q`."

-- Runs an example with env (a table); returns stdout, stderr, exit status.
local function run_example(script, env)
  local words = {}
  for k, v in pairs(env) do words[#words + 1] = k .. "=" .. q(v) end
  local err_path = proc.temp_path()
  local cmd = string.format("env -u OPENAI_API_KEY -u ANTHROPIC_API_KEY %s %s %s 2>%s; echo \"__EXIT__=$?\"",
    table.concat(words, " "), interpreter(), q(script), q(err_path))
  local out = proc.output(cmd)
  local stderr = read_file(err_path) or ""
  os.remove(err_path)
  local status = tonumber(out:match("__EXIT__=(%d+)%s*$"))
  out = out:gsub("__EXIT__=%d+%s*$", "")
  return out, stderr, status
end

local function contains(haystack, needle)
  return haystack:find(needle, 1, true) ~= nil
end

describe("agent examples against airlockd and a scripted model", function()
  local server, llm, key

  setup(function()
    server = airlockd.start()
    key = server.tenants.acme
  end)
  teardown(function() airlockd.stop(server) end)
  before_each(function() llm = fake_llm.start() end)
  after_each(function() fake_llm.stop(llm) end)

  local function sandbox_env(extra)
    local env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = key }
    for k, v in pairs(extra) do env[k] = v end
    return env
  end

  local function open_sessions()
    local sessions = airlock.list_sessions({ base_url = server.url, api_key = key })
    return #sessions
  end

  -- The checks both providers share: transcript, sandbox state, no leaked keys.
  local function check_run(out, stderr, status, provider_key)
    assert.equal("", stderr)
    assert.equal(0, status, out)
    assert.truthy(contains(out, "tool call: run_command"), out)
    assert.truthy(contains(out, "tool call: write_file"), out)
    assert.truthy(contains(out, "assistant: " .. FINAL_TEXT), out)
    assert.truthy(contains(out, "calc.py now:\n" .. FIXED_CALC), out)
    assert.truthy(contains(out, "RESULT: the tests pass"), out)
    assert.falsy(contains(out, provider_key))
    assert.falsy(contains(out, key))
    assert.equal(0, open_sessions()) -- the example deleted its sandbox
  end

  -- Checks the text of a tool result from the first test run (the failing one).
  local function check_failing_run(text)
    assert.matches("^%[STDERR%]:\n", text)
    assert.truthy(contains(text, "AssertionError: -1 != 5"), text)
    assert.truthy(contains(text, "FAILED (failures=1)"), text)
    assert.matches("\n%[EXIT CODE%]: 1$", text)
  end

  local function check_result_file(text)
    assert.truthy(contains(text, "Ran 1 test in "), text)
    assert.matches("\nOK\n$", text)
  end

  it("branching (snapshots): three attempts from one snapshot at once, the best kept, nothing left", function()
    local out, stderr, status = run_example("examples/agent_branching.lua", sandbox_env({
      OPENAI_API_KEY = fake_llm.OPENAI_KEY, OPENAI_BASE_URL = llm.url .. "/v1", OPENAI_MODEL = "gpt-test",
    }))
    assert.equal("", stderr)
    assert.equal(0, status, out)
    assert.matches("^seeded 2 files and took snapshot snap_%x+; 3 attempts from it\n", out)
    for n = 1, 3 do
      assert.truthy(contains(out, "\nattempt " .. n .. ": tests pass in 4 model steps\n"), out)
    end
    assert.truthy(contains(out, "best: attempt 1; its calc.py:\n" .. FIXED_CALC .. "RESULT: kept attempt 1\n"), out)
    -- each attempt started from the seeded workspace: its first test run failed there
    local reqs = fake_llm.requests(llm)
    assert.equal(12, #reqs)
    local first_runs = 0
    for _, r in ipairs(reqs) do
      local m = r.body.messages
      if #m == 4 then
        first_runs = first_runs + 1
        check_failing_run(m[4].content)
      end
    end
    assert.equal(3, first_runs)
    assert.equal(0, open_sessions())
    assert.same({}, airlock.snapshots.list({ base_url = server.url, api_key = key }))
  end)

  it("OpenAI: runs the tool calls in the sandbox and sends back each result", function()
    local out, stderr, status = run_example("examples/agent_openai.lua", sandbox_env({
      OPENAI_API_KEY = fake_llm.OPENAI_KEY, OPENAI_BASE_URL = llm.url .. "/v1", OPENAI_MODEL = "gpt-test",
    }))
    check_run(out, stderr, status, fake_llm.OPENAI_KEY)
    assert.truthy(contains(out, "-- step 4 (finish_reason stop)"), out)

    local reqs = fake_llm.requests(llm)
    assert.equal(4, #reqs)
    for _, r in ipairs(reqs) do
      assert.equal("/v1/chat/completions", r.path)
      assert.equal("Bearer " .. fake_llm.OPENAI_KEY, r.headers["authorization"])
      assert.equal("application/json", r.headers["content-type"])
      assert.equal("gpt-test", r.body.model)
      assert.same(tools.openai_tools(), r.body.tools)
      assert.truthy(contains(r.raw, '"required":["path","content"]'))
    end

    local m = reqs[1].body.messages
    assert.equal(2, #m)
    assert.equal("system", m[1].role)
    assert.same({ role = "user", content = TASK }, m[2])

    -- Turn 1: one call, its result (the failing test run).
    m = reqs[2].body.messages
    assert.equal(4, #m)
    assert.same({ role = "assistant", content = cjson.null, tool_calls = { {
      id = "call_0_0", type = "function",
      ["function"] = { name = "run_command",
        arguments = '{"command": "python3 -m unittest -q", "timeout_seconds": 30}' },
    } } }, m[3])
    assert.equal("tool", m[4].role)
    assert.equal("call_0_0", m[4].tool_call_id)
    check_failing_run(m[4].content)

    -- Turn 2: two calls in one turn, answered in order.
    m = reqs[3].body.messages
    assert.equal(7, #m)
    assert.same({ "call_1_0", "call_1_1" }, { m[5].tool_calls[1].id, m[5].tool_calls[2].id })
    assert.same({ role = "tool", tool_call_id = "call_1_0", content = "Wrote 32 characters to calc.py" }, m[6])
    assert.same({ role = "tool", tool_call_id = "call_1_1", content = "[STDOUT]:\nexit=0\n[EXIT CODE]: 0" }, m[7])
    assert.same({ command = TEST_COMMAND }, cjson.decode(m[5].tool_calls[2]["function"].arguments))

    -- Turn 3: the file the command wrote, and a missing file as an error text.
    m = reqs[4].body.messages
    assert.equal(10, #m)
    assert.equal("call_2_0", m[9].tool_call_id)
    check_result_file(m[9].content)
    assert.same({ role = "tool", tool_call_id = "call_2_1", content = "Error: file not found: notes.txt" }, m[10])
    -- Earlier messages are sent again unchanged.
    for i = 1, 7 do assert.same(reqs[3].body.messages[i], m[i]) end
  end)

  it("Anthropic: runs the tool_use blocks and answers with tool_result blocks", function()
    local out, stderr, status = run_example("examples/agent_anthropic.lua", sandbox_env({
      ANTHROPIC_API_KEY = fake_llm.ANTHROPIC_KEY, ANTHROPIC_BASE_URL = llm.url, ANTHROPIC_MODEL = "claude-test",
    }))
    check_run(out, stderr, status, fake_llm.ANTHROPIC_KEY)
    assert.truthy(contains(out, "-- step 4 (stop_reason end_turn)"), out)
    assert.truthy(contains(out, "assistant: Step 2."), out)

    local reqs = fake_llm.requests(llm)
    assert.equal(4, #reqs)
    for _, r in ipairs(reqs) do
      assert.equal("/v1/messages", r.path)
      assert.equal(fake_llm.ANTHROPIC_KEY, r.headers["x-api-key"])
      assert.equal("2023-06-01", r.headers["anthropic-version"])
      assert.is_nil(r.headers["authorization"])
      assert.equal("claude-test", r.body.model)
      assert.equal(4096, r.body.max_tokens)
      assert.equal("string", type(r.body.system))
      assert.same(tools.anthropic_tools(), r.body.tools)
      assert.truthy(contains(r.raw, '"input_schema":{'))
    end
    assert.same({ { role = "user", content = TASK } }, reqs[1].body.messages)

    local m = reqs[2].body.messages
    assert.equal(3, #m)
    assert.same({ role = "assistant", content = {
      { type = "text", text = "Step 1." },
      { type = "tool_use", id = "toolu_0_0", name = "run_command",
        input = { command = "python3 -m unittest -q", timeout_seconds = 30 } },
    } }, m[2])
    assert.equal("user", m[3].role)
    assert.equal(1, #m[3].content)
    assert.equal("tool_result", m[3].content[1].type)
    assert.equal("toolu_0_0", m[3].content[1].tool_use_id)
    check_failing_run(m[3].content[1].content)

    m = reqs[3].body.messages
    assert.equal(5, #m)
    assert.same({ role = "user", content = {
      { type = "tool_result", tool_use_id = "toolu_1_0", content = "Wrote 32 characters to calc.py" },
      { type = "tool_result", tool_use_id = "toolu_1_1", content = "[STDOUT]:\nexit=0\n[EXIT CODE]: 0" },
    } }, m[5])
    assert.same({ type = "tool_use", id = "toolu_1_0", name = "write_file",
      input = { path = "calc.py", content = FIXED_CALC } }, m[4].content[2])

    m = reqs[4].body.messages
    assert.equal(7, #m)
    local results = m[7].content
    assert.equal(2, #results)
    assert.equal("toolu_2_0", results[1].tool_use_id)
    check_result_file(results[1].content)
    assert.same({ type = "tool_result", tool_use_id = "toolu_2_1", content = "Error: file not found: notes.txt" },
      results[2])
  end)

  it("kernel example: loads the CSV once and answers three questions from it, the last with a chart", function()
    fake_llm.stop(llm)
    llm = fake_llm.start({ script = "csv" })
    local out, stderr, status = run_example("examples/agent_kernel.lua", sandbox_env({
      OPENAI_API_KEY = fake_llm.OPENAI_KEY, OPENAI_BASE_URL = llm.url .. "/v1", OPENAI_MODEL = "gpt-test",
    }))
    assert.equal("", stderr)
    assert.equal(0, status, out)
    assert.truthy(contains(out, "-- kernels: 1; sales.csv read by 1 cell(s); charts: 1\n"
      .. "RESULT: answered from data loaded once, with a chart\n"), out)
    assert.equal(0, open_sessions())
    -- what the model was sent back: each cell ran in the same kernel, on the rows of the first
    local reqs = fake_llm.requests(llm)
    assert.equal(4, #reqs)
    for _, r in ipairs(reqs) do assert.same(tools.openai_tools(), r.body.tools) end
    local function tool_result(n)
      local m = reqs[n].body.messages
      assert.equal("tool", m[#m].role)
      return m[#m].content
    end
    assert.equal("[RESULT]:\n(144, 49997.0)\n[EXECUTION COUNT]: 1", tool_result(2))
    assert.equal("[RESULT]:\n('west', 15250.0)\n[EXECUTION COUNT]: 2", tool_result(3))
    assert.matches("^%[RESULT%]:\n%[image/png: %d+ bytes%]\n%[RESULT%]:\n%('2025%-01', '2025%-12', 1750%.0%)\n"
      .. "%[EXECUTION COUNT%]: 3$", tool_result(4))
  end)

  it("retries a 429 from the model API and carries on", function()
    fake_llm.stop(llm)
    llm = fake_llm.start({ fail_first = 1 })
    local out, stderr, status = run_example("examples/agent_openai.lua", sandbox_env({
      OPENAI_API_KEY = fake_llm.OPENAI_KEY, OPENAI_BASE_URL = llm.url .. "/v1",
    }))
    check_run(out, stderr, status, fake_llm.OPENAI_KEY)
    local reqs = fake_llm.requests(llm)
    assert.equal(5, #reqs)
    assert.equal(reqs[1].raw, reqs[2].raw)
    assert.equal("gpt-4o-mini", reqs[1].body.model) -- the default model
  end)

  it("stops at the step limit with a non-zero exit status and still deletes the sandbox", function()
    local out, stderr, status = run_example("examples/agent_anthropic.lua", sandbox_env({
      ANTHROPIC_API_KEY = fake_llm.ANTHROPIC_KEY, ANTHROPIC_BASE_URL = llm.url, AGENT_MAX_STEPS = "2",
    }))
    assert.equal("", stderr)
    assert.equal(1, status)
    assert.truthy(contains(out, "stopped: the step limit (2) was reached"), out)
    assert.equal(2, #fake_llm.requests(llm))
    assert.equal(0, open_sessions())
  end)

  it("reports a provider error and a missing key clearly, without the key", function()
    local out, stderr, status = run_example("examples/agent_openai.lua", sandbox_env({
      OPENAI_API_KEY = "sk-wrong-key-123456", OPENAI_BASE_URL = llm.url .. "/v1",
    }))
    assert.equal(1, status)
    assert.equal("agent_openai: the model API answered 401: Incorrect API key provided.\n", stderr)
    assert.falsy(contains(out .. stderr, "sk-wrong-key-123456"))
    assert.equal(0, open_sessions())

    out, stderr, status = run_example("examples/agent_anthropic.lua", sandbox_env({}))
    assert.equal(1, status)
    assert.equal("", out)
    assert.equal("agent_anthropic: set ANTHROPIC_API_KEY\n", stderr)
  end)
end)
