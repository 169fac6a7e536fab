-- The agent tool layer (airlock.tools): definitions, truncation and handle_tool_call,
-- driven with a small in-memory sandbox object (the tool layer only calls files:write,
-- files:read and run on it). The same calls against a real airlockd are in
-- spec/integration/agents_spec.lua.
local tools = require "airlock.tools"
local cjson = require "cjson"

-- Error objects as the SDK raises them: from airlock.errors when it can build one,
-- otherwise a table carrying its class name (what the tool layer reads).
local function make_error(class, message, status)
  local ok, errors = pcall(require, "airlock.errors")
  if ok and type(errors) == "table" and type(errors.new) == "function" then
    return errors.new(class, message, { status = status })
  end
  return setmetatable({ class = class, message = message, status = status },
    { __tostring = function(e) return e.class .. ": " .. e.message end })
end

-- A sandbox object with a dictionary for a workspace. `run` answers like airlockd's fake
-- executor ("ran <command> (<timeout>s)") and records its calls.
local function fake_sandbox()
  local sbx = { store = {}, calls = {} }
  sbx.files = {
    write = function(self, path, content)
      assert(self == sbx.files, "files:write called with the wrong self")
      sbx.calls[#sbx.calls + 1] = { "write", path, content }
      if path:find("^%.%./") then
        error(make_error("PermissionDeniedError",
          "Access denied: symlink/path traversal outside workspace for '" .. path .. "'", 403))
      end
      sbx.store[path] = content
    end,
    read = function(self, path)
      assert(self == sbx.files, "files:read called with the wrong self")
      sbx.calls[#sbx.calls + 1] = { "read", path }
      if sbx.store[path] == nil then error(make_error("FileNotFoundError", path)) end
      return sbx.store[path]
    end,
  }
  function sbx.run(self, command, opts)
    assert(self == sbx, "run called with the wrong self")
    sbx.calls[#sbx.calls + 1] = { "run", command, opts and opts.timeout }
    if command == "explode" then error("the executor exploded") end
    if command == "big-output" then
      return { output = "[STDOUT]:\n" .. string.rep("x", 50000) .. "\nEND\n[EXIT CODE]: 0" }
    end
    if command == "validate" then
      error(make_error("ValidationError",
        '[{"type":"less_than_equal","loc":["body","timeout_seconds"]}]', 422))
    end
    return { output = string.format("[STDOUT]:\nran %s (%ss)\n[EXIT CODE]: 0", command, tostring(opts.timeout)) }
  end
  return sbx
end

-- Code points of a UTF-8 string that must be valid (fails the test otherwise).
local function utf8_len(s)
  local n, i = 0, 1
  while i <= #s do
    local b = s:byte(i)
    local size = b < 0x80 and 1 or b >= 0xF0 and 4 or b >= 0xE0 and 3 or b >= 0xC0 and 2 or nil
    assert(size, "invalid UTF-8 lead byte at " .. i)
    for j = i + 1, i + size - 1 do
      local c = s:byte(j)
      assert(c and c >= 0x80 and c <= 0xBF, "invalid UTF-8 continuation at " .. j)
    end
    i = i + size
    n = n + 1
  end
  return n
end

describe("airlock.tools definitions", function()
  it("openai_tools returns write_file, read_file, run_command, run_python as functions, in that order", function()
    local defs = tools.openai_tools()
    assert.equal(4, #defs)
    local names = {}
    for i, d in ipairs(defs) do
      assert.equal("function", d.type)
      names[i] = d["function"].name
      assert.is_string(d["function"].description)
      assert.equal("object", d["function"].parameters.type)
    end
    assert.same({ "write_file", "read_file", "run_command", "run_python" }, names)
  end)

  it("has the reference's parameters and schemas", function()
    local defs = tools.openai_tools()
    local w, r, c = defs[1]["function"], defs[2]["function"], defs[3]["function"]
    assert.same({
      type = "object",
      properties = {
        path = { type = "string", description = "Path relative to the workspace, e.g. 'src/main.py'" },
        content = { type = "string", description = "Full file content" },
      },
      required = { "path", "content" },
    }, w.parameters)
    assert.same({ "path" }, r.parameters.required)
    assert.same({ type = "string", description = "Path relative to the workspace" }, r.parameters.properties.path)
    assert.same({ "command" }, c.parameters.required)
    assert.same({ type = "integer", description = "1-60, default 15", minimum = 1, maximum = 60 },
      c.parameters.properties.timeout_seconds)
    assert.equal("Create or overwrite a text file in the sandbox workspace.", w.description)
    assert.equal("Read a text file from the sandbox workspace.", r.description)
    assert.equal("Run a shell command in an isolated Linux sandbox (bash, Python 3.11). Files in the "
      .. "workspace persist between commands; processes do not. Returns stdout, stderr and the exit code.",
      c.description)
    assert.is_nil(w.parameters.additionalProperties)
    local py = defs[4]["function"]
    assert.same({ "code" }, py.parameters.required)
    assert.same({ type = "integer", description = "1-60, default 30", minimum = 1, maximum = 60 },
      py.parameters.properties.timeout_seconds)
    assert.truthy(py.description:find("persistent Python session", 1, true))
  end)

  it("anthropic_tools carries the same schemas as input_schema", function()
    local a, o = tools.anthropic_tools(), tools.openai_tools()
    assert.equal(4, #a)
    for i = 1, 4 do
      assert.equal(o[i]["function"].name, a[i].name)
      assert.equal(o[i]["function"].description, a[i].description)
      assert.same(o[i]["function"].parameters, a[i].input_schema)
      assert.is_nil(a[i].type)
    end
    assert.same({ "command" }, a[3].input_schema.required)
  end)

  it("returns fresh tables: a caller's change does not leak into the next call", function()
    local first = tools.openai_tools()
    first[1]["function"].parameters.required[1] = "changed"
    first[4] = "extra"
    local again = tools.openai_tools()
    assert.equal(4, #again)
    assert.equal("path", again[1]["function"].parameters.required[1])
  end)

  local function check_encoded(text)
    -- An array of objects; no empty table anywhere (lua-cjson would write {} for an array).
    assert.matches("^%[{", text)
    assert.not_matches("{}", text, 1, true)
    assert.not_matches("[]", text, 1, true)
    assert.truthy(text:find('"required":["path","content"]', 1, true))
    assert.truthy(text:find('"required":["path"]', 1, true))
    assert.truthy(text:find('"required":["command"]', 1, true))
    assert.truthy(text:find('"properties":{"', 1, true))
    assert.truthy(text:find('"minimum":1', 1, true))
    assert.truthy(text:find('"maximum":60', 1, true))
    assert.falsy(text:find('"minimum":1.0', 1, true))
    assert.falsy(text:find('"maximum":60.0', 1, true))
    assert.truthy(text:find('"type":"integer"', 1, true))
    -- The order of the tools survives the encoding.
    local w = text:find('"write_file"', 1, true)
    local r = text:find('"read_file"', 1, true)
    local c = text:find('"run_command"', 1, true)
    assert.truthy(w and r and c and w < r and r < c)
  end

  it("encodes with lua-cjson to JSON objects and arrays the providers accept (OpenAI)", function()
    local text = cjson.encode(tools.openai_tools())
    check_encoded(text)
    assert.truthy(text:find('"type":"function"', 1, true))
    assert.truthy(text:find('"parameters":{"', 1, true))
    assert.same(tools.openai_tools(), cjson.decode(text))
  end)

  it("encodes with lua-cjson to JSON objects and arrays the providers accept (Anthropic)", function()
    local text = cjson.encode(tools.anthropic_tools())
    check_encoded(text)
    assert.truthy(text:find('"input_schema":{"', 1, true))
    assert.same(tools.anthropic_tools(), cjson.decode(text))
  end)

  it("MAX_TOOL_OUTPUT_CHARS is 8000", function()
    assert.equal(8000, tools.MAX_TOOL_OUTPUT_CHARS)
  end)
end)

describe("airlock.tools.truncate", function()
  local function marker(n)
    return "\n\n... [TRUNCATED: " .. n .. " characters omitted] ...\n\n"
  end

  it("returns text within the limit unchanged", function()
    assert.equal("short", tools.truncate("short"))
    assert.equal("", tools.truncate(""))
    local exact = string.rep("a", 1000)
    assert.equal(exact, tools.truncate(exact, 1000))
    local default = string.rep("b", 8000)
    assert.equal(default, tools.truncate(default))
  end)

  it("keeps 2/5 head and 3/5 tail around the marker", function()
    local text = "start" .. string.rep("x", 20000) .. "end"
    local out = tools.truncate(text, 1000)
    assert.equal("start" .. string.rep("x", 395) .. marker(19008) .. string.rep("x", 597) .. "end", out)
    assert.is_true(#out < 1100)
  end)

  it("cuts one character over the limit", function()
    local text = string.rep("a", 400) .. "M" .. string.rep("z", 600)
    assert.equal(string.rep("a", 400) .. marker(1) .. string.rep("z", 600), tools.truncate(text, 1000))
  end)

  it("uses 8000 by default: 3200 head, 4800 tail", function()
    local text = string.rep("h", 5000) .. string.rep("t", 5000)
    local out = tools.truncate(text)
    assert.equal(string.rep("h", 3200) .. marker(2000) .. string.rep("t", 4800), out)
  end)

  it("counts code points, not bytes, and never cuts a multi-byte character", function()
    -- 2-byte é: 150 bytes but 75 characters fits in 100.
    local fits = string.rep("\195\169", 75)
    assert.equal(fits, tools.truncate(fits, 100))
    -- Mixed 1-, 2-, 3- and 4-byte characters, 1000 of them.
    local chars = { "a", "\195\169", "\226\130\172", "\240\159\152\128" }
    local parts = {}
    for i = 1, 1000 do parts[i] = chars[(i % 4) + 1] end
    local text = table.concat(parts)
    local out = tools.truncate(text, 100)
    assert.equal(100 + utf8_len(marker(900)), utf8_len(out))
    assert.equal(table.concat(parts, "", 1, 40) .. marker(900) .. table.concat(parts, "", 941, 1000), out)
  end)

  it("counts a 4-byte character as one (U+1F600)", function()
    local text = string.rep("\240\159\152\128", 11)
    assert.equal(string.rep("\240\159\152\128", 4) .. marker(1) .. string.rep("\240\159\152\128", 6),
      tools.truncate(text, 10))
  end)

  it("handles tiny limits", function()
    assert.equal(marker(3) .. "d", tools.truncate("abcd", 1))
    assert.equal(marker(4), tools.truncate("abcd", 0))
  end)

  it("rejects a bad limit or a non-string text with a clear error", function()
    assert.has_error(function() tools.truncate("x", -1) end,
      "airlock.tools.truncate: limit must be a non-negative integer, got -1")
    assert.has_error(function() tools.truncate("x", "10") end)
    assert.has_error(function() tools.truncate("x", 1.5) end)
    assert.has_error(function() tools.truncate({}, 10) end,
      "airlock.tools.truncate: text must be a string, got table")
  end)

  it("char_count counts code points", function()
    assert.equal(5, tools.char_count("h\195\169llo"))
    assert.equal(0, tools.char_count(""))
    assert.equal(2, tools.char_count("\240\159\152\128\226\130\172"))
  end)
end)

describe("airlock.tools.handle_tool_call", function()
  local sbx
  before_each(function() sbx = fake_sandbox() end)

  it("rejects an unknown tool with the list of tools", function()
    assert.equal("Error: unknown tool 'nope'. Available: ['write_file', 'read_file', 'run_command', 'run_python']",
      tools.handle_tool_call(sbx, "nope", {}))
    assert.equal(0, #sbx.calls)
  end)

  it("works with an object that is not a sandbox for argument and name errors", function()
    assert.matches("unknown tool", tools.handle_tool_call({}, "nope", {}))
    assert.matches("not valid JSON", tools.handle_tool_call({}, "run_command", "{"))
  end)

  it("reports JSON that does not parse, with the parser's message, without calling the sandbox", function()
    local out = tools.handle_tool_call(sbx, "run_command", "{")
    assert.matches("^Error: tool arguments were not valid JSON: .+", out)
    out = tools.handle_tool_call(sbx, "write_file", '{"path": "a.py", "content": "x"')
    assert.matches("^Error: tool arguments were not valid JSON: .+", out)
    assert.equal(0, #sbx.calls)
  end)

  it("requires a JSON object", function()
    for _, args in ipairs({ "[1, 2]", "[]", '"ls"', "42", "true", "null", { "ls" }, 42, true }) do
      assert.equal("Error: tool arguments must be a JSON object.", tools.handle_tool_call(sbx, "run_command", args),
        "arguments " .. tostring(args))
    end
    assert.equal(0, #sbx.calls)
  end)

  it("names the first missing argument (path before content)", function()
    assert.equal("Error: missing required argument 'path' for write_file.",
      tools.handle_tool_call(sbx, "write_file", {}))
    assert.equal("Error: missing required argument 'path' for write_file.",
      tools.handle_tool_call(sbx, "write_file", '{"content": "x"}'))
    assert.equal("Error: missing required argument 'content' for write_file.",
      tools.handle_tool_call(sbx, "write_file", '{"path": "a.py"}'))
    assert.equal("Error: missing required argument 'command' for run_command.",
      tools.handle_tool_call(sbx, "run_command", nil))
    assert.equal("Error: missing required argument 'command' for run_command.",
      tools.handle_tool_call(sbx, "run_command", ""))
    assert.equal("Error: missing required argument 'path' for read_file.",
      tools.handle_tool_call(sbx, "read_file", '{"path": null}'))
    assert.equal(0, #sbx.calls)
  end)

  it("refuses arguments of the wrong type with a clear text", function()
    assert.equal("Error: argument 'path' for read_file must be a string, not a number.",
      tools.handle_tool_call(sbx, "read_file", '{"path": 3}'))
    assert.equal("Error: argument 'content' for write_file must be a string, not an object or array.",
      tools.handle_tool_call(sbx, "write_file", { path = "a", content = { 1 } }))
    assert.equal(0, #sbx.calls)
  end)

  it("writes a file and counts characters as code points", function()
    assert.equal("Wrote 5 characters to h.txt", tools.handle_tool_call(sbx, "write_file",
      '{"path": "h.txt", "content": "h\\u00e9llo"}'))
    assert.equal("h\195\169llo", sbx.store["h.txt"])
    assert.equal("Wrote 3 characters to a.py",
      tools.handle_tool_call(sbx, "write_file", { path = "a.py", content = "abc" }))
    assert.same({ "write", "a.py", "abc" }, sbx.calls[2])
  end)

  it("reads a file back", function()
    sbx.store["notes.md"] = "# hi\n"
    assert.equal("# hi\n", tools.handle_tool_call(sbx, "read_file", '{"path": "notes.md"}'))
  end)

  it("reports a missing file", function()
    assert.equal("Error: file not found: x.py", tools.handle_tool_call(sbx, "read_file", { path = "x.py" }))
  end)

  it("reports sandbox errors with their class", function()
    assert.equal("Error from sandbox (PermissionDeniedError): Access denied: symlink/path traversal outside "
      .. "workspace for '../escape.txt'",
      tools.handle_tool_call(sbx, "write_file", { path = "../escape.txt", content = "x" }))
    assert.equal('Error from sandbox (ValidationError): [{"type":"less_than_equal","loc":["body","timeout_seconds"]}]',
      tools.handle_tool_call(sbx, "run_command", { command = "validate" }))
  end)

  it("runs a command with the default timeout of 15 s", function()
    assert.equal("[STDOUT]:\nran ls (15s)\n[EXIT CODE]: 0",
      tools.handle_tool_call(sbx, "run_command", '{"command":"ls"}'))
    assert.same({ "run", "ls", 15 }, sbx.calls[1])
  end)

  it("passes timeout_seconds as an integer, as Python's int() would", function()
    local function run(args) return tools.handle_tool_call(sbx, "run_command", args) end
    assert.equal("[STDOUT]:\nran ls (20s)\n[EXIT CODE]: 0", run('{"command":"ls","timeout_seconds":20}'))
    assert.equal("[STDOUT]:\nran ls (30s)\n[EXIT CODE]: 0", run({ command = "ls", timeout_seconds = "30" }))
    assert.equal("[STDOUT]:\nran ls (7s)\n[EXIT CODE]: 0", run({ command = "ls", timeout_seconds = 7.9 }))
    assert.equal(3, #sbx.calls)
    assert.equal(20, sbx.calls[1][3])
    assert.equal(30, sbx.calls[2][3])
    assert.equal(7, sbx.calls[3][3])
  end)

  it("reports a timeout that is not a number as a failed call, without running it", function()
    assert.equal("Error: run_command failed (ValueError): invalid literal for int() with base 10: 'soon'",
      tools.handle_tool_call(sbx, "run_command", '{"command":"ls","timeout_seconds":"soon"}'))
    assert.equal("Error: run_command failed (TypeError): int() argument must be a string, a bytes-like object "
      .. "or a real number, not 'NoneType'",
      tools.handle_tool_call(sbx, "run_command", '{"command":"ls","timeout_seconds":null}'))
    assert.equal(0, #sbx.calls)
  end)

  it("reports any other failure as `<name> failed` and never raises", function()
    local out = tools.handle_tool_call(sbx, "run_command", { command = "explode" })
    assert.matches("^Error: run_command failed %(LuaError%): .*the executor exploded$", out)
    out = tools.handle_tool_call(nil, "read_file", { path = "a" })
    assert.matches("^Error: read_file failed %(LuaError%): ", out)
    out = tools.handle_tool_call({ files = {} }, "write_file", { path = "a", content = "b" })
    assert.matches("^Error: write_file failed %(LuaError%): ", out)
  end)

  it("truncates a long result to under 8200 characters, keeping the exit code", function()
    local out = tools.handle_tool_call(sbx, "run_command", { command = "big-output" })
    assert.is_true(#out < 8200)
    assert.matches("^%[STDOUT%]:\nxxx", out)
    assert.matches("\nEND\n%[EXIT CODE%]: 0$", out)
    assert.truthy(out:find("[TRUNCATED: ", 1, true))
  end)

  it("passes a long file through the same truncation", function()
    sbx.store["big.txt"] = string.rep("y", 9000)
    local out = tools.handle_tool_call(sbx, "read_file", { path = "big.txt" })
    assert.equal(string.rep("y", 3200) .. "\n\n... [TRUNCATED: 1000 characters omitted] ...\n\n"
      .. string.rep("y", 4800), out)
  end)
end)
