-- luacheck: max line length 160
-- The hard disk quota (issue #8 item 4): every workspace is its own ext4 image, so a command
-- writing inside gVisor hits ENOSPC at the quota, directories and empty or sparse files cost
-- inodes of that image only, a full workspace touches no other tenant, nor airlockd's state,
-- nor the host disk (the image was fully allocated when the session was made), and `df` in the
-- sandbox shows the workspace's own size. The files API refuses what does not fit with the
-- contract's 413; the total of all images has a server-wide cap (503). Loopback only.
-- Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"

local q = proc.shell_quote
local QUOTA_MB = 5
local MB = 1048576

-- Creates as many entries as the disk allows (python: a fork per file would be slow in gVisor),
-- printing "<made> <errno> <strerror>".
local function fill_inodes_script(kind)
  return "python3 -c " .. q(table.concat({
    "import os, errno",
    "n = 0",
    "while n < 100000:",
    "    try:",
    kind == "dir" and "        os.mkdir('d%d' % n)" or "        open('f%d' % n, 'w').close()",
    "    except OSError as e:",
    "        print(n, e.errno, e.strerror); break",
    "    n += 1",
  }, "\n"))
end

local function stat_image(server, id)
  local out = proc.output("stat -c '%s %b %B' " .. q(server.dir .. "/state/images/" .. id .. ".img"))
  local size, blocks, unit = out:match("^(%d+) (%d+) (%d+)")
  return tonumber(size), tonumber(blocks) * tonumber(unit)
end

describe("airlockd workspace disks", function()
  local server, acme, other

  local function create(key)
    local r = http_client.create(server, key)
    assert.are.equal(201, r.status, r.body)
    return r.json.session_id
  end

  local function exec(key, id, command, timeout)
    local r = http_client.exec(server, key, id, command, timeout or 60)
    assert.are.equal(200, r.status, r.body)
    assert.is_false(r.json.timed_out, r.body)
    return r.json
  end

  lazy_setup(function()
    server = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = tostring(QUOTA_MB), SANDBOX_WARM_NEW = "0" } })
    acme, other = server.tenants.acme, server.tenants.other
  end)

  lazy_teardown(function()
    if server then airlockd.stop(server) end
  end)

  it("runs commands in gVisor", function()
    assert.truthy(airlockd.log(server):find("(isolation: gvisor)", 1, true), airlockd.log(server))
  end)

  -- (unmarked, every mount had the kernel's lazy init write the inode tables through the loop
  -- device: a 512 MB workspace's 16 MB, on the host's disk, for nothing a new image needs)
  it("makes each workspace with its inode tables marked zeroed: no mount writes them again", function()
    local id = create(acme)
    local groups = proc.output("dumpe2fs " .. q(server.dir .. "/state/images/" .. id .. ".img") .. " 2>/dev/null")
    local n, zeroed = 0, 0
    for line in groups:gmatch("\nGroup %d+:[^\n]*") do
      n = n + 1
      if line:find("ITABLE_ZEROED", 1, true) then zeroed = zeroed + 1 end
    end
    assert.truthy(n > 0, "dumpe2fs listed no groups: " .. groups:sub(1, 400))
    assert.are.equal(n, zeroed, groups:sub(1, 2000))
    assert.are.equal(200, http_client.delete(server, acme, id).status)
  end)

  it("stops a command writing 48 MB into a 5 MB workspace with ENOSPC; the host image never grows", function()
    local id = create(acme)
    local size0, alloc0 = stat_image(server, id)
    assert.truthy(alloc0 >= size0, "the image is fully allocated at creation: " .. alloc0 .. " of " .. size0)
    local r = exec(acme, id, "fallocate -l 1G reserved 2>&1; rm -f reserved; " ..
      "dd if=/dev/zero of=big bs=1M count=48; echo rc=$?; " ..
      "python3 -c \"open('p.bin', 'wb').write(b'x' * 48 * 1024 * 1024)\" 2>&1 | tail -1; " ..
      "stat -c %s big")
    assert.truthy(r.stderr:find("No space left on device", 1, true) or r.stderr:find("Disk quota exceeded", 1, true), r.stderr)
    local falloc, rc, py, written = r.stdout:match("^(.-)rc=(%d+)\n(.-)\n(%d+)\n$")
    assert.truthy(falloc and falloc:find("No space left on device", 1, true), r.stdout)
    assert.are.equal("1", rc, r.stdout)
    assert.truthy(py:find("No space left on device", 1, true), py)
    -- the quota's worth and a little headroom (the journal and inode tables are fixed costs
    -- at this small size), never the 48 MB
    assert.truthy(tonumber(written) >= QUOTA_MB * MB and tonumber(written) < 8 * MB, written)
    assert.truthy(r.warnings[1] and r.warnings[1]:match("^Workspace uses %d+%.%d MB, over its 5 MB disk quota%."), r.output)
    local size1, alloc1 = stat_image(server, id)
    assert.are.equal(size0, size1)
    assert.are.equal(alloc0, alloc1)
    assert.are.equal(200, http_client.delete(server, acme, id).status)
  end)

  it("shows the workspace's own size and inodes in df", function()
    local id = create(acme)
    local r = exec(acme, id, "df -k --output=size,itotal /workspace | tail -1")
    local kb, inodes = r.stdout:match("^%s*(%d+)%s+(%d+)")
    kb, inodes = tonumber(kb), tonumber(inodes)
    assert.truthy(kb and kb >= QUOTA_MB * 1024 and kb < 8 * 1024, r.stdout)
    assert.truthy(inodes and inodes > 500 and inodes < 2000, r.stdout)
    assert.are.equal(200, http_client.delete(server, acme, id).status)
  end)

  it("counts empty files, directories and sparse files: the workspace's inodes run out", function()
    local id = create(acme)
    local r = exec(acme, id, fill_inodes_script("file"))
    local made, errno = r.stdout:match("^(%d+) (%d+) ")
    assert.truthy(made, r.output)
    assert.are.equal("28", errno, r.stdout) -- ENOSPC
    assert.truthy(tonumber(made) > 500 and tonumber(made) < 2000, made)
    r = exec(acme, id, "rm -f f*; " .. fill_inodes_script("dir"))
    made, errno = r.stdout:match("^(%d+) (%d+) ")
    assert.are.equal("28", errno, r.stdout)
    assert.truthy(tonumber(made) > 500 and tonumber(made) < 2000, made)
    -- sparse: a 1 GB file costs one inode and no blocks, but its holes cannot be filled past
    -- the quota
    r = exec(acme, id, "rmdir d*; truncate -s 1G sparse && echo made; " ..
      "dd if=/dev/zero of=sparse bs=1M count=20 seek=100 conv=notrunc 2>&1 | head -1")
    assert.are.equal("made\ndd: error writing 'sparse': No space left on device\n", r.stdout)
    -- on the host (gVisor reports a sparse file's blocks wrongly inside): what it really takes
    local kb = tonumber(proc.output("du -k " .. q(server.dir .. "/state/workspaces/" .. id .. "/w/sparse")):match("^(%d+)"))
    assert.truthy(kb and kb < 8 * 1024, kb)
    assert.are.equal(200, http_client.delete(server, acme, id).status)
  end)

  it("stops a deep directory chain at the quota", function()
    local id = create(acme)
    local r = exec(acme, id, "python3 -c " .. q(table.concat({
      "import os",
      "depth = 0",
      "while depth < 25000:",
      "    try:",
      "        os.mkdir('a'); os.chdir('a')",
      "    except OSError as e:",
      "        print(depth, e.errno); break",
      "    depth += 1",
    }, "\n")))
    local depth, errno = r.stdout:match("^(%d+) (%d+)\n$")
    assert.are.equal("28", errno, r.output)
    assert.truthy(tonumber(depth) < 2000, depth)
    assert.are.equal(200, http_client.delete(server, acme, id).status)
    assert.is_true(airlockd.alive(server))
  end)

  it("leaves another tenant's writes alone while one workspace is full", function()
    local full = create(acme)
    exec(acme, full, "dd if=/dev/zero of=big bs=1M count=48 2>/dev/null; " .. fill_inodes_script("file"))
    local victim = create(other)
    local r = exec(other, victim, "head -c 3000000 /dev/urandom > data.bin && stat -c %s data.bin && mkdir -p a/b/c && echo ok")
    assert.are.equal("3000000\nok\n", r.stdout, r.output)
    assert.are.equal(200, http_client.write(server, other, victim, "notes/today.txt", "fine").status)
    assert.are.equal("fine", http_client.read(server, other, victim, "notes/today.txt").json.content)
    -- the full one is only full for itself; the server still saves its state
    assert.are.equal(201, http_client.create(server, acme).status)
    for _, s in ipairs(http_client.request(server, "GET", "/v1/sessions", { key = acme }).json.sessions) do
      http_client.delete(server, acme, s.session_id)
    end
    assert.are.equal(200, http_client.delete(server, other, victim).status)
  end)

  describe("the files API", function()
    it("answers 413 with the contract's text for a write that does not fit, and leaves no file", function()
      local id = create(acme)
      local r = http_client.write(server, acme, id, "big.txt", string.rep("x", 6 * MB))
      assert.are.equal(413, r.status)
      assert.are.equal("Writing big.txt would use 6.0 MB of the workspace's 5 MB disk quota. Delete files first.", r.json.detail)
      assert.are.equal("Error: File 'big.txt' does not exist.", http_client.read(server, acme, id, "big.txt").json.content)
      assert.are.equal(200, http_client.write(server, acme, id, "small.txt", "ok").status)
      assert.are.equal(200, http_client.delete(server, acme, id).status)
    end)

    it("answers 413, not 500, when the disk's inodes run out for the file or its directories", function()
      local id = create(acme)
      exec(acme, id, fill_inodes_script("file"))
      for _, path in ipairs({ "new.txt", "newdir/sub/file.txt" }) do
        local r = http_client.write(server, acme, id, path, "x")
        assert.are.equal(413, r.status, r.body)
        local escaped = path:gsub("%p", "%%%0")
        assert.truthy(r.json.detail:match("^Writing " .. escaped ..
          " would use %d+%.%d MB of the workspace's 5 MB disk quota%. Delete files first%.$"), r.json.detail)
      end
      -- nothing of either write was left behind
      local r = exec(acme, id, "ls -d new.txt newdir 2>&1; rm -f f*")
      assert.are.equal("ls: cannot access 'new.txt': No such file or directory\n" ..
        "ls: cannot access 'newdir': No such file or directory\n", r.stdout)
      assert.are.equal(200, http_client.write(server, acme, id, "newdir/sub/file.txt", "x").status)
      assert.are.equal(200, http_client.delete(server, acme, id).status)
    end)
  end)

  it("removes the disk on DELETE: nothing of it stays mounted or attached", function()
    local id = create(acme)
    assert.are.equal(200, http_client.write(server, acme, id, "f.txt", "data").status)
    local before = airlockd.host_objects(server.dir)
    local mount_point = server.dir .. "/state/workspaces/" .. id
    local listed = false
    for _, m in ipairs(before.mounts) do listed = listed or m == mount_point end
    assert.is_true(listed, table.concat(before.mounts, "\n"))
    assert.are.equal(200, http_client.delete(server, acme, id).status)
    -- (the only session of this server: afterwards only the workspaces mount itself remains)
    local after = airlockd.settled(server.dir, 0, 1)
    assert.are.same({ server.dir .. "/state/workspaces" }, after.mounts)
    assert.are.same({}, after.loops)
    assert.is_false(proc.run("test -e " .. q(server.dir .. "/state/images/" .. id .. ".img")))
    assert.is_false(proc.run("test -e " .. q(mount_point)))
  end)
end)

