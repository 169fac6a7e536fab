-- Bytes-safe files through the SDK (issue 11 item 2): files:write sends any Lua string (valid
-- UTF-8 as the contract's JSON text, anything else as raw bytes, or as asked with
-- { binary = true | false }), files:read(path, { binary = true }) returns the exact bytes, and
-- files:list(dir) names, kinds, sizes and times; on the curl, uv (luv) and ngx (nginx
-- cosockets) transports, against a real airlockd. Runs on Lua 5.4, 5.1 and LuaJIT.
local airlock = require "airlock"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"

local function all_bytes()
  local t = {}
  for i = 0, 255 do t[#t + 1] = string.char(i) end
  return table.concat(t)
end

describe("binary files through the SDK", function()
  local server, opts

  setup(function()
    server = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "200" } })
    opts = { base_url = server.url, api_key = server.tenants.acme }
  end)
  teardown(function() if server then airlockd.stop(server) end end)

  -- The same checks on every transport.
  local function round_trip(sbx)
    local data = all_bytes():rep(4) .. "\0end\r\n"
    sbx.files:write("b/all.bin", data)                      -- auto: not UTF-8 → raw
    assert.is_true(sbx.files:read("b/all.bin", { binary = true }) == data)
    sbx.files:write("b/text.txt", "h\195\169\r\n")           -- auto: UTF-8 → JSON, as before
    assert.are.equal("h\195\169\n", sbx.files:read("b/text.txt"))
    assert.are.equal("h\195\169\r\n", sbx.files:read("b/text.txt", { binary = true }))
    sbx.files:write("b/forced.txt", "plain", { binary = true })
    assert.are.equal("plain", sbx.files:read("b/forced.txt", { binary = true }))
    local entries, truncated = sbx.files:list("b")
    assert.is_false(truncated)
    local by_name = {}
    for _, e in ipairs(entries) do by_name[e.name] = e end
    assert.are.equal("file", by_name["all.bin"].kind)
    assert.are.equal(#data, by_name["all.bin"].size)
    assert.are.equal(5, by_name["text.txt"].size)
    assert.truthy(by_name["forced.txt"].mtime > 1e9)
    local root = sbx.files:list()
    assert.are.equal("b", root[1].name)
    assert.are.equal("dir", root[1].kind)
    local two, more = sbx.files:list("b", { limit = 2 })
    assert.are.equal(2, #two)
    assert.is_true(more)
  end

  it("round-trips all 256 byte values on the curl transport", function()
    local sbx = airlock.sandbox(opts)
    local ok, err = pcall(round_trip, sbx)
    sbx:close()
    assert(ok, err)
  end)

  it("round-trips a 100 MB binary string on the curl transport", function()
    local sbx = airlock.sandbox(opts)
    local block = all_bytes():rep(4096)                      -- 1 MiB
    local data = block:rep(100)
    local ok, err = pcall(function()
      sbx.files:write("big.bin", data)
      local back = sbx.files:read("big.bin", { binary = true })
      assert.are.equal(#data, #back)
      assert.is_true(back == data, "the 100 MB read back differs")
    end)
    sbx:close()
    assert(ok, err)
  end)

  it("raises FileNotFoundError for a missing file read raw, the quota error for a raw write over it", function()
    local sbx = airlock.sandbox(opts)
    local ok, err = pcall(sbx.files.read, sbx.files, "missing.bin", { binary = true })
    assert.is_false(ok)
    assert.are.equal("FileNotFoundError", err.name)
    local qok, qerr = pcall(sbx.files.write, sbx.files, "huge.bin", ("\255"):rep(210 * 1024 * 1024))
    assert.is_false(qok)
    assert.are.equal(413, qerr.status)
    assert.truthy(qerr.message:find("disk quota", 1, true), qerr.message)
    assert.are.equal(0, #sbx.files:list())
    local vok, verr = pcall(sbx.files.write, sbx.files, "x", "\255", { binary = false })
    assert.is_false(vok)
    assert.are.equal("ValidationError", verr.name)
    sbx:close()
  end)

  it("round-trips on the libuv transport", function()
    local ok_uv, luv = pcall(require, "luv")
    if not ok_uv then return pending("luv is not installed") end
    local uvt = require "airlock.transport.uv"
    uvt.install(luv)
    local failure
    airlock.spawn(function()
      local sbx = airlock.sandbox(opts)
      local ok, err = pcall(round_trip, sbx)
      sbx:close()
      if not ok then failure = err end
    end)
    luv.run()
    assert.is_true(uvt.uninstall())
    luv.run("nowait")
    assert(not failure, failure)
  end)

  it("round-trips on the cosocket transport in nginx", function()
    local ok_n, nginx = pcall(require, "support.hosts.nginx")
    if not ok_n or os.execute("command -v nginx >/dev/null 2>&1") ~= true and
      os.execute("command -v nginx >/dev/null 2>&1") ~= 0 then
      return pending("nginx is not installed")
    end
    local ngx_eval = require "support.hosts.nginx_eval"
    local srv = nginx.start({ env = { SANDBOX_API_URL = server.url, SANDBOX_API_KEY = server.tenants.acme },
      server = ngx_eval.LOCATION })
    local ok, value = pcall(ngx_eval.eval, srv, [[
      local airlock = require "airlock"
      local t = {}
      for i = 0, 255 do t[#t + 1] = string.char(i) end
      local data = table.concat(t):rep(1024)
      local big = data:rep(80)                                  -- 20 MiB
      local sbx = airlock.sandbox()
      sbx.files:write("n/all.bin", data)
      local back = sbx.files:read("n/all.bin", { binary = true })
      sbx.files:write("n/big.bin", big)
      local big_back = sbx.files:read("n/big.bin", { binary = true })
      local entries = sbx.files:list("n")
      sbx:close()
      return { same = back == data, big_same = big_back == big, n = #entries, kind = entries[1].kind,
        transport = airlock.stats().transport }
    ]], 300)
    local log = nginx.stop(srv)
    nginx.assert_no_crashes(log)
    assert(ok, value)
    assert.is_true(value.same)
    assert.is_true(value.big_same)
    assert.are.equal(2, value.n)
    assert.are.equal("file", value.kind)
    assert.are.equal("ngx", value.transport)
  end)

  it("keeps the raw HTTP answers of the JSON routes unchanged for text", function()
    local sbx = airlock.sandbox(opts)
    sbx.files:write("t.txt", "a\r\nb")
    local r = http_client.read(server, server.tenants.acme, sbx.session_id, "t.txt")
    sbx:close()
    assert.are.equal('{"path":"t.txt","content":"a\\nb"}', r.body)
  end)
end)
