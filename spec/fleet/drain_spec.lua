-- A drain can never hurt its node or the other sessions (docs/fleet.md "Drain"), on a real
-- 3-node fleet brought up once for this file: a workspace holding a 3 GB sparse file and
-- 10 MB of data moves while the node keeps its heartbeat and every session of every tenant
-- keeps answering, the sparse file arrives sparse, a workspace of every kind of file arrives
-- exactly as it was with nothing landing outside it, and a node without room for a session's
-- disk, or a move that outlasts its bound (a node that never answers), leaves the session
-- where it was, reported, instead of a drain that never ends; so does a paused session.
local cjson = require "cjson"
local fleet = require "support.fleet"
local http = require "support.http_client"
local proc = require "support.proc"
local socket = require "socket"

local KEY = "drain-main-" .. string.rep("a", 24)
local OTHER = "drain-other-" .. string.rep("b", 24)
local ADMIN = "drain-admin-" .. string.rep("e", 30)
-- short, so a move that held the heartbeat (as one did when it ran inside it) would let the
-- node be declared dead during the drain
local LOST_AFTER = 8
local QUOTA_MB = 16
local DISK_TOTAL_MB = 150 -- eight 16 MB workspace disks per node
local GB3 = 3 * 1024 * 1024 * 1024
local MOVE_TIMEOUT = 20 -- each move here takes about a second
-- the bound of the last test, whose move never ends (its nodes start again with it): the test
-- waits it out
local HUNG_MOVE_TIMEOUT = 5

