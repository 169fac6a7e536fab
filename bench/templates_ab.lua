-- luacheck: max line length 140
-- Template builds, two airlockd binaries side by side (A/B, e.g. main against a branch), interleaved
-- round by round (ABBA): each round starts a fresh server (no base, cold package cache) and
-- builds jq + hello twice (another setup each time): the first build, then one with the package
-- cache warm (and, on a server with the cached base, over the base). Load average printed per
-- server; this machine is shared, only figures of one run compare.
--   lua5.4 bench/templates_ab.lua A_BIN B_BIN [rounds]
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local airlockd = require "support.airlockd"
local harness = require "harness"
local proc = require "support.proc"
local cjson = require "cjson"
local call, check = harness.call, harness.check
local A_BIN, B_BIN, ROUNDS = arg[1], arg[2], tonumber(arg[3] or "2")
assert(A_BIN and B_BIN, "usage: lua5.4 bench/templates_ab.lua A_BIN B_BIN [rounds]")
local KEY = "bk_" .. airlockd.random_hex(16)
local LIMITS = '{"*":{"max_templates":50,"max_template_builds":2}}'
local function now() local f = io.popen("date +%s.%N"); local t = tonumber(f:read("*l")); f:close(); return t end
local function load() return (proc.read_file("/proc/loadavg") or "?"):match("^(%S+ %S+ %S+)") end
local function build(server, body)
  local t0 = now()
  local status, rec = call(server, "POST", "/v1/templates", KEY, cjson.encode(body))
  check(status == 202, "POST: " .. tostring(status))
  while rec.status == "building" do
    proc.sleep(0.5)
    status, rec = call(server, "GET", "/v1/templates/" .. body.name, KEY)
    check(status == 200, "GET: " .. tostring(status))
  end
  check(rec.status == "ready", body.name .. " failed: " .. tostring(rec.log_tail))
  return now() - t0
end
for round = 1, ROUNDS do
  for _, which in ipairs(round % 2 == 1 and { "A", "B" } or { "B", "A" }) do
    local s = airlockd.start({ binary = which == "A" and A_BIN or B_BIN, tenants = { bench = KEY },
      env = { SANDBOX_TENANT_LIMITS = LIMITS } })
    local l0 = load()
    local first = build(s, { name = "a" .. round, packages = { "jq", "hello" }, setup = { "echo " .. round } })
    local second = build(s, { name = "b" .. round, packages = { "jq", "hello" }, setup = { "echo b" .. round } })
    print(string.format("round %d %-4s first %.1f s, second %.1f s (load %s -> %s)", round, which, first, second, l0, load()))
    io.stdout:flush()
    airlockd.stop(s)
  end
end
