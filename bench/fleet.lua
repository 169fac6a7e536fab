-- The fleet, measured side by side in one run on a 3-node fleet from scripts/fleet.sh
-- (docs/fleet.md, "Measures"): the router's overhead (exec `true` and a small read through
-- HAProxy vs straight to the session's node, p50), the spread of N creates over the nodes,
-- placement by load (node1 holding half its capacity, then creates through the router: each
-- node's share against its free room), exact max_sessions under parallel creates (R rounds of
-- P creates against a limit of 10), a node's death (what creates see after kill -9), and a
-- drain of a node holding 20 sessions with files (its time, and sessions lost: any whose file
-- does not read back through the router). Each
-- node's capacity is FLEET_BENCH_CREATES. FLEET_BENCH_CREATES (60),
-- FLEET_BENCH_PARALLEL (300) and FLEET_BENCH_ROUNDS (3) size it.
-- The cost of a call against a single airlockd (reads, CPU, the router's hop, exec, the
-- database's transactions and CPU per request, nodes per database, one tenant's ceiling) is
-- bench/fleet_db.lua's, in a run of its own.
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local cjson = require "cjson"
local socket = require "socket"
local fleet = require "support.fleet"
local stats = require "stats"
local harness = require "harness"

local CREATES = tonumber(os.getenv("FLEET_BENCH_CREATES") or "60")
local PARALLEL = tonumber(os.getenv("FLEET_BENCH_PARALLEL") or "300")
local ROUNDS = tonumber(os.getenv("FLEET_BENCH_ROUNDS") or "3")
local SAMPLES = 40
local KEY = "bench-key-" .. string.rep("a", 24)
local LIMITED = "bench-limited-" .. string.rep("b", 20)
local ADMIN = "bench-admin-" .. string.rep("c", 30)

local check, timed = harness.check, harness.timed

-- One request on a new connection (as a client without keep-alive): status, decoded body.
local call = harness.call_url

local f = fleet.up{ nodes = 3, env = {
  SANDBOX_API_KEYS = "bench:" .. KEY .. ",limited:" .. LIMITED,
  SANDBOX_ADMIN_KEY = ADMIN,
  SANDBOX_TENANT_LIMITS = cjson.encode{
    bench = { max_sessions = 100000, requests_per_minute = 1000000, max_concurrent_exec = 64 },
    limited = { max_sessions = 10, requests_per_minute = 1000000 } },
  SANDBOX_FLEET_LOST_AFTER = "30",
  SANDBOX_FLEET_CAPACITY = tostring(CREATES),
} }

