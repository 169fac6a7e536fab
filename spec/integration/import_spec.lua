-- luacheck: max line length 160
-- POST /v1/sessions/{id}/import against a real airlockd (contract 1.8): the archives come
-- from spec/support/archive_server.py on 127.0.0.1 (AIRLOCK_IMPORT_BASE_URL), the unpacking
-- runs in the sandbox. Exact status codes and detail texts, the order of checks, limits,
-- audit entries, and the SDK's sbx:import_repo. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local archive_server = require "support.archive_server"
local client = require "support.http_client"
local proc = require "support.proc"
local expect_error = require "support.expect_error"
local airlock = require "airlock"
local cjson = require "cjson"

local q = proc.shell_quote
local write_file = proc.write_file
local sh = proc.run

local NOT_GITHUB = "Only GitHub repositories can be imported (https://github.com/owner/repo)."
local FORM = "Give the repository as owner/repo or https://github.com/owner/repo."
local TREE = "Use https://github.com/owner/repo or https://github.com/owner/repo/tree/<branch>."

-- A fixture tree of repositories: <root>/acme/hello has 4 regular files and a symlink.
local function make_fixtures()
  local root = proc.make_temp_dir()
  assert(sh("mkdir -p " .. q(root .. "/acme/hello/src/util")))
  write_file(root .. "/acme/hello/README.md", "# hello\n")
  write_file(root .. "/acme/hello/src/main.py", "print('hello from the import')\n")
  write_file(root .. "/acme/hello/src/util/data.txt", "data\n")
  write_file(root .. "/acme/hello/.hidden", "h\n")
  assert(sh("ln -s README.md " .. q(root .. "/acme/hello/link")))
  assert(sh("mkdir -p " .. q(root .. "/acme/counted") .. " && echo x > " .. q(root .. "/acme/counted/x")))
  return root
end

local function create(server, key)
  local r = client.create(server, key)
  assert.are.equal(201, r.status, r.body)
  return r.json.session_id
end

local function import(server, key, id, body)
  return client.request(server, "POST", "/v1/sessions/" .. id .. "/import",
    { key = key, body = type(body) == "string" and body or cjson.encode(body), max_time = 240 })
end

-- A background import with curl; wait() gives the decoded response.
local function import_async(server, key, id, body)
  local job = client.post_async(server, key, "/v1/sessions/" .. id .. "/import", body, 240)
  return { wait = function() return job.wait(240) end }
end

local function running(server, key)
  return client.request(server, "GET", "/v1/usage", { key = key }).json.commands_running
end

local function wait_running(server, key, n)
  return proc.wait_until(15, function() return running(server, key) == n end, 0.05)
end

