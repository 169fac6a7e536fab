-- luacheck: max line length 140
-- The cost of a call in a fleet, side by side in one run (docs/fleet.md, "The cost of a
-- call"): a single airlockd (no database) and a 3-node fleet (scripts/fleet.sh), in rounds
-- that alternate so that the machine's load falls on each alike.
--   1. 10-byte reads on one keep-alive connection (build/bench/raw_curl_rate): a single
--      airlockd, straight to a node, through the router: the rate, each ratio to the single
--      airlockd, the router's hop per read, and the server CPU per read (the node's and
--      PostgreSQL's together against the single airlockd's; HAProxy's apart).
--   2. exec `true` (a new connection each): straight to a node and through the router against a
--      single airlockd.
--   3. PostgreSQL's transactions per request type (pg_stat_database, the idle fleet's own rate
--      subtracted) and its CPU per request type; for an exec, the statements it ran and their
--      time in the database (pg_stat_statements, which scripts/fleet.sh loads when
--      FLEET_PG_STATEMENTS=1, as here).
--   4. A projection: how many nodes one 2-core PostgreSQL carries, each node at its own
--      saturation (its 2 cores busy: its CPU per mix, sandboxes included) with an agent-like
--      mix (one exec and three small calls: a read, a write, a file listing),
--      from the node's and the database's measured CPU per call, once with one client at a
--      time and once with the execs 4 at once (a node at saturation runs several: its
--      database connections stay busy instead of being woken cold for each statement, which
--      costs a 2-core VM's PostgreSQL several times the statement itself); and the ceiling of one
--      tenant's requests, from the lease statements one bucket row takes a second (pgbench)
--      and the tokens a lease carries.
-- Prints the figures against their goals (and the load average before and after); no
-- assertion. The single airlockd runs in a session of its own, as each node does (fleet.sh
-- starts them with setsid): the kernel schedules each session as a group, so both servers
-- meet the client and the machine's other work alike.
--
--   make build build/bench/raw_curl_rate && lua5.4 bench/fleet_db.lua [reads] [rounds]
--   FLEET_DB_READS_ONLY=1 lua5.4 bench/fleet_db.lua [reads] [rounds]    (part 1 alone: ~1 min)
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local cjson = require "cjson"
local socket = require "socket"
local airlockd = require "support.airlockd"
local fleet = require "support.fleet"
local proc = require "support.proc"
local stats = require "stats"
local harness = require "harness"

local READS_ONLY = os.getenv("FLEET_DB_READS_ONLY") == "1"
local READS = tonumber(arg and arg[1]) or 3000
local ROUNDS = tonumber(arg and arg[2]) or (READS_ONLY and 15 or 5)
local EXECS = 30
local RAW = os.getenv("RAW_CURL_RATE") or "build/bench/raw_curl_rate"
local KEY = "bench-key-" .. string.rep("a", 24)
local RPM = 100000000
local check = harness.check
local q = proc.shell_quote
assert(proc.run("test -x " .. q(RAW)), RAW .. " is missing: make build/bench/raw_curl_rate")

local TICK = tonumber(proc.output("getconf CLK_TCK")) or 100

-- CPU seconds of pid (with the children it has waited for: a node's sandboxes).
local function cpu_of(pid)
  local stat = proc.read_file("/proc/" .. pid .. "/stat")
  if not stat then return 0 end
  local fields = {}
  for w in stat:match("^%d+ %b() (.*)$"):gmatch("%S+") do fields[#fields + 1] = w end
  -- after the name: state is field 3 of stat, so utime (14) is fields[12]
  return (tonumber(fields[12]) + tonumber(fields[13]) + tonumber(fields[14]) + tonumber(fields[15])) / TICK
end

-- CPU seconds of a process and all its descendants now running, each with the children it
-- has waited for (PostgreSQL: the postmaster, its backends and the ones that ended; a node:
-- airlockd, its guard and the sandboxes they ran).
local function cpu_tree(pid)
  local children = {}
  for p, pp in proc.output("ps -e -o pid=,ppid="):gmatch("(%d+)%s+(%d+)") do
    children[pp] = children[pp] or {}
    table.insert(children[pp], p)
  end
  local function sum(p)
    local total = cpu_of(p)
    for _, c in ipairs(children[p] or {}) do total = total + sum(c) end
    return total
  end
  return sum(tostring(pid))
end

-- One request on a new connection: status and decoded body.
local function call(url, method, path, body)
  return harness.call_url(url, method, path, KEY, body, 120)
end

local LIMITS = cjson.encode{ bench = { max_sessions = 100000, requests_per_minute = RPM, max_concurrent_exec = 64 } }
print("load average " .. harness.loadavg())
local single = airlockd.start{ launcher = "setsid", tenants = { bench = KEY }, env = {
  SANDBOX_TENANT_LIMITS = LIMITS, SANDBOX_WORKSPACE_QUOTA_MB = "16", SANDBOX_WARM_NEW = "0" } }
local f
local ok, err = pcall(function()
  f = fleet.up{ nodes = 3, env = { SANDBOX_API_KEYS = "bench:" .. KEY, SANDBOX_TENANT_LIMITS = LIMITS,
                                   SANDBOX_FLEET_LOST_AFTER = "30", FLEET_PG_STATEMENTS = "1" } }
  local pg_port = (proc.read_file(f.dir .. "/pg/port"):gsub("%s+$", ""))
  local pm = f.info.postgres.pid
  local function xacts()
    return tonumber(fleet.sql(f, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'airlock'"))
  end
  local node = f.info.nodes[1]

  -- a session with a 10-byte file on the single airlockd and on node1 (made straight on it)
  local function session_on(url)
    local st, s = call(url, "POST", "/v1/sessions", "{}")
    check(st == 201, "create on " .. url .. ": " .. tostring(st))
    check(call(url, "POST", "/v1/sessions/" .. s.session_id .. "/write",
      cjson.encode{ path = "ten.txt", content = "0123456789" }) == 200, "write")
    return s.session_id
  end
  local sid_single, sid_node = session_on(single.url), session_on(node.url)
  local on_each = { { url = node.url, sid = sid_node } } -- a session on each node
  for i = 2, #f.info.nodes do on_each[i] = { url = f.info.nodes[i].url, sid = session_on(f.info.nodes[i].url) } end

  -- pg_stat_statements: calls and time of each statement the fleet's role ran
  local STATEMENTS = "SELECT queryid, calls, total_exec_time + total_plan_time,"
    .. " left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_statements WHERE toplevel"
  local function statements()
    local ok_s, out = pcall(fleet.sql, f, STATEMENTS)
    local rows = {}
    if not ok_s or not out:match("^%-?%d+|") then return nil end
    for id, calls, ms, text in out:gmatch("(%-?%d+)|(%d+)|([%d.e+-]+)|([^\n]*)") do
      rows[id] = { calls = tonumber(calls), ms = tonumber(ms), text = text }
    end
    return rows
  end
  -- 1. reads on one keep-alive connection
  local function reads(url, sid)
    local out = proc.output(string.format("%s %s %s %d", RAW, q(url .. "/v1/sessions/" .. sid .. "/read?path=ten.txt"),
      q(KEY), READS))
    return assert(tonumber(out:match("rate=([%d.]+)")), "raw_curl_rate said: " .. out)
  end
  local rate = { single = {}, direct = {}, router = {}, direct_x = {}, router_x = {}, hop = {} }
  local took = { single = 0, direct = 0, router = 0 } -- all rounds' time of each
  local cpu = { single = 0, node = 0, db = 0, haproxy = 0, router_node = 0, router_db = 0 }
  reads(single.url, sid_single) -- warm
  reads(node.url, sid_node)
  -- the lease statements the rounds took (node1's: the other nodes serve none of them)
  local function leases(rows)
    local n = 0
    for _, row in pairs(rows or {}) do
      if row.text:find("airlock_lease_tokens", 1, true) then n = n + row.calls end
    end
    return n
  end
  local leases0 = leases(statements())
  for _ = 1, ROUNDS do
    local c0 = cpu_of(single.pid)
    rate.single[#rate.single + 1] = reads(single.url, sid_single)
    cpu.single = cpu.single + cpu_of(single.pid) - c0
    local n0, d0 = cpu_of(node.pid), cpu_tree(pm)
    rate.direct[#rate.direct + 1] = reads(node.url, sid_node)
    cpu.node, cpu.db = cpu.node + cpu_of(node.pid) - n0, cpu.db + cpu_tree(pm) - d0
    local h0 = cpu_of(f.info.haproxy.pid)
    n0, d0 = cpu_of(node.pid), cpu_tree(pm)
    rate.router[#rate.router + 1] = reads(f.router.url, sid_node)
    cpu.haproxy = cpu.haproxy + cpu_of(f.info.haproxy.pid) - h0
    cpu.router_node, cpu.router_db = cpu.router_node + cpu_of(node.pid) - n0, cpu.router_db + cpu_tree(pm) - d0
    local i = #rate.single
    for k, v in pairs(took) do took[k] = v + READS / rate[k][i] end
    rate.direct_x[i] = rate.direct[i] / rate.single[i]
    rate.router_x[i] = rate.router[i] / rate.single[i]
    rate.hop[i] = 1000 / rate.router[i] - 1000 / rate.direct[i]
  end
  local r = {}
  for k, v in pairs(rate) do r[k] = stats.summary(v).p50 end
  local all = READS * ROUNDS
  local per = function(seconds) return seconds / all * 1e3 end -- ms per read
  print(string.format("10-byte reads, one keep-alive connection, %d rounds of %d (medians; ratios within a round)",
    ROUNDS, READS))
  print(string.format("  single airlockd          %8.0f/s", r.single))
  print(string.format("  straight to a node       %8.0f/s  %.2fx single (goal >= 0.8x)", r.direct, r.direct_x))
  print(string.format("  through the router       %8.0f/s  %.2fx single", r.router, r.router_x))
  print(string.format("  router's hop per read    %+8.3f ms (goal <= 0.3 ms)", r.hop))
  print(string.format("  server CPU per read: single %.3f ms; node %.3f + database %.3f = %.3f ms, %.2fx single (goal <= 1.5x)",
    per(cpu.single), per(cpu.node), per(cpu.db), per(cpu.node + cpu.db), (cpu.node + cpu.db) / cpu.single))
  print(string.format("  through the router: node %.3f + database %.3f ms, HAProxy's own %.3f ms per read",
    per(cpu.router_node), per(cpu.router_db), per(cpu.haproxy)))
  -- the rounds' times summed: a burst of the machine's other work weighs by its length, not
  -- by the one round it fell in
  print(string.format("  all rounds together: straight to a node %.2fx single, through the router %.2fx,"
    .. " router's hop %+.3f ms; per-round ratios straight to a node %s",
    took.single / took.direct, took.single / took.router, (took.router - took.direct) / all * 1e3,
    table.concat((function()
      local t = {}
      for i, x in ipairs(rate.direct_x) do t[i] = string.format("%.2f", x) end
      return t
    end)(), " ")))
  print(string.format("  lease statements during the rounds: %d (%d reads on node1, straight and through the router)",
    leases(statements()) - leases0, 2 * all))
  print("load average " .. harness.loadavg())
  if READS_ONLY then return end

  -- 2. exec `true`, a new connection each
  local exec = cjson.encode{ command = "true" }
  local function execs(url, sid)
    local t0 = socket.gettime()
    for _ = 1, EXECS do check(call(url, "POST", "/v1/sessions/" .. sid .. "/exec", exec) == 200, "exec") end
    return EXECS / (socket.gettime() - t0)
  end
  local xr = { single = {}, router = {}, direct = {}, router_x = {}, direct_x = {} }
  execs(single.url, sid_single)
  execs(f.router.url, sid_node)
  execs(node.url, sid_node)
  for i = 1, 5 do
    xr.single[i] = execs(single.url, sid_single)
    xr.direct[i] = execs(node.url, sid_node)
    xr.router[i] = execs(f.router.url, sid_node)
    xr.direct_x[i], xr.router_x[i] = xr.direct[i] / xr.single[i], xr.router[i] / xr.single[i]
  end
  local xm = {}
  for k, v in pairs(xr) do xm[k] = stats.summary(v).p50 end
  print(string.format("exec `true` (%d x 5, new connection each; medians, ratios within a round): single %.1f/s,"
    .. " straight to a node %.1f/s (%.2fx), through the router %.1f/s: %.2fx (goal >= 0.9x)",
    EXECS, xm.single, xm.direct, xm.direct_x, xm.router, xm.router_x))

  -- 3. transactions and database CPU per request type: each phase, then the time a backend
  -- may keep its counts before it reports them (10 s), against the idle fleet's own rate
  local FLUSH = 11
  -- n requests, their transactions (counted once every backend reported), the database's CPU
  -- while they ran and the seconds of each
  -- (each psql that reads the counts is a backend of its own: the CPU is read once it has
  -- ended, so that its start and end are not the phase's)
  local function phase(fn)
    local x0, tx = xacts(), socket.gettime()
    proc.sleep(0.5)
    local c0, nd0, t0 = cpu_tree(pm), cpu_tree(node.pid), socket.gettime()
    local n, on_node = fn() -- on_node: those of the n that node1 served (all when nil)
    local c1, nd1, t1 = cpu_tree(pm), cpu_tree(node.pid), socket.gettime()
    proc.sleep(FLUSH)
    return n, xacts() - x0, c1 - c0, t1 - t0, socket.gettime() - tx, nd1 - nd0, on_node or n
  end
  proc.sleep(FLUSH) -- what ran before is counted before the idle fleet is
  local _, idle_x, idle_c, idle_t, idle_all = phase(function() proc.sleep(20); return 0 end)
  local idle_rate, idle_cpu = idle_x / idle_all, idle_c / idle_t
  print(string.format("idle fleet (3 nodes and the router program): %.1f transactions/s, %.2f%% of a core in PostgreSQL", idle_rate,
    idle_cpu * 100))
  local cost = {}
  local function measure(name, fn, show)
    local s0 = show and statements()
    local n, x, c, t, all_t, nd, on_node = phase(fn)
    cost[name] = { tx = (x - idle_rate * all_t) / n, cpu = math.max(0, (c - idle_cpu * t) / n), node = nd / on_node }
    print(string.format("  %-28s %7.3f transactions, %.3f ms database CPU each (%d)", name, cost[name].tx,
      cost[name].cpu * 1e3, n))
    local s1 = s0 and statements()
    if not s1 then return end
    -- the statements of this phase (heartbeats and other nodes' included), most calls first
    local list = {}
    for id, row in pairs(s1) do
      local before = s0[id] or { calls = 0, ms = 0 }
      if row.calls > before.calls then
        list[#list + 1] = { calls = (row.calls - before.calls) / n, us = (row.ms - before.ms) * 1e3 / n, text = row.text }
      end
    end
    table.sort(list, function(a, b) return a.calls > b.calls end)
    for i = 1, math.min(#list, 6) do
      print(string.format("      %6.3f calls %7.1f us  %s", list[i].calls, list[i].us, list[i].text))
    end
  end
  print("PostgreSQL per request (idle rate subtracted):")
  measure("read (10 bytes)", function() reads(node.url, sid_node); return READS end)
  measure("write (10 bytes)", function()
    for _ = 1, 1000 do
      call(node.url, "POST", "/v1/sessions/" .. sid_node .. "/write", cjson.encode{ path = "w.txt", content = "0123456789" })
    end
    return 1000
  end)
  measure("list files", function()
    for _ = 1, 1000 do call(node.url, "GET", "/v1/sessions/" .. sid_node .. "/list") end
    return 1000
  end)
  measure("usage", function() for _ = 1, 1000 do call(node.url, "GET", "/v1/usage") end return 1000 end)
  measure("list own sessions", function() for _ = 1, 1000 do call(node.url, "GET", "/v1/sessions") end return 1000 end)
  measure("exec `true`", function()
    for _ = 1, 300 do call(node.url, "POST", "/v1/sessions/" .. sid_node .. "/exec", exec) end
    return 300
  end, true)
  -- as a node at saturation runs them: several at once (its database connections busy, not
  -- woken cold for each statement; the ends of commands that finish together go together)
  local PARALLEL = 4 -- a session's sandbox runs 4 commands at once
  measure("exec `true`, " .. PARALLEL .. " at once", function()
    local counts = fleet.parallel(node.url, 320, PARALLEL, "POST", "/v1/sessions/" .. sid_node .. "/exec", KEY, exec)
    local seen = {}
    for code, k in pairs(counts) do seen[#seen + 1] = code .. " x" .. k end
    check(counts[200] == 320, "execs at once: " .. table.concat(seen, ", "))
    return 320
  end, true)
  -- a fleet at work: execs PARALLEL at once on each of its nodes (each node's ends group-commit
  -- with the others that finish with them)
  local EACH = 160
  local fleet_parallel = "exec `true`, " .. PARALLEL .. " at once on each node"
  measure(fleet_parallel, function()
    local jobs = {}
    for _, n in ipairs(on_each) do
      jobs[#jobs + 1] = string.format("seq %d | xargs -P %d -I@ curl -s -o /dev/null -w '%%{http_code}\\n' --max-time 60"
        .. " -X POST -H %s -H 'Content-Type: application/json' --data-binary %s %s", EACH, PARALLEL, q("X-API-Key: " .. KEY),
        q(exec), q(n.url .. "/v1/sessions/" .. n.sid .. "/exec"))
    end
    local out = proc.output("{ " .. table.concat(jobs, " & ") .. " & wait; }")
    local ok200 = select(2, out:gsub("200", ""))
    check(ok200 == EACH * #on_each, "execs at once on each node: " .. ok200 .. " of " .. EACH * #on_each .. " answered 200")
    return EACH * #on_each, EACH -- node1's CPU is measured: its share
  end, true)
  measure("create + delete", function()
    for _ = 1, 40 do
      local st, s = call(node.url, "POST", "/v1/sessions", "{}")
      check(st == 201, "create")
      call(node.url, "DELETE", "/v1/sessions/" .. s.session_id)
    end
    return 40
  end)
  local worst_exec = math.max(cost["exec `true`"].tx, cost["exec `true`, " .. PARALLEL .. " at once"].tx, cost[fleet_parallel].tx)
  print(string.format("  goals: read <= 0.05 transactions (%s), exec <= 2 (%s: %.3f at worst of the three exec phases)",
    cost["read (10 bytes)"].tx <= 0.05 and "met" or "missed", worst_exec <= 2 and "met" or "missed", worst_exec))

  -- 4a. nodes per 2-core PostgreSQL: a node at saturation runs the mix at 2 cores / its CPU
  -- per mix; the database spends its CPU per mix that often, plus each node's idle share
  local n0 = cpu_tree(node.pid)
  local t0 = socket.gettime()
  local MIXES = 40
  for _ = 1, MIXES do
    call(node.url, "POST", "/v1/sessions/" .. sid_node .. "/exec", exec)
    call(node.url, "GET", "/v1/sessions/" .. sid_node .. "/read?path=ten.txt")
    call(node.url, "POST", "/v1/sessions/" .. sid_node .. "/write", cjson.encode{ path = "w.txt", content = "0123456789" })
    call(node.url, "GET", "/v1/sessions/" .. sid_node .. "/list")
  end
  local mix_wall = (socket.gettime() - t0) / MIXES
  local node_mix = (cpu_tree(node.pid) - n0) / MIXES
  local mix = { "exec `true`", "read (10 bytes)", "write (10 bytes)", "list files" }
  local db_mix, tx_mix = 0, 0
  for _, k in ipairs(mix) do db_mix, tx_mix = db_mix + cost[k].cpu, tx_mix + cost[k].tx end
  local sat = 2 / math.max(node_mix, 1e-6) -- mixes a second of a node with its 2 cores busy
  local per_node_db = sat * db_mix + idle_cpu / 3
  print(string.format("agent-like mix (exec + read + write + list files): node CPU %.2f ms (%.0f ms wall, one client),"
    .. " database CPU %.3f ms, %.2f transactions", node_mix * 1e3, mix_wall * 1e3, db_mix * 1e3, tx_mix))
  print(string.format("  one client at a time (each statement wakes a database connection cold): a node's 2 cores run"
    .. " %.0f mixes/s; one 2-core PostgreSQL carries %.0f such nodes", sat, 2 / per_node_db))
  -- the same with a fleet at work (execs PARALLEL at once on each node; the small calls' node
  -- CPU from their phases): its inputs, then the projection
  -- the exec's node CPU from node1's phase of 4 at once: with every node busy, node1's tree
  -- lost CPU now and then (a process with CPU left it unreaped: the delta came out negative)
  local one_node = "exec `true`, " .. PARALLEL .. " at once"
  print(string.format("    (node CPU per exec with every node busy: %.3f ms, not used: see the source)",
    cost[fleet_parallel].node * 1e3))
  cost[fleet_parallel].node = cost[one_node].node
  local pmix = { fleet_parallel, "read (10 bytes)", "write (10 bytes)", "list files" }
  local node_p, db_p, tx_p = 0, 0, 0
  print("  inputs at work (per call; CPU from /proc/<pid>/stat of the node's tree and of PostgreSQL's postmaster,"
    .. " backends and workers, idle rate subtracted; an exec's node CPU from " .. one_node .. "):")
  for _, k in ipairs(pmix) do
    node_p, db_p, tx_p = node_p + cost[k].node, db_p + cost[k].cpu, tx_p + cost[k].tx
    print(string.format("    %-36s node %.3f ms  database %.3f ms  %.3f transactions", k, cost[k].node * 1e3,
      cost[k].cpu * 1e3, cost[k].tx))
  end
  local idle_node = idle_cpu / #f.info.nodes -- each node's heartbeat (the router program's share included)
  print(string.format("    idle: %.3f%% of a core of PostgreSQL per node", idle_node * 100))
  -- nodes = 2 cores of PostgreSQL / (a node's mixes a second at saturation x database CPU
  -- per mix + its idle share), a node's mixes a second = its 2 cores / its CPU per mix
  local function carried(db_per_mix, sat_rate) return 2 / (sat_rate * db_per_mix + idle_node) end
  local sat_p = 2 / math.max(node_p, 1e-6)
  print(string.format("  at work: node CPU %.2f ms, database CPU %.3f ms, %.2f transactions a mix; a node's 2 cores run"
    .. " %.0f mixes/s; one 2-core PostgreSQL carries %.0f such nodes (goal >= 100)",
    node_p * 1e3, db_p * 1e3, tx_p, sat_p, carried(db_p, sat_p)))

  -- 4a'. the database as 100 nodes would keep it: busy. pgbench runs an exec's own statements
  -- prepared, as a node's, from 64 connections, each a node of its own; the database's CPU per
  -- statement from /proc as above. Two scripts: an exec's start and its end with its audit row
  -- (bench/fleet_exec_pair.sql: an exec that takes a slot, and what each exec cost before the
  -- slots were leased), and the end alone (bench/fleet_exec_end.sql: an exec on a slot its node
  -- holds). An exec at work costs the end plus, for each statement beyond one that it ran
  -- (cost[fleet_parallel].tx - 1: slots taken and given back, token leases), half a pair.
  local HOT_S = 8
  local function hot_run(script)
    local h0, ht0 = cpu_tree(pm), socket.gettime()
    local hot = proc.output(string.format("PGPASSFILE=%s /usr/lib/postgresql/15/bin/pgbench -n -M prepared -c 64 -j 2 -T %d"
      .. " -f %s -h 127.0.0.1 -p %s -U airlock airlock 2>&1", q(f.dir .. "/pg/pgpass"), HOT_S, script, pg_port))
    local h1, ht1 = cpu_tree(pm), socket.gettime()
    local done = tonumber(hot:match("number of transactions actually processed: (%d+)"))
    check(done and done > 0 and not hot:find("aborted", 1, true), "pgbench said: " .. hot)
    return math.max(0, (h1 - h0) - idle_cpu * (ht1 - ht0)) / done, done / (ht1 - ht0), (h1 - h0) / (ht1 - ht0) * 50
  end
  local hot_pair, pair_rate, pair_busy = hot_run("bench/fleet_exec_pair.sql")
  local hot_end, end_rate, end_busy = hot_run("bench/fleet_exec_end.sql")
  local beyond = math.max(0, cost[fleet_parallel].tx - 1)
  local hot_exec = hot_end + beyond * hot_pair / 2
  local db_hot = db_p - cost[fleet_parallel].cpu + hot_exec
  print(string.format("  the database busy (pgbench, 64 connections): an exec's start and its end with its audit row"
    .. " %.0f/s, %.3f ms of its CPU each (%.0f%% of its 2 cores); the end alone %.0f/s, %.3f ms (%.0f%%)",
    pair_rate, hot_pair * 1e3, pair_busy, end_rate, hot_end * 1e3, end_busy))
  print(string.format("  an exec at work (the end + %.3f statements beyond it at half a pair each) %.3f ms, a mix %.3f ms:"
    .. " one 2-core PostgreSQL carries %.0f nodes at work (goal >= 100); were every exec a pair: %.0f",
    beyond, hot_exec * 1e3, db_hot * 1e3, carried(db_hot, sat_p),
    carried(db_p - cost[fleet_parallel].cpu + hot_pair, sat_p)))

  -- 4b. one tenant's ceiling: lease statements one bucket row takes a second (pgbench, 4
  -- clients) times the tokens a lease carries
  local script = proc.temp_path()
  proc.write_file(script, "SELECT granted FROM airlock_lease_tokens('ceiling', 1e12, 1000, 0);\n")
  local out = proc.output(string.format("PGPASSFILE=%s /usr/lib/postgresql/15/bin/pgbench -n -c 4 -j 2 -T 5 -f %s"
    .. " -h 127.0.0.1 -p %s -U airlock airlock 2>&1", q(f.dir .. "/pg/pgpass"), q(script), pg_port))
  local tps = tonumber(out:match("tps = ([%d.]+)"))
  check(tps, "pgbench said: " .. out)
  local function ceiling(nodes)
    local rpm = 20000 * 60 -- a tenant allowed 20,000 requests a second
    local lease = math.max(1, math.floor(math.min(rpm * 2 / 60, rpm / (8 * nodes))))
    return tps * lease, lease
  end
  local c3, l3 = ceiling(3)
  local c100, l100 = ceiling(100)
  print(string.format("one tenant's bucket row: %.0f lease statements/s; a tenant allowed 20,000/s leases %d tokens at a time"
    .. " (3 nodes) or %d (100 nodes): ceiling %.0f or %.0f requests/s (goal >= 20,000)", tps, l3, l100, c3, c100))
end)
if f then fleet.down(f) end
airlockd.stop(single)
if not ok then error(err, 0) end
