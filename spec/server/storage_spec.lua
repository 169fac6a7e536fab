-- luacheck: max line length 160
-- Storage (issue #16): every byte on the state disk is counted (an import downloads onto the
-- session's own disk, never the state directory), storage fails closed (a create, key change
-- or audit record that cannot be made durable is refused; what was acknowledged survives
-- kill -9), a JSON file write is decoded into the file without a tree (its memory:
-- storage_memory_spec.lua), everything airlockd creates is private whatever the umask, and
-- the workspace quota holds within 1 MB on any disk size. The full-disk cases run airlockd on
-- a small tmpfs of their own, mounted under the test's directory and always unmounted.
-- Loopback only. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local archive_server = require "support.archive_server"
local c_unit = require "support.c_unit"
local http_client = require "support.http_client"
local proc = require "support.proc"

local q = proc.shell_quote
local MB = 1048576

-- Bytes a command can still write on the filesystem holding path (statvfs f_bavail).
local function avail(path)
  local a, s = proc.output("stat -f -c '%a %S' " .. q(path)):match("^(%d+) (%d+)")
  return tonumber(a) * tonumber(s)
end

local function create(server, key)
  local r = http_client.create(server, key)
  assert.are.equal(201, r.status, r.body)
  return r.json.session_id
end

local function workspace(server, id)
  return server.dir .. "/state/workspaces/" .. id .. "/w"
end

-- A temp directory whose "state" subdirectory is a tmpfs of mb MB (made here, removed by
-- airlockd.stop or unmount_state).
local function small_state_dir(mb)
  local dir = proc.make_temp_dir()
  assert(os.execute("mkdir " .. q(dir .. "/state") .. " && mount -t tmpfs -o size=" .. mb .. "m,mode=0700 airlock-spec "
    .. q(dir .. "/state")))
  return dir
end

local function unmount_state(dir)
  airlockd.release_host_objects(dir)
  os.execute("umount -l " .. q(dir .. "/state") .. " 2>/dev/null")
  proc.remove_tree(dir)
end

-- Fills the filesystem of dir with a file named filler (host side) until it is full.
local function fill(dir)
  os.execute("dd if=/dev/zero of=" .. q(dir .. "/filler") .. " bs=64k 2>/dev/null")
  os.execute("sync")
end

