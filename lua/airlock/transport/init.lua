-- Which transport moves the bytes. A transport is a small object (docs/api.md, "Transports"):
--
--   t.name                    "curl", "ngx", "uv", or a test's own
--   t:send(request)           → response | nil, failure   (blocks, or yields inside a task)
--       request  = { method, url, headers = {"Name: value", ...}, body, timeout_ms,
--                    connect_timeout_ms, verify = true | false | "ca.pem" }
--       response = { status, reason, headers = {["lower-case-name"] = value}, body }
--       failure  = { message, sent = may the request have reached the server,
--                    tls = the TLS setup failed (the same on every try) }
--   t:sleep(seconds)          waits (a timer or a yield; never stalls a host loop inside a task)
--   t:close_idle()            (optional) → true: closes idle keep-alive connections
--   t:stats()                 (optional) → table of counters
--
-- The choice: `transport = "curl" | "ngx" | "uv" | <object>` in the options, else automatic:
-- the OpenResty cosocket transport inside an nginx request or timer (when it is installed),
-- else the host's default (set_default), else the libuv transport on vim.loop inside Neovim,
-- libcurl otherwise. Transports are loaded on first use: `require "airlock"` needs no C.
local M = {}

local loaded = {}

-- nginx phases in which cosockets work.
M.COSOCKET_PHASES = {
  rewrite = true, access = true, content = true, timer = true, ssl_cert = true,
  ssl_session_fetch = true,
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

-- Whether the code runs where the cosocket transport can work.
function M.in_cosocket_context()
  local ngx = rawget(_G, "ngx")
  if type(ngx) ~= "table" or type(ngx.get_phase) ~= "function" then return false end
  return M.COSOCKET_PHASES[ngx.get_phase()] == true
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

-- Whether this Lua state runs inside Neovim (vim.loop is its libuv loop).
function M.in_neovim()
  local vim = rawget(_G, "vim")
  return type(vim) == "table" and type(vim.loop) == "table" and type(vim.schedule) == "function"
end

-- The automatic choice for the code running now: cosockets inside nginx, else the host's
-- default, else libuv inside Neovim, else libcurl.
function M.auto()
  if M.in_cosocket_context() and has_module("airlock.transport.ngx") then return load("ngx") end
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

return M