local ok, err = pcall(function()
  local router = f.router.url
  local _, nodes = call(router, "GET", "/v1/admin/nodes", ADMIN)
  local by_slot = {}
  for _, n in ipairs(nodes.nodes) do by_slot[n.slot] = n end

  -- 1. the router's overhead
  local st, s = call(router, "POST", "/v1/sessions", KEY, "{}")
  check(st == 201, "create: " .. tostring(st))
  local id, direct = s.session_id, by_slot[s.session_id:sub(5, 6)].url
  check(call(router, "POST", "/v1/sessions/" .. id .. "/write", KEY,
    cjson.encode{ path = "small.txt", content = string.rep("x", 1024) }) == 200, "write")
  local exec = cjson.encode{ command = "true" }
  local t = { exec_router = {}, exec_direct = {}, read_router = {}, read_direct = {} }
  for _ = 1, 3 do call(direct, "POST", "/v1/sessions/" .. id .. "/exec", KEY, exec) end -- warm
  for _ = 1, SAMPLES do -- interleaved, so the machine's load falls on both alike
    t.exec_router[#t.exec_router + 1] = timed(function()
      check(call(router, "POST", "/v1/sessions/" .. id .. "/exec", KEY, exec) == 200, "exec via router") end)
    t.exec_direct[#t.exec_direct + 1] = timed(function()
      check(call(direct, "POST", "/v1/sessions/" .. id .. "/exec", KEY, exec) == 200, "exec direct") end)
    t.read_router[#t.read_router + 1] = timed(function()
      check(call(router, "GET", "/v1/sessions/" .. id .. "/read?path=small.txt", KEY) == 200, "read via router") end)
    t.read_direct[#t.read_direct + 1] = timed(function()
      check(call(direct, "GET", "/v1/sessions/" .. id .. "/read?path=small.txt", KEY) == 200, "read direct") end)
  end
  call(router, "DELETE", "/v1/sessions/" .. id, KEY)
  local p = {}
  for k, v in pairs(t) do p[k] = stats.summary(v).p50 end
  print(string.format("%-44s %10s %10s %10s", "router overhead (p50, new connection each)", "router", "direct",
    "added"))
  print(string.format("%-44s %8.2fms %8.2fms %+8.2fms", "  exec `true`", p.exec_router, p.exec_direct,
    p.exec_router - p.exec_direct))
  print(string.format("%-44s %8.2fms %8.2fms %+8.2fms", "  read 1 KB file", p.read_router, p.read_direct,
    p.read_router - p.read_direct))

  -- n creates through the router: the count landed on each node; each id added to ids
  local function create_spread(n, ids)
    local per = {}
    for i = 1, n do
      local cs, c = call(router, "POST", "/v1/sessions", KEY, "{}")
      check(cs == 201, "create " .. i .. ": " .. tostring(cs))
      local node = by_slot[c.session_id:sub(5, 6)].id
      per[node] = (per[node] or 0) + 1
      ids[#ids + 1] = c.session_id
    end
    return per
  end

  -- 2. spread of CREATES creates
  local ids = {}
  local per = create_spread(CREATES, ids)
  local even, worst = CREATES / 3, 0
  local row = {}
  for _, n in ipairs(f.info.nodes) do
    local got = per[n.id] or 0
    worst = math.max(worst, math.abs(got - even) / even * 100)
    row[#row + 1] = n.id .. " " .. got
  end
  print(string.format("spread of %d creates over 3 nodes: %s (worst %.1f%% from even)", CREATES,
    table.concat(row, ", "), worst))
  for _, sid in ipairs(ids) do call(router, "DELETE", "/v1/sessions/" .. sid, KEY) end

  -- 2b. placement by load: node1 holds half its capacity (made straight on it), then
  -- CREATES / 2 creates through the router, once HAProxy has read node1's agent
  local half = CREATES // 2
  local held = {}
  for i = 1, half do
    local cs, c = call(f.nodes.node1.url, "POST", "/v1/sessions", KEY, "{}")
    check(cs == 201, "create on node1 " .. i .. ": " .. tostring(cs))
    held[#held + 1] = c.session_id
  end
  local want = string.format("^%d ", 100 * (CREATES - half) // CREATES)
  local deadline = socket.gettime() + 10
  local weight = function() return fleet.haproxy(f, "get weight create/node1") end
  while not weight():match(want) do
    check(socket.gettime() < deadline, "HAProxy never read node1's weight: " .. weight())
    socket.sleep(0.1)
  end
  local placed = create_spread(half, held)
  local free = { node1 = CREATES - half, node2 = CREATES, node3 = CREATES }
  local room = free.node1 + free.node2 + free.node3
  row = {}
  for _, n in ipairs(f.info.nodes) do
    row[#row + 1] = string.format("%s %d (by free room %.1f)", n.id, placed[n.id] or 0, half * free[n.id] / room)
  end
  print(string.format("placement by load, node1 holding %d of %d: %d creates: %s", half, CREATES, half,
    table.concat(row, ", ")))
  for _, sid in ipairs(held) do call(router, "DELETE", "/v1/sessions/" .. sid, KEY) end

  -- 3. exact max_sessions under PARALLEL parallel creates, ROUNDS times
  local exact = 0
  local admitted = {}
  for r = 1, ROUNDS do
    local counts = fleet.parallel(router, PARALLEL, 50, "POST", "/v1/sessions", LIMITED, "{}")
    admitted[r] = counts[201] or 0
    if admitted[r] == 10 and (counts[429] or 0) == PARALLEL - 10 then exact = exact + 1 end
    local _, list = call(router, "GET", "/v1/sessions", LIMITED)
    for _, x in ipairs(list.sessions) do call(router, "DELETE", "/v1/sessions/" .. x.session_id, LIMITED) end
  end
  print(string.format("max_sessions 10 vs %d parallel creates: exactly 10 admitted %d of %d rounds (%s)",
    PARALLEL, exact, ROUNDS, table.concat(admitted, " ")))

  -- 4. kill -9 of a node: what creates through the router see for 3 s after
  local victim = f.nodes.node3
  local t0 = socket.gettime()
  os.execute("kill -9 " .. victim.pid)
  local seen, first_ok, on_victim, made = {}, nil, 0, {}
  while socket.gettime() - t0 < 3 do
    local cs, c = call(router, "POST", "/v1/sessions", KEY, "{}")
    seen[cs or 0] = (seen[cs or 0] or 0) + 1
    if cs == 201 then
      first_ok = first_ok or (socket.gettime() - t0)
      if by_slot[c.session_id:sub(5, 6)].id == "node3" then on_victim = on_victim + 1 end
      made[#made + 1] = c.session_id
    end
  end
  local codes = {}
  for code, n in pairs(seen) do codes[#codes + 1] = code .. " x" .. n end
  table.sort(codes)
  print(string.format("kill -9 node3: first create succeeded after %.0f ms; 3 s of creates: %s; on node3: %d",
    (first_ok or 0) * 1000, table.concat(codes, ", "), on_victim))
  for _, sid in ipairs(made) do call(router, "DELETE", "/v1/sessions/" .. sid, KEY) end

  -- 5. drain of node2 holding 20 sessions, each with a file (to node1: node3 is dead)
  local on2 = {}
  for i = 1, 20 do
    local cs, c = call(f.nodes.node2.url, "POST", "/v1/sessions", KEY, "{}")
    check(cs == 201, "create on node2 " .. i .. ": " .. tostring(cs))
    on2[i] = c.session_id
    check(call(router, "POST", "/v1/sessions/" .. c.session_id .. "/write", KEY,
      cjson.encode{ path = "f.txt", content = c.session_id .. string.rep("x", 4096) }) == 200, "write")
  end
  local d0 = socket.gettime()
  local drained, out = fleet.sh(f.env, { "drain", f.dir, "node2" })
  local took = socket.gettime() - d0
  check(drained, "fleet.sh drain: " .. out)
  local lost = 0
  for _, sid in ipairs(on2) do
    local rs, r = call(router, "GET", "/v1/sessions/" .. sid .. "/read?path=f.txt", KEY)
    if rs ~= 200 or r.content ~= sid .. string.rep("x", 4096) then lost = lost + 1 end
    call(router, "DELETE", "/v1/sessions/" .. sid, KEY)
  end
  print(string.format("drain of node2 holding 20 sessions (4 KB file each): drained in %.1f s; lost: %d", took, lost))
end)

fleet.down(f)
if not ok then error(err, 0) end
print("fleet bench: done (the fleet is down)")
