-- luacheck: max line length 160
-- Deep directory trees cannot hurt the server (issue #8). A workspace is its own filesystem
-- image, so directories cost its inodes and blocks: a command trying to build a chain of 25,000
-- directories stops at the quota with ENOSPC, and the server never walks a workspace (usage
-- comes from statvfs, DELETE unmounts and deletes one image file), so even the deepest chain a
-- quota allows is measured, kept across a kill -9 and removed at once. The server runs with a
-- 1 MB stack: a walk that recursed one level per directory would crash it. (Its descriptors are
-- not limited here: the sandbox inherits that limit, and gVisor's gofer holds one descriptor per
-- directory level, so the chain would stop there instead of at the quota.) Loopback only.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"

local q = proc.shell_quote
local LAUNCHER = "prlimit --stack=1048576:1048576 --"

-- A chain of directories "a" built with mkdir + chdir until the disk says no (or 25,000), then
-- the last level given back for a file "f" at the bottom: prints "<levels> <errno>".
local CHAIN = "python3 -c " .. q(table.concat({
  "import os",
  "depth, err = 0, 0",
  "while depth < 25000:",
  "    try:",
  "        os.mkdir('a'); os.chdir('a')",
  "    except OSError as e:",
  "        err = e.errno; break",
  "    depth += 1",
  "if err:",
  "    os.chdir('..'); os.rmdir('a'); depth -= 1",
  "open('f', 'w').write('deep')",
  "print(depth, err)",
}, "\n"))

local function exists(path)
  return proc.run("test -e " .. q(path))
end

describe("airlockd with deep directory chains", function()
  local server, key

  local function start(dir, tenants, wait)
    server = airlockd.start({ dir = dir, tenants = tenants, launcher = LAUNCHER, wait = wait,
                              env = { SANDBOX_WORKSPACE_QUOTA_MB = "64" } })
    key = server.tenants.acme
  end

  lazy_setup(function() start() end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  local function create()
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    return r.json.session_id
  end

  local function chain(id)
    local r = http_client.exec(server, key, id, CHAIN, 60)
    assert.are.equal(200, r.status, r.body)
    assert.is_false(r.json.timed_out, r.body)
    local depth, errno = r.json.stdout:match("^(%d+) (%d+)\n$")
    assert.truthy(depth, r.json.output)
    return tonumber(depth), errno
  end

  it("stops a 25,000-level chain at the workspace's quota (ENOSPC), measures it without walking, removes it at once", function()
    local id = create()
    local depth, errno = chain(id)
    -- 64 MB give ~8,900 inodes: the chain ends there, far from 25,000 (ENOSPC = 28)
    assert.are.equal("28", errno)
    assert.truthy(depth > 1000 and depth < 25000, depth)
    -- the next exec says how full it is; the files API refuses what does not fit
    local r = http_client.exec(server, key, id, "true")
    assert.are.equal(200, r.status, r.body)
    r = http_client.write(server, key, id, "b.txt", "x") -- no inode left for it
    assert.are.equal(413, r.status, r.body)
    assert.truthy(r.json.detail:match("^Writing b%.txt would use %d+%.%d MB of the workspace's 64 MB disk quota%. Delete files first%.$"), r.body)
    -- DELETE does not walk the chain: one unmount and one unlink
    r = http_client.delete(server, key, id)
    assert.are.equal(200, r.status, r.body)
    assert.is_false(exists(server.dir .. "/state/workspaces/" .. id))
    assert.is_false(exists(server.dir .. "/state/images/" .. id .. ".img"))
    assert.is_true(airlockd.alive(server))
  end)

  it("keeps the deepest chain its quota allows across a kill -9, and serves it again", function()
    local id = create()
    local depth = chain(id)
    local dir, tenants = server.dir, server.tenants
    os.execute("kill -9 " .. server.pid)
    assert.is_true(proc.wait_until(10, function() return not airlockd.alive(server) end))
    start(dir, tenants, 60)
    assert.are.equal(200, http_client.request(server, "GET", "/healthz").status)
    -- the session is back with its chain (taken over, not walked), and the server works
    local r = http_client.exec(server, key, id, "python3 -c " .. q(table.concat({
      "import os",
      "n = 0",
      "while os.path.isdir('a'):",
      "    os.chdir('a'); n += 1",
      "print(n, open('f').read())",
    }, "\n")), 60)
    assert.are.equal(200, r.status, r.body)
    assert.are.equal(depth .. " deep\n", r.json.stdout, r.json.output)
    assert.truthy(airlockd.log(server):find("(1 mounts taken over, 0 images mounted again)", 1, true), airlockd.log(server))
    local id2 = create()
    assert.are.equal(200, http_client.write(server, key, id2, "x.txt", "ok").status)
    assert.are.equal(200, http_client.delete(server, key, id).status)
  end)
end)
