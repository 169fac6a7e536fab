-- bin/airlock-mcp for real: a subprocess speaking newline-delimited JSON-RPC over pipes
-- (stdin is a FIFO the spec writes to, so it can look at airlockd between messages; closing
-- it is the client disconnecting), against a real airlockd.
local airlockd = require "support.airlockd"
local proc = require "support.proc"
local airlock = require "airlock"
local mcp = require "airlock.mcp"
local cjson = require "cjson"

local q = proc.shell_quote

local read_file = proc.read_file
local interpreter = proc.lua_interpreter
local alive = proc.alive

local BIN = proc.repo_root() .. "/bin/airlock-mcp"

-- A running airlock-mcp. proc:send(msg) writes one line; proc:wait(n) waits until n answer
-- lines exist and returns them decoded; proc:close() is the disconnect.
local Proc = {}
Proc.__index = Proc

local function start_mcp(env, args)
  local dir = proc.make_temp_dir()
  assert(os.execute("mkfifo " .. q(dir .. "/in")))
  local words = {}
  for k, v in pairs(env) do words[#words + 1] = k .. "=" .. q(v) end
  assert(os.execute(string.format("env %s %s %s %s < %s > %s 2> %s & echo $! > %s",
    table.concat(words, " "), interpreter(), q(BIN), args or "", q(dir .. "/in"), q(dir .. "/out"),
    q(dir .. "/err"), q(dir .. "/pid"))))
  local child = setmetatable({ dir = dir }, Proc)
  child.writer = assert(io.open(dir .. "/in", "w"))
  child.pid = tonumber(read_file(dir .. "/pid"):match("%d+"))
  return child
end

function Proc:send(msg)
  self.writer:write(type(msg) == "string" and msg or cjson.encode(msg), "\n")
  self.writer:flush()
end

function Proc:lines()
  local out = {}
  for line in (read_file(self.dir .. "/out") or ""):gmatch("[^\n]+") do out[#out + 1] = line end
  return out
end

function Proc:wait(n)
  for _ = 1, 1200 do
    local lines = self:lines()
    if #lines >= n then
      local decoded = {}
      for i, line in ipairs(lines) do decoded[i] = cjson.decode(line) end
      return decoded
    end
    if not alive(self.pid) then break end
    proc.sleep(0.05)
  end
  error("airlock-mcp did not answer " .. n .. " messages; stderr:\n" .. (read_file(self.dir .. "/err") or ""))
end

-- Disconnect and wait for the process to end; returns its stderr.
function Proc:close()
  if self.writer then
    self.writer:close()
    self.writer = nil
  end
  for _ = 1, 400 do
    if not alive(self.pid) then break end
    proc.sleep(0.05)
  end
  local still = alive(self.pid)
  return read_file(self.dir .. "/err") or "", still
end

function Proc:kill()
  os.execute("kill -9 " .. self.pid .. " 2>/dev/null")
  for _ = 1, 100 do
    if not alive(self.pid) then break end
    proc.sleep(0.05)
  end
  if self.writer then pcall(self.writer.close, self.writer) end
  self.writer = nil
end

function Proc:cleanup()
  if self.writer then self:close() end
  if alive(self.pid) then self:kill() end
  proc.remove_tree(self.dir)
end

local function call(id, name, arguments)
  return { jsonrpc = "2.0", id = id, method = "tools/call", params = { name = name, arguments = arguments or {} } }
end

local function text_of(answer)
  assert.is_nil(answer.error, answer.error and answer.error.message)
  assert.equal(1, #answer.result.content)
  assert.equal("text", answer.result.content[1].type)
  return answer.result.content[1].text, answer.result.isError
end

local INIT = { jsonrpc = "2.0", id = 0, method = "initialize",
  params = { protocolVersion = "2025-06-18", capabilities = {}, clientInfo = { name = "spec", version = "1" } } }

describe("bin/airlock-mcp against airlockd", function()
  local server, key, state_dir, procs

  setup(function()
    server = airlockd.start()
    key = server.tenants.acme
  end)
  teardown(function() airlockd.stop(server) end)

  before_each(function()
    procs = {}
    state_dir = proc.temp_path()
    os.remove(state_dir)
  end)
  after_each(function()
    for _, p in ipairs(procs) do p:cleanup() end
    proc.remove_tree(state_dir)
  end)

  local function env(extra)
    local e = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = key, AIRLOCK_STATE_DIR = state_dir,
      LUA_PATH = os.getenv("LUA_PATH") or "", LUA_CPATH = os.getenv("LUA_CPATH") or "" }
    for k, v in pairs(extra or {}) do e[k] = v end
    return e
  end

  local function spawn(extra, args)
    local p = start_mcp(env(extra), args)
    procs[#procs + 1] = p
    return p
  end

  local function sessions()
    local list = airlock.list_sessions({ base_url = server.url, api_key = key })
    local ids = {}
    for i, s in ipairs(list) do ids[i] = s.session_id end
    table.sort(ids)
    return ids
  end

  local function state_path()
    return mcp.state_file({ base_url = server.url, api_key = key, template = "sandbox-base:latest",
      egress = {}, state_dir = state_dir })
  end

  local function state()
    local text = read_file(state_path())
    return text and cjson.decode(text)
  end

  it("serves a whole session: tools work in one sandbox, deleted on disconnect", function()
    local p = spawn()
    p:send(INIT)
    p:send('{"jsonrpc":"2.0","method":"notifications/initialized"}')
    p:send({ jsonrpc = "2.0", id = 1, method = "tools/list" })
    local answers = p:wait(2)
    assert.equal("2025-06-18", answers[1].result.protocolVersion)
    assert.equal("airlock-sandbox", answers[1].result.serverInfo.name)
    assert.equal(12, #answers[2].result.tools) -- the reference's nine, run_python, snapshot and restore
    assert.equal("run_command", answers[2].result.tools[1].name)
    assert.same({}, sessions()) -- listing tools creates nothing
    assert.is_nil(state())

    p:send(call(2, "write_file", { path = "pkg/hello.py", content = "print('h\195\169llo', 6 * 7)\n" }))
    answers = p:wait(3)
    assert.same({ "Wrote 22 characters to pkg/hello.py", false }, { text_of(answers[3]) })
    local ids = sessions()
    assert.equal(1, #ids)
    assert.same({ session_id = ids[1] }, state())
    assert.falsy(read_file(state_path()):find(key, 1, true))

    p:send(call(3, "read_file", { path = "pkg/hello.py" }))
    p:send(call(4, "run_command", { command = "python3 pkg/hello.py" }))
    p:send(call(5, "read_file", { path = "missing.txt" }))
    p:send(call(6, "run_command", { command = "echo hi", timeout_seconds = 600 }))
    p:send(call(7, "list_files", {}))
    p:send(call(8, "sandbox_info", {}))
    p:send(call(9, "write_file", { path = "../escape.txt", content = "x" }))
    answers = p:wait(10)
    assert.same({ "print('h\195\169llo', 6 * 7)\n", false }, { text_of(answers[4]) })
    assert.same({ "[STDOUT]:\nh\195\169llo 42\n[EXIT CODE]: 0", false }, { text_of(answers[5]) })
    assert.same({ "File not found: missing.txt", true }, { text_of(answers[6]) })
    local t, is_error = text_of(answers[7])
    assert.is_true(is_error)
    assert.matches("^ValidationError: ", t)
    t = text_of(answers[8])
    assert.matches("^%[STDOUT%]:\n", t)
    assert.truthy(t:find("\nf       23  ./pkg/hello.py\n", 1, true), t) -- 23 bytes
    assert.truthy(t:find("\nd +%d+  %./pkg\n"), t)
    assert.truthy(t:find("^%[STDOUT%]:\nd +%d+  %.\n"), t)
    assert.matches("\n%[EXIT CODE%]: 0$", t)
    assert.same({ table.concat({
      "Server: " .. server.url,
      "Session: " .. ids[1] .. " (tenant acme)",
      "Internet: none",
      "Disk quota: 512 MB",
      "Limits: 10 sessions, 120 requests/min, 4 concurrent commands",
    }, "\n"), false }, { text_of(answers[9]) })
    assert.same({ "PermissionDeniedError: Access denied: symlink/path traversal outside workspace for '../escape.txt'",
      true }, { text_of(answers[10]) })
    assert.same(ids, sessions()) -- still the one sandbox

    p:send(call(10, "reset_sandbox", {}))
    p:send(call(11, "read_file", { path = "pkg/hello.py" }))
    answers = p:wait(12)
    local fresh = text_of(answers[11]):match("^Started a fresh sandbox %((sbx_%x+)%)%. All previous files are gone%.$")
    assert.truthy(fresh, text_of(answers[11]))
    assert.not_equal(ids[1], fresh)
    assert.same({ fresh }, sessions())
    assert.same({ session_id = fresh }, state())
    assert.same({ "File not found: pkg/hello.py", true }, { text_of(answers[12]) })

    -- a binary file is described, not put in the model's context (the shared catalogue)
    p:send(call(12, "run_command", { command = "printf '\\x89PNG\\r\\n\\x1a\\n\\xff\\x00' > dot.png" }))
    p:send(call(13, "read_file", { path = "dot.png" }))
    answers = p:wait(14)
    assert.same({ "binary file, 10 bytes (PNG image); not shown. Inspect it with run_command "
      .. "(e.g. xxd FILE | head, or file FILE).", false }, { text_of(answers[14]) })

    local stderr, still_running = p:close()
    assert.is_false(still_running)
    assert.equal("", stderr)
    assert.same({}, sessions()) -- deleted on disconnect
    assert.is_nil(read_file(state_path()))
    for _, line in ipairs(p:lines()) do assert.falsy(line:find(key, 1, true)) end
  end)

  it("runs Python in one kernel for the connection and returns charts as image content", function()
    local p = spawn()
    p:send(call(1, "run_python", { code = "data = {'a': 3, 'b': 5}" }))
    p:send(call(2, "run_python", { code = "import matplotlib.pyplot as plt\n"
      .. "plt.bar(list(data), list(data.values())); plt.show()\nsum(data.values())" }))
    p:send(call(3, "run_python", { code = "1 / 0" }))
    local a = p:wait(3)
    assert.same({ "[EXECUTION COUNT]: 1", false }, { text_of(a[1]) })
    local chart = a[2].result
    assert.is_false(chart.isError)
    assert.equal(2, #chart.content)
    assert.equal("text", chart.content[1].type)
    assert.matches("^%[RESULT%]:\n%[image/png: %d+ bytes%]\n%[RESULT%]:\n8\n%[EXECUTION COUNT%]: 2$",
      chart.content[1].text)
    assert.equal("image", chart.content[2].type)
    assert.equal("image/png", chart.content[2].mimeType)
    assert.matches("^iVBORw0KGgo", chart.content[2].data)   -- "\x89PNG\r\n\x1a\n", base64
    local t = text_of(a[3])
    assert.truthy(t:find("ZeroDivisionError: division by zero", 1, true), t)
    p:send(call(4, "run_python", { code = "for i in range(10):\n    plt.figure(); plt.plot([0, i])\nplt.show()" }))
    local many = p:wait(4)[4].result
    assert.equal(1 + mcp.MAX_TOOL_IMAGES, #many.content)
    assert.equal("image", many.content[1 + mcp.MAX_TOOL_IMAGES].type)
    assert.truthy(many.content[1].text:find("\n[note] 2 more images were drawn but not sent (at most "
      .. mcp.MAX_TOOL_IMAGES .. " per call).", 1, true), many.content[1].text)
    assert.equal(1, #airlock.attach(sessions()[1], { base_url = server.url, api_key = key }):kernels())
    assert.equal("", (p:close()))
    assert.same({}, sessions())
  end)

  it("answers malformed and unknown requests with JSON-RPC errors and keeps serving", function()
    local p = spawn()
    p:send("this is not json")
    p:send('{"jsonrpc":"2.0","id":1,"method":"no/such/method"}')
    p:send('{"jsonrpc":"2.0","id":2}')
    p:send('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope","arguments":{}}}')
    p:send('{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"read_file","arguments":{}}}')
    p:send('{"jsonrpc":"2.0","id":5,"method":"ping"}')
    local a = p:wait(6)
    assert.same({ -32700, cjson.null }, { a[1].error.code, a[1].id })
    assert.same({ -32601, 1 }, { a[2].error.code, a[2].id })
    assert.same({ -32600, 2 }, { a[3].error.code, a[3].id })
    assert.same({ -32602, 3, "Unknown tool: nope" }, { a[4].error.code, a[4].id, a[4].error.message })
    assert.same({ -32602, 4 }, { a[5].error.code, a[5].id })
    assert.same({ jsonrpc = "2.0", id = 5, result = {} }, a[6])
    assert.same({}, sessions())
    local stderr = p:close()
    assert.equal("", stderr)
  end)

  it("formats the egress log, and turns the server's refusals into tool errors", function()
    local p = spawn()
    p:send(call(1, "egress_log", {}))
    p:send(call(2, "activity", { limit = 5 }))
    p:send(call(3, "import_repo", { repo = "octocat/Hello-World" }))
    local a = p:wait(3)
    assert.same({ "This sandbox has no internet access.", false }, { text_of(a[1]) })
    -- airlockd runs without an audit log (501) and cannot reach GitHub (502).
    assert.same({ "SandboxError: The audit log is not enabled on this server (SANDBOX_AUDIT).", true },
      { text_of(a[2]) })
    local import, import_error = text_of(a[3])
    assert.is_true(import_error)
    assert.matches("^SandboxError: Couldn't download octocat/Hello%-World: .+", import)
    assert.equal("", (p:close()))
  end)

  it("replaces an expired session once, with a note", function()
    local p = spawn()
    p:send(call(1, "write_file", { path = "a.txt", content = "1" }))
    p:wait(1)
    local first = state().session_id
    airlock.attach(first, { base_url = server.url, api_key = key }):close() -- expire it
    p:send(call(2, "run_command", { command = "ls" }))
    local a = p:wait(2)
    assert.same({ mcp.EXPIRED_NOTE .. "[EXIT CODE]: 0", false }, { text_of(a[2]) })
    local second = state().session_id
    assert.not_equal(first, second)
    assert.same({ second }, sessions())
    assert.equal("", (p:close()))
    assert.same({}, sessions())
  end)

  it("snapshot keeps the workspace and restore goes back to it in a new session (ours)", function()
    local p = spawn()
    p:send(call(1, "write_file", { path = "a.txt", content = "before" }))
    p:send(call(2, "snapshot", { name = "before-change" }))
    local a = p:wait(2)
    local text = text_of(a[2])
    local snap = text:match("^Snapshot (snap_%x+) taken %(")
    assert.truthy(snap, text)
    local first = state().session_id
    p:send(call(3, "write_file", { path = "a.txt", content = "after" }))
    p:send(call(4, "restore", { snapshot_id = snap }))
    p:send(call(5, "read_file", { path = "a.txt" }))
    p:send(call(6, "restore", { snapshot_id = "snap_0000000000000000" }))
    p:send(call(7, "restore", {}))
    a = p:wait(7)
    local restored = state().session_id
    assert.not_equal(first, restored)
    assert.same({ string.format(
      "Restored snapshot %s into a new sandbox (%s): its files are as they were when the snapshot was taken, "
      .. "and the next tools run there.", snap, restored), false }, { text_of(a[4]) })
    assert.same({ "before", false }, { text_of(a[5]) })
    local unknown, is_error = text_of(a[6])
    assert.is_true(is_error)
    assert.matches("^NotFoundError: ", unknown)
    assert.equal("Invalid params: missing required argument 'snapshot_id' for restore", a[7].error.message)
    assert.same({ restored }, sessions()) -- the first session went with the restore
    assert.equal("", (p:close()))
    assert.same({}, sessions())
    assert.is_true(airlock.snapshots.delete(snap, { base_url = server.url, api_key = key }))
  end)

  it("deletes the session a killed process left behind when the next one starts working", function()
    local p = spawn()
    p:send(call(1, "run_command", { command = "true" }))
    p:wait(1)
    local left = state().session_id
    p:kill()
    assert.same({ left }, sessions()) -- still there
    assert.same({ session_id = left }, state())

    local p2 = spawn()
    p2:send({ jsonrpc = "2.0", id = 1, method = "tools/list" })
    p2:wait(1)
    assert.same({ left }, sessions()) -- nothing happens before a tool call
    p2:send(call(2, "write_file", { path = "b.txt", content = "2" }))
    p2:wait(2)
    local now = state().session_id
    assert.not_equal(left, now)
    assert.same({ now }, sessions())
    assert.equal("", (p2:close()))
    assert.same({}, sessions())
  end)

  it("uses --egress and --template in the state file name and the session", function()
    local p = spawn({ AIRLOCK_EGRESS = "pypi" }, "--egress '' --template python:3.11-slim")
    p:send(call(1, "sandbox_info", {}))
    local a = p:wait(1)
    assert.truthy(text_of(a[1]):find("\nInternet: none\n", 1, true))
    local path = mcp.state_file({ base_url = server.url, api_key = key, template = "python:3.11-slim",
      egress = {}, state_dir = state_dir })
    assert.truthy(read_file(path))
    assert.equal("", (p:close()))
    assert.is_nil(read_file(path))
  end)

  it("refuses to start without settings, and prints its version and help", function()
    local function run(cmd)
      local status, out = proc.run_capture(cmd)
      return out, status
    end
    local out, status = run("env -u SANDBOX_API_URL -u SANDBOX_API_KEY " .. interpreter() .. " " .. q(BIN)
      .. " < /dev/null")
    assert.equal("airlock-mcp: set SANDBOX_API_URL and SANDBOX_API_KEY (see --help).\n", out)
    assert.equal(2, status)
    out, status = run(interpreter() .. " " .. q(BIN) .. " --version")
    assert.equal("airlock-mcp " .. mcp.version() .. "\n", out)
    assert.equal(0, status)
    out, status = run(interpreter() .. " " .. q(BIN) .. " --help")
    assert.truthy(out:find("AIRLOCK_STATE_DIR", 1, true))
    assert.equal(0, status)
  end)
end)
