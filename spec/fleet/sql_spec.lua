-- luacheck: max line length 140
-- The fleet's SQL tested as SQL: a private PostgreSQL only (no node, no router), the schema
-- applied by airlockd's own migrations (--migrate-only), and the schema's functions called
-- from several connections at once: request-token leases (a refill is counted once, whatever
-- the order the clock and the lock are reached in), exact session and command limits (a
-- node's group commit of ends, audit rows and starts included; exec slots leased by nodes,
-- their holders asked with a notice, a dead node's freed), the
-- slots of the nodes, heartbeats that do not read the sessions, and many nodes declared dead at
-- once without a deadlock.
local pg_cluster = require "support.pg_cluster"
local proc = require "support.proc"

describe("the fleet's SQL", function()
  local pg

  setup(function()
    pg = pg_cluster.start()
  end)

  teardown(function()
    pg_cluster.stop(pg)
  end)

  local function num(s) return tonumber(s) end

  -- every job's exit status 0; its outputs joined
  local function wait_all(jobs, what)
    local outs = {}
    for i, j in ipairs(jobs) do
      local rc, out = j.wait(120)
      assert.are.equal(0, rc, what .. " #" .. i .. ": " .. tostring(out))
      outs[#outs + 1] = out
    end
    return table.concat(outs, "\n")
  end

  it("is applied by airlockd --migrate-only, and applying it again changes nothing", function()
    local version = num(pg.psql("SELECT max(version) FROM schema_version"))
    assert.is_true(version >= 6, "schema version " .. version)
    -- the same binary once more: nothing to do
    local rc, out = proc.run_capture(string.format("SANDBOX_DATABASE_URL_FILE=%s %s --migrate-only",
      proc.shell_quote(pg.dir .. "/database.url"),
      proc.shell_quote(os.getenv("AIRLOCKD_BIN") or (proc.repo_root() .. "/build/airlockd"))))
    assert.are.equal(0, rc, out)
    assert.is_nil(out:find("migrated to version", 1, true), out)
    assert.is_nil(out:find(pg.url:match(":([^:@]+)@"), 1, true), "the password in: " .. out)
    assert.are.equal(version, num(pg.psql("SELECT max(version) FROM schema_version")))
  end)

  -- A connection whose airlock_now() reads the clock and only then waits 1.5 s: a call on it
  -- that read the clock before taking the bucket's lock would hold a time older than what
  -- another call wrote meanwhile (the refill of finding 8, counted twice).
  local SLOW_CLOCK = [[
CREATE SCHEMA IF NOT EXISTS slow_clock;
CREATE OR REPLACE FUNCTION slow_clock.airlock_now() RETURNS double precision LANGUAGE plpgsql AS $$
DECLARE t double precision := extract(epoch FROM clock_timestamp())::double precision;
BEGIN PERFORM pg_sleep(1.5); RETURN t; END $$;
]]

  -- The tokens granted over a window of tenant's bucket (600 a minute: 10 a second), drained at
  -- its start, by a call on the slow clock and, 0.7 s later, calls on a normal clock, then
  -- more calls: never more than the window's refill (+1 for a partial token). take(tenant, n)
  -- is the SQL of n calls, each printing the tokens it was granted.
  local function refill_once(tenant, take)
    pg.psql(SLOW_CLOCK)
    pg.psql(string.format("SELECT granted FROM airlock_lease_tokens('%s', 600, 100000, 0)", tenant))
    local t0 = num(pg.psql("SELECT updated FROM rate_buckets WHERE tenant = '" .. tenant .. "'"))
    local slow = pg.start("SET search_path = slow_clock, public;\n" .. take(tenant, 1))
    local quick = pg.start("SELECT pg_sleep(0.7);\n" .. take(tenant, 20))
    local got = wait_all({ slow, quick }, "a call")
    local last = pg.psql(take(tenant, 20))
    local t1 = num(pg.psql("SELECT updated FROM rate_buckets WHERE tenant = '" .. tenant .. "'"))
    local granted = 0
    for n in (got .. "\n" .. last):gmatch("(%d+)") do granted = granted + num(n) end
    return granted, (t1 - t0) * 10 + 1
  end

  it("leases a tenant's tokens with each interval refilled once (the clock read after the lock)", function()
    local granted, bound = refill_once("lease-t", function(tenant)
      return string.format("SELECT granted FROM airlock_lease_tokens('%s', 600, 1000, 0);", tenant)
    end)
    assert.is_true(granted <= bound, string.format("granted %d tokens, at most %.1f refilled", granted, bound))
    assert.is_true(granted >= 10, "granted " .. granted)
  end)

  it("takes single tokens (an older node's call) on the same corrected bucket", function()
    -- airlock_take_token answers the tokens left (granted) or minus the wait (refused)
    local granted, bound = refill_once("token-t", function(tenant, n)
      return string.rep(string.format("SELECT CASE WHEN airlock_take_token('%s', 600) >= 0 THEN 1 ELSE 0 END;\n",
        tenant), n)
    end)
    assert.is_true(granted <= bound, string.format("granted %d tokens, at most %.1f refilled", granted, bound))
    assert.is_true(granted >= 10, "granted " .. granted)
  end)

  it("gives back what a lease did not use, never above the bucket's size", function()
    assert.are.equal("60|0", pg.psql("SELECT granted, floor(tokens_left) FROM airlock_lease_tokens('back-t', 60, 1000, 0)"))
    -- 25 unused come back with the next lease (which takes 10 of them)
    assert.are.equal("10", pg.psql("SELECT granted FROM airlock_lease_tokens('back-t', 60, 10, 25)"))
    local left = num(pg.psql("SELECT tokens FROM rate_buckets WHERE tenant = 'back-t'"))
    assert.is_true(left >= 15 and left < 17, "left " .. left)
    -- a give-back beyond the bucket's size is capped at it
    pg.psql("SELECT * FROM airlock_lease_tokens('back-t', 60, 0, 1000)")
    assert.are.equal("60", pg.psql("SELECT tokens FROM rate_buckets WHERE tenant = 'back-t'"))
  end)

  it("admits exactly max_sessions and max_concurrent_exec from several connections at once", function()
    pg.psql("SELECT airlock_node_register('lim-node', 'http://127.0.0.9:1', 0)")
    local jobs = {}
    for c = 1, 4 do
      local calls = {}
      for i = 1, 10 do
        calls[#calls + 1] = string.format("SELECT airlock_session_reserve('sbx_lim%d_%02d', 'lim-tenant', 'lim-node', 7,"
          .. " '[]', 16);", c, i)
        -- two connections start as this version's nodes do, two as an older node's
        calls[#calls + 1] = c % 2 == 0 and "SELECT airlock_exec_start('lim-tenant', 'lim-node', 3);"
          or "SELECT airlock_command_start('lim-tenant', 'lim-node', 3);"
      end
      jobs[c] = pg.start(table.concat(calls, "\n"))
    end
    wait_all(jobs, "a connection")
    assert.are.equal("7", pg.psql("SELECT count(*) FROM sessions WHERE tenant = 'lim-tenant' AND state = 'active'"))
    assert.are.equal("3", pg.psql("SELECT sum(running) FROM command_counts WHERE tenant = 'lim-tenant'"))
    -- an older node's command rows are among them
    assert.is_true(num(pg.psql("SELECT count(*) FROM commands WHERE tenant = 'lim-tenant'")) <= 3)
    pg.psql("DELETE FROM commands; DELETE FROM command_counts")
  end)

  -- A node's command ends, as fleet/audit.c sends them with its audit rows ($3: one tenant a
  -- command), and the audit row with them.
  local function ends(node, tenants, sk)
    return string.format("WITH ended AS (UPDATE command_counts c SET running = greatest(c.running - e.n, 0)"
      .. " FROM (SELECT value AS tenant, count(*)::integer AS n FROM json_array_elements_text('%s'::json)"
      .. " GROUP BY value) e WHERE c.tenant = e.tenant AND c.node = '%s')"
      .. " INSERT INTO audit (tenant_id, node, sk, ts_us, truncated, timed_out, oom_killed)"
      .. " VALUES ('cnt-a', '%s', '%s', 0, false, false, false);", tenants, node, node, sk)
  end

  it("counts running commands on one row per tenant and node, changed in place, from many connections", function()
    for n = 1, 3 do pg.psql("SELECT airlock_node_register('cnt-node" .. n .. "', 'http://127.0.0.9:1', 0)") end
    -- 6 connections (2 per node) start 10 commands each of two tenants allowed 4 and 5, and
    -- end every one they were granted, some alone, some together with others
    local jobs = {}
    for c = 1, 6 do
      local node, calls = "cnt-node" .. (1 + c % 3), { "CREATE TEMP TABLE mine (tenant text);" }
      for i = 1, 10 do
        local tenant = i % 2 == 0 and "cnt-a" or "cnt-b"
        calls[#calls + 1] = string.format("INSERT INTO mine SELECT '%s' WHERE airlock_exec_start('%s', '%s', %d);",
          tenant, tenant, node, tenant == "cnt-a" and 4 or 5)
        calls[#calls + 1] = string.format("SELECT CASE WHEN (SELECT sum(running) FROM command_counts WHERE tenant = '%s')"
          .. " > %d THEN 'over the limit' END;", tenant, tenant == "cnt-a" and 4 or 5)
        if i % 3 == 0 then
          calls[#calls + 1] = "SELECT coalesce(json_agg(tenant), '[]') AS gone FROM mine \\gset"
          calls[#calls + 1] = ends(node, ":gone", "sk-" .. c .. "-" .. i):gsub("'(:gone)'", ":'gone'")
          calls[#calls + 1] = "DELETE FROM mine;"
        end
      end
      calls[#calls + 1] = "SELECT coalesce(json_agg(tenant), '[]') AS gone FROM mine \\gset"
      calls[#calls + 1] = ends(node, ":gone", "sk-" .. c .. "-end"):gsub("'(:gone)'", ":'gone'")
      jobs[c] = pg.start(table.concat(calls, "\n"))
    end
    local out = wait_all(jobs, "a connection")
    assert.is_nil(out:find("over the limit", 1, true), out)
    assert.is_nil(out:find("deadlock", 1, true), out)
    assert.are.equal("0", pg.psql("SELECT coalesce(sum(running), 0) FROM command_counts WHERE tenant LIKE 'cnt-%'"))
    assert.are.equal("24", pg.psql("SELECT count(*) FROM audit WHERE tenant_id = 'cnt-a'"))
    -- in place: a start and an end change no index (HOT), whatever the number of commands
    local row = pg.psql("BEGIN; SELECT airlock_exec_start('cnt-a', 'cnt-node1', 4); " .. ends("cnt-node1", '["cnt-a"]', "sk-hot")
      .. " SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'command_counts'; COMMIT")
    local upd, hot = row:match("(%d+)|(%d+)")
    assert.are.equal("2", upd, row)
    assert.are.equal("2", hot, row)
    -- an older node's row deleted takes its count off; a node that starts again or is declared
    -- dead has no command left
    pg.psql("SELECT airlock_command_start('cnt-a', 'cnt-node1', 4); SELECT airlock_command_start('cnt-a', 'cnt-node2', 4);"
      .. " SELECT airlock_exec_start('cnt-a', 'cnt-node3', 4); SELECT airlock_exec_start('cnt-a', 'cnt-node3', 4)")
    assert.are.equal("4", pg.psql("SELECT sum(running) FROM command_counts WHERE tenant = 'cnt-a'"))
    assert.are.equal("f", pg.psql("SELECT airlock_exec_start('cnt-a', 'cnt-node1', 4)"))
    pg.psql("DELETE FROM commands WHERE node = 'cnt-node1'")
    assert.are.equal("0", pg.psql("SELECT running FROM command_counts WHERE tenant = 'cnt-a' AND node = 'cnt-node1'"))
    pg.psql("SELECT airlock_node_register('cnt-node2', 'http://127.0.0.9:1', 0)")
    pg.psql("UPDATE nodes SET heartbeat = now() - interval '1 hour' WHERE id = 'cnt-node3'; SELECT airlock_nodes_reap(60)")
    assert.are.equal("0", pg.psql("SELECT coalesce(sum(running), 0) FROM command_counts WHERE tenant = 'cnt-a'"))
    pg.psql("DELETE FROM sessions; DELETE FROM commands; DELETE FROM command_counts; DELETE FROM audit; DELETE FROM nodes")
  end)

  -- A node's group commit (fleet/audit.c): its ends and audit rows, then its starts.
  local function group(node, rows, ended, starts)
    return string.format("SELECT airlock_exec_group('%s', '%s', '%s', '%s');", node, rows, ended, starts)
  end

  it("runs a node's group commit: ends and audit rows, then starts in tenant order, exact from many connections", function()
    for n = 1, 3 do pg.psql("SELECT airlock_node_register('grp-node" .. n .. "', 'http://127.0.0.9:1', 0)") end
    -- each start's answer in its own place, whatever the tenants' order
    assert.are.equal("{f,t,f}", pg.psql(group("grp-node1", "[]", "[]", '[["grp-z", 0], ["grp-y", 1], ["grp-x", 0]]')))
    assert.are.equal("{}", pg.psql(group("grp-node1", "[]", '["grp-y"]', "[]")))
    assert.are.equal("0", pg.psql("SELECT running FROM command_counts WHERE tenant = 'grp-y'"))
    -- 6 connections (2 per node), each 10 groups of starts of two tenants in both orders
    -- (allowed 2 and 3) with the ends of what its last group was granted: never over a limit,
    -- never a deadlock
    local jobs = {}
    for c = 1, 6 do
      local node, calls = "grp-node" .. (1 + c % 3), { "CREATE TEMP TABLE mine (tenant text);",
        "SELECT '[]' AS gone \\gset" }
      for i = 1, 10 do
        local starts = i % 2 == 0 and '[["grp-b", 3], ["grp-a", 2], ["grp-b", 3]]' or '[["grp-a", 2], ["grp-b", 3]]'
        local rows = string.format('[{"tenant_id": "grp-a", "sk": "g-%d-%d", "ts_us": 1, "truncated": false,'
          .. ' "timed_out": false, "oom_killed": false}]', c, i)
        calls[#calls + 1] = "DELETE FROM mine;"
        calls[#calls + 1] = string.format("INSERT INTO mine SELECT s.value->>0 FROM json_array_elements('%s') WITH ORDINALITY"
          .. " s(value, i), unnest((%s)::boolean[]) WITH ORDINALITY a(ok, j) WHERE i = j AND ok;", starts,
          group(node, rows, "GONE", starts):gsub(";$", ""):gsub("SELECT ", "SELECT ", 1):gsub("'GONE'", ":'gone'"))
        calls[#calls + 1] = string.format("SELECT CASE WHEN (SELECT sum(running) FROM command_counts WHERE tenant = 'grp-a')"
          .. " > 2 OR (SELECT sum(running) FROM command_counts WHERE tenant = 'grp-b') > 3 THEN 'over the limit' END;")
        calls[#calls + 1] = "SELECT coalesce(json_agg(tenant), '[]') AS gone FROM mine \\gset"
      end
      calls[#calls + 1] = group(node, "[]", "GONE", "[]"):gsub("'GONE'", ":'gone'")
      jobs[c] = pg.start(table.concat(calls, "\n"))
    end
    local out = wait_all(jobs, "a connection")
    assert.is_nil(out:find("over the limit", 1, true), out)
    assert.is_nil(out:find("deadlock", 1, true), out)
    assert.are.equal("0", pg.psql("SELECT coalesce(sum(running), 0) FROM command_counts WHERE tenant LIKE 'grp-%'"))
    assert.are.equal("60", pg.psql("SELECT count(*) FROM audit WHERE tenant_id = 'grp-a' AND sk LIKE 'g-%'"))
    -- a slot freed in a group is free for the starts of the same group
    assert.are.equal("{t,t}", pg.psql(group("grp-node1", "[]", "[]", '[["grp-a", 2], ["grp-a", 2]]')))
    assert.are.equal("{f}", pg.psql(group("grp-node2", "[]", "[]", '[["grp-a", 2]]')))
    assert.are.equal("{t}", pg.psql(group("grp-node1", "[]", '["grp-a"]', '[["grp-a", 2]]')))
    pg.psql("DELETE FROM sessions; DELETE FROM commands; DELETE FROM command_counts; DELETE FROM audit; DELETE FROM nodes")
  end)

  -- Exec slots leased (migration 16, docs/fleet.md "Exec slots"): a node's counter is the slots
  -- it holds, running or idle, taken one at a time by airlock_exec_take and given back as ends.
  it("leases exec slots: never more than the limit from two connections racing, holders asked, a dead node's freed", function()
    for n = 1, 3 do pg.psql("SELECT airlock_node_register('sl-node" .. n .. "', 'http://127.0.0.9:1', 0)") end
    -- two connections (two nodes) race for a tenant's 5 slots, each taking 12 and giving some
    -- back, another node's statements checking the sum all along
    local jobs = {}
    for c = 1, 2 do
      local node, calls = "sl-node" .. c, { "CREATE TEMP TABLE mine (n integer);" }
      for i = 1, 12 do
        calls[#calls + 1] = string.format("INSERT INTO mine SELECT 1 WHERE airlock_exec_take('sl-t', '%s', 5) = 1;", node)
        calls[#calls + 1] = "SELECT CASE WHEN (SELECT sum(running) FROM command_counts WHERE tenant = 'sl-t') > 5"
          .. " THEN 'over the limit' END;"
        if i % 4 == 0 then -- one slot back, as a node's ends statement gives it
          calls[#calls + 1] = "SELECT CASE WHEN count(*) > 0 THEN '[\"sl-t\"]' ELSE '[]' END AS gone FROM mine \\gset"
          calls[#calls + 1] = ends(node, ":gone", "sl-" .. c .. "-" .. i):gsub("'(:gone)'", ":'gone'")
          calls[#calls + 1] = "DELETE FROM mine WHERE ctid = (SELECT ctid FROM mine LIMIT 1);"
        end
      end
      calls[#calls + 1] = "SELECT 'held ' || count(*) FROM mine;"
      jobs[c] = pg.start(table.concat(calls, "\n"))
    end
    local out = wait_all(jobs, "a connection")
    assert.is_nil(out:find("over the limit", 1, true), out)
    local held = 0
    for n in out:gmatch("held (%d+)") do held = held + tonumber(n) end
    -- every slot granted is counted once, never beyond the limit
    assert.is_true(held >= 1 and held <= 5, out)
    assert.are.equal(tostring(held), pg.psql("SELECT sum(running) FROM command_counts WHERE tenant = 'sl-t'"))
    -- all 5 held: a node holding none is refused and asks the holders (2, a notice); a node
    -- holding every one is refused without asking (0: they all run there)
    pg.psql("UPDATE command_counts SET running = CASE WHEN node = 'sl-node1' THEN 5 ELSE 0 END WHERE tenant = 'sl-t'")
    local rc, asked = pg.start("LISTEN airlock_slots;\nSELECT airlock_exec_take('sl-t', 'sl-node3', 5);\nSELECT 'done';").wait(60)
    assert.are.equal(0, rc, asked)
    assert.matches("\n2\n", "\n" .. asked)
    assert.matches('payload "want sl%-node3 sl%-t"', asked)
    local rc0, alone = pg.start("LISTEN airlock_slots;\nSELECT airlock_exec_take('sl-t', 'sl-node1', 5);\nSELECT 'done';").wait(60)
    assert.are.equal(0, rc0, alone)
    assert.matches("\n0\n", "\n" .. alone)
    assert.is_nil(alone:find("want", 1, true), alone)
    -- a group's starts answer the same, each in its place
    assert.are.equal("{2,0}", pg.psql("SELECT airlock_exec_group_take('sl-node2', '[]', '[]', '[[\"sl-t\", 5], [\"sl-u\", 0]]')"))
    -- the holder gives two back: two takes elsewhere succeed, the third is refused
    pg.psql(ends("sl-node1", '["sl-t", "sl-t"]', "sl-back"))
    assert.are.equal("1", pg.psql("SELECT airlock_exec_take('sl-t', 'sl-node2', 5)"))
    assert.are.equal("1", pg.psql("SELECT airlock_exec_take('sl-t', 'sl-node3', 5)"))
    assert.are.equal("2", pg.psql("SELECT airlock_exec_take('sl-t', 'sl-node3', 5)"))
    -- a dead node's slots are free again with its reap
    pg.psql("UPDATE nodes SET heartbeat = now() - interval '1 hour' WHERE id = 'sl-node1'; SELECT airlock_nodes_reap(60)")
    assert.are.equal("2", pg.psql("SELECT sum(running) FROM command_counts WHERE tenant = 'sl-t'"))
    assert.are.equal("1", pg.psql("SELECT airlock_exec_take('sl-t', 'sl-node3', 5)"))
    pg.psql("DELETE FROM sessions; DELETE FROM commands; DELETE FROM command_counts; DELETE FROM audit; DELETE FROM nodes")
  end)

  it("gives each node a slot up to the documented bound of 255, then says they are taken", function()
    pg.psql("DO $$ BEGIN FOR i IN 1..300 LOOP EXIT WHEN (SELECT count(*) FROM nodes) >= 255;"
      .. " PERFORM airlock_node_register('slot-' || i, 'http://127.0.0.9:1', 0); END LOOP; END $$")
    assert.are.equal("255|1|255", pg.psql("SELECT count(*), min(slot), max(slot) FROM nodes"))
    local rc, out = pg.start("SELECT airlock_node_register('one-too-many', 'http://127.0.0.9:1', 0);").wait(60)
    assert.are_not.equal(0, rc)
    assert.matches("all 255 node slots are taken", out)
    -- a node that comes back keeps its slot
    local slot = pg.psql("SELECT slot FROM nodes WHERE id = 'slot-7'")
    assert.are.equal(slot, pg.psql("SELECT airlock_node_register('slot-7', 'http://127.0.0.9:2', 0)"))
    pg.psql("DELETE FROM sessions; DELETE FROM commands; DELETE FROM command_counts; DELETE FROM nodes")
  end)

  it("beats without reading the sessions, however many there are, and records the last uses it carries", function()
    pg.psql("SELECT airlock_node_register('big-node', 'http://127.0.0.9:1', 0);"
      .. " SELECT airlock_node_register('other-node', 'http://127.0.0.9:2', 0)")
    pg.psql("INSERT INTO sessions (id, tenant, node, created_at, last_used)"
      .. " SELECT 'sbx_big' || g, 'big-tenant', 'big-node', 0, 0 FROM generate_series(1, 20000) g;"
      .. " INSERT INTO sessions (id, tenant, node, state, created_at, last_used, lost_at)"
      .. " SELECT 'sbx_lost' || g, 'big-tenant', 'big-node', 'lost', 0, 0, now() FROM generate_series(1, 20000) g;"
      .. " INSERT INTO sessions (id, tenant, node, created_at, last_used) VALUES ('sbx_other', 'big-tenant', 'other-node', 0, 0);"
      .. " ANALYZE sessions")
    -- this transaction's own counters: a sequential scan of sessions, or more than a few rows
    -- read through its indexes, would be a heartbeat whose cost grows with sessions
    local row = pg.psql("BEGIN; SELECT st FROM airlock_node_beat('big-node', 3, 60,"
      .. " '{sbx_big7,sbx_big9,sbx_other}', '{100,200,300}');"
      .. " SELECT seq_scan, coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables WHERE relname = 'sessions'; COMMIT")
    local st, seq, fetched = row:match("^(%a+)\n(%d+)|(%d+)")
    assert.are.equal("active", st, row)
    assert.are.equal(0, num(seq), row)
    assert.is_true(num(fetched) <= 5 * (3 + 1), row) -- a few for each session it carries, of 40,001
    -- its own sessions' last uses, never another node's
    assert.are.equal("sbx_big7|100\nsbx_big9|200\nsbx_other|0", pg.psql("SELECT id, last_used FROM sessions"
      .. " WHERE id IN ('sbx_big7', 'sbx_big9', 'sbx_other') ORDER BY id"))
    pg.psql("DELETE FROM sessions; DELETE FROM nodes")
  end)

  local function twenty_silent_nodes(more)
    pg.psql("DO $$ BEGIN FOR i IN 1..20 LOOP"
      .. " PERFORM airlock_node_register('dead-' || i, 'http://127.0.0.9:1', 0);"
      .. " FOR j IN 1..5 LOOP PERFORM airlock_session_reserve('sbx_d' || i || '_' || j, 't' || (j % 3), 'dead-' || i,"
      .. " 1000, '[]', 16); END LOOP;"
      .. " PERFORM airlock_command_start('t1', 'dead-' || i, 1000); END LOOP; END $$;"
      .. " INSERT INTO sessions (id, tenant, node, created_at, last_used) SELECT 'sbx_m' || g, 'm',"
      .. " 'dead-' || (1 + g % 20), 0, 0 FROM generate_series(1, " .. (more or 0) .. ") g;"
      .. " UPDATE nodes SET heartbeat = now() - interval '1 hour' WHERE id LIKE 'dead-%'")
  end

  it("lets 20 silent nodes come back at once, each beating from its own connection, without a deadlock", function()
    -- a fleet that was down: its nodes all beat again at once (the wrong lock order of
    -- finding 10 deadlocks here: each held its own row and waited for the others' to declare
    -- them dead), while 4 more connections touch the sessions as the nodes do (id order).
    -- Each change of a node's row takes 50 ms (a trigger of this test), so the beats overlap
    -- however the machine schedules them.
    pg.psql([[CREATE FUNCTION slow_clock.slow_row() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$;
      CREATE TRIGGER slow_row BEFORE UPDATE ON nodes FOR EACH ROW EXECUTE FUNCTION slow_clock.slow_row()]])
    finally(function() pg.psql("DROP TRIGGER slow_row ON nodes") end)
    for round = 1, 3 do
      twenty_silent_nodes(2000)
      local jobs = {}
      for i = 1, 20 do
        jobs[#jobs + 1] = pg.start(string.format("BEGIN; SELECT airlock_node_heartbeat('dead-%d', 5, 60);"
          .. " SELECT pg_sleep(0.05); COMMIT;", i))
      end
      for c = 1, 4 do
        jobs[#jobs + 1] = pg.start(string.format("UPDATE sessions SET last_used = %d WHERE id IN (SELECT id FROM"
          .. " sessions WHERE node LIKE 'dead-%%' ORDER BY id FOR UPDATE);", c))
      end
      local out = wait_all(jobs, "round " .. round .. ": a connection")
      assert.is_nil(out:find("deadlock", 1, true), out)
      -- a node declared dead before its own beat began has lost its sessions: never a dead
      -- node with an active session or a running command
      assert.are.equal("0", pg.psql("SELECT count(*) FROM sessions s JOIN nodes n ON n.id = s.node"
        .. " WHERE n.state = 'dead' AND s.state = 'active'"))
      assert.are.equal("0", pg.psql("SELECT count(*) FROM commands c JOIN nodes n ON n.id = c.node"
        .. " WHERE n.state = 'dead'"))
      assert.are.equal("0", pg.psql("SELECT count(*) FROM command_counts c JOIN nodes n ON n.id = c.node"
        .. " WHERE n.state = 'dead'"))
      pg.psql("DELETE FROM sessions; DELETE FROM commands; DELETE FROM command_counts; DELETE FROM nodes")
    end
  end)

  it("declares 20 silent nodes dead once, whichever of several connections gets there", function()
    for round = 1, 3 do
      twenty_silent_nodes()
      local jobs = {}
      for c = 1, 6 do jobs[c] = pg.start("SELECT airlock_nodes_reap(60);") end
      local out = wait_all(jobs, "round " .. round .. ": a reaper")
      assert.is_nil(out:find("deadlock", 1, true), out)
      local declared = 0
      for n in out:gmatch("(%-?%d+)") do if num(n) > 0 then declared = declared + num(n) end end
      -- the others found it at work (-1) or nothing left to do (0)
      assert.are.equal(20, declared, out)
      assert.are.equal("20", pg.psql("SELECT count(*) FROM nodes WHERE id LIKE 'dead-%' AND state = 'dead'"))
      assert.are.equal("0", pg.psql("SELECT count(*) FROM sessions WHERE node LIKE 'dead-%' AND state = 'active'"))
      assert.are.equal("100", pg.psql("SELECT count(*) FROM sessions WHERE node LIKE 'dead-%' AND state = 'lost'"))
      assert.are.equal("0", pg.psql("SELECT count(*) FROM commands WHERE node LIKE 'dead-%'"))
      assert.are.equal("0", pg.psql("SELECT count(*) FROM command_counts WHERE node LIKE 'dead-%'"))
      pg.psql("DELETE FROM sessions; DELETE FROM commands; DELETE FROM command_counts; DELETE FROM nodes")
    end
  end)
end)
