-- airlockd's log (issue 27 item 1; docs/server.md "The log"): every line of stderr goes through
-- one logger with a time and a level, as text or (SANDBOX_LOG_FORMAT=json) JSON lines, with the
-- session a line concerns; per-request lines (health checks too) only at SANDBOX_LOG_LEVEL=debug;
-- a bad level or format stops the start naming the variable. That no log holds a secret is
-- checked by support.airlockd on every server it stops (support.log_secrets).
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local http_client = require "support.http_client"
local proc = require "support.proc"
require "support.eventually"

local http = http_client.request

local TIME = "^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$"
local LEVELS = { error = true, warn = true, info = true, debug = true }

local function lines(text)
  local out = {}
  for line in text:gmatch("[^\n]+") do out[#out + 1] = line end
  return out
end

-- Runs airlockd with env (a string of NAME=value words) and args until it exits; its status and
-- output.
local function run_airlockd(env, args)
  local dir = proc.make_temp_dir()
  local rc, out = proc.run_capture("env SANDBOX_API_KEYS=a:logging-spec-key-1 " .. env .. " timeout 60 " ..
    airlockd.shell_quote(airlockd.binary()) .. " --listen 127.0.0.1:0 --state-dir " ..
    airlockd.shell_quote(dir .. "/state") .. " " .. (args or ""))
  proc.remove_tree(dir)
  return rc, out
end

describe("airlockd's log as JSON lines at debug", function()
  local server, key

  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_LOG_FORMAT = "json", SANDBOX_LOG_LEVEL = "debug" } })
    key = server.tenants.acme
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("writes every line as one JSON object with time, level and msg, per-request lines naming their session", function()
    assert.are.equal(200, http(server, "GET", "/healthz").status)
    local created = http_client.create(server, key)
    assert.are.equal(201, created.status, created.body)
    local sid = created.json.session_id
    assert.are.equal(200, http_client.exec(server, key, sid, "echo hi").status)
    -- failing ones: another tenant's key on this session, and a key that does not exist
    local other = server.tenants.other
    assert.are.equal(403, http(server, "GET", "/v1/sessions/" .. sid .. "/read?path=x", { key = other }).status)
    assert.are.equal(401, http(server, "GET", "/v1/sessions", { key = "not-a-key" }).status)
    assert.are.equal(200, http_client.delete(server, key, sid).status)

    -- the request line is written as the request ends, possibly after its answer arrived
    assert.eventually(function()
      return airlockd.log(server):find('"msg":"DELETE /v1/sessions/' .. sid .. ' 200 ', 1, true), airlockd.log(server)
    end, { what = "the DELETE's request line" })
    local entries = {}
    for _, line in ipairs(lines(airlockd.log(server))) do
      local ok, e = pcall(cjson.decode, line)
      assert.is_true(ok and type(e) == "table", "not a JSON object: " .. line)
      entries[#entries + 1] = e
    end
    local by_msg = {}
    for _, e in ipairs(entries) do
      assert.truthy(type(e.time) == "string" and e.time:match(TIME), cjson.encode(e))
      assert.truthy(LEVELS[e.level], cjson.encode(e))
      assert.are.equal("string", type(e.msg), cjson.encode(e))
      assert.is_nil(e.node) -- one airlockd, no fleet
      by_msg[e.msg:gsub(" [%d.]+ms$", "")] = e
    end
    assert.are.equal("debug", by_msg["GET /healthz 200"].level)
    local refused = by_msg["GET /v1/sessions/" .. sid .. "/read 403"]
    assert.are.same({ "debug", sid }, { refused.level, refused.session })
    assert.are.equal("debug", by_msg["GET /v1/sessions 401"].level)
    assert.truthy(by_msg["listening on http://127.0.0.1:" .. server.port .. " (isolation: gvisor)"])
  end)
end)

