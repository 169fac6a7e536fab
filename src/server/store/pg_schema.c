/* The fleet's tables and the functions that decide its limits, as numbered migrations.
 * Every decision on a limit is one call of one of these functions: it takes a transaction
 * advisory lock on (what, tenant), counts and writes inside that one transaction, so any
 * number of nodes get exact answers. A migration is never edited once released: a change
 * is a new entry at the end. */
#include "store/pg_schema.h"
#include "log/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* pg_advisory_lock key of the migrations ("airlock" in ASCII) */
#define MIGRATION_LOCK 0x6169726c6f636bLL

static const char *const MIGRATIONS[] = {
    /* 1: nodes, sessions, commands, request buckets, keys */
    "CREATE TABLE nodes ("
    " id text PRIMARY KEY,"
    " slot integer NOT NULL UNIQUE CHECK (slot BETWEEN 1 AND 255),"
    " url text NOT NULL,"
    " state text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining', 'drained', 'dead')),"
    " started_at timestamptz NOT NULL DEFAULT now(),"
    " heartbeat timestamptz NOT NULL DEFAULT now(),"
    " capacity integer NOT NULL DEFAULT 0,"
    " load integer NOT NULL DEFAULT 0);"
    "CREATE TABLE sessions ("
    " id text PRIMARY KEY,"
    " tenant text NOT NULL,"
    " node text NOT NULL REFERENCES nodes (id),"
    " state text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'lost')),"
    " egress jsonb NOT NULL DEFAULT '[]',"
    " quota_mb integer NOT NULL DEFAULT 0,"
    " created_at double precision NOT NULL,"
    " last_used double precision NOT NULL,"
    " lost_at timestamptz);"
    "CREATE INDEX sessions_tenant ON sessions (tenant, state);"
    "CREATE INDEX sessions_node ON sessions (node, state);"
    "CREATE TABLE commands ("
    " id bigserial PRIMARY KEY,"
    " tenant text NOT NULL,"
    " node text NOT NULL,"
    " started_at timestamptz NOT NULL DEFAULT now());"
    "CREATE INDEX commands_tenant ON commands (tenant);"
    "CREATE INDEX commands_node ON commands (node);"
    "CREATE TABLE rate_buckets ("
    " tenant text PRIMARY KEY,"
    " tokens double precision NOT NULL,"
    " updated double precision NOT NULL);"
    "CREATE TABLE api_keys ("
    " key_id text PRIMARY KEY,"
    " tenant_id text NOT NULL,"
    " name text NOT NULL,"
    " key_hash text NOT NULL,"
    " created_at double precision NOT NULL,"
    " revoked_at double precision);"
    "CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);"
    /* epoch seconds now (not the transaction's start) */
    "CREATE FUNCTION airlock_now() RETURNS double precision LANGUAGE sql VOLATILE AS"
    " $$ SELECT extract(epoch FROM clock_timestamp())::double precision $$;"
    /* a node's slot: its own since its first start, else the lowest free one */
    "CREATE FUNCTION airlock_node_register(p_id text, p_url text, p_capacity integer) RETURNS integer"
    " LANGUAGE plpgsql AS $$ DECLARE s integer; BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.nodes'));"
    "  DELETE FROM commands WHERE node = p_id;" /* what ran there before this start ended */
    "  SELECT slot INTO s FROM nodes WHERE id = p_id;"
    "  IF FOUND THEN"
    "   UPDATE nodes SET url = p_url, capacity = p_capacity, heartbeat = now(), started_at = now(),"
    "    state = CASE WHEN state IN ('dead', 'drained') THEN 'active' ELSE state END WHERE id = p_id;"
    "   RETURN s;"
    "  END IF;"
    "  SELECT min(g) INTO s FROM generate_series(1, 255) g WHERE g NOT IN (SELECT slot FROM nodes);"
    "  IF s IS NULL THEN RAISE EXCEPTION 'all 255 node slots are taken'; END IF;"
    "  INSERT INTO nodes (id, slot, url, capacity) VALUES (p_id, s, p_url, p_capacity);"
    "  RETURN s;"
    " END $$;"
    /* a heartbeat; nodes silent longer than the grace are dead: their sessions lost (slots
     * freed), their commands gone. Returns the node's state. */
    "CREATE FUNCTION airlock_node_heartbeat(p_id text, p_load integer, p_grace double precision) RETURNS text"
    " LANGUAGE plpgsql AS $$ DECLARE st text; BEGIN"
    "  UPDATE nodes SET heartbeat = now(), load = p_load WHERE id = p_id RETURNING state INTO st;"
    /* a draining node whose sessions have all ended is drained */
    "  UPDATE nodes SET state = 'drained' WHERE id = p_id AND state = 'draining' AND NOT EXISTS"
    "   (SELECT 1 FROM sessions WHERE node = p_id AND state = 'active') RETURNING state INTO st;"
    "  IF st IS NULL THEN SELECT state INTO st FROM nodes WHERE id = p_id; END IF;"
    "  WITH dead AS (UPDATE nodes SET state = 'dead' WHERE state <> 'dead'"
    "                 AND heartbeat < now() - make_interval(secs => p_grace) RETURNING id),"
    "   lost AS (UPDATE sessions SET state = 'lost', lost_at = now()"
    "            WHERE state = 'active' AND node IN (SELECT id FROM dead))"
    "  DELETE FROM commands WHERE node IN (SELECT id FROM dead);"
    "  DELETE FROM sessions WHERE state = 'lost' AND lost_at < now() - interval '7 days';"
    "  RETURN st;"
    " END $$;"
    /* a new session against the tenant's max_sessions: -1 when registered, else the count */
    "CREATE FUNCTION airlock_session_reserve(p_id text, p_tenant text, p_node text, p_max integer,"
    "  p_egress jsonb, p_quota_mb integer) RETURNS integer"
    " LANGUAGE plpgsql AS $$ DECLARE n integer; t double precision := airlock_now(); BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.sessions'), hashtext(p_tenant));"
    "  SELECT count(*) INTO n FROM sessions WHERE tenant = p_tenant AND state = 'active';"
    "  IF n >= p_max THEN RETURN n; END IF;"
    "  INSERT INTO sessions (id, tenant, node, egress, quota_mb, created_at, last_used)"
    "   VALUES (p_id, p_tenant, p_node, p_egress, p_quota_mb, t, t);"
    "  RETURN -1;"
    " END $$;"
    /* one request token of the tenant's bucket: the tokens left (>= 0), or minus the
     * seconds until the next one */
    "CREATE FUNCTION airlock_take_token(p_tenant text, p_per_minute double precision) RETURNS double precision"
    " LANGUAGE plpgsql AS $$ DECLARE tk double precision; up double precision;"
    "  t double precision := airlock_now(); BEGIN"
    "  INSERT INTO rate_buckets VALUES (p_tenant, p_per_minute, t) ON CONFLICT (tenant) DO NOTHING;"
    "  SELECT tokens, updated INTO tk, up FROM rate_buckets WHERE tenant = p_tenant FOR UPDATE;"
    "  tk := least(p_per_minute, tk + greatest(t - up, 0) * p_per_minute / 60);"
    "  IF tk >= 1 THEN"
    "   UPDATE rate_buckets SET tokens = tk - 1, updated = t WHERE tenant = p_tenant;"
    "   RETURN tk - 1;"
    "  END IF;"
    "  UPDATE rate_buckets SET tokens = tk, updated = t WHERE tenant = p_tenant;"
    "  RETURN -((1 - tk) * 60 / p_per_minute);"
    " END $$;"
    /* a running command against the tenant's max_concurrent_exec: true when admitted */
    "CREATE FUNCTION airlock_command_begin(p_tenant text, p_node text, p_max integer) RETURNS boolean"
    " LANGUAGE plpgsql AS $$ DECLARE n integer; BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.commands'), hashtext(p_tenant));"
    "  SELECT count(*) INTO n FROM commands WHERE tenant = p_tenant;"
    "  IF n >= p_max THEN RETURN false; END IF;"
    "  INSERT INTO commands (tenant, node) VALUES (p_tenant, p_node);"
    "  RETURN true;"
    " END $$;"
    /* a new key against the 10 active keys of a tenant: -1 stored, -2 key id taken, else the
     * active count */
    "CREATE FUNCTION airlock_key_insert(p_id text, p_tenant text, p_name text, p_hash text, p_max integer)"
    " RETURNS integer LANGUAGE plpgsql AS $$ DECLARE n integer; BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.keys'), hashtext(p_tenant));"
    "  SELECT count(*) INTO n FROM api_keys WHERE tenant_id = p_tenant AND revoked_at IS NULL;"
    "  IF n >= p_max THEN RETURN n; END IF;"
    "  INSERT INTO api_keys VALUES (p_id, p_tenant, p_name, p_hash, airlock_now(), NULL)"
    "   ON CONFLICT (key_id) DO NOTHING;"
    "  IF NOT FOUND THEN RETURN -2; END IF;"
    "  RETURN -1;"
    " END $$;"
    /* revokes a key (of p_tenant; NULL: any): 0 done or already revoked, 1 no such key,
     * 2 refused, the tenant's last active key (p_keep_last) */
    "CREATE FUNCTION airlock_key_revoke(p_id text, p_tenant text, p_keep_last boolean) RETURNS integer"
    " LANGUAGE plpgsql AS $$ DECLARE tn text; rv double precision; n integer; BEGIN"
    "  SELECT tenant_id, revoked_at INTO tn, rv FROM api_keys WHERE key_id = p_id;"
    "  IF NOT FOUND OR (p_tenant IS NOT NULL AND tn <> p_tenant) THEN RETURN 1; END IF;"
    "  IF rv IS NOT NULL THEN RETURN 0; END IF;"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.keys'), hashtext(tn));"
    "  SELECT count(*) INTO n FROM api_keys WHERE tenant_id = tn AND revoked_at IS NULL;"
    "  IF p_keep_last AND n <= 1 THEN RETURN 2; END IF;"
    "  UPDATE api_keys SET revoked_at = airlock_now() WHERE key_id = p_id AND revoked_at IS NULL;"
    "  RETURN 0;"
    " END $$;",
    /* 2: the audit log of every node, shipped from each node's outbox (written once: a row's
     * key is its node's) */
    "CREATE TABLE audit ("
    " tenant_id text NOT NULL,"
    " node text NOT NULL,"
    " sk text COLLATE \"C\" NOT NULL," /* compared byte by byte, as the cursor is */
    " ts_us bigint NOT NULL,"
    " session_id text,"
    " actor text,"
    " kind text,"
    " command text,"
    " truncated boolean NOT NULL,"
    " exit_code integer,"
    " duration_s double precision,"
    " timed_out boolean NOT NULL,"
    " oom_killed boolean NOT NULL,"
    " detail text,"
    " PRIMARY KEY (tenant_id, node, sk));"
    "CREATE INDEX audit_tenant_sk ON audit (tenant_id, sk DESC);"
    "CREATE INDEX audit_ts ON audit (ts_us);",
    /* 3: a session moving to another node (a drain): the node that may take it */
    "ALTER TABLE sessions ADD COLUMN moving_to text REFERENCES nodes (id);",
    /* 4: every node's egress events, shipped from its outbox (written once: a row's key is
     * its node's), readable from any node and after a drain */
    "CREATE TABLE egress_events ("
    " session_id text NOT NULL,"
    " node text NOT NULL,"
    " sk text COLLATE \"C\" NOT NULL,"
    " event jsonb NOT NULL,"
    " PRIMARY KEY (session_id, node, sk));"
    "CREATE INDEX egress_events_session_sk ON egress_events (session_id, sk DESC);",
    /* 5: a session's egress events go when it ends (its row deleted) or is declared lost,
     * however that happens (a release, a heartbeat, a reconcile): nothing reads them after */
    "CREATE FUNCTION airlock_session_events_gone() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    "  DELETE FROM egress_events WHERE session_id = OLD.id;"
    "  RETURN NULL;"
    " END $$;"
    "CREATE TRIGGER sessions_deleted AFTER DELETE ON sessions"
    " FOR EACH ROW EXECUTE FUNCTION airlock_session_events_gone();"
    "CREATE TRIGGER sessions_lost AFTER UPDATE OF state ON sessions"
    " FOR EACH ROW WHEN (NEW.state = 'lost' AND OLD.state <> 'lost') EXECUTE FUNCTION airlock_session_events_gone();",
    /* 6: the router program (airlockd router, docs/fleet.md): each node's node-to-node
     * listener and agent port; the session-id layout (domain/session_id.h) and "which
     * sessions moved" said once in SQL; and a notice on the channel airlock_router from the
     * statements that change a node or a moved session's route, so the router is told */
    "ALTER TABLE nodes ADD COLUMN internal_url text;"
    "ALTER TABLE nodes ADD COLUMN agent_port integer NOT NULL DEFAULT 0;"
    /* the slot an id names: 'sbx_' + 12 lowercase hex, the first two its node's slot */
    "CREATE FUNCTION airlock_id_slot(p_id text) RETURNS integer LANGUAGE sql IMMUTABLE AS"
    " $$ SELECT CASE WHEN p_id ~ '^sbx_[0-9a-f]{12}$' THEN ('x' || substr(p_id, 5, 2))::bit(8)::integer END $$;"
    /* a session moved when its id's slot is not its node's (a drain moved it) */
    "CREATE FUNCTION airlock_moved(p_id text, p_node_slot integer) RETURNS boolean LANGUAGE sql IMMUTABLE AS"
    " $$ SELECT airlock_id_slot(p_id) IS DISTINCT FROM p_node_slot $$;"
    /* every live moved session and the router's backend for it (its node's slot) */
    "CREATE FUNCTION airlock_moved_sessions() RETURNS TABLE (id text, backend text) LANGUAGE sql STABLE AS"
    " $$ SELECT s.id, 'slot_' || lpad(to_hex(n.slot), 2, '0') FROM sessions s JOIN nodes n ON n.id = s.node"
    "    WHERE s.state = 'active' AND airlock_moved(s.id, n.slot) $$;"
    "CREATE FUNCTION airlock_router_session_notice() RETURNS trigger LANGUAGE plpgsql AS $$"
    " DECLARE be text; BEGIN"
    "  IF TG_OP = 'DELETE' THEN"
    "   IF airlock_moved(OLD.id, (SELECT slot FROM nodes WHERE id = OLD.node)) THEN"
    "    PERFORM pg_notify('airlock_router', 's ' || OLD.id || ' -');"
    "   END IF;"
    "   RETURN NULL;"
    "  END IF;"
    "  SELECT m.backend INTO be FROM airlock_moved_sessions() m WHERE m.id = NEW.id;"
    "  PERFORM pg_notify('airlock_router', 's ' || NEW.id || ' ' || coalesce(be, '-'));"
    "  RETURN NULL;"
    " END $$;"
    "CREATE TRIGGER sessions_router AFTER UPDATE OF node, state ON sessions FOR EACH ROW"
    " WHEN (OLD.node IS DISTINCT FROM NEW.node OR OLD.state IS DISTINCT FROM NEW.state)"
    " EXECUTE FUNCTION airlock_router_session_notice();"
    "CREATE TRIGGER sessions_router_gone AFTER DELETE ON sessions FOR EACH ROW"
    " EXECUTE FUNCTION airlock_router_session_notice();"
    "CREATE FUNCTION airlock_router_node_notice() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    "  PERFORM pg_notify('airlock_router', 'n ' || CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);"
    "  RETURN NULL;"
    " END $$;"
    "CREATE TRIGGER nodes_router AFTER INSERT OR DELETE OR UPDATE OF slot, url, internal_url, state, agent_port"
    " ON nodes FOR EACH ROW EXECUTE FUNCTION airlock_router_node_notice();",
    /* 7: why a drain could not move a session (it stays on its node; a new drain tries again) */
    "ALTER TABLE sessions ADD COLUMN move_error text;",
    /* 8: a session's template and size ({"template", "memory_mb", "cpu_percent",
     * "max_processes"}; its disk is quota_mb), for the list and for a move; '{}': the defaults */
    "ALTER TABLE sessions ADD COLUMN shape jsonb NOT NULL DEFAULT '{}';",
    /* 9: a call decided on its node (docs/fleet.md "The cost of a call"). Request tokens are
     * leased: a node takes a share of the tenant's bucket in one statement and spends it
     * locally; what it did not use comes back with its next lease. The clock is read after
     * the bucket's row lock, so one interval is refilled once. A command's start returns its
     * row's id (its end is deleted with the audit row that follows it). Dead nodes are
     * declared by one node at a time (a try-lock), their rows and their sessions' rows locked
     * in id order, so any number of heartbeats at once never deadlock; the heartbeat's cost
     * does not grow with sessions (indexed). */
    "CREATE FUNCTION airlock_lease_tokens(p_tenant text, p_per_minute double precision, p_want integer,"
    "  p_give_back double precision, OUT granted integer, OUT tokens_left double precision,"
    "  OUT wait_s double precision)"
    " LANGUAGE plpgsql AS $$ DECLARE tk double precision; up double precision; t double precision; BEGIN"
    "  SELECT tokens, updated INTO tk, up FROM rate_buckets WHERE tenant = p_tenant FOR UPDATE;"
    "  IF NOT FOUND THEN"
    "   INSERT INTO rate_buckets VALUES (p_tenant, p_per_minute, airlock_now()) ON CONFLICT (tenant) DO NOTHING;"
    "   SELECT tokens, updated INTO tk, up FROM rate_buckets WHERE tenant = p_tenant FOR UPDATE;"
    "  END IF;"
    "  t := airlock_now();" /* after the lock: never before a refill another call wrote */
    "  tk := least(p_per_minute, tk + greatest(t - up, 0) * p_per_minute / 60 + greatest(p_give_back, 0));"
    "  granted := least(greatest(p_want, 0), floor(greatest(tk, 0)))::integer;"
    "  tk := tk - granted;"
    "  UPDATE rate_buckets SET tokens = tk, updated = greatest(t, up) WHERE tenant = p_tenant;"
    "  tokens_left := tk;"
    "  wait_s := CASE WHEN tk >= 1 THEN 0 ELSE (1 - tk) * 60 / p_per_minute END;"
    " END $$;"
    /* the one-token form (nodes of an older version) on the same corrected bucket */
    "CREATE OR REPLACE FUNCTION airlock_take_token(p_tenant text, p_per_minute double precision)"
    " RETURNS double precision LANGUAGE sql AS"
    " $$ SELECT CASE WHEN granted >= 1 THEN tokens_left ELSE -wait_s END"
    "    FROM airlock_lease_tokens(p_tenant, p_per_minute, 1, 0) $$;"
    /* a running command against max_concurrent_exec: its row's id when admitted, else 0 */
    "CREATE FUNCTION airlock_command_start(p_tenant text, p_node text, p_max integer) RETURNS bigint"
    " LANGUAGE plpgsql AS $$ DECLARE n integer; i bigint; BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.commands'), hashtext(p_tenant));"
    "  SELECT count(*) INTO n FROM commands WHERE tenant = p_tenant;"
    "  IF n >= p_max THEN RETURN 0; END IF;"
    "  INSERT INTO commands (tenant, node) VALUES (p_tenant, p_node) RETURNING id INTO i;"
    "  RETURN i;"
    " END $$;"
    "CREATE INDEX sessions_lost_at ON sessions (lost_at) WHERE state = 'lost';"
    "CREATE INDEX nodes_heartbeat ON nodes (heartbeat) WHERE state <> 'dead';"
    /* nodes silent longer than the grace are dead: their sessions lost, their commands gone.
     * One caller at a time (-1: another is at it); a node beating right now (its row locked)
     * is not dead. Returns how many nodes it declared dead. */
    "CREATE FUNCTION airlock_nodes_reap(p_grace double precision) RETURNS integer"
    " LANGUAGE plpgsql AS $$ DECLARE dead text[]; BEGIN"
    "  IF NOT pg_try_advisory_xact_lock(hashtext('airlock.reap')) THEN RETURN -1; END IF;"
    "  SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO dead FROM (SELECT id FROM nodes"
    "   WHERE state <> 'dead' AND heartbeat < now() - make_interval(secs => p_grace)"
    "   ORDER BY id FOR UPDATE SKIP LOCKED) d;"
    "  IF cardinality(dead) > 0 THEN"
    "   UPDATE nodes SET state = 'dead' WHERE id = ANY (dead);"
    "   UPDATE sessions SET state = 'lost', lost_at = now() WHERE id IN (SELECT id FROM sessions"
    "    WHERE node = ANY (dead) AND state = 'active' ORDER BY id FOR UPDATE);"
    "   DELETE FROM commands WHERE node = ANY (dead);"
    "  END IF;"
    "  DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE state = 'lost'"
    "   AND lost_at < now() - interval '7 days' ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED);"
    "  RETURN cardinality(dead);"
    " END $$;"
    /* a heartbeat: the node's state (a draining node with no session left is drained), the
     * last uses of its sessions used since its last beat (p_ids at p_times; locked after its
     * own row, as the reaping locks a node's row before its sessions), the reaping of dead
     * nodes when no other node is at it, and the nodes not dead */
    "CREATE FUNCTION airlock_node_beat(p_id text, p_load integer, p_grace double precision,"
    "  p_ids text[], p_times double precision[], OUT st text, OUT live integer)"
    " LANGUAGE plpgsql AS $$ BEGIN"
    "  UPDATE nodes SET heartbeat = now(), load = p_load WHERE id = p_id RETURNING state INTO st;"
    "  IF p_ids IS NOT NULL THEN"
    "   UPDATE sessions s SET last_used = u.t FROM unnest(p_ids, p_times) AS u(id, t)"
    "    WHERE s.id = u.id AND s.last_used < u.t AND s.id IN (SELECT id FROM sessions"
    "     WHERE id = ANY (p_ids) AND node = p_id ORDER BY id FOR UPDATE);"
    "  END IF;"
    "  IF st = 'draining' AND NOT EXISTS (SELECT 1 FROM sessions WHERE node = p_id AND state = 'active') THEN"
    "   UPDATE nodes SET state = 'drained' WHERE id = p_id;"
    "   st := 'drained';"
    "  END IF;"
    "  PERFORM airlock_nodes_reap(p_grace);"
    "  SELECT count(*) INTO live FROM nodes WHERE state <> 'dead';"
    " END $$;"
    "CREATE OR REPLACE FUNCTION airlock_node_heartbeat(p_id text, p_load integer, p_grace double precision)"
    " RETURNS text LANGUAGE sql AS $$ SELECT st FROM airlock_node_beat(p_id, p_load, p_grace, NULL, NULL) $$;",
    /* 10 (ours, templates): a template's recipe, built through any node; every node builds it
     * again from this (the same id: content-addressed) on its first session there */
    "CREATE TABLE templates ("
    " owner text NOT NULL,"
    " name text NOT NULL,"
    " id text NOT NULL,"
    " recipe jsonb NOT NULL,"
    " created_at double precision NOT NULL DEFAULT airlock_now(),"
    " PRIMARY KEY (owner, name));",
    /* 11 (ours, pause): a paused session stays on its node, its row kept; paused_at is when it
     * was paused (NULL: active), for the list (docs/api.md "Pause and resume") */
    "ALTER TABLE sessions ADD COLUMN paused_at double precision;",
    /* 12: a tenant's running commands as one counter row per node, updated in place (HOT: no
     * index holds the count, and the pages keep room), where migration 9 inserted a row per
     * command and deleted it at its end (every exec grew the indexes and left dead rows for
     * the next count to walk past). The start is one statement; the ends go with the audit
     * rows that follow them (fleet/audit.c). Nodes of an older version keep their command
     * rows and are counted here too: their start adds to the counter, deleting their row
     * takes it off (a trigger), so both kinds share one exact max_concurrent_exec. */
    "CREATE TABLE command_counts ("
    " tenant text NOT NULL,"
    " node text NOT NULL,"
    " running integer NOT NULL,"
    " PRIMARY KEY (tenant, node)) WITH (fillfactor = 50);"
    "CREATE INDEX command_counts_node ON command_counts (node);"
    "INSERT INTO command_counts SELECT tenant, node, count(*) FROM commands GROUP BY tenant, node;"
    /* a running command against max_concurrent_exec: true when admitted (its count taken) */
    "CREATE FUNCTION airlock_exec_start(p_tenant text, p_node text, p_max integer) RETURNS boolean"
    " LANGUAGE plpgsql AS $$ BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.commands'), hashtext(p_tenant));"
    "  IF (SELECT coalesce(sum(running), 0) FROM command_counts WHERE tenant = p_tenant) >= p_max THEN"
    "   RETURN false;"
    "  END IF;"
    "  UPDATE command_counts SET running = running + 1 WHERE tenant = p_tenant AND node = p_node;"
    "  IF NOT FOUND THEN INSERT INTO command_counts VALUES (p_tenant, p_node, 1); END IF;"
    "  RETURN true;"
    " END $$;"
    /* the ends of a node's commands, one tenant name per ended command */
    "CREATE FUNCTION airlock_exec_end(p_node text, p_tenants text[]) RETURNS void LANGUAGE sql AS"
    " $$ UPDATE command_counts c SET running = greatest(c.running - e.n, 0)"
    "    FROM (SELECT t, count(*)::integer AS n FROM unnest(p_tenants) t GROUP BY t) e"
    "    WHERE c.tenant = e.t AND c.node = p_node $$;"
    /* an older node's start and end */
    "CREATE OR REPLACE FUNCTION airlock_command_start(p_tenant text, p_node text, p_max integer) RETURNS bigint"
    " LANGUAGE plpgsql AS $$ DECLARE i bigint; BEGIN"
    "  IF NOT airlock_exec_start(p_tenant, p_node, p_max) THEN RETURN 0; END IF;"
    "  INSERT INTO commands (tenant, node) VALUES (p_tenant, p_node) RETURNING id INTO i;"
    "  RETURN i;"
    " END $$;"
    "CREATE OR REPLACE FUNCTION airlock_command_begin(p_tenant text, p_node text, p_max integer) RETURNS boolean"
    " LANGUAGE sql AS $$ SELECT airlock_command_start(p_tenant, p_node, p_max) > 0 $$;"
    "CREATE FUNCTION airlock_command_row_gone() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    "  UPDATE command_counts SET running = greatest(running - 1, 0) WHERE tenant = OLD.tenant AND node = OLD.node;"
    "  RETURN NULL;"
    " END $$;"
    "CREATE TRIGGER commands_gone AFTER DELETE ON commands FOR EACH ROW EXECUTE FUNCTION airlock_command_row_gone();"
    /* a node's (re)start and a dead node: what ran there ended (as migrations 1 and 9, plus
     * the counters) */
    "CREATE OR REPLACE FUNCTION airlock_node_register(p_id text, p_url text, p_capacity integer) RETURNS integer"
    " LANGUAGE plpgsql AS $$ DECLARE s integer; BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.nodes'));"
    "  DELETE FROM commands WHERE node = p_id;"
    "  DELETE FROM command_counts WHERE node = p_id;"
    "  SELECT slot INTO s FROM nodes WHERE id = p_id;"
    "  IF FOUND THEN"
    "   UPDATE nodes SET url = p_url, capacity = p_capacity, heartbeat = now(), started_at = now(),"
    "    state = CASE WHEN state IN ('dead', 'drained') THEN 'active' ELSE state END WHERE id = p_id;"
    "   RETURN s;"
    "  END IF;"
    "  SELECT min(g) INTO s FROM generate_series(1, 255) g WHERE g NOT IN (SELECT slot FROM nodes);"
    "  IF s IS NULL THEN RAISE EXCEPTION 'all 255 node slots are taken'; END IF;"
    "  INSERT INTO nodes (id, slot, url, capacity) VALUES (p_id, s, p_url, p_capacity);"
    "  RETURN s;"
    " END $$;"
    "CREATE OR REPLACE FUNCTION airlock_nodes_reap(p_grace double precision) RETURNS integer"
    " LANGUAGE plpgsql AS $$ DECLARE dead text[]; BEGIN"
    "  IF NOT pg_try_advisory_xact_lock(hashtext('airlock.reap')) THEN RETURN -1; END IF;"
    "  SELECT coalesce(array_agg(id ORDER BY id), '{}') INTO dead FROM (SELECT id FROM nodes"
    "   WHERE state <> 'dead' AND heartbeat < now() - make_interval(secs => p_grace)"
    "   ORDER BY id FOR UPDATE SKIP LOCKED) d;"
    "  IF cardinality(dead) > 0 THEN"
    "   UPDATE nodes SET state = 'dead' WHERE id = ANY (dead);"
    "   UPDATE sessions SET state = 'lost', lost_at = now() WHERE id IN (SELECT id FROM sessions"
    "    WHERE node = ANY (dead) AND state = 'active' ORDER BY id FOR UPDATE);"
    "   DELETE FROM commands WHERE node = ANY (dead);"
    "   DELETE FROM command_counts WHERE node = ANY (dead);"
    "  END IF;"
    "  DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE state = 'lost'"
    "   AND lost_at < now() - interval '7 days' ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED);"
    "  RETURN cardinality(dead);"
    " END $$;",
    /* 13 (ours, fleet store; MIGRATIONS[12]): a paused session's image in the shared store
     * (docs/fleet.md "The shared store"): stored names its parts relative to the store
     * ({"workspace": "paused/<id>.img", "bytes": n}; NULL: on its node). No node holds it then,
     * so its node's death (a reap, a reconcile) does not lose it: it stays paused, taken by the
     * first node a call reaches (fleet/store.c) */
    "ALTER TABLE sessions ADD COLUMN stored jsonb;"
    "CREATE FUNCTION airlock_stored_kept() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    "  NEW.state := 'active';"
    "  NEW.lost_at := NULL;"
    "  RETURN NEW;"
    " END $$;"
    "CREATE TRIGGER sessions_stored_kept BEFORE UPDATE OF state ON sessions FOR EACH ROW"
    " WHEN (NEW.state = 'lost' AND OLD.stored IS NOT NULL) EXECUTE FUNCTION airlock_stored_kept();",
    /* 14 (ours, fleet snapshots; MIGRATIONS[13]): every snapshot in the shared store, written
     * by the node that takes it in the step that renames its directory into place, so listing
     * and the tenant's limits are exact across machines (the directory stays the data). A new
     * one is counted against max_snapshots / max_snapshot_mb under the tenant's lock: added,
     * else the count and bytes that refused it */
    "CREATE TABLE snapshots ("
    " id text PRIMARY KEY,"
    " tenant text NOT NULL,"
    " name text NOT NULL,"
    " session_id text NOT NULL,"
    " template text NOT NULL,"
    " quota_bytes bigint NOT NULL,"
    " image_bytes bigint NOT NULL,"
    " bytes bigint NOT NULL,"
    " memory boolean NOT NULL,"
    " node text NOT NULL,"
    " created_at double precision NOT NULL);"
    "CREATE INDEX snapshots_tenant ON snapshots (tenant, created_at DESC);"
    "CREATE FUNCTION airlock_snapshot_add(p_row jsonb, p_max_count integer, p_max_bytes bigint,"
    "  OUT added boolean, OUT n integer, OUT used bigint) LANGUAGE plpgsql AS $$ BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.snapshots'), hashtext(p_row->>'tenant'));"
    "  SELECT count(*), coalesce(sum(bytes), 0) INTO n, used FROM snapshots WHERE tenant = p_row->>'tenant';"
    "  added := n < p_max_count AND used + (p_row->>'bytes')::bigint <= p_max_bytes;"
    "  IF added THEN"
    "   INSERT INTO snapshots SELECT * FROM jsonb_populate_record(NULL::snapshots, p_row);"
    "  END IF;"
    " END $$;",
    /* 15: a node's group commit (fleet/audit.c): in one transaction, the ends of its commands
     * that ended (p_ends: a tenant each) and the audit rows that wait (p_rows), then the
     * starts that wait (p_starts: [[tenant, max], ...]), each as airlock_exec_start, taken in
     * tenant order (so two nodes' groups take the tenants' locks in one order: no deadlock)
     * after the ends (a slot freed in the group is free for its starts). Whether each start
     * was admitted, in p_starts' order. */
    "CREATE FUNCTION airlock_exec_group(p_node text, p_rows json, p_ends json, p_starts json) RETURNS boolean[]"
    " LANGUAGE plpgsql AS $$ DECLARE admitted boolean[]; s record; BEGIN"
    "  IF json_array_length(p_ends) > 0 THEN"
    "   UPDATE command_counts c SET running = greatest(c.running - e.n, 0)"
    "    FROM (SELECT value AS tenant, count(*)::integer AS n FROM json_array_elements_text(p_ends) GROUP BY value) e"
    "    WHERE c.tenant = e.tenant AND c.node = p_node;"
    "  END IF;"
    "  IF json_array_length(p_rows) > 0 THEN"
    "   INSERT INTO audit SELECT r.tenant_id, p_node, r.sk, r.ts_us, r.session_id, r.actor, r.kind, r.command,"
    "    r.truncated, r.exit_code, r.duration_s, r.timed_out, r.oom_killed, r.detail"
    "    FROM json_populate_recordset(NULL::audit, p_rows) r ON CONFLICT DO NOTHING;"
    "  END IF;"
    "  admitted := array_fill(false, ARRAY[json_array_length(p_starts)]);"
    "  FOR s IN SELECT value->>0 AS tenant, (value->>1)::integer AS max, i::integer AS i"
    "   FROM json_array_elements(p_starts) WITH ORDINALITY AS a(value, i) ORDER BY (value->>0) COLLATE \"C\", i LOOP"
    "   admitted[s.i] := airlock_exec_start(s.tenant, p_node, s.max);"
    "  END LOOP;"
    "  RETURN admitted;"
    " END $$;",
    /* 16: concurrent-exec slots leased (docs/fleet.md "Exec slots"): a node's counter is the
     * slots it holds, running or kept idle for its next commands, so a start with an idle
     * slot needs no statement and its end is only its audit row; the sum over nodes stays at
     * most max_concurrent_exec. A start the sum refuses while other nodes hold slots asks
     * them for their idle ones (NOTIFY airlock_slots 'want <node> <tenant>'): 1 admitted, 0
     * refused (the tenant's slots are all this node's, running), 2 refused and asked. The
     * group's form answers one of these per start. */
    "CREATE FUNCTION airlock_exec_take(p_tenant text, p_node text, p_max integer) RETURNS integer"
    " LANGUAGE plpgsql AS $$ DECLARE mine integer; total integer; BEGIN"
    "  PERFORM pg_advisory_xact_lock(hashtext('airlock.commands'), hashtext(p_tenant));"
    "  SELECT coalesce(sum(running), 0), coalesce(sum(running) FILTER (WHERE node = p_node), 0)"
    "   INTO total, mine FROM command_counts WHERE tenant = p_tenant;"
    "  IF total >= p_max THEN"
    "   IF total > mine THEN"
    "    PERFORM pg_notify('airlock_slots', 'want ' || p_node || ' ' || p_tenant);"
    "    RETURN 2;"
    "   END IF;"
    "   RETURN 0;"
    "  END IF;"
    "  UPDATE command_counts SET running = running + 1 WHERE tenant = p_tenant AND node = p_node;"
    "  IF NOT FOUND THEN INSERT INTO command_counts VALUES (p_tenant, p_node, 1); END IF;"
    "  RETURN 1;"
    " END $$;"
    "CREATE FUNCTION airlock_exec_group_take(p_node text, p_rows json, p_ends json, p_starts json) RETURNS integer[]"
    " LANGUAGE plpgsql AS $$ DECLARE taken integer[]; s record; BEGIN"
    "  IF json_array_length(p_ends) > 0 THEN"
    "   UPDATE command_counts c SET running = greatest(c.running - e.n, 0)"
    "    FROM (SELECT value AS tenant, count(*)::integer AS n FROM json_array_elements_text(p_ends) GROUP BY value) e"
    "    WHERE c.tenant = e.tenant AND c.node = p_node;"
    "  END IF;"
    "  IF json_array_length(p_rows) > 0 THEN"
    "   INSERT INTO audit SELECT r.tenant_id, p_node, r.sk, r.ts_us, r.session_id, r.actor, r.kind, r.command,"
    "    r.truncated, r.exit_code, r.duration_s, r.timed_out, r.oom_killed, r.detail"
    "    FROM json_populate_recordset(NULL::audit, p_rows) r ON CONFLICT DO NOTHING;"
    "  END IF;"
    "  taken := array_fill(0, ARRAY[json_array_length(p_starts)]);"
    "  FOR s IN SELECT value->>0 AS tenant, (value->>1)::integer AS max, i::integer AS i"
    "   FROM json_array_elements(p_starts) WITH ORDINALITY AS a(value, i) ORDER BY (value->>0) COLLATE \"C\", i LOOP"
    "   taken[s.i] := airlock_exec_take(s.tenant, p_node, s.max);"
    "  END LOOP;"
    "  RETURN taken;"
    " END $$;",
    /* 17: a group's ends took their tenants' counter rows before the tenants' locks its starts
     * take, while a start on another connection of the node takes the lock first and then the
     * row: each waited for the other (sql_spec, 2 connections per node, under load: "deadlock
     * detected"). A group now begins (airlock_group_begin) with the lock of every tenant it
     * touches, in tenant order as the starts take them (an advisory lock is taken again at no
     * cost by its holder), then its ends and audit rows; both group functions begin so. */
    "CREATE FUNCTION airlock_group_begin(p_node text, p_rows json, p_ends json, p_starts json) RETURNS void"
    " LANGUAGE plpgsql AS $$ DECLARE t text; BEGIN"
    "  FOR t IN SELECT u.tenant FROM (SELECT value AS tenant FROM json_array_elements_text(p_ends)"
    "   UNION SELECT value->>0 FROM json_array_elements(p_starts)) u ORDER BY u.tenant COLLATE \"C\" LOOP"
    "   PERFORM pg_advisory_xact_lock(hashtext('airlock.commands'), hashtext(t));"
    "  END LOOP;"
    "  IF json_array_length(p_ends) > 0 THEN"
    "   UPDATE command_counts c SET running = greatest(c.running - e.n, 0)"
    "    FROM (SELECT value AS tenant, count(*)::integer AS n FROM json_array_elements_text(p_ends) GROUP BY value) e"
    "    WHERE c.tenant = e.tenant AND c.node = p_node;"
    "  END IF;"
    "  IF json_array_length(p_rows) > 0 THEN"
    "   INSERT INTO audit SELECT r.tenant_id, p_node, r.sk, r.ts_us, r.session_id, r.actor, r.kind, r.command,"
    "    r.truncated, r.exit_code, r.duration_s, r.timed_out, r.oom_killed, r.detail"
    "    FROM json_populate_recordset(NULL::audit, p_rows) r ON CONFLICT DO NOTHING;"
    "  END IF;"
    " END $$;"
    "CREATE OR REPLACE FUNCTION airlock_exec_group(p_node text, p_rows json, p_ends json, p_starts json)"
    " RETURNS boolean[] LANGUAGE plpgsql AS $$ DECLARE admitted boolean[]; s record; BEGIN"
    "  PERFORM airlock_group_begin(p_node, p_rows, p_ends, p_starts);"
    "  admitted := array_fill(false, ARRAY[json_array_length(p_starts)]);"
    "  FOR s IN SELECT value->>0 AS tenant, (value->>1)::integer AS max, i::integer AS i"
    "   FROM json_array_elements(p_starts) WITH ORDINALITY AS a(value, i) ORDER BY (value->>0) COLLATE \"C\", i LOOP"
    "   admitted[s.i] := airlock_exec_start(s.tenant, p_node, s.max);"
    "  END LOOP;"
    "  RETURN admitted;"
    " END $$;"
    "CREATE OR REPLACE FUNCTION airlock_exec_group_take(p_node text, p_rows json, p_ends json, p_starts json)"
    " RETURNS integer[] LANGUAGE plpgsql AS $$ DECLARE taken integer[]; s record; BEGIN"
    "  PERFORM airlock_group_begin(p_node, p_rows, p_ends, p_starts);"
    "  taken := array_fill(0, ARRAY[json_array_length(p_starts)]);"
    "  FOR s IN SELECT value->>0 AS tenant, (value->>1)::integer AS max, i::integer AS i"
    "   FROM json_array_elements(p_starts) WITH ORDINALITY AS a(value, i) ORDER BY (value->>0) COLLATE \"C\", i LOOP"
    "   taken[s.i] := airlock_exec_take(s.tenant, p_node, s.max);"
    "  END LOOP;"
    "  RETURN taken;"
    " END $$;",
};

