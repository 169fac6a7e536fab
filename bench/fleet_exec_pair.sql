-- An exec's bookkeeping in a fleet's database, as a pgbench script (docs/fleet.md, "The cost
-- of a call, measured"): the start (fleet/counters.c) and the end with its audit row
-- (fleet/audit.c), each client a node of its own. On a fleet from scripts/fleet.sh DIR:
--   PGPASSFILE=DIR/pg/pgpass pgbench -n -M prepared -c 32 -j 2 -T 10 -f bench/fleet_exec_pair.sql \
--     -h 127.0.0.1 -p $(cat DIR/pg/port) -U airlock airlock
-- and the PostgreSQL processes' CPU over the run divided by the transactions.
\set sk random(1, 1000000000)
SELECT airlock_exec_start('bench', 'node' || :client_id, 1000000);
WITH ended AS (UPDATE command_counts c SET running = greatest(c.running - e.n, 0)
  FROM (SELECT value AS tenant, count(*)::integer AS n FROM json_array_elements_text(json_build_array('bench'))
        GROUP BY value) e WHERE c.tenant = e.tenant AND c.node = 'node' || :client_id)
INSERT INTO audit SELECT r.tenant_id, 'node' || :client_id, r.sk, r.ts_us, r.session_id, r.actor, r.kind, r.command,
  r.truncated, r.exit_code, r.duration_s, r.timed_out, r.oom_killed, r.detail
  FROM json_populate_recordset(NULL::audit, json_build_array(json_build_object('tenant_id', 'bench',
    'sk', :sk || '-' || :client_id, 'ts_us', 1700000000000000, 'session_id', 'sbx_010000000001', 'actor', 'key',
    'kind', 'exec', 'command', 'true', 'truncated', false, 'exit_code', 0, 'duration_s', 0.03, 'timed_out', false,
    'oom_killed', false, 'detail', NULL))) r ON CONFLICT DO NOTHING;
