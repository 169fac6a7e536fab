-- luacheck: max line length 140
-- The client's instructions per small call, counted by valgrind (callgrind): the SDK's whole
-- path (facade, engine, retry policy, transport, C core, libcurl, JSON decoding) against
-- bench/raw_curl_rate.c, a raw libcurl keep-alive loop in C, on the same airlockd. Unlike a
-- rate on this shared machine, an instruction count does not move with the load: each kind
-- runs twice (SHORT and LONG calls) and the difference over LONG - SHORT calls is the cost
-- of one call, start-up excluded. A small call: GET /v1/usage, 200 with a short JSON body.
-- Kinds: raw C; the curl transport (blocking) and the uv transport (a task on a luv loop),
-- under Lua 5.4 and LuaJIT (when its core is built). No assertion.
--
--   make build luajit-core && lua5.4 bench/call_instructions.lua [short] [long]
package.path = "spec/?.lua;bench/?.lua;" .. package.path
local airlockd = require "support.airlockd"
local proc = require "support.proc"

local SHORT = tonumber(arg and arg[1]) or 200
local LONG = tonumber(arg and arg[2]) or 1200
local RAW = os.getenv("RAW_CURL_RATE") or "build/bench/raw_curl_rate"
local LUAJIT_CORE = "build/luajit/airlock/core.so"
assert(proc.run("command -v valgrind >/dev/null"), "valgrind is missing")
assert(proc.run("test -x " .. proc.shell_quote(RAW)), RAW .. " is missing: make build")

local srv = airlockd.start({ env = {
  SANDBOX_TENANT_LIMITS = '{"*":{"max_concurrent_exec":4,"max_sessions":20,"requests_per_minute":10000000}}' } })
local q = proc.shell_quote
local key = srv.tenants.acme

-- The instructions a command executes (its own process, under callgrind); env: "NAME=value ..."
local function instructions(env, command)
  local rc, out = proc.run_capture(string.format("env %s valgrind --tool=callgrind --callgrind-out-file=/dev/null %s",
    env, command))
  local n = tonumber((out:match("Collected : (%d+)")))
  assert(rc == 0 and n, "failed: " .. command .. "\n" .. out)
  return n
end

local function per_call(command_for)
  local short, long = instructions(command_for(SHORT)), instructions(command_for(LONG))
  return (long - short) / (LONG - SHORT)
end

local function lua_kind(interpreter, cpath, transport)
  return function(n)
    return "LUA_CPATH=" .. q(cpath .. ";;"), string.format("%s bench/hosts/call_loop.lua %s %s %d %s",
      interpreter, q(srv.url), q(key), n, transport)
  end
end

local kinds = {
  { "raw C", function(n) return "", string.format("%s %s %s %d", q(RAW), q(srv.url .. "/v1/usage"), q(key), n) end },
  { "curl, Lua 5.4", lua_kind("lua5.4", "build/?.so", "curl") },
  { "uv, Lua 5.4", lua_kind("lua5.4", "build/?.so", "uv") },
}
if proc.run("test -f " .. LUAJIT_CORE .. " && command -v luajit >/dev/null") then
  kinds[#kinds + 1] = { "curl, LuaJIT", lua_kind("luajit", "build/luajit/?.so", "curl") }
  kinds[#kinds + 1] = { "uv, LuaJIT", lua_kind("luajit", "build/luajit/?.so", "uv") }
end

local rows, raw = {}, nil
local ok, err = pcall(function()
  for i, k in ipairs(kinds) do
    rows[i] = per_call(k[2])
    raw = raw or rows[i]
  end
end)
airlockd.stop(srv)
assert(ok, err)

print(string.format("client instructions per small call (GET /v1/usage), callgrind, (%d - %d calls) / %d", LONG, SHORT, LONG - SHORT))
print(string.format("%-16s %14s %8s", "kind", "instructions", "vs raw"))
for i, k in ipairs(kinds) do
  print(string.format("%-16s %14.0f %7.2fx", k[1], rows[i], rows[i] / raw))
end