describe("airlockd storage", function()
  describe("the workspace quota", function()
    for _, mb in ipairs({ 5, 600 }) do
      it("holds within 1 MB on a " .. mb .. " MB disk (the image's own costs are not the tenant's)", function()
        local server = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = tostring(mb), SANDBOX_WARM_NEW = "0" } })
        local ok, err = pcall(function()
          local key = server.tenants.acme
          local id = create(server, key)
          local free = avail(workspace(server, id))
          assert.truthy(free >= mb * MB and free <= mb * MB + MB, "writable: " .. free .. " for a " .. mb .. " MB quota")
          if mb <= 5 then
            -- what a command can really leave behind
            local r = http_client.exec(server, key, id, "dd if=/dev/zero of=big bs=64k 2>/dev/null; stat -c %s big", 60)
            assert.are.equal(200, r.status, r.body)
            local size = tonumber(r.json.stdout:match("(%d+)"))
            assert.truthy(size and size >= mb * MB - 256 * 1024 and size <= mb * MB + MB, r.json.stdout)
          end
        end)
        airlockd.stop(server)
        assert(ok, err)
      end)
    end
  end)

  describe("files airlockd creates", function()
    it("are private (0600 / 0700) with umask 000: state, session state, audit and key stores with -wal/-shm, images", function()
      local dir = proc.make_temp_dir()
      local audit_db, keys_db = dir .. "/db/audit.db", dir .. "/db/keys.db"
      os.execute("mkdir -p " .. q(dir .. "/db"))
      local server = airlockd.start({ dir = dir, launcher = "umask 000;",
        env = { SANDBOX_AUDIT = "sqlite:" .. audit_db, SANDBOX_KEYSTORE = "sqlite:" .. keys_db, SANDBOX_WARM_NEW = "0",
                SANDBOX_WORKSPACE_QUOTA_MB = "5" } })
      local ok, err = pcall(function()
        local key = server.tenants.acme
        local id = create(server, key)
        assert.are.equal(200, http_client.write(server, key, id, "a.txt", "x").status)
        assert.are.equal(200, http_client.exec(server, key, id, "umask; touch made", 30).status)
        local k = http_client.request(server, "POST", "/v1/keys", { key = key, body = '{"name":"n"}' })
        assert.are.equal(201, k.status, k.body)
        -- the stores, their WAL and shared memory
        for _, f in ipairs({ audit_db, audit_db .. "-wal", audit_db .. "-shm", keys_db, keys_db .. "-wal", keys_db .. "-shm" }) do
          assert.are.equal("600", proc.output("stat -c %a " .. q(f)):match("%d+"), f)
        end
        -- everything of airlockd's own in the state directory (not inside the workspaces'
        -- disks, which are the sandbox's, nor the sandbox's read-only root, which uid 1000
        -- must read)
        local state = dir .. "/state"
        local list = proc.output("find " .. q(state) .. " -path " .. q(state .. "/workspaces/*") .. " -prune -o -path "
          .. q(state .. "/sandbox-root") .. " -prune -o -path " .. q(state .. "/runsc") .. " -prune -o -printf '%m %y %p\\n'")
        local bad = {}
        for line in list:gmatch("[^\n]+") do
          local mode, kind, path = line:match("^(%d+) (%a) (.*)$")
          if path and path ~= state .. "/sandbox-root" and path ~= state .. "/runsc" and not path:find("/workspaces/", 1, true)
            and ((kind == "d" and mode ~= "700") or (kind == "f" and mode ~= "600")) then
            bad[#bad + 1] = line
          end
        end
        assert.are.same({}, bad)
        assert.are.equal("700", proc.output("stat -c %a " .. q(state)):match("%d+"))
        -- the sandboxed commands keep the usual umask (their files are the user's)
        local r = http_client.exec(server, key, id, "umask", 30)
        assert.are.equal("0022\n", r.json.stdout)
        -- and what the API writes, and the sandbox's root, keep the usual modes too
        assert.are.equal(200, http_client.write(server, key, id, "d/b.txt", "x").status)
        r = http_client.exec(server, key, id, "stat -c '%a %U %n' /workspace /workspace/d /workspace/d/b.txt; " ..
          "find / -xdev -path /proc -prune -o \\( -type d -o -type f \\) ! -readable -print 2>/dev/null | grep -v '^/workspace' | head -3", 30)
        assert.are.equal("755 sandboxuser /workspace\n755 sandboxuser /workspace/d\n644 sandboxuser /workspace/d/b.txt\n",
          r.json.stdout)
      end)
      airlockd.stop(server)
      assert(ok, err)
    end)
  end)

  describe("on a full state disk", function()
    it("refuses a create (503), a key (507) and a command it could not audit (507); nothing is lost after kill -9", function()
      local dir = small_state_dir(48)
      -- the audit log on a disk of its own, to fill it alone (commands need the state disk)
      local db = dir .. "/db"
      assert(os.execute("mkdir " .. q(db) .. " && mount -t tmpfs -o size=4m,mode=0700 airlock-spec-db " .. q(db)))
      local audit_db, keys_db = db .. "/audit.db", dir .. "/state/keys.db"
      local env = { SANDBOX_WORKSPACE_QUOTA_MB = "5", SANDBOX_DISK_RESERVE_MB = "1", SANDBOX_WARM_NEW = "1",
                    SANDBOX_AUDIT = "sqlite:" .. audit_db, SANDBOX_KEYSTORE = "sqlite:" .. keys_db }
      local server
      local ok, err = pcall(function()
        server = airlockd.start({ dir = dir, env = env })
        local key = server.tenants.acme
        local kept = create(server, key)
        assert.are.equal(200, http_client.write(server, key, kept, "kept.txt", "acknowledged").status)
        local k = http_client.request(server, "POST", "/v1/keys", { key = key, body = '{"name":"kept"}' })
        assert.are.equal(201, k.status, k.body)
        assert.are.equal(200, http_client.exec(server, key, kept, "true", 30).status)
        -- the audit log's disk full: a command is not acknowledged without its record, and
        -- the next one does not run at all
        fill(db)
        local r = http_client.exec(server, key, kept, "echo ran > ran.txt", 30)
        assert.are.equal(507, r.status, r.body)
        assert.truthy(r.json.detail:find("audit record could not be saved", 1, true), r.body)
        r = http_client.exec(server, key, kept, "echo again > again.txt", 30)
        assert.are.equal(507, r.status, r.body)
        assert.are.equal("The command's audit record could not be saved: the server's storage is full or failing. "
          .. "Nothing was changed; try again later.", r.json.detail)
        assert.are.equal("Error: File 'again.txt' does not exist.", http_client.read(server, key, kept, "again.txt").json.content)
        -- a spare for the next session is ready (it is adopted without a new disk)
        local images = ""
        assert.truthy(proc.wait_until(30, function()
          images = proc.output("ls " .. q(dir .. "/state/images"))
          local n = 0
          for _ in images:gmatch("%.img") do n = n + 1 end
          return n >= 2
        end), images .. airlockd.log(server))
        -- the state disk full: no session or key is acknowledged that a restart would lose.
        -- Whatever frees a page meanwhile (a sandbox's leftovers) may let one be saved: then
        -- it is acknowledged and must survive; the disk is filled again until both are refused.
        local sessions, keys = { [kept] = true }, { kept = true }
        local create_refused, key_refused = false, false
        for attempt = 1, 6 do
          fill(dir .. "/state")
          assert.truthy(avail(dir .. "/state") < 64 * 1024, "the state disk is full")
          if not key_refused then
            r = http_client.request(server, "POST", "/v1/keys", { key = key, body = '{"name":"k' .. attempt .. '"}' })
            if r.status == 201 then
              keys["k" .. attempt] = true
            else
              assert.are.equal(507, r.status, r.body)
              assert.are.equal("The new key could not be saved: the server's storage is full or failing. "
                .. "Nothing was changed; try again later.", r.json.detail)
              key_refused = true
            end
          end
          if not create_refused then
            r = http_client.create(server, key)
            if r.status == 201 then
              sessions[r.json.session_id] = true
            else
              assert.are.equal(503, r.status, r.body)
              assert.truthy(r.json.detail == "The new session could not be saved: the server's storage is full or failing. "
                .. "Nothing was changed; try again later." or r.json.detail == "All sandbox workspaces are in use; try again shortly.",
                r.body)
              create_refused = true
            end
          end
          if create_refused and key_refused then break end
        end
        assert.is_true(create_refused and key_refused)
        local function listed_ids()
          local ids = {}
          for _, e in ipairs(http_client.request(server, "GET", "/v1/sessions", { key = key }).json.sessions) do
            ids[e.session_id] = true
          end
          return ids
        end
        local function key_names()
          local names = {}
          for _, e in ipairs(http_client.request(server, "GET", "/v1/keys", { key = key }).json.keys) do names[e.name] = true end
          return names
        end
        assert.are.same(sessions, listed_ids())
        -- a file write lands on the session's own (preallocated) disk: still fine
        assert.are.equal(200, http_client.write(server, key, kept, "late.txt", "also acknowledged").status)
        -- kill -9 with the disks still full, free them, start again: what was acknowledged is there
        os.execute("kill -9 " .. server.pid)
        proc.wait_until(10, function() return not airlockd.alive(server) end)
        os.remove(dir .. "/state/filler")
        os.remove(db .. "/filler")
        server = airlockd.start({ dir = dir, env = env, tenants = server.tenants })
        assert.are.same(sessions, listed_ids())
        assert.are.equal("acknowledged", http_client.read(server, key, kept, "kept.txt").json.content)
        assert.are.equal("also acknowledged", http_client.read(server, key, kept, "late.txt").json.content)
        assert.are.same(keys, key_names())
        assert.are.equal(201, http_client.create(server, key).status)
        assert.are.equal(200, http_client.exec(server, key, kept, "true", 30).status)
        local audit = http_client.request(server, "GET", "/v1/audit", { key = key }).json.entries
        assert.are.equal(2, #audit) -- "true" before the disk filled and after the restart
      end)
      if server then airlockd.stop(server) end
      os.execute("umount -l " .. q(db) .. " 2>/dev/null")
      unmount_state(dir)
      assert(ok, err)
    end)

    it("keeps import downloads on the session's own disk: parallel stalling imports never touch the state disk", function()
      local root = proc.make_temp_dir()
      local archives = archive_server.start(root)
      local dir = small_state_dir(64)
      local server
      local ok, err = pcall(function()
        server = airlockd.start({ dir = dir, env = { SANDBOX_WORKSPACE_QUOTA_MB = "5", SANDBOX_DISK_RESERVE_MB = "1",
          SANDBOX_WARM_NEW = "0", AIRLOCK_IMPORT_BASE_URL = archives.url } })
        local key, other = server.tenants.acme, server.tenants.other
        local ids = { create(server, key), create(server, key) }
        local state_free = avail(dir .. "/state")
        -- three stalling 3 MB downloads at once, and one growing past the workspace's space
        local stalled = {}
        for i = 1, 3 do
          stalled[i] = http_client.post_async(server, key, "/v1/sessions/" .. ids[1 + i % 2] .. "/import",
            { repo = "stall/n3000000", path = "s" .. i }, 8)
        end
        local big = http_client.request(server, "POST", "/v1/sessions/" .. ids[1] .. "/import",
          { key = key, body = '{"repo":"chunked/n30000000","path":"big"}' })
        assert.are.equal(413, big.status, big.body)
        assert.truthy(big.json.detail:match("^The archive %(%d+%.%d MB%) doesn't fit in the workspace's free disk space %(%d+%.%d MB%)%.$"),
          big.body)
        -- while they stall: the state disk has not lost a byte to them, another tenant creates
        assert.truthy(avail(dir .. "/state") >= state_free - 256 * 1024, avail(dir .. "/state") .. " of " .. state_free)
        assert.are.equal(201, http_client.create(server, other).status)
        -- announced larger than the free space: refused before a byte is written
        local announced = http_client.request(server, "POST", "/v1/sessions/" .. ids[2] .. "/import",
          { key = key, body = '{"repo":"bytes/n30000000","path":"ann"}' })
        assert.are.equal(413, announced.status, announced.body)
        for i = 1, 3 do stalled[i].wait(30) end
        -- the hung-up downloads leave nothing behind in the workspaces (once airlockd has seen
        -- its clients go: within a second or so)
        for _, id in ipairs(ids) do
          assert.truthy(proc.wait_until(20, function() return avail(workspace(server, id)) >= 5 * MB end),
            id .. ": " .. avail(workspace(server, id)))
        end
      end)
      if server then airlockd.stop(server) end
      unmount_state(dir)
      archive_server.stop(archives)
      proc.remove_tree(root)
      assert(ok, err)
    end)
  end)

  describe("a JSON file write without a tree", function()
    it("decodes every escape in pieces (text/jstr, ASan/UBSan)", function()
      local out, ok = c_unit.run({ "spec/c/jstr_units_test.c", "src/server/text/jstr.c" },
        "-fsanitize=address,undefined -fno-sanitize-recover=undefined")
      assert.truthy(out:find(" checks, 0 failures", 1, true), out)
      assert.is_true(ok, out)
    end)

    it("answers every body shape as the reference does", function()
      local server = airlockd.start({ env = { SANDBOX_WORKSPACE_QUOTA_MB = "5", SANDBOX_WARM_NEW = "0" } })
      local ok, err = pcall(function()
        local key = server.tenants.acme
        local id = create(server, key)
        local ws = workspace(server, id)
        local function post(body)
          return http_client.request(server, "POST", "/v1/sessions/" .. id .. "/write", { key = key, body = body })
        end
        local function file(name) return proc.read_file(ws .. "/" .. name) end
        -- escaped keys, escaped slashes, the last of duplicate keys, unknown fields of any kind
        local r = post('{"\\u0070ath":"d\\/e.txt","x":[1,{"y":"}"}],"content":"first","content":"se\\u0063ond","z":NaN}')
        assert.are.equal(200, r.status, r.body)
        assert.are.equal('{"status":"success","message":"Successfully wrote 6 characters to d/e.txt"}', r.body)
        assert.are.equal("second", file("d/e.txt"))
        -- characters as Python counts them: a surrogate pair is one
        r = post('{"path":"p.txt","content":"\\ud83d\\ude00\\u00e9\\n"}')
        assert.are.equal("Successfully wrote 3 characters to p.txt", r.json.message)
        assert.are.equal("\240\159\152\128\195\169\n", file("p.txt"))
        -- an escape right at the decoder's 64 KiB piece boundary
        r = post('{"path":"b.txt","content":"' .. string.rep("a", 65535) .. '\\u00e9\\"end"}')
        assert.are.equal(200, r.status, r.body)
        assert.are.equal(string.rep("a", 65535) .. "\195\169\"end", file("b.txt"))
        -- a lone surrogate cannot be written (500, as before)
        r = post('{"path":"s.txt","content":"\\ud800"}')
        assert.are.equal(500, r.status)
        assert.are.equal("Internal Server Error", r.body)
        -- other shapes: the validation errors quote the input
        r = post('{"path":"a.txt","content":5}')
        assert.are.equal(422, r.status)
        assert.are.same({ type = "string_type", loc = { "body", "content" }, msg = "Input should be a valid string", input = 5 },
          r.json.detail[1])
        r = post('{"path":"a.txt","content":"x","path":null}')
        assert.are.equal(422, r.status)
        assert.are.same({ "body", "path" }, r.json.detail[1].loc)
        r = post('{"content":"x"}')
        assert.are.equal(422, r.status)
        assert.are.same({ type = "missing", loc = { "body", "path" }, msg = "Field required", input = { content = "x" } },
          r.json.detail[1])
        r = post('["path","content"]')
        assert.are.equal(422, r.status)
        -- the quota check counts decoded bytes: 2 bytes each, over 5 MB
        r = post('{"path":"q.txt","content":"' .. string.rep("\\u00e9", 3 * MB) .. '"}')
        assert.are.equal(413, r.status, r.body)
        assert.truthy(r.json.detail:match("^Writing q%.txt would use 6%.%d MB of the workspace's 5 MB disk quota%. Delete files first%.$"),
          r.json.detail)
        assert.is_nil(file("q.txt"))
      end)
      airlockd.stop(server)
      assert(ok, err)
    end)
  end)
end)
