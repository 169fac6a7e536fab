-- Which transport moves the bytes. A transport is a small object (docs/api.md, "Transports"):
--
--   t.name                    "curl", "ngx", "uv", or a test's own
--   t:send(request)           → response | nil, failure   (blocks, or yields inside a task)
--       request  = { method, url, headers = {"Name: value", ...}, body, timeout_ms,
--                    connect_timeout_ms, verify = true | false | "ca.pem",
--                    max_response_bytes = nil | n (a larger body may be taken: raw file reads) }
--       (body is any Lua string, binary included; the response body likewise)
--       response = { status, reason, headers = {["lower-case-name"] = value}, body }
--       failure  = { message, sent = may the request have reached the server,
--                    tls = the TLS setup failed (the same on every try) }
--   t:sleep(seconds)          waits (a timer or a yield; never stalls a host loop inside a task)
--   t:close_idle()            (optional) → true: closes idle keep-alive connections
--   t:stats()                 (optional) → table of counters
--
-- The choice: `transport = "curl" | "ngx" | "uv" | <object>` in the options, else automatic:
-- the OpenResty cosocket transport anywhere in an nginx worker (where cosockets are missing,
-- in init_by_lua or log_by_lua, it raises an error saying what to do instead of blocking the
-- worker), else the host's default (set_default), else the libuv transport on vim.loop inside
-- Neovim, libcurl otherwise. Transports are loaded on first use: `require "airlock"` needs no
-- C, and nginx never loads the C core unless asked to.
local M = {}

local loaded = {}

-- nginx phases in which cosockets work.
M.COSOCKET_PHASES = {
  server_rewrite = true, rewrite = true, access = true, content = true, timer = true,
  ssl_cert = true, ssl_session_fetch = true, ssl_client_hello = true,
}

local function load(name)
  local t = loaded[name]
  if t then return t end
  local ok, mod = pcall(require, "airlock.transport." .. name)
  if not ok then
    error("airlock: transport '" .. name .. "' is not available: " .. tostring(mod), 0)
  end
  loaded[name] = mod
  return mod
end
M.load = load

-- Whether the code runs in an nginx worker's (or master's) Lua VM with the nginx Lua module:
-- its `ngx` has get_phase and cosockets. The VMs of ngx.run_worker_thread have an `ngx`
-- without sockets: there blocking libcurl is fine.
function M.in_nginx()
  local ngx = rawget(_G, "ngx")
  return type(ngx) == "table" and type(ngx.get_phase) == "function" and type(ngx.socket) == "table"
end

-- Whether the code runs where the cosocket transport can work.
function M.in_cosocket_context()
  return M.in_nginx() and M.COSOCKET_PHASES[rawget(_G, "ngx").get_phase()] == true
end

-- Whether `require(name)` would find a Lua module (package.searchpath is 5.2+).
local function has_module(name)
  if package.loaded[name] then return true end
  local searchpath = rawget(package, "searchpath")
  if searchpath then return searchpath(name, package.path) ~= nil end
  local file = name:gsub("%.", "/")
  for pattern in package.path:gmatch("[^;]+") do
    local f = io.open((pattern:gsub("%?", file)), "r")
    if f then
      f:close()
      return true
    end
  end
  return false
end

local host_default   -- set_default's choice

-- transport.set_default(choice): what the automatic choice gives in this Lua state (a host
-- with its own loop: `set_default("uv")` in a Neovim plugin); nil: back to automatic.
function M.set_default(choice)
  if choice ~= nil and type(choice) ~= "string" and type(choice) ~= "table" then
    error("airlock.transport.set_default: a transport name, object or nil expected", 2)
  end
  if choice == "auto" then choice = nil end
  host_default = choice
end

local nginx = M.in_nginx() and has_module("airlock.transport.ngx")

-- Whether this Lua state runs inside Neovim (vim.loop is its libuv loop).
function M.in_neovim()
  local vim = rawget(_G, "vim")
  return type(vim) == "table" and type(vim.loop) == "table" and type(vim.schedule) == "function"
end

-- The automatic choice for the code running now: cosockets inside nginx, else the host's
-- default, else libuv inside Neovim, else libcurl.
function M.auto()
  if nginx then return load("ngx") end
  if host_default ~= nil then return M.resolve(host_default) end
  if M.in_neovim() then return load("uv") end
  return load("curl")
end

-- The transport for a choice (nil or "auto": automatic; engine.check_transport checks it).
function M.resolve(choice)
  if choice == nil or choice == "auto" then return M.auto() end
  if type(choice) == "table" then return choice end
  return load(choice)
end

-- Inside nginx the cosocket transport also sets up the host (a scheduler per request or
-- timer, sessions deleted when the request ends): before the first spawn or call.
if nginx then load("ngx") end

return M