describe("airlockd's cap on all workspace disks", function()
  it("refuses new sessions with the contract's 503 past SANDBOX_DISK_TOTAL_MB, and takes them again after a DELETE", function()
    -- a 5 MB quota reserves 8 MB for its image before making it (which then takes ~6.5 MB):
    -- two fit in 20 MB, a third does not
    local s = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "5", SANDBOX_DISK_TOTAL_MB = "20" } })
    local ok, err = pcall(function()
      local key = s.tenants.acme
      local a = http_client.create(s, key)
      assert.are.equal(201, a.status, a.body)
      assert.are.equal(201, http_client.create(s, s.tenants.other).status)
      local r = http_client.create(s, key)
      assert.are.equal(503, r.status)
      assert.are.equal('{"detail":"All sandbox workspaces are in use; try again shortly."}', r.body)
      assert.are.equal(2, http_client.request(s, "GET", "/healthz").json.active_sessions)
      assert.are.equal(200, http_client.delete(s, key, a.json.session_id).status)
      assert.are.equal(201, http_client.create(s, key).status)
      assert.truthy(airlockd.log(s):find("refusing a new workspace: images use 1%d MB of 20 MB, it needs 8 MB"), airlockd.log(s))
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("refuses new sessions when the host would keep less than SANDBOX_DISK_RESERVE_MB free", function()
    local s = airlockd.start({ env = { SANDBOX_DISK_RESERVE_MB = "1000000000", SANDBOX_DISK_TOTAL_MB = "100", SANDBOX_WORKSPACE_QUOTA_MB = "5" } })
    local ok, err = pcall(function()
      local r = http_client.create(s, s.tenants.acme)
      assert.are.equal(503, r.status)
      assert.are.equal("All sandbox workspaces are in use; try again shortly.", r.json.detail)
      assert.truthy(airlockd.log(s):find("are kept for the server's state", 1, true), airlockd.log(s))
      assert.are.equal("", proc.output("ls " .. q(s.dir .. "/state/images")))
    end)
    airlockd.stop(s)
    assert(ok, err)
  end)

  it("rejects a cap or reserve that is not a whole number of MB at start", function()
    for var, value in pairs({ SANDBOX_DISK_TOTAL_MB = "lots", SANDBOX_DISK_RESERVE_MB = "-1" }) do
      local rc, out = proc.run_capture("env SANDBOX_API_KEY=k " .. var .. "=" .. value .. " " .. q(airlockd.binary()) ..
        " --listen 127.0.0.1:0 --state-dir /nonexistent-airlockd-never-made")
      assert.are.equal(2, rc, out)
      assert.truthy(out:find("airlockd: invalid configuration: " .. var .. ": must be a whole number of MB", 1, true), out)
    end
  end)
end)
