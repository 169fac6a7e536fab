-- airlock.tools.handle_tool_call on a real sandbox (the SDK against airlockd): the texts a
-- model gets back for each tool and for the SDK's real errors.
local airlockd = require "support.airlockd"
local airlock = require "airlock"
local tools = require "airlock.tools"

describe("airlock.tools against airlockd", function()
  local server, sbx

  setup(function()
    server = airlockd.start()
    sbx = airlock.sandbox({ base_url = server.url, api_key = server.tenants.acme })
  end)
  teardown(function()
    if sbx then pcall(sbx.close, sbx) end
    airlockd.stop(server)
  end)

  it("writes, reads and runs", function()
    assert.equal("Wrote 12 characters to src/hi.py",
      tools.handle_tool_call(sbx, "write_file", '{"path": "src/hi.py", "content": "print(\\"h\\u00e9\\")\\n"}'))
    assert.equal('print("h\195\169")\n', tools.handle_tool_call(sbx, "read_file", { path = "src/hi.py" }))
    assert.equal("[STDOUT]:\nh\195\169\n[EXIT CODE]: 0",
      tools.handle_tool_call(sbx, "run_command", { command = "python3 src/hi.py", timeout_seconds = 10 }))
    assert.equal("[STDERR]:\noops\n[EXIT CODE]: 3",
      tools.handle_tool_call(sbx, "run_command", '{"command": "echo oops >&2; exit 3"}'))
  end)

  it("describes a binary file instead of reading its bytes into the model's context", function()
    sbx.files:write("img/dot.png", "\137PNG\r\n\26\n" .. ("\0\255"):rep(6168))
    assert.equal("binary file, 12,344 bytes (PNG image); not shown. Inspect it with run_command "
      .. "(e.g. xxd FILE | head, or file FILE).", tools.handle_tool_call(sbx, "read_file", { path = "img/dot.png" }))
    sbx.files:write("blob", "\255\254")
    assert.equal("binary file, 2 bytes; not shown. Inspect it with run_command (e.g. xxd FILE | head, or file FILE).",
      tools.handle_tool_call(sbx, "read_file", { path = "blob" }))
  end)

  it("reports the SDK's errors with their classes", function()
    assert.equal("Error: file not found: nope.txt", tools.handle_tool_call(sbx, "read_file", { path = "nope.txt" }))
    assert.equal("Error from sandbox (PermissionDeniedError): Access denied: symlink/path traversal outside "
      .. "workspace for '../escape.txt'",
      tools.handle_tool_call(sbx, "write_file", { path = "../escape.txt", content = "x" }))
    assert.matches("^Error from sandbox %(ValidationError%): .*timeout",
      tools.handle_tool_call(sbx, "run_command", { command = "ls", timeout_seconds = 999 }))
  end)

  it("cuts a big output to under 8,200 characters and keeps the exit code", function()
    local out = tools.handle_tool_call(sbx, "run_command",
      { command = "python3 -c \"print('x' * 50000); print('END')\"" })
    assert.is_true(#out < 8200)
    assert.matches("^%[STDOUT%]:\nxxxx", out)
    assert.truthy(out:find("\n\n... [TRUNCATED: 42029 characters omitted] ...\n\n", 1, true), out:sub(3000, 3400))
    assert.matches("xxx\nEND\n%[EXIT CODE%]: 0$", out)
  end)

  it("branching (ours): snapshot, then restore into a new sandbox the next tools use", function()
    local opts = { base_url = server.url, api_key = server.tenants.acme }
    local box = tools.branching(sbx)
    local names = {}
    for i, t in ipairs(box:openai_tools()) do names[i] = t["function"].name end
    assert.same({ "write_file", "read_file", "run_command", "run_python", "snapshot", "restore" }, names)
    assert.equal(6, #box:anthropic_tools())
    assert.equal("Wrote 4 characters to state.txt",
      box:handle_tool_call("write_file", { path = "state.txt", content = "base" }))
    local taken = box:handle_tool_call("snapshot", '{"name": "base"}')
    local snap = taken:match("^Snapshot (snap_%x+) taken %(")
    assert.truthy(snap, taken)
    box:handle_tool_call("write_file", { path = "state.txt", content = "broken" })
    local restored = box:handle_tool_call("restore", { snapshot_id = snap })
    assert.truthy(restored:find("Restored snapshot " .. snap, 1, true), restored)
    assert.not_equal(sbx, box.sandbox)
    assert.equal("base", box:handle_tool_call("read_file", { path = "state.txt" }))
    assert.equal("broken", sbx.files:read("state.txt")) -- the original is left as it is
    -- failures are texts, never raised
    assert.matches("^Error from sandbox %(NotFoundError%)",
      box:handle_tool_call("restore", { snapshot_id = "snap_0000000000000000" }))
    assert.equal("Error: missing required argument 'snapshot_id' for restore.", box:handle_tool_call("restore", {}))
    assert.matches("^Error: unknown tool 'fork'%. Available: %[.*'restore'%]$", box:handle_tool_call("fork", {}))
    local made = box.sandbox.session_id
    assert.is_true(box:close())
    assert.equal(sbx, box.sandbox)
    assert.is_nil(airlock.list_sessions(opts)[2])
    assert.not_equal(made, airlock.list_sessions(opts)[1].session_id)
    airlock.snapshots.delete(snap, opts)
  end)

  it("runs Python in one kernel per sandbox, made on first use, and never raises", function()
    assert.same({}, sbx:kernels())
    assert.equal("[EXECUTION COUNT]: 1", tools.handle_tool_call(sbx, "run_python", { code = "rows = list(range(10))" }))
    assert.equal(1, #sbx:kernels())
    assert.equal("[STDOUT]:\nloaded\n[RESULT]:\n45\n[EXECUTION COUNT]: 2",
      tools.handle_tool_call(sbx, "run_python", '{"code": "print(\\"loaded\\")\\nsum(rows)"}'))
    local failed = tools.handle_tool_call(sbx, "run_python", { code = "rows[99]" })
    assert.matches("^%[ERROR%]:\nTraceback %(most recent call last%):\n", failed)
    assert.truthy(failed:find("IndexError: list index out of range\n[EXECUTION COUNT]: 3", 1, true), failed)
    local chart = tools.handle_tool_call(sbx, "run_python",
      { code = "import matplotlib.pyplot as plt\nplt.bar(['a', 'b'], [3, 5]); plt.show()", timeout_seconds = 60 })
    assert.matches("^%[RESULT%]:\n%[image/png: %d+ bytes%]\n%[EXECUTION COUNT%]: 4$", chart)
    assert.equal("Error: missing required argument 'code' for run_python.",
      tools.handle_tool_call(sbx, "run_python", {}))
    assert.matches("^Error from sandbox %(ValidationError%): .*timeout",
      tools.handle_tool_call(sbx, "run_python", { code = "1", timeout_seconds = 99 }))
    assert.equal(1, #sbx:kernels())
    -- the kernel deleted behind the tool's back: a new one, and the text says so
    local id = sbx:kernels()[1].kernel_id
    local k = setmetatable({ kernel_id = id, session_id = sbx.session_id, language = "python",
      _settings = sbx._settings }, airlock.Kernel)
    assert.is_true(k:close())
    assert.equal("[note] The Python kernel was gone; this ran in a new one: earlier variables are lost.\n"
      .. "[RESULT]:\nFalse\n[EXECUTION COUNT]: 1",
      tools.handle_tool_call(sbx, "run_python", { code = "'rows' in globals()" }))
    local kernels = sbx:kernels()
    assert.equal(1, #kernels)
    assert.not_equal(id, kernels[1].kernel_id)
  end)

  it("reports a closed session as a NotFoundError", function()
    local other = airlock.sandbox({ base_url = server.url, api_key = server.tenants.acme })
    local id = other.session_id
    other:close()
    local attached = airlock.attach(id, { base_url = server.url, api_key = server.tenants.acme })
    assert.equal("Error from sandbox (NotFoundError): Session not found or expired",
      tools.handle_tool_call(attached, "run_command", { command = "ls" }))
  end)
end)
