-- An exec's bookkeeping in a fleet's database when its node holds a slot of the tenant (docs/
-- fleet.md "Exec slots"): no start, and its end is its audit row alone (fleet/audit.c, with no
-- slot to give back), as a pgbench script; each client a node of its own. Run as
-- bench/fleet_exec_pair.sql is (the exec that leases a slot for itself costs that pair).
\set sk random(1, 1000000000)
WITH ended AS (UPDATE command_counts c SET running = greatest(c.running - e.n, 0)
  FROM (SELECT value AS tenant, count(*)::integer AS n FROM json_array_elements_text('[]'::json)
        GROUP BY value) e WHERE c.tenant = e.tenant AND c.node = 'node' || :client_id)
INSERT INTO audit SELECT r.tenant_id, 'node' || :client_id, r.sk, r.ts_us, r.session_id, r.actor, r.kind, r.command,
  r.truncated, r.exit_code, r.duration_s, r.timed_out, r.oom_killed, r.detail
  FROM json_populate_recordset(NULL::audit, json_build_array(json_build_object('tenant_id', 'bench',
    'sk', :sk || '-e-' || :client_id, 'ts_us', 1700000000000000, 'session_id', 'sbx_010000000001', 'actor', 'key',
    'kind', 'exec', 'command', 'true', 'truncated', false, 'exit_code', 0, 'duration_s', 0.03, 'timed_out', false,
    'oom_killed', false, 'detail', NULL))) r ON CONFLICT DO NOTHING;
