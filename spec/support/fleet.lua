-- A fleet for the specs: scripts/fleet.sh up in a fresh temporary directory (a private
-- PostgreSQL, HAProxy, N airlockd nodes on 127.0.0.2..), its fleet.json decoded, and down,
-- which always runs (call it from teardown / finally) and leaves nothing running.
local airlockd = require "support.airlockd"
local cjson = require "cjson"
local http = require "support.http_client"
local log_secrets = require "support.log_secrets"
local luassert = require "luassert" -- busted's assert lives in the spec files' environment only
local proc = require "support.proc"

local M = {}
local q = proc.shell_quote

local function script()
  return proc.repo_root() .. "/scripts/fleet.sh"
end

-- Runs `fleet.sh <args>` with env (a table of NAME = value); returns ok and its output.
local function fleet_sh(env, args)
  local words = {}
  for k, v in pairs(env or {}) do words[#words + 1] = k .. "=" .. q(v) end
  words[#words + 1] = q(script())
  for _, a in ipairs(args) do words[#words + 1] = q(a) end
  local rc, out = proc.run_capture(table.concat(words, " "))
  return rc == 0, out
end
M.sh = fleet_sh

-- Reads DIR/fleet.json again (after a node restart).
local function int(x) return tonumber(string.format("%d", x)) end

function M.reload(f)
  f.info = cjson.decode(assert(proc.read_file(f.dir .. "/fleet.json")))
  -- cjson may give whole numbers as floats (4400.0): pids are made integers
  f.info.postgres.pid = int(f.info.postgres.pid)
  f.info.haproxy.pid = int(f.info.haproxy.pid)
  f.info.haproxy.router_pid = int(f.info.haproxy.router_pid)
  for _, n in ipairs(f.info.nodes) do n.pid = int(n.pid) end
  f.router = { url = f.info.router }
  f.nodes = {}
  for _, n in ipairs(f.info.nodes) do f.nodes[n.id] = { url = n.url, pid = n.pid, id = n.id } end
  return f
end

-- Brings up a fleet of opts.nodes (3) nodes with opts.env; errors (after taking down what
-- started) when it did not come up. With opts.shared_snapshots, the nodes share one
-- SANDBOX_SNAPSHOT_DIR, f.snapshot_dir, in a temporary folder of its own that down removes.
function M.up(opts)
  local dir = proc.make_temp_dir()
  -- small workspace disks (each is a fully allocated image) under a cap per node, no spares,
  -- and never this machine's resolver for egress: the machine is shared (as support.airlockd)
  local env = { SANDBOX_WARM_NEW = "0", SANDBOX_WORKSPACE_QUOTA_MB = "16", SANDBOX_DISK_TOTAL_MB = "2048",
                SANDBOX_EGRESS_DNS = "127.0.0.1:1" }
  local shared = opts.shared_snapshots and proc.make_temp_dir() or nil
  if shared then env.SANDBOX_SNAPSHOT_DIR = shared .. "/snapshots" end
  airlockd.shared_template_bases(env, opts.env)
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local ok, out = fleet_sh(env, { "up", dir, "--nodes", tostring(opts.nodes or 3) })
  local f = { dir = dir, env = env, up_output = out, shared = shared, snapshot_dir = env.SANDBOX_SNAPSHOT_DIR }
  if not ok then
    M.down(f)
    error("fleet.sh up failed:\n" .. out, 2)
  end
  return M.reload(f)
end

-- The answer of one SQL query on the fleet's database (psql, unaligned, tuples only), trimmed.
function M.sql(f, query)
  local cmd = string.format("PGPASSFILE=%s psql -X -q -At -h 127.0.0.1 -p %s -U airlock -d airlock -c %s 2>&1",
    q(f.dir .. "/pg/pgpass"), q(proc.read_file(f.dir .. "/pg/port"):gsub("%s+$", "")), q(query))
  return (proc.output(cmd):gsub("%s+$", ""))
end

-- Every process of the fleet as pids: PostgreSQL, HAProxy, the router program and the nodes from
-- fleet.json, and every process each of them started (PostgreSQL's backends, each node's
-- cgroup guard and sandboxes).
function M.pids(f)
  local pids, mine = {}, {}
  local function add(pid)
    mine[pid] = true
    pids[#pids + 1] = pid
  end
  add(f.info.postgres.pid)
  add(f.info.haproxy.pid)
  add(f.info.haproxy.router_pid)
  for _, n in ipairs(f.info.nodes) do add(n.pid) end
  local parent = {}
  for pid, ppid in proc.output("ps -e -o pid=,ppid="):gmatch("(%d+)%s+(%d+)") do
    parent[tonumber(pid)] = tonumber(ppid)
  end
  local grew = true
  while grew do
    grew = false
    for pid, ppid in pairs(parent) do
      if not mine[pid] and mine[ppid] then
        add(pid)
        grew = true
      end
    end
  end
  return pids
end

-- With AIRLOCK_FLEET_LOGS=DIR set, copies the fleet's logs (each node's, HAProxy's,
-- PostgreSQL's) into a fresh folder of DIR after `down`, before the fleet's folder goes.
local function keep_logs(f)
  local to = os.getenv("AIRLOCK_FLEET_LOGS")
  if not to or to == "" then return end
  local dest = to .. "/fleet-" .. os.time() .. "-" .. math.random(1e6)
  os.execute(string.format("mkdir -p %s && cd %s && cp --parents nodes/*/log haproxy/*.cfg haproxy/log "
    .. "pg/postgres.log %s 2>/dev/null", q(dest), q(f.dir), q(dest)))
  io.stderr:write("fleet logs kept in ", dest, "\n")
end

-- The secrets the fleet's nodes were started with: f.env's and those fleet.sh made (the
-- database URL's password, the fleet secret).
local function fleet_secrets(f)
  local env = {}
  for k, v in pairs(f.env or {}) do env[k] = v end
  env.SANDBOX_DATABASE_URL_FILE = f.dir .. "/database.url"
  env.SANDBOX_FLEET_SECRET_FILE = f.dir .. "/fleet.secret"
  return log_secrets.from_env(env)
end

-- Takes the fleet down and removes its folder (and its shared snapshots' folder); then errors
-- if a node's log held one of the secrets it was started with (support.log_secrets).
function M.down(f)
  if not f or not f.dir then return end
  local ok, out = fleet_sh(f.env, { "down", f.dir })
  if not ok then io.stderr:write("fleet.sh down: ", out, "\n") end
  if f.shared then
    proc.remove_tree(f.shared)
    f.shared = nil
  end
  keep_logs(f)
  local secrets, leaks = fleet_secrets(f), {}
  for path in proc.output("ls " .. q(f.dir) .. "/nodes/*/log 2>/dev/null"):gmatch("[^\n]+") do
    leaks[#leaks + 1] = log_secrets.leaks(proc.read_file(path) or "", secrets, path)
  end
  proc.remove_tree(f.dir)
  f.dir = nil
  if #leaks > 0 then error(table.concat(leaks, "; "), 2) end
end

-- n requests at once (curl, `parallel` at a time) of method path with key and body; returns
-- the count of each status code ({ [201] = 10, [429] = 50 }).
function M.parallel(url, n, parallel, method, path, key, body)
  local cmd = string.format(
    "seq %d | xargs -P %d -I@ curl -s -o /dev/null -w '%%{http_code}\\n' --max-time 60 -X %s -H %s %s %s",
    n, parallel, method, q("X-API-Key: " .. key),
    body and ("-H 'Content-Type: application/json' --data-binary " .. q(body)) or "", q(url .. path))
  local counts = {}
  for code in proc.output(cmd):gmatch("%d+") do
    counts[tonumber(code)] = (counts[tonumber(code)] or 0) + 1
  end
  return counts
end

-- The line node id's load report gives HAProxy's agent-check ("ready up 70%", "drain").
function M.agent(f, id)
  local socket = require "socket"
  local port = tonumber(M.setting(f, "node:" .. id .. ":agent_port"))
  local host = f.nodes[id].url:match("^http://([%d.]+):")
  local c = assert(socket.connect(host, port))
  c:settimeout(5)
  local line = c:receive("*l")
  c:close()
  return line
end

-- A command of HAProxy's runtime API (its stats socket), e.g. "get weight create/node1".
function M.haproxy(f, command)
  return proc.output("printf '%s\\n' " .. q(command) .. " | python3 -c " .. q(
    "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
    .. " s.sendall(sys.stdin.buffer.read()); s.shutdown(socket.SHUT_WR);"
    .. " sys.stdout.write(s.makefile().read())") .. " " .. q(f.info.haproxy.stats_socket))
end

-- The slot a session id names (its first two hex digits after "sbx_": domain/session_id.h).
function M.slot_of(id)
  return id:sub(5, 6)
end

-- GET /v1/admin/nodes through the router with admin_key (asserting a 200): the nodes keyed by
-- slot, keyed by id, and as listed.
function M.nodes(f, admin_key)
  local res = http.request(f.router, "GET", "/v1/admin/nodes", { key = admin_key })
  luassert.are.equal(200, res.status, res.body)
  local by_slot, by_id = {}, {}
  for _, n in ipairs(res.json.nodes) do
    by_slot[n.slot] = n
    by_id[n.id] = n
  end
  return by_slot, by_id, res.json.nodes
end

-- A new session of key's tenant on node_id, made through the router with body (optional):
-- creates that land elsewhere are deleted again; a 503 while HAProxy's checks take a node that
-- came back is tried again.
function M.create_on(f, admin_key, key, node_id, body)
  local by_slot = M.nodes(f, admin_key)
  for _ = 1, 100 do
    local res
    proc.wait_until(10, function()
      res = http.create(f.router, key, body)
      return res.status ~= 503
    end)
    luassert.are.equal(201, res.status, res.body)
    local s = res.json.session_id
    if by_slot[M.slot_of(s)].id == node_id then return s end
    luassert.are.equal(200, http.delete(f.router, key, s).status)
  end
  error("no create landed on " .. node_id)
end

-- A setting of the fleet's settings file (DIR/fleet.env), e.g. "node:node1:internal".
function M.setting(f, key)
  for line in (proc.read_file(f.dir .. "/fleet.env") or ""):gmatch("[^\n]+") do
    local k, v = line:match("^([^=]+)=(.*)$")
    if k == key then return v end
  end
  return nil
end

-- One raw HTTP request (text as sent) to HOST:PORT; the status and the whole answer.
function M.raw(hostport, text)
  local socket = require "socket"
  local host, port = hostport:match("^([%d.]+):(%d+)$")
  local c = assert(socket.connect(host, tonumber(port)))
  c:settimeout(30)
  c:send(text)
  local answer = c:receive("*a")
  c:close()
  return tonumber((answer or ""):match("^HTTP/1%.%d (%d+)")), answer or ""
end

-- The router's or a node's log lines.
function M.node_log(f, id)
  return proc.read_file(f.dir .. "/nodes/" .. id .. "/log") or ""
end

return M
