-- luacheck: max line length 160
-- Deep directory trees (issue #8): a chain of 25,000 directories in a workspace is counted for
-- the quota, wiped on DELETE, and does not stop airlockd from starting again on the same state
-- directory. The chain is made on the host, in the workspace directory: the files API refuses
-- paths over 4,096 bytes or 256 levels, and gVisor holds a descriptor per directory level, so
-- a command cannot nest deeper than its descriptor limit (about 1,000 levels here). The
-- server runs with 1024 descriptors and a 1 MB stack: a walk that recursed one level per
-- directory, or held one descriptor per level, fails all three. Loopback only; the disk
-- quota checks need a filesystem that gives directories blocks (ext4, xfs: 4 KiB each).
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local cjson = require "cjson"

local http = http_client.request
local q = proc.shell_quote

local DEPTH = 25000
local DEEP_PATH = string.rep("a/", DEPTH) .. "f"
-- one mkdir + chdir per level in one process, holding no descriptor per level
local MAKE_CHAIN = "python3 -c 'import os\nfor _ in range(" .. DEPTH .. "):\n    os.mkdir(\"a\"); os.chdir(\"a\")\n" ..
  "open(\"f\", \"w\").write(\"deep\")'"
local LAUNCHER = "prlimit --nofile=1024:1024 --stack=1048576:1048576 --"

local function exists(path)
  return proc.succeeded(os.execute("test -e " .. q(path)))
end

local function workspace(server, id)
  return server.dir .. "/state/workspaces/" .. id
end

-- Megabytes of directory blocks the chain takes, as the server counts them (st_blocks).
local function chain_mb(server, id)
  local out = proc.output("find " .. q(workspace(server, id)) .. " -type d -printf '%b\\n' | awk '{ s += $1 } END { print s * 512 / 1048576 }'")
  return tonumber(out)
end

describe("airlockd with a 25,000-level directory chain", function()
  local server, key

  lazy_setup(function()
    server = airlockd.start({ launcher = LAUNCHER, env = { SANDBOX_WORKSPACE_QUOTA_MB = "5" } })
    key = server.tenants.acme
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  local function create()
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    return r.json.session_id
  end

  local function write_chain(id)
    assert.is_true(proc.succeeded(os.execute("cd " .. q(workspace(server, id)) .. " && " .. MAKE_CHAIN)))
    assert.is_true(exists(workspace(server, id) .. "/a/a/a"))
  end

  it("counts every level for the quota and wipes the chain on DELETE", function()
    local id = create()
    write_chain(id)
    -- the files API no longer takes such paths: refused before any filesystem work (in a query
    -- string a 50 KB path does not even fit the request line: 414)
    local r = http_client.write(server, key, id, DEEP_PATH, "deep")
    assert.are.equal(400, r.status, r.body)
    assert.are.equal("Path too long: at most 4096 bytes, also once symlinks are resolved.", r.json.detail)
    -- the chain's own directories are far over the 5 MB quota; the refusal says by how much
    local on_disk = chain_mb(server, id)
    assert.truthy(on_disk > 50, "the chain takes " .. tostring(on_disk) .. " MB on this filesystem")
    r = http_client.write(server, key, id, "b.txt", "x")
    assert.are.equal(413, r.status, r.body)
    local counted = tonumber(r.json.detail:match("^Writing b%.txt would use (%d+%.%d) MB of the workspace's 5 MB disk quota%."))
    assert.truthy(counted, r.body)
    -- rounded to 0.1 MB by the message; the file "f" and the workspace itself add a little
    assert.truthy(math.abs(counted - on_disk) < 0.5, "counted " .. counted .. " MB of " .. on_disk .. " MB")

    r = http_client.delete(server, key, id)
    assert.are.equal(200, r.status, r.body)
    assert.is_false(exists(workspace(server, id)))
    assert.is_nil(airlockd.log(server):find("could not wipe", 1, true), airlockd.log(server))
    assert.is_true(airlockd.alive(server))
  end)

  it("starts again on the same state directory after a kill -9 left a chain behind", function()
    local id = create()
    write_chain(id)
    local dir, tenants = server.dir, server.tenants
    os.execute("kill -9 " .. server.pid) -- SIGTERM would wipe it: kill -9 keeps the chain on disk
    assert.is_true(proc.wait_until(10, function() return not airlockd.alive(server) end))
    assert.is_true(exists(workspace(server, id) .. "/a/a/a"))

    -- removing 25,000 directories takes a while on a busy disk: wait for it
    server = airlockd.start({ dir = dir, tenants = tenants, launcher = LAUNCHER, wait = 120,
                              env = { SANDBOX_WORKSPACE_QUOTA_MB = "5" } })
    local r = http(server, "GET", "/healthz")
    assert.are.equal(200, r.status, r.body)
    -- the chain is either wiped with the rest of the old workspaces or kept with its session
    local listed = http(server, "GET", "/v1/sessions", { key = key })
    assert.are.equal(200, listed.status, listed.body)
    local kept = false
    for _, s in ipairs(listed.json.sessions) do kept = kept or s.session_id == id end
    assert.is_true(kept or not exists(workspace(server, id)), cjson.encode(listed.json))
    -- and the new server works
    local id2 = create()
    r = http_client.write(server, key, id2, "x.txt", "ok")
    assert.are.equal(200, r.status, r.body)
  end)
end)