describe("a drain on a 3-node fleet", function()
  local f

  setup(function()
    f = fleet.up{ nodes = 3, env = {
      SANDBOX_API_KEYS = "main:" .. KEY .. ",other:" .. OTHER,
      SANDBOX_ADMIN_KEY = ADMIN,
      SANDBOX_TENANT_LIMITS = cjson.encode{ main = { max_sessions = 100, requests_per_minute = 100000 },
                                            other = { max_sessions = 100, requests_per_minute = 100000 } },
      SANDBOX_FLEET_LOST_AFTER = tostring(LOST_AFTER),
      SANDBOX_WORKSPACE_QUOTA_MB = tostring(QUOTA_MB),
      SANDBOX_DISK_TOTAL_MB = tostring(DISK_TOTAL_MB),
      SANDBOX_FLEET_MOVE_TIMEOUT_S = tostring(MOVE_TIMEOUT),
    } }
  end)

  local moved_url -- node1's node-to-node URL while a test points it elsewhere

  teardown(function()
    if moved_url then fleet.sql(f, "UPDATE nodes SET internal_url = '" .. moved_url .. "' WHERE id = 'node1'") end
    fleet.down(f)
  end)

  -- A new session of key's tenant made on node_id itself.
  local function create_on(node_id, key)
    local res
    assert.is_true(proc.wait_until(20, function()
      res = http.create({ url = f.nodes[node_id].url }, key)
      return res.status ~= 503
    end), "no create on " .. node_id)
    assert.are.equal(201, res.status, res.body)
    return res.json.session_id
  end

  local function run(key, id, command)
    local res = http.exec(f.router, key, id, command, 60)
    assert.are.equal(200, res.status, res.body)
    assert.are.equal(0, res.json.exit_code, res.json.stderr)
    return res.json.stdout
  end

  -- The node that holds session id now (the database's word).
  local function node_of(id)
    return fleet.sql(f, "SELECT node FROM sessions WHERE id = '" .. id .. "'")
  end

  local function workspace_on_host(node_id, id)
    return f.dir .. "/nodes/" .. node_id .. "/state/workspaces/" .. id .. "/w"
  end

  -- The bytes a file of a session takes on its disk (st_blocks, read on the host: the sandbox
  -- reports a file's size there).
  local function used_bytes(node_id, id, name)
    local out = proc.output("stat -c '%b %B' " .. proc.shell_quote(workspace_on_host(node_id, id) .. "/" .. name))
    local blocks, unit = out:match("^(%d+) (%d+)")
    assert.truthy(unit, out)
    return tonumber(blocks) * tonumber(unit)
  end

  -- Every entry of a session's workspace as `stat` shows it on the host (type, mode with
  -- setuid/setgid/sticky, links, size, owner, device numbers, inode, name and link target,
  -- bytes as they are), sorted. (The sandbox shows fifos and devices its own way.)
  local function manifest_of(node_id, id)
    return proc.output("cd " .. proc.shell_quote(workspace_on_host(node_id, id))
      .. " && find . -mindepth 1 -print0 | LC_ALL=C sort -z"
      .. " | LC_ALL=C xargs -0 stat -c '%F|%a|%h|%s|%u:%g|%t,%T|%i|%N'")
  end

  local sparse, special, others = nil, nil, {}
  local data_sum, region_sum, manifest

  it("moves a 3 GB sparse file and every kind of file while the node and every session stay alive", function()
    sparse = create_on("node1", KEY)
    -- 10 MB of data, and a 3 GB sparse file with 1 MB of data at its second gigabyte
    local out = run(KEY, sparse, "head -c 10485760 /dev/urandom > data.bin && truncate -s 3G sparse.bin"
      .. " && dd if=/dev/urandom of=sparse.bin bs=65536 count=16 seek=16384 conv=notrunc 2>/dev/null"
      .. " && sha256sum < data.bin && dd if=sparse.bin bs=65536 skip=16384 count=16 2>/dev/null | sha256sum")
    data_sum, region_sum = out:match("^(%x+)%s.-\n(%x+)")
    assert.truthy(region_sum, out)
    assert.is_true(used_bytes("node1", sparse, "sparse.bin") < 4 * 1024 * 1024)

    special = create_on("node1", KEY)
    run(KEY, special, table.concat({
      "cd /workspace && mkdir -p d/e/f sticky && chmod 1777 sticky",
      "echo hello > d/e/f/file && ln d/e/f/file hard && ln -s d/e/f/file rel && ln -s /etc/passwd abs",
      -- a link whose target climbs out, and names that try to: stay links, never followed
      "ln -s ../../../../../../../../tmp/drain-spec-escape up && mkdir -- '-dash' && touch -- '-dash/..x'",
      "echo run > suid && chmod 4755 suid && echo g > sgid && chmod 2750 sgid",
      "touch nothing && chmod 000 nothing",
      "touch \"$(printf 'new\\nline')\" \"$(printf 'bad\\377\\376utf8')\" 'sp ace' && mkdir empty",
    }, " && "))
    -- a device node and a fifo (the sandbox cannot make either on its disk; the host can, as
    -- root): they move as they are
    local ws = proc.shell_quote(workspace_on_host("node1", special))
    assert.is_true(proc.run("mknod " .. ws .. "/dev0 c 1 3 && mkfifo -m 644 " .. ws .. "/fifo && chown 1000:1000 "
      .. ws .. "/fifo"))
    manifest = manifest_of("node1", special)
    assert.matches("character special file|644|1|0|0:0|1,3|", manifest, 1, true)
    assert.matches("fifo|644|1|0|1000:1000|", manifest, 1, true)
    assert.matches("regular file|4755|1|4|1000:1000|", manifest, 1, true)
    assert.matches("'./new'$'\\n''line'", manifest, 1, true)

    -- the other sessions: of both tenants, on the other nodes
    others = { { KEY, create_on("node2", KEY) }, { OTHER, create_on("node2", OTHER) },
               { OTHER, create_on("node3", OTHER) }, { OTHER, create_on("node1", OTHER) } }
    for _, o in ipairs(others) do
      assert.are.equal(200, http.write(f.router, o[1], o[2], "mine.txt", "of " .. o[2]).status)
    end
    local _, before = fleet.nodes(f, ADMIN)
    local beat0 = before.node1.last_heartbeat

    local res = http.request(f.router, "POST", "/v1/admin/nodes/node1/drain", { key = ADMIN })
    assert.are.equal(200, res.status, res.body)
    assert.are.equal("draining", res.json.state)
    -- all along: node1 is never declared dead, no session is lost, and each session answers
    -- (its file, or 503 + Retry-After while it moves)
    local last
    assert.is_true(proc.wait_until(300, function()
      local _, by = fleet.nodes(f, ADMIN)
      last = by.node1
      assert.are_not.equal("dead", by.node1.state, cjson.encode(by.node1))
      for _, o in ipairs(others) do
        local r = http.read(f.router, o[1], o[2], "mine.txt")
        if r.status == 503 then
          assert.truthy(r.headers["retry-after"], r.body)
        else
          assert.are.equal(200, r.status, r.body)
          assert.are.equal("of " .. o[2], r.json.content)
        end
      end
      for _, id in ipairs({ sparse, special }) do
        local r = http.read(f.router, KEY, id, "nope")
        assert.is_true(r.status == 200 or r.status == 503, r.status .. " " .. (r.body or ""))
      end
      return by.node1.state == "drained"
    end, 0.2), "node1 did not drain: " .. cjson.encode(last))
    assert.is_true(last.last_heartbeat > beat0)
    assert.are.same({}, last.unmoved)

    -- every session is alive and whole, the moved ones on another node
    for _, o in ipairs({ { KEY, sparse }, { KEY, special }, others[4] }) do
      assert.are_not.equal("node1", node_of(o[2]))
      assert.is_true(proc.wait_until(15, function()
        return http.read(f.router, o[1], o[2], "nope").status == 200
      end, 0.1), o[2] .. " is not routed")
    end
    for _, o in ipairs(others) do
      assert.are.equal("of " .. o[2], http.read(f.router, o[1], o[2], "mine.txt").json.content)
    end
    out = run(KEY, sparse, "sha256sum < data.bin && dd if=sparse.bin bs=65536 skip=16384 count=16 2>/dev/null"
      .. " | sha256sum && stat -c %s sparse.bin")
    local d2, r2, size = out:match("^(%x+)%s.-\n(%x+)%s.-\n(%d+)")
    assert.are.same({ data_sum, region_sum }, { d2, r2 })
    assert.are.equal(GB3, tonumber(size))
    -- still sparse: it takes about its 1 MB of data, not 3 GB
    local used = used_bytes(node_of(sparse), sparse, "sparse.bin")
    assert.is_true(used >= 1024 * 1024 and used < 4 * 1024 * 1024, tostring(used))

    -- every kind of file arrived as it was, and nothing landed outside the workspace
    assert.are.equal(manifest, manifest_of(node_of(special), special))
    assert.are.equal("hello\n", run(KEY, special, "cat hard && test \"$(stat -c %i hard)\" = "
      .. "\"$(stat -c %i d/e/f/file)\" && readlink up | grep -q '^../../' && test -u suid && test -g sgid"))
    assert.is_false(proc.run("test -e /tmp/drain-spec-escape"))
  end)

  it("keeps and reports the sessions a node without room cannot take, and moves them once it has", function()
    -- node1 is drained: node3 is the only node node2's sessions can go to; fill its disks
    local fillers = {}
    for _ = 1, DISK_TOTAL_MB // QUOTA_MB + 1 do
      local res = http.create({ url = f.nodes.node3.url }, KEY)
      if res.status ~= 201 then
        assert.are.equal(503, res.status, res.body)
        break
      end
      fillers[#fillers + 1] = res.json.session_id
    end
    assert.are.equal(503, http.create({ url = f.nodes.node3.url }, KEY).status)
    local on2 = {}
    local all = { { KEY, sparse }, { KEY, special } }
    for _, o in ipairs(others) do all[#all + 1] = o end
    for _, o in ipairs(all) do
      if node_of(o[2]) == "node2" then on2[#on2 + 1] = o end
    end
    assert.are.equal(fleet.sql(f, "SELECT count(*) FROM sessions WHERE node = 'node2' AND state = 'active'"),
      tostring(#on2))
    assert.is_true(#on2 >= 2)

    -- the command line returns with the report instead of waiting for ever
    local ok, out = fleet.sh(f.env, { "drain", f.dir, "node2" })
    assert.is_false(ok, out)
    assert.matches("node node2 is still draining: " .. #on2 .. " sessions could not move", out)
    for _, o in ipairs(on2) do
      assert.matches(o[2] .. ": node node3 has no room for it: ", out, 1, true)
    end
    local _, by = fleet.nodes(f, ADMIN)
    assert.are.equal("draining", by.node2.state)
    assert.are.equal(#on2, #by.node2.unmoved)
    assert.matches("no room", by.node2.unmoved[1].reason)
    assert.matches("kept on this node after [%d.]+ s: node node3 has no room for it", fleet.node_log(f, "node2"))
    -- they are served where they were, as before
    for _, o in ipairs(on2) do
      assert.are.equal("node2", node_of(o[2]))
      local r = http.read(f.router, o[1], o[2], "nope")
      assert.are.equal(200, r.status, r.body)
    end

    -- room again on node3: a drain asked again moves them
    for _, s in ipairs(fillers) do assert.are.equal(200, http.delete(f.router, KEY, s).status) end
    ok, out = fleet.sh(f.env, { "drain", f.dir, "node2" })
    assert.is_true(ok, out)
    assert.matches("node node2 drained in [%d.]+ s", out)
    for _, o in ipairs(on2) do
      assert.are.equal("node3", node_of(o[2]))
      assert.is_true(proc.wait_until(15, function()
        return http.read(f.router, o[1], o[2], "nope").status == 200
      end, 0.1), o[2] .. " is not routed")
    end
  end)

  it("gives up a move that outlasts its bound: the session stays where it was, reported", function()
    -- node1 and node2 (drained, holding nothing) come back active, with the shorter bound
    local env_file = f.dir .. "/fleet.env"
    local settings, n = proc.read_file(env_file):gsub("\nSANDBOX_FLEET_MOVE_TIMEOUT_S=%d+\n",
      "\nSANDBOX_FLEET_MOVE_TIMEOUT_S=" .. HUNG_MOVE_TIMEOUT .. "\n")
    assert.are.equal(1, n, "no SANDBOX_FLEET_MOVE_TIMEOUT_S line in fleet.env")
    proc.write_file(env_file, settings)
    for _, id in ipairs({ "node1", "node2" }) do
      local pid = f.nodes[id].pid
      assert.is_true(proc.succeeded(os.execute("kill -TERM " .. pid)))
      assert.is_true(proc.wait_until(60, function() return not proc.alive(pid) end), id .. " did not stop")
      local ok, out = fleet.sh(f.env, { "start-node", f.dir, id })
      assert.is_true(ok, out)
    end
    fleet.reload(f)
    assert.is_true(proc.wait_until(20, function()
      local _, by = fleet.nodes(f, ADMIN)
      return by.node1.state == "active" and by.node2.state == "active"
    end), "node1 and node2 are not active again")
    -- (straight to node2 from here: a node started again listens on a new port, which the
    -- router learns only from `fleet.sh router`)
    local node2 = { url = f.nodes.node2.url }
    local s = create_on("node2", KEY)
    assert.are.equal(200, http.write(node2, KEY, s, "stays.txt", "stays on node2").status)
    -- and a paused session, which a drain does not move (issue #26): reported at once
    local paused = create_on("node2", KEY)
    assert.are.equal(200, http.request(node2, "POST", "/v1/sessions/" .. paused .. "/pause", { key = KEY }).status)
    -- node1, the node with the most room, stops answering other nodes while its heartbeat goes
    -- on (its node-to-node address is a socket that takes connections and never answers): the
    -- move goes to it and never ends
    local hole = assert(socket.bind("127.0.0.1", 0))
    local _, port = hole:getsockname()
    moved_url = fleet.sql(f, "SELECT internal_url FROM nodes WHERE id = 'node1'")
    fleet.sql(f, "UPDATE nodes SET internal_url = 'http://127.0.0.1:" .. port .. "' WHERE id = 'node1'")
    local res = http.request(f.router, "POST", "/v1/admin/nodes/node2/drain", { key = ADMIN })
    assert.are.equal(200, res.status, res.body)
    local last
    assert.is_true(proc.wait_until(HUNG_MOVE_TIMEOUT + 60, function()
      local _, by = fleet.nodes(f, ADMIN)
      last = by.node2
      assert.are_not.equal("dead", last.state)
      return #last.unmoved == 2
    end, 0.5), "no report: " .. cjson.encode(last))
    local reasons = {}
    for _, u in ipairs(last.unmoved) do reasons[u.session_id] = u.reason end
    assert.are.same({ [s] = "its move to node1 did not end within SANDBOX_FLEET_MOVE_TIMEOUT_S ("
      .. HUNG_MOVE_TIMEOUT .. " s)",
      [paused] = "it is paused: a paused session stays on its node until it is resumed or deleted (no shared "
        .. "store: SANDBOX_SNAPSHOT_DIR)" }, reasons)
    assert.are.equal("draining", last.state)
    -- served where it was, as before
    assert.are.equal("node2", node_of(s))
    local r = http.read(node2, KEY, s, "stays.txt")
    assert.are.equal(200, r.status, r.body)
    assert.are.equal("stays on node2", r.json.content)
    assert.are.equal("node2", node_of(paused))
    assert.are.equal("paused", http.request(node2, "GET", "/v1/sessions/" .. paused, { key = KEY }).json.state)
    hole:close()
    fleet.sql(f, "UPDATE nodes SET internal_url = '" .. moved_url .. "' WHERE id = 'node1'")
    moved_url = nil
  end)
end)
