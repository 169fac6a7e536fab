-- What the egress specs share: an airlockd wired to the offline stand-ins of
-- support.egress_upstream, sessions with egress rules, the probe (egress_probe.py) run inside
-- a sandbox, the session's egress log, and the host-side view of airlockd's descriptors.
-- Lua 5.1-compatible.
local cjson = require "cjson"
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local upstream = require "support.egress_upstream"

local M = {}

local function here(name)
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return (src:gsub("egress%.lua$", name))
end

-- Starts the stand-ins and an airlockd using them. opts.env: more environment; opts.policy:
-- the "*" egress policy. Returns { up, server, key, other } (acme's and other's keys).
function M.start(opts)
  opts = opts or {}
  local up = upstream.start()
  local env = upstream.env(up, opts.policy)
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local ok, server = pcall(airlockd.start, { env = env, args = opts.args, dir = opts.dir })
  if not ok then
    upstream.stop(up)
    error(server, 2)
  end
  return { up = up, server = server, key = server.tenants.acme, other = server.tenants.other }
end

function M.stop(ctx)
  if ctx.server then airlockd.stop(ctx.server) end
  if ctx.up then upstream.stop(ctx.up) end
end

-- A new session of key's tenant with these egress rules; returns its id.
function M.session(server, key, egress)
  -- lua-cjson would send an empty table as {}
  local body = #egress == 0 and '{"egress":[]}' or cjson.encode({ egress = egress })
  local r = http_client.create(server, key, body)
  assert(r.status == 201, r.body)
  return r.json.session_id
end

-- Runs a command and returns the decoded exec answer (asserting a 200).
function M.exec(server, key, sid, command, timeout)
  local r = http_client.exec(server, key, sid, command, timeout or 60)
  assert(r.status == 200, r.body)
  return r.json
end

-- Puts the probe and its steps into the session's workspace; returns the command that runs it.
local function install_probe(server, key, sid, steps)
  local w = http_client.write(server, key, sid, ".probe.py", assert(proc.read_file(here("egress_probe.py"))))
  assert(w.status == 200, w.body)
  w = http_client.write(server, key, sid, ".probe.json", cjson.encode(steps))
  assert(w.status == 200, w.body)
  return "python3 .probe.py @.probe.json"
end

-- Runs the probe with a list of steps (see egress_probe.py) inside the session's sandbox;
-- returns one decoded result per step and the exec answer.
function M.probe(server, key, sid, steps, timeout)
  local r = M.exec(server, key, sid, install_probe(server, key, sid, steps), timeout)
  local out = {}
  for line in r.stdout:gmatch("[^\n]+") do out[#out + 1] = cjson.decode(line) end
  assert(#out == #steps, "probe: " .. r.output)
  return out, r
end

-- Starts the probe in the background (exec_async) and returns the job once the workspace file
-- `marker` exists (a step writes it), or raises after `within` seconds. before/after: shell
-- commands around the probe.
function M.probe_async(server, key, sid, steps, marker, within, before, after)
  local command = (before or "") .. install_probe(server, key, sid, steps) .. (after or "")
  local job = http_client.exec_async(server, key, sid, command, 60)
  local seen = proc.wait_until(within or 40, function()
    return http_client.read(server, key, sid, marker).json.content == ""
  end)
  assert(seen, "the probe did not get to " .. marker)
  return job
end

-- The session's events (GET /v1/sessions/{id}/egress).
function M.events(server, key, sid, limit)
  local path = "/v1/sessions/" .. sid .. "/egress" .. (limit and ("?limit=" .. limit) or "")
  local r = http_client.request(server, "GET", path, { key = key })
  assert(r.status == 200, r.body)
  return r.json.events
end

-- The events added since `before` events were there.
-- With want, waits (20 s at most) until there are that many: a tunnel's event is logged when
-- it closes, which can come just after the command that opened it has answered.
function M.new_events(server, key, sid, before, want)
  local out
  proc.wait_until(20, function()
    local all = M.events(server, key, sid, 1000)
    out = {}
    for i = before + 1, #all do out[#out + 1] = all[i] end
    return not want or #out >= want
  end, 0.1)
  return out
end

-- What each of airlockd's descriptors links to ("socket:[...]", "net:[...]", a path).
local function descriptor_targets(server)
  return proc.output("ls -l /proc/" .. server.pid .. "/fd 2>/dev/null"):gmatch("%-> ([^\n]+)")
end

-- What airlockd holds, from /proc/<pid>/fd: sockets, namespace descriptors, all of them.
function M.descriptors(server)
  local counts = { socket = 0, net = 0, total = 0 }
  for target in descriptor_targets(server) do
    counts.total = counts.total + 1
    if target:find("^socket:") then counts.socket = counts.socket + 1 end
    if target:find("^net:") then counts.net = counts.net + 1 end
  end
  return counts
end

-- The network namespaces airlockd holds open: a set of their links ("net:[4026532...]").
function M.namespaces(server)
  local set = {}
  for target in descriptor_targets(server) do
    if target:find("^net:") then set[target] = true end
  end
  return set
end

-- descriptors() once it has not changed for a second (requests just answered settle first).
function M.quiet_descriptors(server)
  local last, same = M.descriptors(server), 0
  for _ = 1, 100 do
    proc.sleep(0.2)
    local now = M.descriptors(server)
    if now.socket == last.socket and now.net == last.net and now.total == last.total then
      same = same + 1
      if same >= 5 then return now end
    else
      same = 0
    end
    last = now
  end
  return last
end

-- The host's network namespaces and links, as `ip` shows them (names only).
function M.host_network()
  local links = {}
  for name in proc.output("ip -o link show"):gmatch("%d+: ([^:@]+)[:@]") do links[#links + 1] = name end
  table.sort(links)
  return { netns = proc.output("ip netns list"), links = table.concat(links, " ") }
end

return M