describe("airlockd's log as text at the default level", function()
  local server

  lazy_setup(function()
    server = airlockd.start()
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("gives each line a time and a level, and leaves health checks and other requests out", function()
    for _ = 1, 5 do assert.are.equal(200, http(server, "GET", "/healthz").status) end
    local created = http_client.create(server, server.tenants.acme)
    assert.are.equal(201, created.status, created.body)
    assert.are.equal(200, http_client.delete(server, server.tenants.acme, created.json.session_id).status)
    -- a line written after those requests: had they been logged, they are in the file by now
    assert.are.equal(401, http(server, "GET", "/v1/sessions", { key = "not-a-key" }).status)
    local log = airlockd.log(server)
    assert.truthy(#lines(log) >= 2, log)
    for _, line in ipairs(lines(log)) do
      local time, level = line:match("^(%S+) (%a+) +airlockd: ")
      assert.truthy(time and time:match(TIME), line)
      assert.truthy(LEVELS[level] and level ~= "debug", line)
    end
    assert.is_nil(log:find("/healthz", 1, true), log)
    assert.is_nil(log:find("/v1/sessions", 1, true), log)
    assert.truthy(log:find("info  airlockd: listening on http://127.0.0.1:" .. server.port, 1, true), log)
  end)
end)

describe("airlockd's log settings", function()
  it("refuses a bad SANDBOX_LOG_LEVEL or SANDBOX_LOG_FORMAT at start, naming it (exit 2)", function()
    local rc, out = run_airlockd("SANDBOX_LOG_LEVEL=verbose")
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("invalid configuration: SANDBOX_LOG_LEVEL: must be one of error, warn, info, debug, " ..
      "got 'verbose'", 1, true), out)
    rc, out = run_airlockd("SANDBOX_LOG_FORMAT=xml")
    assert.are.equal(2, rc, out)
    assert.truthy(out:find("SANDBOX_LOG_FORMAT: must be one of text, json, got 'xml'", 1, true), out)
  end)

  it("says a bad setting in the format asked for", function()
    local rc, out = run_airlockd("SANDBOX_LOG_FORMAT=json SANDBOX_LOG_LEVEL=loud")
    assert.are.equal(2, rc, out)
    local e = cjson.decode(out:match("^[^\n]+"))
    assert.are.same({ "error", "invalid configuration: SANDBOX_LOG_LEVEL: must be one of error, warn, info, debug, " ..
      "got 'loud'" }, { e.level, e.msg })
  end)

  it("puts a fleet node's id on its lines and never its database password", function()
    -- no database listens on port 1: the node says so and stops, in JSON with its node id
    local password = "pw" .. airlockd.random_hex(12)
    local rc, out = run_airlockd("SANDBOX_LOG_FORMAT=json SANDBOX_DATABASE_URL=" ..
      airlockd.shell_quote("postgresql://airlock:" .. password .. "@127.0.0.1:1/airlock"), "--node-id node-7")
    assert.are.equal(1, rc, out)
    assert.truthy(#lines(out) >= 1, out)
    local said
    for _, line in ipairs(lines(out)) do
      local e = cjson.decode(line)
      assert.are.equal("node-7", e.node, line)
      said = said or (e.level == "error" and e.msg:find("database", 1, true))
    end
    assert.truthy(said, out)
    assert.is_nil(out:find(password, 1, true), out)
  end)

  it("says a busy port with its address and the reason, not libmicrohttpd's port 0", function()
    local socket = require "socket"
    local taken = assert(socket.bind("127.0.0.1", 0))
    local _, port = taken:getsockname()
    local dir = proc.make_temp_dir()
    local rc, out = proc.run_capture("SANDBOX_API_KEYS=a:logging-spec-key-1 timeout 60 " ..
      airlockd.shell_quote(airlockd.binary()) .. " --listen 127.0.0.1:" .. port .. " --state-dir " ..
      airlockd.shell_quote(dir .. "/state"))
    taken:close()
    proc.remove_tree(dir)
    assert.are.equal(1, rc, out)
    local said = "error airlockd: --listen: cannot listen on 127.0.0.1:" .. port .. ": Address already in use"
    assert.truthy(out:find(said, 1, true), out)
    assert.is_nil(out:find("port 0", 1, true), out)
  end)
end)