#define N_MIGRATIONS (int)(sizeof MIGRATIONS / sizeof MIGRATIONS[0])

static int fail(PGconn *c, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "schema: %s: %s", what, PQerrorMessage(c));
    for (char *s = err; *s; s++)
        if (*s == '\n')
            *s = ' ';
    return -1;
}

static bool run(PGconn *c, const char *sql)
{
    PGresult *res = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(res);
    PQclear(res);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

/* Under the migration lock: the version, then each missing migration in a transaction. */
static int migrate(PGconn *c, void *ctx, char *err, size_t errlen)
{
    (void)ctx;
    if (!run(c, "CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"))
        return fail(c, "schema_version", err, errlen);
    PGresult *res = PQexec(c, "SELECT coalesce(max(version), 0) FROM schema_version");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        PQclear(res);
        return fail(c, "reading the version", err, errlen);
    }
    int have = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (have > N_MIGRATIONS) {
        snprintf(err, errlen, "schema: the database is at version %d, newer than this airlockd (%d)", have,
                 N_MIGRATIONS);
        return -1;
    }
    for (int v = have + 1; v <= N_MIGRATIONS; v++) {
        char mark[96];
        snprintf(mark, sizeof mark, "INSERT INTO schema_version (version) VALUES (%d)", v);
        if (!run(c, "BEGIN") || !run(c, MIGRATIONS[v - 1]) || !run(c, mark) || !run(c, "COMMIT")) {
            char what[48];
            snprintf(what, sizeof what, "migration %d", v);
            fail(c, what, err, errlen);
            run(c, "ROLLBACK");
            return -1;
        }
        log_info("database schema migrated to version %d", v);
    }
    return 0;
}

int pg_schema_migrate(pg_pool *p, char *err, size_t errlen)
{
    return pg_exec_locked(p, MIGRATION_LOCK, migrate, NULL, err, errlen);
}