describe("POST /v1/sessions/{id}/import", function()
  local root, archives, server, acme, other

  lazy_setup(function()
    root = make_fixtures()
    archives = archive_server.start(root)
    local audit_db = proc.temp_path()
    os.remove(audit_db)
    server = airlockd.start({ env = { AIRLOCK_IMPORT_BASE_URL = archives.url, SANDBOX_AUDIT = "sqlite:" .. audit_db } })
    server.audit_db = audit_db
    acme, other = server.tenants.acme, server.tenants.other
  end)

  lazy_teardown(function()
    if server then
      airlockd.stop(server)
      os.remove(server.audit_db)
    end
    if archives then archive_server.stop(archives) end
    if root then sh("rm -rf " .. q(root)) end
  end)

  describe("success", function()
    local id

    lazy_setup(function() id = create(server, acme) end)

    it("imports owner/repo into /workspace/<name> with the file count and archive size", function()
      local r = import(server, acme, id, { repo = "acme/hello" })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal("application/json", r.headers["content-type"])
      assert.are.same({ "archive_bytes", "dest", "files", "path", "ref", "repo" }, (function()
        local keys = {}
        for k in pairs(r.json) do keys[#keys + 1] = k end
        table.sort(keys)
        return keys
      end)())
      assert.are.equal("acme/hello", r.json.repo)
      assert.are.equal("HEAD", r.json.ref)
      assert.are.equal("/workspace/hello", r.json.path)
      assert.are.equal("hello", r.json.dest)
      assert.are.equal(4, r.json.files) -- the symlink is not a regular file
      assert.is_true(r.json.archive_bytes > 100)
      assert.truthy(r.body:find('^{"repo":"acme/hello","ref":"HEAD","path":"/workspace/hello","dest":"hello","files":4,"archive_bytes":%d+}$'), r.body)
    end)

    it("makes the files readable through /read and visible to exec, owned by the sandbox user", function()
      local r = client.read(server, acme, id, "hello/src/main.py")
      assert.are.equal(200, r.status)
      assert.are.equal("print('hello from the import')\n", r.json.content)
      r = client.exec(server, acme, id, "cat hello/README.md && stat -c %U hello/src/util/data.txt && readlink hello/link")
      assert.are.equal(200, r.status, r.body)
      assert.are.equal(0, r.json.exit_code, r.body)
      assert.are.equal("# hello\nsandboxuser\nREADME.md\n", r.json.stdout)
      r = client.exec(server, acme, id, "echo more >> hello/README.md && rm hello/.hidden && echo ok")
      assert.are.equal("ok\n", r.json.stdout, r.body)
    end)

    it("leaves no temporary archive in the workspace", function()
      local p = assert(io.popen("ls -A " .. q(server.dir .. "/state/workspaces/" .. id .. "/w")))
      local listing = p:read("*a")
      p:close()
      assert.is_nil(listing:find("airlock-import", 1, true), listing)
    end)

    it("takes the ref from /tree/<ref>, an explicit ref over it, and a destination path", function()
      local r = import(server, acme, id, { repo = "https://github.com/acme/hello/tree/feature/x", path = " /sub/dir/ " })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal("feature/x", r.json.ref)
      assert.are.equal("/workspace/sub/dir", r.json.path)
      assert.are.equal("sub/dir", r.json.dest)
      assert.are.equal(4, r.json.files)
      r = import(server, acme, id, { repo = "https://github.com/acme/hello/tree/dev", ref = "v2", path = "v2" })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal("v2", r.json.ref)
      assert.are.equal(1, archive_server.count(archives, "/acme/hello/archive/v2.tar.gz"))
      assert.are.equal(0, archive_server.count(archives, "/acme/hello/archive/dev.tar.gz"))
    end)

    it("accepts http(s)://(www.)github.com URLs with .git, and odd but valid folder names", function()
      local r = import(server, acme, id, { repo = "  http://www.github.com/acme/hello.git  ", path = "-rf" })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal("acme/hello", r.json.repo)
      assert.are.equal("/workspace/-rf", r.json.path)
      r = client.read(server, acme, id, "-rf/README.md")
      assert.are.equal("# hello\n", r.json.content)
      r = import(server, acme, id, { repo = "github.com/acme/hello", ref = cjson.null, path = cjson.null })
      assert.are.equal(409, r.status, r.body) -- default dest "hello" exists by now
    end)

    it("follows a redirect back to the archive host", function()
      local r = import(server, acme, id, { repo = "redirect-self/hello", path = "redirected" })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal("redirect-self/hello", r.json.repo)
      assert.are.equal(4, r.json.files)
    end)
  end)

  describe("errors", function()
    local id

    lazy_setup(function() id = create(server, acme) end)

    local function detail(body)
      local r = import(server, acme, id, body)
      return r.status, r.json and r.json.detail, r
    end

    it("answers every 400 text of the contract before downloading anything", function()
      local cases = {
        { { repo = "https://gitlab.com/acme/counted" }, NOT_GITHUB },
        { { repo = "ftp://github.com/acme/counted" }, NOT_GITHUB },
        { { repo = "gitlab.com/acme/counted" }, NOT_GITHUB },
        { { repo = "not a repo" }, FORM },
        { { repo = "counted" }, FORM },
        { { repo = "   " }, FORM },
        { { repo = "https://github.com/acme" }, FORM },
        { { repo = "acme/counted/blob/main/x" }, TREE },
        { { repo = "https://github.com/acme/counted/tree" }, TREE },
        { { repo = "-acme/counted" }, "'-acme/counted' isn't a valid GitHub repository name." },
        { { repo = "acme/.." }, "'acme/..' isn't a valid GitHub repository name." },
        { { repo = "acme/x y" }, "'acme/x y' isn't a valid GitHub repository name." },
        { { repo = "acme/.git" }, "'acme/' isn't a valid GitHub repository name." },
        { { repo = "acme/counted", ref = "a..b" }, "'a..b' isn't a valid branch, tag or commit." },
        { { repo = "acme/counted", ref = "/main" }, "'/main' isn't a valid branch, tag or commit." },
        { { repo = "acme/counted/tree/we ird" }, "'we ird' isn't a valid branch, tag or commit." },
        { { repo = "acme/counted", path = "../x" }, "'../x' isn't a valid folder name inside the workspace." },
        { { repo = "acme/counted", path = "a/./b" }, "'a/./b' isn't a valid folder name inside the workspace." },
        { { repo = "acme/counted", path = "a b" }, "'a b' isn't a valid folder name inside the workspace." },
      }
      for _, c in ipairs(cases) do
        local status, d, r = detail(c[1])
        assert.are.equal(400, status, cjson.encode(c[1]) .. " → " .. r.body)
        assert.are.equal(c[2], d, cjson.encode(c[1]))
      end
      assert.are.equal(0, archive_server.count(archives, "/acme/counted/archive/HEAD.tar.gz"))
    end)

    it("404 for a repository or ref the server doesn't have: the contract's text, and a hint true for airlockd", function()
      local status, d, r = detail({ repo = "acme/nope" })
      assert.are.equal(404, status)
      assert.are.equal("acme/nope@HEAD wasn't found. For a private repository, connect GitHub in the console "
        .. "(Workspaces → Private repositories) and give Airlock access to it.", d)
      assert.are.equal("airlockd has no console and no GitHub connection: it downloads public archives from "
        .. archives.url .. " only. Check the owner, name and ref; a private repository's files can be sent with "
        .. "/write instead.", r.json.hint)
    end)

    it("409 when the destination exists, without downloading", function()
      assert.are.equal(200, client.write(server, acme, id, "taken/file.txt", "x").status)
      local status, d = detail({ repo = "acme/counted", path = "taken" })
      assert.are.equal(409, status)
      assert.are.equal("/workspace/taken already exists. Pick another folder name or delete it first.", d)
      assert.are.equal(0, archive_server.count(archives, "/acme/counted/archive/HEAD.tar.gz"))
    end)

    it("follows symlinks only inside the workspace when checking the destination", function()
      local r = client.exec(server, acme, id, "ln -s /etc out && ln -s taken inlink")
      assert.are.equal(0, r.json.exit_code, r.body)
      local status, d = detail({ repo = "acme/counted", path = "out/x" })
      assert.are.equal(400, status)
      assert.are.equal("'out/x' isn't a valid folder name inside the workspace.", d)
      status, d = detail({ repo = "acme/counted", path = "inlink/file.txt" })
      assert.are.equal(409, status)
      assert.are.equal("/workspace/inlink/file.txt already exists. Pick another folder name or delete it first.", d)
      assert.are.equal(0, archive_server.count(archives, "/acme/counted/archive/HEAD.tar.gz"))
      client.exec(server, acme, id, "rm out inlink")
    end)

    it("422 when the archive can't be unpacked, leaving nothing behind", function()
      local status, d = detail({ repo = "corrupt/thing" })
      assert.are.equal(422, status)
      assert.truthy(d:find("^Unpacking corrupt/thing failed: "), d)
      assert.truthy(d:find("gzip", 1, true), d)
      assert.is_true(#d <= #"Unpacking corrupt/thing failed: " + 500)
      local r = client.exec(server, acme, id, "ls -A")
      assert.are.equal("taken\n", r.json.stdout)
    end)

    it("502 for other answers, refused redirects and network errors", function()
      local status, d = detail({ repo = "status500/x" })
      assert.are.equal(502, status)
      assert.are.equal("GitHub answered 500 for status500/x.", d)
      status, d = detail({ repo = "redirect-evil/x" })
      assert.are.equal(502, status)
      assert.are.equal("GitHub redirected the download to an unexpected host (evil.example.com).", d)
    end)

    it("422 validation errors pydantic-style, before the session lookup", function()
      local r = import(server, acme, id, {})
      assert.are.equal(422, r.status)
      assert.are.same({ type = "missing", loc = { "body", "repo" }, msg = "Field required", input = {} }, r.json.detail[1])
      r = import(server, acme, "sbx_000000000000", { repo = string.rep("a", 301), ref = 5, path = string.rep("p", 201) })
      assert.are.equal(422, r.status)
      assert.are.equal(3, #r.json.detail)
      assert.are.equal("string_too_long", r.json.detail[1].type)
      assert.are.same({ max_length = 300 }, r.json.detail[1].ctx)
      assert.are.same({ "body", "ref" }, r.json.detail[2].loc)
      assert.are.equal("string_type", r.json.detail[2].type)
      assert.are.equal("String should have at most 200 characters", r.json.detail[3].msg)
      r = import(server, acme, id, "[]")
      assert.are.equal(422, r.status)
      assert.are.equal("model_attributes_type", r.json.detail[1].type)
    end)

    it("404 for an unknown session, 403 for another tenant's (and 401 without a key)", function()
      local r = import(server, acme, "sbx_000000000000", { repo = "acme/hello" })
      assert.are.equal(404, r.status)
      assert.are.equal("Session not found or expired", r.json.detail)
      r = import(server, other, id, { repo = "acme/hello" })
      assert.are.equal(403, r.status)
      assert.are.equal("Forbidden: Access denied to this session", r.json.detail)
      r = import(server, nil, id, { repo = "acme/hello" })
      assert.are.equal(401, r.status)
      r = client.exec(server, acme, id, "ls -A")
      assert.are.equal("taken\n", r.json.stdout)
    end)

    it("audits imports' failures with a null exit code and their duration, as the reference does", function()
      local r = client.request(server, "GET", "/v1/audit?limit=500", { key = acme })
      assert.are.equal(200, r.status, r.body)
      local by_command = {}
      for _, e in ipairs(r.json.entries) do
        if e.kind == "import" and e.session_id == id then by_command[e.command] = by_command[e.command] or e end
      end
      local e = by_command["import acme/nope"]
      assert.truthy(e, r.body)
      assert.are.equal(cjson.null, e.exit_code)
      assert.are.equal("number", type(e.duration_s))
      assert.truthy(e.duration_s >= 0 and e.duration_s < 120, r.body)
      assert.are.equal("static key", e.actor)
      assert.truthy(e.detail:find("^failed %(404%): acme/nope@HEAD wasn't found%."), e.detail)
      e = by_command["import acme/counted into taken"]
      assert.are.equal("failed (409): /workspace/taken already exists. Pick another folder name or delete it first.", e.detail)
      e = by_command["import acme/counted @a..b"]
      assert.truthy(e and e.detail:find("^failed %(400%)"))
      assert.is_true(#by_command["import corrupt/thing"].detail <= 300)
      local other_ids = client.request(server, "GET", "/v1/audit", { key = other }).json.entries
      for _, x in ipairs(other_ids) do assert.are_not.equal(id, x.session_id) end
    end)

    it("audits a success with the file count, exit code 0 and its duration, as the reference does", function()
      local sid = create(server, acme)
      assert.are.equal(200, import(server, acme, sid, { repo = "acme/hello", ref = "main", path = "lib/h" }).status)
      local r = client.request(server, "GET", "/v1/audit?limit=5", { key = acme })
      local e = r.json.entries[1]
      assert.are.equal("import", e.kind)
      assert.are.equal("import acme/hello @main into lib/h", e.command)
      assert.are.equal("4 files into /workspace/lib/h", e.detail)
      assert.are.equal(0, e.exit_code)
      assert.are.equal("number", type(e.duration_s))
      -- the unpacking ran in a sandbox: measurably more than nothing
      assert.truthy(e.duration_s > 0 and e.duration_s < 240, r.body)
      assert.is_false(e.timed_out)
    end)
  end)

  describe("through the SDK", function()
    it("sbx:import_repo returns the result; NotFoundError and ValidationError otherwise", function()
      local sbx = airlock.sandbox({ api_key = acme, base_url = server.url })
      local ok, err = pcall(function()
        local res = sbx:import_repo("acme/hello")
        assert.are.equal("/workspace/hello", res.path)
        assert.are.equal("HEAD", res.ref)
        assert.are.equal(4, res.files)
        res = sbx:import_repo("https://github.com/acme/hello", { ref = "v1", path = "pkg/h" })
        assert.are.equal("/workspace/pkg/h", res.path)
        assert.are.equal("v1", res.ref)
        assert.are.equal("# hello\n", sbx.files:read("pkg/h/README.md"))
        local e = expect_error("NotFoundError", sbx.import_repo, sbx, "acme/missing")
        assert.truthy(tostring(e):find("wasn't found", 1, true), tostring(e))
        e = expect_error("ValidationError", sbx.import_repo, sbx, "not a repo")
        assert.are.equal(400, e.status)
        expect_error("ValidationError", sbx.import_repo, sbx, "acme/hello", { path = "../x" })
      end)
      sbx:close()
      assert(ok, err)
    end)
  end)
end)

describe("import limits", function()
  local root, archives, server, acme

  lazy_setup(function()
    root = make_fixtures()
    archives = archive_server.start(root)
    server = airlockd.start({ env = {
      AIRLOCK_IMPORT_BASE_URL = archives.url, SANDBOX_IMPORT_MAX_MB = "1", SANDBOX_WORKSPACE_QUOTA_MB = "1",
      SANDBOX_TENANT_LIMITS = '{"*": {"max_concurrent_exec": 1}}',
    } })
    acme = server.tenants.acme
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
    if archives then archive_server.stop(archives) end
    if root then sh("rm -rf " .. q(root)) end
  end)

  it("413 over SANDBOX_IMPORT_MAX_MB, with or without a Content-Length", function()
    local id = create(server, acme)
    local r = import(server, acme, id, { repo = "bytes/n2000000" })
    assert.are.equal(413, r.status, r.body)
    assert.are.equal("bytes/n2000000 is larger than the 1 MB import limit.", r.json.detail)
    r = import(server, acme, id, { repo = "chunked/n2000000" })
    assert.are.equal(413, r.status, r.body)
    assert.are.equal("chunked/n2000000 is larger than the 1 MB import limit.", r.json.detail)
  end)

  it("413 when the archive doesn't fit in the free quota", function()
    local id = create(server, acme)
    assert.are.equal(200, client.write(server, acme, id, "filler.bin", string.rep("f", 600000)).status)
    local r = import(server, acme, id, { repo = "bytes/n600000" })
    assert.are.equal(413, r.status, r.body)
    local archive_mb, free_mb = r.json.detail:match("^The archive %((%d+%.%d) MB%) doesn't fit in the workspace's free disk space %((%d+%.%d) MB%)%.$")
    assert.are.equal("0.6", archive_mb, r.json.detail)
    assert.truthy(tonumber(free_mb) < 0.6, r.json.detail)
    -- a small repository still fits
    assert.are.equal(200, import(server, acme, id, { repo = "acme/hello" }).status)
  end)

  it("rejects an invalid SANDBOX_IMPORT_MAX_MB naming the variable", function()
    local ok, err = pcall(airlockd.start, { env = { SANDBOX_IMPORT_MAX_MB = "lots" } })
    assert.is_false(ok)
    assert.truthy(tostring(err):find("SANDBOX_IMPORT_MAX_MB", 1, true), tostring(err))
  end)

  it("counts against max_concurrent_exec in both directions", function()
    local id = create(server, acme)
    local running_exec = client.exec_async(server, acme, id, client.until_go(), 60)
    assert.is_true(wait_running(server, acme, 1))
    local r = import(server, acme, id, { repo = "acme/hello", path = "blocked" })
    assert.are.equal(429, r.status, r.body)
    assert.are.equal("Too many commands running at once: 1 allowed. Wait for one to finish.", r.json.detail)
    assert.is_nil(r.headers["retry-after"])
    assert.are.equal("1", r.headers["x-airlock-exec-limit"])
    assert.are.equal(200, client.write(server, acme, id, "go", "").status)
    assert.are.equal(0, running_exec.wait(90).exit_code)

    local slow = import_async(server, acme, id, { repo = "slow/hello", path = "slow" })
    assert.is_true(wait_running(server, acme, 1))
    r = client.exec(server, acme, id, "true")
    assert.are.equal(429, r.status, r.body)
    local res, raw = slow.wait()
    assert.truthy(res, raw)
    assert.are.equal("/workspace/slow", res.path, raw)
    assert.are.equal(0, running(server, acme))
  end)
end)
