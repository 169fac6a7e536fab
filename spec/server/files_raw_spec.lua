-- luacheck: max line length 160
-- Bytes-safe files (issue 11 item 2), airlock's extension of the files routes: raw
-- application/octet-stream bodies on POST .../write?path= streamed to disk as they arrive,
-- Accept: application/octet-stream on GET .../read streamed from disk, and GET .../list. The
-- exact bytes go both ways (all 256 byte values, 100 MB) while airlockd's memory stays flat;
-- the quota holds while the body streams (413, nothing left); a body cut short leaves no file;
-- the listing is bounded and never follows a symlink. The JSON routes stay as they were.
-- Real airlockd, real gVisor, loopback only. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local tcp_queues = require "support.tcp_queues"
local socket = require "socket"

local q = proc.shell_quote
local MB = 1024 * 1024
local LIMITS = '{"*":{"requests_per_minute":100000,"max_sessions":50}}'

local function status_field(server, field)
  local s = proc.read_file("/proc/" .. server.pid .. "/status") or ""
  return tonumber(s:match(field .. ":%s*(%d+)"))
end

local function all_bytes()
  local t = {}
  for i = 0, 255 do t[#t + 1] = string.char(i) end
  return table.concat(t)
end

-- curl from files (bodies never pass through Lua): → status, body text.
local function curl(args)
  local out = proc.output("curl -s -o /dev/stderr -w '%{http_code}' " .. table.concat(args, " ") .. " 2>/dev/null")
  return tonumber(out)
end

describe("airlockd raw files (airlock extension)", function()
  local server, small, key, tmp

  local function create(srv)
    local r = http_client.create(srv, srv.tenants.acme)
    assert.are.equal(201, r.status, r.body)
    return r.json.session_id
  end

  local function raw_write(srv, id, path, body, headers)
    return http_client.request(srv, "POST", "/v1/sessions/" .. id .. "/write?path=" .. http_client.urlencode(path),
      { key = srv.tenants.acme, body = body, content_type = "application/octet-stream", headers = headers })
  end

  local function raw_read(srv, id, path)
    return http_client.request(srv, "GET", "/v1/sessions/" .. id .. "/read?path=" .. http_client.urlencode(path),
      { key = srv.tenants.acme, headers = { "Accept: application/octet-stream" } })
  end

  local function list(srv, id, path, extra)
    local url = "/v1/sessions/" .. id .. "/list" .. (path and ("?path=" .. http_client.urlencode(path)) or "")
    if extra then url = url .. (path and "&" or "?") .. extra end
    return http_client.request(srv, "GET", url, { key = srv.tenants.acme })
  end

  local function names(r)
    local out = {}
    for _, e in ipairs(r.json.entries) do out[#out + 1] = e.name end
    return table.concat(out, ",")
  end

  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "160", SANDBOX_TENANT_LIMITS = LIMITS,
                                      SANDBOX_LOG_LEVEL = "debug" } }) -- request lines: a hung-up write is "/write 0"
    small = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "5", SANDBOX_TENANT_LIMITS = LIMITS } })
    key = server.tenants.acme
    tmp = proc.make_temp_dir()
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
    if small then airlockd.stop(small) end
    if tmp then proc.remove_tree(tmp) end
  end)

  it("round-trips all 256 byte values exactly; the JSON read of that file is unchanged (500)", function()
    local id = create(server)
    local data = all_bytes():rep(3) .. "\r\n\r" .. all_bytes()
    local w = raw_write(server, id, "bin/all.bin", data)
    assert.are.equal(200, w.status, w.body)
    assert.are.equal('{"status":"success","message":"Successfully wrote ' .. #data .. ' bytes to bin/all.bin","bytes":' .. #data .. '}', w.body)
    local r = raw_read(server, id, "bin/all.bin")
    assert.are.equal(200, r.status)
    assert.are.equal("application/octet-stream", r.headers["content-type"])
    assert.are.equal(tostring(#data), r.headers["content-length"])
    assert.is_true(r.body == data, "the bytes read back differ")
    -- the contract's JSON read is untouched: a binary file is its UnicodeDecodeError 500
    local j = http_client.read(server, key, id, "bin/all.bin")
    assert.are.equal(500, j.status)
    assert.are.equal("Internal Server Error", j.body)
    -- and a JSON text write/read is byte for byte what it was
    local jw = http_client.write(server, key, id, "t.txt", "a\r\nb")
    assert.are.equal('{"status":"success","message":"Successfully wrote 4 characters to t.txt"}', jw.body)
    assert.are.equal('{"path":"t.txt","content":"a\\nb"}', http_client.read(server, key, id, "t.txt").body)
    -- an empty raw body is an empty file
    assert.are.equal(200, raw_write(server, id, "empty", "").status)
    local e = raw_read(server, id, "empty")
    assert.are.equal(200, e.status)
    assert.are.equal("", e.body)
  end)

  it("streams a 100 MB file in and out with airlockd's VmHWM growing by at most 16 MB", function()
    local id = create(server)
    local src, back = tmp .. "/big.bin", tmp .. "/back.bin"
    assert.is_true(proc.run("head -c 100000000 /dev/urandom > " .. q(src)))
    local before = status_field(server, "VmHWM")
    local base = q(server.url .. "/v1/sessions/" .. id)
    assert.are.equal(200, curl({ "-H", q("X-API-Key: " .. key), "-H", q("Content-Type: application/octet-stream"),
      "--data-binary", q("@" .. src), base .. "/write?path=big.bin" }))
    assert.is_true(proc.run("curl -s -f -H " .. q("X-API-Key: " .. key) .. " -H 'Accept: application/octet-stream' -o " ..
      q(back) .. " " .. base .. "/read?path=big.bin"))
    local after = status_field(server, "VmHWM")
    print(string.format("VmHWM before %d kB, after a 100 MB raw write and read %d kB (+%d kB)", before, after, after - before))
    assert.is_true(proc.run("cmp -s " .. q(src) .. " " .. q(back)), "the 100 MB read back differs")
    assert.truthy(after - before <= 16 * 1024, "VmHWM grew by " .. (after - before) .. " kB")
    local l = list(server, id, ".")
    assert.are.equal(200, l.status, l.body)
    assert.are.equal(100000000, l.json.entries[1].size)
  end)

  it("refuses a declared body over the quota with the contract's 413 before reading it", function()
    local id = create(small)
    assert.are.equal(200, raw_write(small, id, "keep.bin", ("k"):rep(1000)).status)
    local r = raw_write(small, id, "big.bin", ("x"):rep(8 * MB))
    assert.are.equal(413, r.status, r.body)
    assert.truthy(r.json.detail:match("^Writing big%.bin would use [%d.]+ MB of the workspace's 5 MB disk quota%. Delete files first%.$"), r.body)
    assert.are.equal("keep.bin", names(list(small, id, ".")))
  end)

  it("lets a client still sending its body read the 413 it was answered from the headers (no reset)", function()
    local id = create(small)
    local c = socket.tcp()
    c:settimeout(10)
    assert(c:connect("127.0.0.1", small.port))
    assert(c:send("POST /v1/sessions/" .. id .. "/write?path=big.bin HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. small.tenants.acme ..
      "\r\nContent-Type: application/octet-stream\r\nContent-Length: " .. 8 * MB .. "\r\n\r\n" .. ("x"):rep(100000)))
    -- the answer is waiting, unread; a server that closed now would reset what follows
    assert.are.equal(1, #(socket.select({ c }, nil, 10)))
    local sent, err = c:send(("x"):rep(2 * MB))
    assert.are.equal(2 * MB, sent, "the rest of the body was refused: " .. tostring(err))
    local answer, rerr, part = c:receive("*a")
    c:close()
    answer = answer or part
    assert.truthy(answer:match("^HTTP/1%.1 413 "), tostring(rerr) .. " " .. answer)
    assert.truthy(answer:find("of the workspace's 5 MB disk quota. Delete files first.", 1, true), answer)
  end)

  it("enforces the quota while a chunked body streams: 413, no partial file, the replaced file kept", function()
    local id = create(small)
    assert.are.equal(200, raw_write(small, id, "f.bin", "old contents").status)
    local src = tmp .. "/8mb.bin"
    assert.is_true(proc.run("head -c " .. 8 * MB .. " /dev/zero > " .. q(src)))
    local body = tmp .. "/413.json"
    local out = proc.output("cat " .. q(src) .. " | curl -s -o " .. q(body) .. " -w '%{http_code}' -H " .. q("X-API-Key: " .. small.tenants.acme) ..
      " -H 'Content-Type: application/octet-stream' -H 'Transfer-Encoding: chunked' --data-binary @- " ..
      q(small.url .. "/v1/sessions/" .. id .. "/write?path=f.bin"))
    assert.are.equal("413", out)
    assert.truthy(proc.read_file(body):find("of the workspace's 5 MB disk quota. Delete files first.", 1, true), proc.read_file(body))
    local l = list(small, id, ".")
    assert.are.equal("f.bin", names(l)) -- no temporary name either
    assert.are.equal("old contents", raw_read(small, id, "f.bin").body)
    -- the space came back: a file of 4 MB still fits
    assert.are.equal(200, raw_write(small, id, "g.bin", ("y"):rep(4 * MB)).status)
  end)

  it("leaves no file when the client hangs up before its Content-Length is complete", function()
    local id = create(server)
    local c = socket.tcp()
    c:settimeout(10)
    assert(c:connect("127.0.0.1", server.port))
    assert(c:send("POST /v1/sessions/" .. id .. "/write?path=cut/part.bin HTTP/1.1\r\nHost: x\r\nX-API-Key: " .. key ..
      "\r\nContent-Type: application/octet-stream\r\nContent-Length: 4000000\r\n\r\n" .. ("p"):rep(1500000)))
    -- hang up once airlockd has read the 1.5 MB (its file is half written)
    assert.is_true(proc.wait_until(10, function() return tcp_queues.all_read(c) end, 0.05))
    c:close()
    assert.is_true(proc.wait_until(10, function()
      return airlockd.log(server):find("/write 0 ", 1, true) ~= nil
    end), airlockd.log(server))
    local l = list(server, id, "cut")
    assert.are.equal(200, l.status, l.body)
    assert.are.equal("", names(l))
    assert.are.equal(404, raw_read(server, id, "cut/part.bin").status)
  end)

  it("checks raw writes like JSON ones: key from the headers, path rules, missing files", function()
    local id = create(server)
    local r = http_client.request(server, "POST", "/v1/sessions/" .. id .. "/write?path=x", {
      key = "wrong", body = ("z"):rep(100000), content_type = "application/octet-stream" })
    assert.are.equal(401, r.status)
    assert.are.equal(403, raw_write(server, id, "../../etc/x", "a").status)
    assert.are.equal(422, http_client.request(server, "POST", "/v1/sessions/" .. id .. "/write",
      { key = key, body = "a", content_type = "application/octet-stream" }).status)
    local p = raw_write(server, id, ("a/"):rep(300) .. "f", "a")
    assert.are.equal(400, p.status, p.body)
    assert.are.equal(404, raw_write(server, "sbx_000000000000", "f", "a").status)
    local m = raw_read(server, id, "nope.bin")
    assert.are.equal(404, m.status)
    assert.are.equal('{"detail":"File \'nope.bin\' does not exist."}', m.body)
    assert.are.equal(403, raw_read(server, id, "/etc/passwd").status)
    -- writing over a directory fails as the JSON write does, leaving the directory
    assert.are.equal(200, raw_write(server, id, "dir/f", "a").status)
    assert.are.equal(500, raw_write(server, id, "dir", "a").status)
    assert.are.equal("f", names(list(server, id, "dir")))
  end)

  it("lists names, kinds, sizes and times; never follows symlinks; bounded with a truncated flag", function()
    local id = create(server)
    for i = 1, 12 do assert.are.equal(200, raw_write(server, id, string.format("many/f%02d", i), ("x"):rep(i)).status) end
    local r = http_client.exec(server, key, id,
      "mkdir sub && ln -s /etc sub/etc && ln -s ../many sub/many && echo hi > sub/file && ln -s /etc out", 60)
    assert.are.equal(200, r.status, r.body)
    assert.are.equal(0, r.json.exit_code, r.body)
    -- a FIFO made inside gVisor lives in the sandbox only: made on the host side instead
    assert.is_true(proc.run("mkfifo " .. q(server.dir .. "/state/workspaces/" .. id .. "/w/sub/fifo")))
    local l = list(server, id, "sub")
    assert.are.equal(200, l.status, l.body)
    assert.are.equal("etc,fifo,file,many", names(l))
    local kinds = {}
    for _, e in ipairs(l.json.entries) do
      kinds[e.name] = e.kind
      assert.are.equal("number", type(e.mtime))
      assert.truthy(e.mtime > 1e9)
    end
    assert.are.same({ etc = "symlink", fifo = "other", file = "file", many = "symlink" }, kinds)
    assert.are.equal(3, l.json.entries[3].size)
    assert.is_false(l.json.truncated)
    -- a symlink out of the workspace is not followed: 403 as for every files path
    assert.are.equal(403, list(server, id, "sub/etc").status)
    assert.are.equal(403, list(server, id, "out").status)
    -- one inside is resolved like any path
    assert.are.equal(12, #list(server, id, "sub/many").json.entries)
    local b = list(server, id, "many", "limit=5")
    assert.are.equal(5, #b.json.entries)
    assert.is_true(b.json.truncated)
    assert.are.equal(400, list(server, id, "many", "limit=0").status)
    assert.are.equal(400, list(server, id, "many", "limit=10001").status)
    assert.are.equal(404, list(server, id, "nothing").status)
    assert.are.equal(400, list(server, id, "sub/file").status)
    local root = list(server, id)
    assert.are.equal(".", root.json.path)
    assert.are.equal("many,out,sub", names(root))
  end)

  it("refuses a raw read of a sparse file larger than the quota without allocating it", function()
    local id = create(small)
    local r = http_client.exec(small, small.tenants.acme, id, "truncate -s 1G sparse && ls -l sparse", 60)
    assert.are.equal(200, r.status, r.body)
    local before = status_field(small, "VmHWM")
    local s = raw_read(small, id, "sparse")
    assert.are.equal(413, s.status, s.body)
    assert.truthy(s.json.detail:find("over the workspace's 5 MB quota", 1, true), s.body)
    assert.truthy(status_field(small, "VmHWM") - before < 2048)
  end)
end)
