-- luacheck: max line length 160
-- Streaming exec and the output budget as options (issue #11 items 1 and 3), against a real
-- airlockd and real gVisor sandboxes, with raw curl (no SDK): "stream": true (or Accept:
-- application/x-ndjson) answers NDJSON events in order, heartbeats while the command is
-- silent, and a final event whose result equals the plain route's for the same command;
-- pieces cut only between UTF-8 characters; a client that hangs up kills the command and
-- frees its slot; a client that stops reading cannot make airlockd buffer (VmHWM from
-- /proc/<pid>/status); output_limit_bytes (422 out of range) and spill files in the
-- workspace, stopped by the disk quota with a warning. Loopback only. Lua 5.1-compatible.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"
local proc = require "support.proc"

local REPLACEMENT = "\239\191\189" -- U+FFFD

-- A streamed exec with curl: the decoded events (in order), the HTTP status and the content
-- type. opts: body fields beside command, curl_args (extra curl words), headers.
local function stream_exec(server, key, id, command, opts)
  opts = opts or {}
  local body = { command = command, stream = true }
  for k, v in pairs(opts.body or {}) do body[k] = v end
  if opts.accept then body.stream = nil end
  local out = proc.temp_path()
  local words = { "curl", "-sN", "-D", out .. ".head", "-o", out, "--max-time", tostring(opts.max_time or 120),
    "-H", "X-API-Key: " .. key, "-H", "Content-Type: application/json", "--data-binary", cjson.encode(body) }
  if opts.accept then words[#words + 1] = "-H"; words[#words + 1] = "Accept: application/x-ndjson" end
  for _, w in ipairs(opts.curl_args or {}) do words[#words + 1] = w end
  words[#words + 1] = server.url .. "/v1/sessions/" .. id .. "/exec"
  for i, w in ipairs(words) do words[i] = proc.shell_quote(w) end
  os.execute(table.concat(words, " ") .. " 2>/dev/null")
  local head = proc.read_file(out .. ".head") or ""
  local raw = proc.read_file(out) or ""
  os.remove(out)
  os.remove(out .. ".head")
  -- complete lines only: a stream cut by --max-time ends inside one
  local events, start = {}, 1
  while true do
    local nl = raw:find("\n", start, true)
    if not nl then break end
    events[#events + 1] = cjson.decode(raw:sub(start, nl - 1))
    start = nl + 1
  end
  return events, tonumber(head:match("^HTTP/%S+ (%d+)")), (head:lower():match("content%-type: ([^\r\n]+)")), raw
end

local function types(events)
  local t = {}
  for i, e in ipairs(events) do t[i] = e.type end
  return table.concat(t, " ")
end

-- The events' types without heartbeats (a loaded machine can be silent for a heartbeat's
-- interval anywhere, before the first output too).
local function types_of_output(events)
  local t = {}
  for _, e in ipairs(events) do
    if e.type ~= "heartbeat" then t[#t + 1] = e.type end
  end
  return table.concat(t, " ")
end

-- The concatenated data of one stream's events.
local function joined(events, kind)
  local parts = {}
  for _, e in ipairs(events) do
    if e.type == kind then parts[#parts + 1] = e.data end
  end
  return table.concat(parts)
end

local function usage(server, key)
  return http_client.request(server, "GET", "/v1/usage", { key = key }).json
end

local function exec_body(server, key, id, body)
  return http_client.request(server, "POST", "/v1/sessions/" .. id .. "/exec",
    { key = key, body = cjson.encode(body), max_time = 120 })
end

describe("streaming exec", function()
  local server, key, id
  lazy_setup(function()
    server = airlockd.start()
    key = server.tenants.acme
    id = http_client.create(server, key).json.session_id
  end)
  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("sends stdout and stderr events in order and a final result equal to the plain route's", function()
    local command = "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 3"
    local events, status, ctype = stream_exec(server, key, id, command)
    assert.are.equal(200, status)
    assert.are.equal("application/x-ndjson", ctype)
    assert.are.equal("stdout stderr stdout result", types_of_output(events))
    assert.are.equal("one\n", events[1].data)
    local plain = http_client.exec(server, key, id, command)
    assert.are.equal(200, plain.status)
    assert.are.same(plain.json, events[#events].result)
    assert.are.equal(3, events[#events].result.exit_code)
  end)

  it("takes Accept: application/x-ndjson as the request for a stream", function()
    local events, status = stream_exec(server, key, id, "printf 'x\\ny\\n'", { accept = true })
    assert.are.equal(200, status)
    assert.are.equal("x\ny\n", joined(events, "stdout"))
    assert.are.equal("result", events[#events].type)
  end)

  it("sends heartbeats while the command is silent", function()
    local events = stream_exec(server, key, id, "echo a; sleep 5; echo b")
    local t = types(events)
    repeat -- heartbeats before the first output too, on a loaded machine
      local before = t
      t = t:gsub("^heartbeat ", "")
    until t == before
    assert.truthy(t:find("^stdout heartbeat.* stdout result$"), t)
  end)

  it("cuts only between UTF-8 characters and replaces invalid bytes as the plain route does", function()
    -- a euro sign written in two halves, an invalid byte, a 4-byte character cut after 1 byte
    local command = "printf '\\342\\202'; sleep 0.4; printf '\\254 \\377 \\360'; sleep 0.4; printf '\\237\\230\\200 end'"
    local events = stream_exec(server, key, id, command)
    local plain = http_client.exec(server, key, id, command)
    assert.are.equal("\226\130\172 " .. REPLACEMENT .. " \240\159\152\128 end", plain.json.stdout)
    assert.are.equal(plain.json.stdout, joined(events, "stdout"))
    for _, e in ipairs(events) do
      if e.type == "stdout" then
        assert.falsy(e.data:find(REPLACEMENT .. REPLACEMENT, 1, true))
        assert.truthy(e.data == "" or not e.data:find("^[\128-\191]"), "a piece starts inside a character")
      end
    end
    assert.are.same(plain.json, events[#events].result)
  end)

  it("escapes every byte of a data event as the plain route's JSON does", function()
    -- every control character, quote, backslash, slash, DEL and multi-byte text, in one piece
    local command = "printf '\\001\\002\\010\\011\\012\\014\\015\\033\\037 \"q\" \\\\ / \\177 h\\303\\251 \\342\\202\\254 end'"
    local events, _, _, raw = stream_exec(server, key, id, command)
    local plain = http_client.exec(server, key, id, command)
    local want = "\1\2\8\t\n\12\r\27\31 \"q\" \\ / \127 h\195\169 \226\130\172 end"
    assert.are.equal(want, plain.json.stdout)
    assert.are.equal(want, joined(events, "stdout"))
    -- the very text of the plain answer's string (Python's json.dumps: lowercase \u00xx)
    local escaped = plain.body:match('"stdout":"(.-)","stderr"')
    assert.truthy(escaped, plain.body)
    local pieces = {}
    for text in raw:gmatch('{"type":"stdout","data":"(.-)"}\n') do pieces[#pieces + 1] = text end
    assert.are.equal(escaped, table.concat(pieces))
    assert.truthy(escaped:find("\\u001f", 1, true), escaped)
  end)

  it("ends a timed-out command with the plain route's timeout result", function()
    local events = stream_exec(server, key, id, "echo early; sleep 30", { body = { timeout_seconds = 2 } })
    local final = events[#events]
    assert.are.equal("result", final.type)
    assert.is_true(final.result.timed_out)
    assert.are.equal(-1, final.result.exit_code)
    assert.are.equal("early\n", joined(events, "stdout"))
  end)

  it("answers refusals before the command runs as the plain route does (not as a stream)", function()
    local events, status, ctype, raw = stream_exec(server, key, "sbx_000000000000", "true")
    assert.are.equal(404, status)
    assert.are.equal("application/json", ctype)
    assert.are.equal(0, #events)
    assert.truthy(raw:find("not found", 1, true) or raw:find("Not Found", 1, true), raw)
    local bad = exec_body(server, key, id, { command = "true", stream = "yes" })
    assert.are.equal(422, bad.status)
    assert.are.same({ "body", "stream" }, bad.json.detail[1].loc)
  end)

  it("kills the command, removes its sandbox and frees its slot when the client hangs up", function()
    local events = stream_exec(server, key, id, "echo started; sleep 50", { max_time = 4, body = { timeout_seconds = 60 } })
    assert.are.equal("started\n", events[1].data)
    assert.are_not.equal("result", events[#events].type) -- the stream was cut, never finished
    assert.is_true(proc.wait_until(15, function() return usage(server, key).commands_running == 0 end))
    assert.is_true(proc.wait_until(15, function() return host_state.runsc_runs(server) == 0 end))
    -- the slot is free: a command runs at once
    assert.are.equal("ok\n", http_client.exec(server, key, id, "echo ok").json.stdout)
  end)

  it("keeps airlockd's memory bounded when the client stops reading", function()
    local before = host_state.status_kb(server.pid, "VmRSS")
    assert.is_true(host_state.reset_peak(server.pid))
    -- the client reads 20 KB/s of a command that could write 300 MB at pipe speed
    local events = stream_exec(server, key, id, "yes | head -c 300000000; echo done >&2",
      { max_time = 12, body = { timeout_seconds = 8 }, curl_args = { "--limit-rate", "20K" } })
    local growth = (host_state.status_kb(server.pid, "VmHWM") - before) / 1024
    print(string.format("\nstalled reader: %d events received, airlockd peak growth %.1f MB", #events, growth))
    if not host_state.sanitized(server.pid) then assert.is_true(growth < 32, growth .. " MB") end
    assert.is_true(proc.wait_until(20, function() return usage(server, key).commands_running == 0 end))
  end)
end)

describe("the output budget as an option", function()
  local server, key, id
  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_OUTPUT_MAX_KB = "64", SANDBOX_WORKSPACE_QUOTA_MB = "8" } })
    key = server.tenants.acme
    id = http_client.create(server, key).json.session_id
  end)
  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("keeps output_limit_bytes of each stream and says so", function()
    local res = exec_body(server, key, id, { command = "head -c 100000 /dev/zero | tr '\\0' a", output_limit_bytes = 1000 })
    assert.are.equal(200, res.status)
    assert.truthy(#res.json.stdout < 1100, #res.json.stdout)
    assert.truthy(res.json.stdout:find("TRUNCATED: 99000 bytes omitted", 1, true))
    assert.truthy(res.json.warnings[1]:find("keeps 1000 bytes", 1, true), res.json.warnings[1])
  end)

  it("refuses a budget over the server's maximum or too small, naming the field", function()
    local over = exec_body(server, key, id, { command = "true", output_limit_bytes = 64 * 1024 + 1 })
    assert.are.equal(422, over.status)
    assert.are.same({ "body", "output_limit_bytes" }, over.json.detail[1].loc)
    assert.truthy(over.json.detail[1].msg:find("65536", 1, true))
    local low = exec_body(server, key, id, { command = "true", output_limit_bytes = 0 })
    assert.are.equal(422, low.status)
    assert.are.same({ "body", "output_limit_bytes" }, low.json.detail[1].loc)
    local text = exec_body(server, key, id, { command = "true", output_limit_bytes = "lots" })
    assert.are.equal(422, text.status)
  end)

  it("spills the whole output into workspace files named in the result", function()
    local res = exec_body(server, key, id, { command = "seq 1 200000; echo oops >&2", spill = true })
    assert.are.equal(200, res.status)
    assert.truthy(res.json.stdout:find("TRUNCATED", 1, true))
    local out_file, err_file = res.json.stdout_file, res.json.stderr_file
    assert.truthy(out_file:find("^/workspace/%.airlock/exec%-[%d%-]+%.stdout$"), out_file)
    local check = http_client.exec(server, key, id,
      "wc -c < " .. out_file .. "; tail -n 1 " .. out_file .. "; cat " .. err_file .. "; stat -c %u " .. out_file)
    assert.are.equal("1288895\n200000\noops\n1000\n", check.json.stdout)
  end)

  it("spills within the disk quota: a full disk stops the file with a warning, not the command", function()
    local res = exec_body(server, key, id, { command = "head -c 30000000 /dev/zero; echo finished >&2", spill = true, timeout_seconds = 60 })
    assert.are.equal(200, res.status)
    assert.are.equal(0, res.json.exit_code)
    assert.are.equal("finished\n", res.json.stderr)
    local found = false
    for _, w in ipairs(res.json.warnings) do
      if w:find("spill to " .. res.json.stdout_file .. " stopped early", 1, true) then found = true end
    end
    assert.is_true(found, cjson.encode(res.json.warnings))
    -- the workspace still works: the spill file is there and can be removed
    local rm = http_client.exec(server, key, id, "rm " .. res.json.stdout_file .. " && echo removed")
    assert.are.equal("removed\n", rm.json.stdout)
  end)

  it("streams with a per-command budget: the final result keeps the budget", function()
    local events = stream_exec(server, key, id, "seq 1 20000", { body = { output_limit_bytes = 500 } })
    assert.are.equal(108894, #joined(events, "stdout"))
    local final = events[#events].result
    assert.truthy(final.stdout:find("TRUNCATED", 1, true))
    assert.truthy(#final.stdout < 600)
  end)

  it("runs a command writing 50 MB to stdout to its end, plain and streamed", function()
    local cmd = "head -c 50000000 /dev/zero | tr '\\0' y; echo end >&2"
    local plain = exec_body(server, key, id, { command = cmd, timeout_seconds = 60 })
    assert.are.equal(0, plain.json.exit_code)
    assert.are.equal("end\n", plain.json.stderr)
    local events = stream_exec(server, key, id, cmd, { body = { timeout_seconds = 60 }, curl_args = {} })
    assert.are.equal(0, events[#events].result.exit_code)
    assert.are.equal(50000000, #joined(events, "stdout"))
  end)
end)
