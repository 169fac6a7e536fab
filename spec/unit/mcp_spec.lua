-- The local MCP server's library (airlock.mcp): settings, the JSON-RPC layer, the tool texts
-- and the one-sandbox-per-process holder, driven line by line with an in-memory SDK adapter
-- (the holder only calls create/delete/close on it). The real thing, bin/airlock-mcp over
-- pipes against airlockd, is spec/integration/mcp_spec.lua.
local mcp = require "airlock.mcp"
local errors = require "airlock.errors"
local cjson = require "cjson"

local proc = require "support.proc"

local read_file = proc.read_file

local function getenv_from(t) return function(k) return t[k] end end

-- A fake SDK: sandboxes sbx_1, sbx_2, ... whose calls are recorded in sdk.log.
local function fake_sdk()
  local sdk = { log = {}, n = 0, expire_next = 0 }
  local function note(...) sdk.log[#sdk.log + 1] = table.concat({ ... }, " ") end
  local function check_alive(sbx)
    if sdk.expire_next > 0 then
      sdk.expire_next = sdk.expire_next - 1
      error(errors.new("NotFoundError", "Session not found or expired", { status = 404 }), 0)
    end
    assert(not sbx.closed, "call on a closed sandbox")
  end
  function sdk.create(_, settings)
    sdk.n = sdk.n + 1
    local sbx = { session_id = "sbx_" .. sdk.n, tenant_id = "acme", egress = settings.egress,
      disk_quota_mb = 512, store = {} }
    note("create", sbx.session_id, settings.template, table.concat(settings.egress, ","))
    sbx.files = {
      write = function(_, path, content)
        check_alive(sbx)
        if path:find("^%.%.") then
          error(errors.new("PermissionDeniedError",
            "Access denied: symlink/path traversal outside workspace for '" .. path .. "'", { status = 403 }), 0)
        end
        sbx.store[path] = content
      end,
      read = function(_, path)
        check_alive(sbx)
        if not sbx.store[path] then error(errors.new("FileNotFoundError", "File not found: " .. path), 0) end
        return sbx.store[path]
      end,
    }
    function sbx.run(_, command, opts)
      check_alive(sbx)
      note("run", sbx.session_id, command, tostring(opts.timeout))
      if command == "big" then return { output = string.rep("z", 20000) } end
      return { output = "[STDOUT]:\nran " .. command .. "\n[EXIT CODE]: 0" }
    end
    function sbx.egress_log(_, limit)
      note("egress_log", tostring(limit))
      return sdk.events or {}
    end
    function sbx.audit(_, opts)
      note("audit", tostring(opts.limit))
      return { entries = sdk.entries or {} }
    end
    function sbx.usage()
      return { tenant_id = "acme", limits = { max_sessions = 10, requests_per_minute = 120, max_concurrent_exec = 4 } }
    end
    function sbx.import_repo(_, repo, opts)
      note("import", repo, tostring(opts.ref), tostring(opts.path))
      return { repo = "octo/hello", ref = opts.ref or "HEAD", path = "/workspace/" .. (opts.path or "hello"),
        files = 3 }
    end
    return sbx
  end
  function sdk.delete(_, _, id, timeout) note("delete", id, tostring(timeout)) end
  function sdk.close(_, sbx, timeout)
    sbx.closed = true
    note("close", sbx.session_id, tostring(timeout))
  end
  function sdk.session_id(_, sbx) return sbx.session_id end
  return sdk
end

local function settings(dir, extra)
  local s = { base_url = "http://127.0.0.1:9", api_key = "ak_secret_key_123", template = "sandbox-base:latest",
    egress = {}, verify = true, state_dir = dir }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

-- Each test of the enclosing describe block gets a fresh state directory, fake SDK and
-- server: set(dir, sdk, server) hands them over; the directory is removed after the test.
local function fresh_server_each_test(set)
  local dir
  before_each(function()
    dir = proc.make_temp_dir()
    local sdk = fake_sdk()
    set(dir, sdk, mcp.server(settings(dir), { sdk = sdk }))
  end)
  after_each(function() proc.remove_tree(dir) end)
end

local function rpc(server, id, method, params)
  local line = server:handle_line(cjson.encode({ jsonrpc = "2.0", id = id, method = method, params = params }))
  return line and cjson.decode(line)
end

local function call_tool(server, name, args)
  local r = rpc(server, 7, "tools/call", { name = name, arguments = args or {} })
  assert.is_nil(r.error)
  assert.equal(1, #r.result.content)
  assert.equal("text", r.result.content[1].type)
  return r.result.content[1].text, r.result.isError
end

describe("airlock.mcp settings", function()
  it("needs SANDBOX_API_URL and SANDBOX_API_KEY", function()
    local s, msg, status = mcp.settings_from_env(getenv_from({ SANDBOX_API_URL = "http://x" }), {})
    assert.is_nil(s)
    assert.equal("airlock-mcp: set SANDBOX_API_URL and SANDBOX_API_KEY (see --help).", msg)
    assert.equal(2, status)
  end)

  it("reads the environment, with --egress and --template overriding it", function()
    local env = { SANDBOX_API_URL = "http://127.0.0.1:8080//", SANDBOX_API_KEY = " k1 ",
      AIRLOCK_EGRESS = "pypi, npm,,", AIRLOCK_TEMPLATE = "python:3.11-slim", SANDBOX_API_INSECURE = " Yes ",
      AIRLOCK_STATE_DIR = "/tmp/st" }
    local s = assert(mcp.settings_from_env(getenv_from(env), {}))
    assert.same({ base_url = "http://127.0.0.1:8080", api_key = "k1", template = "python:3.11-slim",
      egress = { "pypi", "npm" }, verify = false, state_dir = "/tmp/st" }, s)
    s = assert(mcp.settings_from_env(getenv_from(env), { "--egress", "github", "--template=sandbox-base:latest" }))
    assert.same({ "github" }, s.egress)
    assert.equal("sandbox-base:latest", s.template)
    s = assert(mcp.settings_from_env(getenv_from(env), { "--egress=" }))
    assert.same({}, s.egress)
  end)

  it("reads the sandbox's size from AIRLOCK_MEMORY_MB, _CPUS, _DISK_MB, _MAX_PROCESSES", function()
    local env = { SANDBOX_API_URL = "http://a", SANDBOX_API_KEY = "k", AIRLOCK_STATE_DIR = "/st" }
    local plain = assert(mcp.settings_from_env(getenv_from(env), {}))
    assert.is_nil(plain.sizes)
    env.AIRLOCK_MEMORY_MB, env.AIRLOCK_CPUS, env.AIRLOCK_DISK_MB, env.AIRLOCK_MAX_PROCESSES = " 1024 ", "0.5", "", "100"
    local s = assert(mcp.settings_from_env(getenv_from(env), {}))
    assert.same({ memory_mb = 1024, cpus = 0.5, max_processes = 100 }, s.sizes)
    local opts = mcp.sdk({}):options(s)
    assert.same({ 1024, 0.5, 100 }, { opts.memory_mb, opts.cpus, opts.max_processes })
    assert.is_nil(opts.disk_mb)
    -- a session of another size is another session; without sizes the name is the reference's
    assert.not_equal(mcp.state_file(plain), mcp.state_file(s))
    local want = mcp.sha256_hex("http://a|k|sandbox-base:latest|"):sub(1, 16)
    assert.equal("/st/mcp-session-" .. want .. ".json", mcp.state_file(plain))
    env.AIRLOCK_CPUS = "two"
    local none, msg, status = mcp.settings_from_env(getenv_from(env), {})
    assert.is_nil(none)
    assert.equal("airlock-mcp: AIRLOCK_CPUS must be a number, got 'two' (see --help).", msg)
    assert.equal(2, status)
  end)

  it("keeps state under XDG_STATE_HOME or ~/.local/state", function()
    local env = { SANDBOX_API_URL = "http://a", SANDBOX_API_KEY = "k", HOME = "/home/u" }
    assert.equal("/home/u/.local/state/airlock-sandbox", mcp.settings_from_env(getenv_from(env), {}).state_dir)
    env.XDG_STATE_HOME = "/xdg"
    assert.equal("/xdg/airlock-sandbox", mcp.settings_from_env(getenv_from(env), {}).state_dir)
    assert.is_true(mcp.settings_from_env(getenv_from(env), {}).verify)
  end)

  it("answers --help and --version, and refuses unknown arguments", function()
    assert.same({ nil, "help", 0 }, { mcp.settings_from_env(getenv_from({}), { "--help" }) })
    assert.same({ nil, "version", 0 }, { mcp.settings_from_env(getenv_from({}), { "--version" }) })
    local _, msg, status = mcp.settings_from_env(getenv_from({}), { "--frobnicate" })
    assert.equal("airlock-mcp: unknown argument '--frobnicate' (see --help).", msg)
    assert.equal(2, status)
    _, msg = mcp.settings_from_env(getenv_from({}), { "--egress" })
    assert.equal("airlock-mcp: --egress needs a value (see --help).", msg)
    assert.truthy(mcp.usage():find("SANDBOX_API_KEY", 1, true))
  end)

  it("names the state file from a SHA-256 of url|key|template|egress without storing the key", function()
    assert.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", mcp.sha256_hex("abc"))
    local s = settings("/st", { egress = { "pypi", "npm" } })
    local want = mcp.sha256_hex("http://127.0.0.1:9|ak_secret_key_123|sandbox-base:latest|pypi,npm"):sub(1, 16)
    assert.equal("/st/mcp-session-" .. want .. ".json", mcp.state_file(s))
    assert.not_equal(mcp.state_file(s), mcp.state_file(settings("/st", { egress = { "pypi" } })))
    local other = settings("/st", { api_key = "other", egress = { "pypi", "npm" } })
    assert.not_equal(mcp.state_file(s), mcp.state_file(other))
  end)
end)

describe("airlock.mcp helpers", function()
  it("quotes like shlex.quote", function()
    assert.equal(".", mcp.shell_quote("."))
    assert.equal("src/a-b_c.py", mcp.shell_quote("src/a-b_c.py"))
    assert.equal("''", mcp.shell_quote(""))
    assert.equal("'my dir'", mcp.shell_quote("my dir"))
    assert.equal("'it'\"'\"'s'", mcp.shell_quote("it's"))
    assert.equal("'$(rm -rf /)'", mcp.shell_quote("$(rm -rf /)"))
  end)

  it("groups digits with commas", function()
    assert.equal("0", mcp.group_digits(0))
    assert.equal("999", mcp.group_digits(999))
    assert.equal("1,000", mcp.group_digits(1000))
    assert.equal("1,234,567", mcp.group_digits(1234567))
    assert.equal("-1,234", mcp.group_digits(-1234))
  end)

  it("formats the egress log", function()
    assert.equal("This sandbox has no internet access.", mcp.format_egress({}, { egress = {} }))
    assert.equal("No outbound connections yet.", mcp.format_egress({}, { egress = { "pypi.org" } }))
    assert.equal(table.concat({
      "allow  pypi.org  1,234,567 bytes in",
      "deny   evil.com  (host not on allowlist)",
      "deny   http://x.test/  (only HTTPS (CONNECT) is supported)",
      "deny   ?",
      "allow  files.pythonhosted.org",
    }, "\n"), mcp.format_egress({
      { decision = "allow", host = "pypi.org", bytes_down = 1234567, bytes_up = 10 },
      { decision = "deny", host = "evil.com", reason = "host not on allowlist" },
      { decision = "deny", target = "http://x.test/", reason = "only HTTPS (CONNECT) is supported" },
      { decision = "deny" },
      { decision = "allow", host = "files.pythonhosted.org", bytes_down = 0 },
    }, { egress = { "pypi.org" } }))
  end)

  it("formats the activity log", function()
    assert.equal("No commands recorded yet.", mcp.format_activity({}))
    assert.equal(table.concat({
      "exit 0        ls   [sbx_1]",
      "exit 2        false   [sbx_1]",
      "timed out     sleep 99   [sbx_2]",
      "out of memory python3 hog.py   [sbx_2]",
      "failed        import a/private   [sbx_3]",
      "exit 0        echo",
    }, "\n"), mcp.format_activity({
      { command = "ls", exit_code = 0, session_id = "sbx_1" },
      { command = "false", exit_code = 2, session_id = "sbx_1" },
      { command = "sleep 99", exit_code = -1, timed_out = true, session_id = "sbx_2" },
      { command = "python3 hog.py", exit_code = 137, oom_killed = true, session_id = "sbx_2" },
      { command = "import a/private", exit_code = cjson.null, session_id = "sbx_3" },
      { command = "echo", exit_code = 0 },
    }))
  end)
end)

describe("airlock.mcp JSON-RPC", function()
  local sdk, server
  fresh_server_each_test(function(_, f, srv) sdk, server = f, srv end)

  it("initializes, echoing a supported protocol version", function()
    for _, v in ipairs({ "2025-06-18", "2025-03-26", "2024-11-05" }) do
      local r = rpc(server, 1, "initialize", { protocolVersion = v, capabilities = {},
        clientInfo = { name = "t", version = "1" } })
      assert.equal(v, r.result.protocolVersion)
      assert.equal(1, r.id)
      assert.equal("2.0", r.jsonrpc)
      assert.same({ name = "airlock-sandbox", version = mcp.version() }, r.result.serverInfo)
      assert.equal("table", type(r.result.capabilities.tools))
      assert.truthy(r.result.instructions:find("256 MB RAM, 1 CPU, 64 processes", 1, true))
    end
    local r = rpc(server, 2, "initialize", { protocolVersion = "1999-01-01" })
    assert.equal("2025-06-18", r.result.protocolVersion)
  end)

  it("lists the ten tools in order, then ours, with schemas and annotations, creating nothing", function()
    local r = rpc(server, "list", "tools/list", {})
    assert.equal("list", r.id)
    local names = {}
    for i, t in ipairs(r.result.tools) do names[i] = t.name end
    assert.same({ "run_command", "run_python", "write_file", "read_file", "list_files", "import_repo", "egress_log",
      "activity", "sandbox_info", "reset_sandbox", "snapshot", "restore" }, names)
    assert.same({ "snapshot_id" }, r.result.tools[12].inputSchema.required)
    local by = {}
    for _, t in ipairs(r.result.tools) do by[t.name] = t end
    assert.same({ "command" }, by.run_command.inputSchema.required)
    assert.equal(30, by.run_command.inputSchema.properties.timeout_seconds.default)
    assert.equal("integer", by.run_command.inputSchema.properties.timeout_seconds.type)
    assert.same({ "code" }, by.run_python.inputSchema.required)
    assert.equal(30, by.run_python.inputSchema.properties.timeout_seconds.default)
    assert.same({ "path", "content" }, by.write_file.inputSchema.required)
    assert.same({ "repo" }, by.import_repo.inputSchema.required)
    assert.is_nil(by.sandbox_info.inputSchema.required)
    assert.equal("object", by.sandbox_info.inputSchema.type)
    assert.same({ title = "Reset the sandbox", readOnlyHint = false, destructiveHint = true },
      by.reset_sandbox.annotations)
    assert.same({ title = "Read a file", readOnlyHint = true, destructiveHint = false }, by.read_file.annotations)
    assert.same({ title = "Run a shell command", readOnlyHint = false, destructiveHint = false },
      by.run_command.annotations)
    for _, n in ipairs({ "list_files", "egress_log", "activity", "sandbox_info" }) do
      assert.is_true(by[n].annotations.readOnlyHint)
    end
    assert.equal(0, #sdk.log)
    -- The encoded text: properties of a tool without parameters is an object, not an array.
    local line = server:handle_line('{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
    assert.truthy(line:find('"properties":{}', 1, true))
    assert.falsy(line:find('"required":{}', 1, true))
  end)

  it("answers ping with an empty object and ignores notifications", function()
    local line = server:handle_line('{"jsonrpc":"2.0","id":9,"method":"ping"}')
    assert.truthy(line:find('"result":{}', 1, true), line)
    assert.same({ jsonrpc = "2.0", id = 9, result = {} }, cjson.decode(line))
    assert.is_nil(server:handle_line('{"jsonrpc":"2.0","method":"notifications/initialized"}'))
    assert.is_nil(server:handle_line('{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}'))
    assert.is_nil(server:handle_line("   "))
  end)

  it("keeps numeric ids exact", function()
    local line = server:handle_line('{"jsonrpc":"2.0","id":1000000000000001,"method":"ping"}')
    assert.truthy(line:find('"id":1000000000000001', 1, true), line)
    line = server:handle_line('{"jsonrpc":"2.0","id":0,"method":"ping"}')
    assert.truthy(line:find('"id":0[,}]'), line)
  end)

  it("answers protocol errors with JSON-RPC error codes", function()
    local function err(line)
      local r = cjson.decode(server:handle_line(line))
      return r.error.code, r.id, r.error.message
    end
    local code, id = err("{not json")
    assert.equal(-32700, code)
    assert.equal(cjson.null, id)
    assert.equal(-32600, cjson.decode(server:handle_line("[1]"))[1].error.code)
    assert.equal(-32600, err('{"jsonrpc":"1.0","id":1,"method":"ping"}'))
    assert.equal(-32600, err('{"jsonrpc":"2.0","id":1}'))
    assert.equal(-32600, err('{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}'))
    assert.equal(-32600, err('"hello"'))
    assert.equal(-32600, err("[]"))
    local c, i, m = err('{"jsonrpc":"2.0","id":5,"method":"resources/list"}')
    assert.same({ -32601, 5, "Method not found: resources/list" }, { c, i, m })
    assert.equal(-32602, err('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}'))
    assert.equal(-32602, err('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}'))
    c, i, m = err('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm_rf"}}')
    assert.same({ -32602, 1, "Unknown tool: rm_rf" }, { c, i, m })
    c, i, m = err('{"jsonrpc":"2.0","id":1,"method":"tools/call",'
      .. '"params":{"name":"write_file","arguments":{"path":"a"}}}')
    assert.same({ -32602, 1, "Invalid params: missing required argument 'content' for write_file" }, { c, i, m })
    c, i, m = err('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command",'
      .. '"arguments":{"command":"ls","timeout_seconds":"soon"}}}')
    assert.same({ -32602, 1, "Invalid params: argument 'timeout_seconds' for run_command must be an integer" },
      { c, i, m })
    c = err('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file","arguments":[1]}}')
    assert.equal(-32602, c)
    assert.equal(0, #sdk.log)
  end)

  it("answers a batch with an array", function()
    local line = server:handle_line('[{"jsonrpc":"2.0","id":1,"method":"ping"},'
      .. '{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"nope"}]')
    local r = cjson.decode(line)
    assert.equal(2, #r)
    assert.equal(1, r[1].id)
    assert.equal(-32601, r[2].error.code)
  end)
end)

describe("airlock.mcp tools and the sandbox holder", function()
  local dir, sdk, server
  fresh_server_each_test(function(d, f, srv) dir, sdk, server = d, f, srv end)

  local function state()
    local text = read_file(mcp.state_file(settings(dir)))
    return text and cjson.decode(text)
  end

  it("creates the sandbox on the first tool call and records its id (not the key)", function()
    assert.is_nil(state())
    assert.same({ "Wrote 5 characters to h.txt", false },
      { call_tool(server, "write_file", { path = "h.txt", content = "h\195\169llo" }) })
    assert.same({ session_id = "sbx_1" }, state())
    assert.falsy(read_file(mcp.state_file(settings(dir))):find("ak_secret_key_123", 1, true))
    assert.same({ "h\195\169llo", false }, { call_tool(server, "read_file", { path = "h.txt" }) })
    assert.same({ "create sbx_1 sandbox-base:latest " }, sdk.log)
  end)

  it("turns errors into tool errors", function()
    assert.same({ "File not found: nope.txt", true }, { call_tool(server, "read_file", { path = "nope.txt" }) })
    assert.same({ "PermissionDeniedError: Access denied: symlink/path traversal outside workspace for '../x'", true },
      { call_tool(server, "write_file", { path = "../x", content = "" }) })
  end)

  it("runs commands with a default timeout of 30 s and truncates long output", function()
    assert.same({ "[STDOUT]:\nran ls\n[EXIT CODE]: 0", false },
      { call_tool(server, "run_command", { command = "ls" }) })
    call_tool(server, "run_command", { command = "ls", timeout_seconds = "7" })
    assert.equal("run sbx_1 ls 30", sdk.log[2])
    assert.equal("run sbx_1 ls 7", sdk.log[3])
    local text = call_tool(server, "run_command", { command = "big" })
    assert.equal(string.rep("z", 3200) .. "\n\n... [TRUNCATED: 12000 characters omitted] ...\n\n"
      .. string.rep("z", 4800), text)
  end)

  it("lists files with find, a clamped depth and a 15 s timeout", function()
    call_tool(server, "list_files", {})
    assert.equal("run sbx_1 find . -maxdepth 3 -path '*/.local' -prune -o -printf '%y %8s  %p\\n' 2>&1 "
      .. "| sort -k3 | head -500 15", sdk.log[2])
    call_tool(server, "list_files", { path = "my dir", max_depth = 99 })
    assert.equal("run sbx_1 find 'my dir' -maxdepth 10 -path '*/.local' -prune -o -printf '%y %8s  %p\\n' 2>&1 "
      .. "| sort -k3 | head -500 15", sdk.log[3])
    call_tool(server, "list_files", { max_depth = 0 })
    assert.truthy(sdk.log[4]:find("-maxdepth 1 ", 1, true))
  end)

  it("imports a repository, passing empty ref and path as absent", function()
    assert.same({ "Imported octo/hello@HEAD: 3 files in /workspace/hello", false },
      { call_tool(server, "import_repo", { repo = "octo/hello" }) })
    assert.equal("import octo/hello nil nil", sdk.log[2])
    call_tool(server, "import_repo", { repo = "octo/hello", ref = "v1", path = "x" })
    assert.equal("import octo/hello v1 x", sdk.log[3])
  end)

  it("clamps the egress log and activity limits", function()
    assert.same({ "This sandbox has no internet access.", false }, { call_tool(server, "egress_log", {}) })
    call_tool(server, "egress_log", { limit = 9999 })
    call_tool(server, "activity", {})
    call_tool(server, "activity", { limit = 0 })
    assert.same({ "egress_log 50", "egress_log 500", "audit 20", "audit 1" },
      { sdk.log[2], sdk.log[3], sdk.log[4], sdk.log[5] })
  end)

  it("describes the sandbox", function()
    assert.same({ table.concat({
      "Server: http://127.0.0.1:9",
      "Session: sbx_1 (tenant acme)",
      "Internet: none",
      "Disk quota: 512 MB",
      "Limits: 10 sessions, 120 requests/min, 4 concurrent commands",
    }, "\n"), false }, { call_tool(server, "sandbox_info") })
  end)

  it("replaces an expired session once, with a note", function()
    call_tool(server, "write_file", { path = "a", content = "1" })
    sdk.expire_next = 1
    local text, is_error = call_tool(server, "run_command", { command = "ls" })
    assert.is_false(is_error)
    assert.equal(mcp.EXPIRED_NOTE .. "[STDOUT]:\nran ls\n[EXIT CODE]: 0", text)
    assert.equal("[note] The previous sandbox session expired; this ran in a new, empty workspace.\n", mcp.EXPIRED_NOTE)
    assert.same({ session_id = "sbx_2" }, state())
    sdk.expire_next = 2
    text, is_error = call_tool(server, "run_command", { command = "ls" })
    assert.is_true(is_error)
    assert.equal("NotFoundError: Session not found or expired", text)
  end)

  it("resets the sandbox", function()
    call_tool(server, "write_file", { path = "a", content = "1" })
    assert.same({ "Started a fresh sandbox (sbx_2). All previous files are gone.", false },
      { call_tool(server, "reset_sandbox") })
    assert.same({ "create sbx_1 sandbox-base:latest ", "close sbx_1 nil", "create sbx_2 sandbox-base:latest " },
      sdk.log)
    assert.same({ session_id = "sbx_2" }, state())
  end)

  it("deletes a session left by a killed process before creating its own", function()
    os.execute("mkdir -p '" .. dir .. "'")
    local f = assert(io.open(mcp.state_file(settings(dir)), "w"))
    f:write('{"session_id": "sbx_deadbeef0001"}')
    f:close()
    call_tool(server, "run_command", { command = "ls" })
    assert.same({ "delete sbx_deadbeef0001 5", "create sbx_1 sandbox-base:latest " }, { sdk.log[1], sdk.log[2] })
    assert.same({ session_id = "sbx_1" }, state())
  end)

  it("deletes its session on disconnect (end of input), with a 1.5 s timeout", function()
    local input = { lines = {
      '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"ls"}}}',
    } }
    function input.read() return table.remove(input.lines, 1) end
    local out = {}
    local output = { write = function(_, ...) for _, s in ipairs({ ... }) do out[#out + 1] = s end end,
      flush = function() end }
    server:serve(input, output)
    local r = cjson.decode(out[1])
    assert.equal("[STDOUT]:\nran ls\n[EXIT CODE]: 0", r.result.content[1].text)
    assert.equal("\n", out[2])
    assert.equal("close sbx_1 1.5", sdk.log[#sdk.log])
    assert.is_nil(state())
  end)

  it("a session without tool calls creates and deletes nothing", function()
    local input = { lines = { '{"jsonrpc":"2.0","id":1,"method":"tools/list"}' } }
    function input.read() return table.remove(input.lines, 1) end
    server:serve(input, { write = function() end, flush = function() end })
    assert.same({}, sdk.log)
  end)
end)
