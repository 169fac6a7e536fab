--- A local MCP server over stdio (used by bin/airlock-mcp): JSON-RPC 2.0, one message per
-- line, the nine sandbox tools of the reference local MCP server (airlock-sandbox-mcp),
-- run_python (ours: a stateful kernel, its charts as image content) and, ours, snapshot and
-- restore (airlockd) for agents that branch, one
-- sandbox per process created on the first tool call and deleted when the client
-- disconnects. The tools, their checks and texts come from the agent catalogue
-- (airlock.internal.agent.catalogue), shared with airlock.tools. Runs on Lua 5.1/LuaJIT through 5.4.
--
--   local mcp = require "airlock.mcp"
--   local settings = assert(mcp.settings_from_env(os.getenv, arg))
--   mcp.serve(settings, io.stdin, io.stdout)
local json = require "airlock.internal.json"
local catalogue = require "airlock.internal.agent.catalogue"
local agent_text = require "airlock.internal.agent.text"
local tasks = require "airlock.tasks"

local M = {}

M.SERVER_NAME = "airlock-sandbox"
M.PROGRAM = "airlock-mcp"
M.PROTOCOL_VERSIONS = { "2025-06-18", "2025-03-26", "2024-11-05" }
M.LATEST_PROTOCOL_VERSION = M.PROTOCOL_VERSIONS[1]
M.EXPIRED_NOTE = "[note] The previous sandbox session expired; this ran in a new, empty workspace.\n"

-- The SDK's version (the server reports it), read lazily so this module loads without it.
function M.version()
  local ok, airlock = pcall(require, "airlock")
  if ok and type(airlock) == "table" then
    local v = airlock.VERSION or airlock._VERSION
    if type(v) == "string" then return (v:gsub("^airlock%s*", "")) end
  end
  return "0.1.0"
end

M.INSTRUCTIONS = table.concat({
  "Tools for an isolated Linux sandbox (bash, Python 3.11) on a remote server. Use it for code "
    .. "you don't want to run on the user's machine: untrusted or generated code, experiments, "
    .. "package installs, tests.",
  "",
  "- run_command runs every command in a fresh container; only files under /workspace persist "
    .. "between calls (processes and environment variables do not).",
  "- run_python keeps one Python interpreter for the whole conversation: load data once, then "
    .. "reuse its variables; charts shown with plt.show() come back as images.",
  "- Limits: 256 MB RAM, 1 CPU, 64 processes, a per-workspace disk quota and a 1-60 s timeout "
    .. "per command.",
  "- No internet access unless the server was configured with egress hosts (call sandbox_info "
    .. "to see them); then only HTTPS to those hosts works.",
  "- reset_sandbox wipes the workspace and starts over with an empty one.",
  "- snapshot keeps the workspace's files as they are (before a risky change); restore goes back "
    .. "to one in a new sandbox (airlockd servers).",
}, "\n")

---------------------------------------------------------------------------------------------
-- Small helpers

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

M.shell_quote = agent_text.shell_quote
M.group_digits = agent_text.group_digits

local is_null = catalogue.is_null

local function read_all(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  return data
end

-- SHA-256 hex digest of `data` with the system's sha256sum (or openssl). The data goes
-- through a pipe, never a command line, since it contains the API key.
function M.sha256_hex(data)
  local out = os.tmpname()
  local commands = {
    "sha256sum > " .. M.shell_quote(out) .. " 2>/dev/null",
    "openssl dgst -sha256 -r > " .. M.shell_quote(out) .. " 2>/dev/null",
  }
  for _, command in ipairs(commands) do
    local pipe = io.popen(command, "w")
    if pipe then
      pipe:write(data)
      pipe:close()
      local hex = (read_all(out) or ""):match("^(%x+)")
      if hex and #hex == 64 then
        os.remove(out)
        return hex:lower()
      end
    end
  end
  os.remove(out)
  error("airlock-mcp: no sha256sum or openssl found to name the session state file", 0)
end

---------------------------------------------------------------------------------------------
-- Settings

local function truthy_flag(v)
  if v == nil then return false end
  v = trim(v):lower()
  return v == "1" or v == "true" or v == "yes"
end

local function split_egress(s)
  local list = {}
  for part in s:gmatch("[^,]+") do
    part = trim(part)
    if part ~= "" then list[#list + 1] = part end
  end
  return list
end

function M.usage()
  return table.concat({
    "usage: airlock-mcp [--egress RULES] [--template NAME] [--help] [--version]",
    "",
    "A local MCP server (stdio) that gives an AI client one isolated Airlock sandbox:",
    "run_command, run_python, write_file, read_file, list_files, import_repo, egress_log,",
    "activity, sandbox_info, reset_sandbox, snapshot, restore. The sandbox is created on the",
    "first tool call and deleted when the client disconnects.",
    "",
    "Environment:",
    "  SANDBOX_API_URL       the Airlock server, e.g. http://127.0.0.1:8080 (required)",
    "  SANDBOX_API_KEY       your API key (required; never written to disk)",
    "  SANDBOX_API_INSECURE  1/true/yes: accept any TLS certificate",
    "  AIRLOCK_EGRESS        comma-separated hosts or presets the sandbox may reach (pypi, npm, ...)",
    "  AIRLOCK_TEMPLATE      sandbox template (default sandbox-base:latest; airlockd: a built one)",
    "  AIRLOCK_MEMORY_MB, AIRLOCK_CPUS, AIRLOCK_DISK_MB, AIRLOCK_MAX_PROCESSES",
    "                        the sandbox's size (airlockd; default the server's)",
    "  AIRLOCK_STATE_DIR     where the session id is kept (default $XDG_STATE_HOME/airlock-sandbox",
    "                        or ~/.local/state/airlock-sandbox)",
    "",
    "Options:",
    "  --egress RULES        overrides AIRLOCK_EGRESS",
    "  --template NAME       overrides AIRLOCK_TEMPLATE",
    "  --help                this text",
    "  --version             print the version",
  }, "\n") .. "\n"
end

-- The size variables, in the order they are hashed into the state file's name.
local SIZE_VARS = {
  { "memory_mb", "AIRLOCK_MEMORY_MB" }, { "cpus", "AIRLOCK_CPUS" }, { "disk_mb", "AIRLOCK_DISK_MB" },
  { "max_processes", "AIRLOCK_MAX_PROCESSES" },
}

-- The sizes the environment asks for (nil when none), or nil and an error message.
local function sizes_from_env(getenv)
  local sizes
  for _, pair in ipairs(SIZE_VARS) do
    local raw = trim(getenv(pair[2]) or "")
    if raw ~= "" then
      local n = tonumber(raw)
      if not n or n ~= n or n == math.huge or n == -math.huge then
        return nil, "airlock-mcp: " .. pair[2] .. " must be a number, got '" .. raw .. "' (see --help)."
      end
      sizes = sizes or {}
      sizes[pair[1]] = n
    end
  end
  return sizes
end

--- Reads the settings from the environment (`getenv`, e.g. os.getenv) and the command-line
-- arguments. Returns settings, or nil, an action ("help", "version") or an error message
-- and the exit status.
function M.settings_from_env(getenv, argv)
  argv = argv or {}
  local egress_arg, template_arg
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--help" or a == "-h" then return nil, "help", 0 end
    if a == "--version" then return nil, "version", 0 end
    local name, value = a:match("^(%-%-%a+)=(.*)$")
    if not name then name = a end
    if name == "--egress" or name == "--template" then
      if value == nil then
        i = i + 1
        value = argv[i]
        if value == nil then return nil, "airlock-mcp: " .. name .. " needs a value (see --help).", 2 end
      end
      if name == "--egress" then egress_arg = value else template_arg = value end
    else
      return nil, "airlock-mcp: unknown argument '" .. a .. "' (see --help).", 2
    end
    i = i + 1
  end

  local url, key = getenv("SANDBOX_API_URL") or "", getenv("SANDBOX_API_KEY") or ""
  if trim(url) == "" or trim(key) == "" then
    return nil, "airlock-mcp: set SANDBOX_API_URL and SANDBOX_API_KEY (see --help).", 2
  end
  local sizes, size_err = sizes_from_env(getenv)
  if size_err then return nil, size_err, 2 end
  local template = template_arg or getenv("AIRLOCK_TEMPLATE")
  if template == nil or trim(template) == "" then template = "sandbox-base:latest" end
  local state_dir = getenv("AIRLOCK_STATE_DIR")
  if state_dir == nil or state_dir == "" then
    local xdg = getenv("XDG_STATE_HOME")
    if xdg and xdg ~= "" then
      state_dir = xdg .. "/airlock-sandbox"
    else
      state_dir = (getenv("HOME") or ".") .. "/.local/state/airlock-sandbox"
    end
  end
  return {
    base_url = trim(url):gsub("/+$", ""),
    api_key = trim(key),
    template = trim(template),
    egress = split_egress(egress_arg or getenv("AIRLOCK_EGRESS") or ""),
    verify = not truthy_flag(getenv("SANDBOX_API_INSECURE")),
    state_dir = state_dir,
    sizes = sizes,
  }
end

--- The state file for these settings: <state_dir>/mcp-session-<16 hex>.json, named from a
-- hash of url, key, template and egress (the key itself is never stored), and the sizes
-- when any was asked for (a session of another size is another session).
function M.state_file(settings)
  local parts = { settings.base_url, settings.api_key, settings.template, table.concat(settings.egress, ",") }
  for _, pair in ipairs(settings.sizes and SIZE_VARS or {}) do
    local v = settings.sizes[pair[1]]
    if v ~= nil then parts[#parts + 1] = pair[1] .. "=" .. string.format("%.17g", v) end
  end
  local material = table.concat(parts, "|")
  return settings.state_dir .. "/mcp-session-" .. M.sha256_hex(material):sub(1, 16) .. ".json"
end

---------------------------------------------------------------------------------------------
-- The SDK, seen through the few calls the server makes. Everything that depends on the
-- shape of the airlock module is here.

local class_name, is_a, message_of = agent_text.error_class, agent_text.is_error, agent_text.message_of
M.is_a = is_a

local Sdk = {}
Sdk.__index = function(self, key)
  if key == "airlock" then
    local airlock = require "airlock" -- loaded on first use: tools/list needs no SDK
    rawset(self, "airlock", airlock)
    return airlock
  end
  return Sdk[key]
end

function M.sdk(airlock)
  return setmetatable({ airlock = airlock }, Sdk)
end

function Sdk.options(_, settings, extra)
  local opts = {
    base_url = settings.base_url, api_key = settings.api_key, template = settings.template,
    egress = settings.egress, verify = settings.verify,
  }
  for k, v in pairs(settings.sizes or {}) do opts[k] = v end
  for k, v in pairs(extra or {}) do opts[k] = v end
  return opts
end

function Sdk:create(settings)
  return self.airlock.sandbox(self:options(settings))
end

-- A new sandbox whose workspace is snapshot `id`'s (airlockd).
function Sdk:create_from(settings, id)
  return self.airlock.sandbox(self:options(settings, { from_snapshot = id }))
end

-- Deletes session `id` with a short timeout and no retries; errors are the caller's.
function Sdk:delete(settings, id, timeout)
  local sbx = self.airlock.attach(id, self:options(settings, { max_retries = 0 }))
  return sbx:close({ timeout = timeout })
end

function Sdk.close(_, sbx, timeout)
  return sbx:close({ timeout = timeout })
end

function Sdk.session_id(_, sbx) return sbx.session_id end

---------------------------------------------------------------------------------------------
-- The sandbox holder: one sandbox per process, created on first use, replaced once when
-- the server says it expired, deleted on disconnect.

local Holder = {}
Holder.__index = Holder

function M.holder(settings, sdk)
  return setmetatable({ settings = settings, sdk = sdk or M.sdk(), sbx = nil, swept = false }, Holder)
end

function Holder:path()
  if not self.state_path then self.state_path = M.state_file(self.settings) end
  return self.state_path
end

function Holder:save(id)
  os.execute("mkdir -p " .. M.shell_quote(self.settings.state_dir) .. " 2>/dev/null")
  local path = self:path()
  local tmp = path .. ".tmp"
  local f = io.open(tmp, "wb")
  if not f then return end
  f:write(assert(json.encode({ session_id = id })), "\n")
  f:close()
  os.rename(tmp, path)
end

function Holder:forget()
  os.remove(self:path())
end

-- A session id left behind by a killed process with the same settings.
function Holder:left_over()
  local data = read_all(self:path())
  if not data then return nil end
  local state = json.decode(data)
  if type(state) == "table" and type(state.session_id) == "string" and state.session_id ~= "" then
    return state.session_id
  end
  return nil
end

function Holder:get()
  if self.sbx then return self.sbx end
  if not self.swept then
    self.swept = true
    local old = self:left_over()
    if old then tasks.pcall(self.sdk.delete, self.sdk, self.settings, old, 5) end
    self:forget()
  end
  local sbx = self.sdk:create(self.settings)
  self.sbx = sbx
  self:save(self.sdk:session_id(sbx))
  return sbx
end

--- Runs fn(sbx); on NotFoundError (the session expired) starts a new sandbox and runs fn
-- once more, prefixing its text with a note.
-- fn's second result (run_python's images) is passed on.
function Holder:call(fn)
  local sbx = self:get()
  local ok, res, extra = tasks.pcall(fn, sbx)
  if ok then return res, extra end
  if not is_a(res, "NotFoundError") then error(res, 0) end
  self.sbx = nil
  self:forget()
  local text
  text, extra = fn(self:get())
  return M.EXPIRED_NOTE .. text, extra
end

function Holder:reset()
  local old = self.sbx
  self.sbx = nil
  if old then
    local ok, err = tasks.pcall(self.sdk.close, self.sdk, old, nil)
    if not ok and not is_a(err, "NotFoundError") then error(err, 0) end
  end
  self:forget()
  self.swept = true
  return self:get()
end

-- The restore tool: a new sandbox from snapshot id replaces the one held (deleted once the new
-- one is there; a failed restore keeps it).
function Holder:restore(id)
  local new = self.sdk:create_from(self.settings, id)
  local old = self.sbx
  self.sbx = new
  self.swept = true
  self:save(self.sdk:session_id(new))
  if old then tasks.pcall(self.sdk.close, self.sdk, old, nil) end
  return new
end

--- On disconnect: delete the session (1.5 s, no retries, errors ignored) and the state file.
function Holder:shutdown()
  local sbx = self.sbx
  self.sbx = nil
  if sbx then
    tasks.pcall(self.sdk.close, self.sdk, sbx, 1.5)
    self:forget()
  end
end

---------------------------------------------------------------------------------------------
-- The tools (the catalogue's "mcp" surface)

local SURFACE = "mcp"
local TEXTS = catalogue.TEXTS.mcp

M.format_egress = catalogue.format_egress
M.format_activity = catalogue.format_activity
M.TOOLS = catalogue.tools(SURFACE)

function M.list_tools()
  local list = {}
  for i, t in ipairs(M.TOOLS) do
    local m = t.mcp
    list[i] = {
      name = t.name,
      title = m.title,
      description = m.description,
      inputSchema = catalogue.schema(t, SURFACE),
      annotations = { title = m.title, readOnlyHint = m.read_only, destructiveHint = m.destructive },
    }
  end
  return list
end

---------------------------------------------------------------------------------------------
-- JSON-RPC

local Server = {}
Server.__index = Server

--- A server for `settings`; opts.sdk replaces the SDK adapter (tests).
function M.server(settings, opts)
  opts = opts or {}
  local self = setmetatable({ settings = settings, initialized = false }, Server)
  self.holder = opts.holder or M.holder(settings, opts.sdk)
  return self
end

-- Encodes a response (json.encode writes a numeric id exactly: 10^15, not 1e+15).
local function encode_response(id, key, value)
  if id == nil then id = json.null end
  return assert(json.encode({ jsonrpc = "2.0", id = id, [key] = value }))
end

local function rpc_error(id, code, message)
  return encode_response(id, "error", { code = code, message = message })
end

-- The most images one tool result carries (a cell may draw many charts; each is a whole PNG in
-- the client's context): the text says how many more there were.
M.MAX_TOOL_IMAGES = 8

-- images: {mime =, base64 =} each (run_python's charts), as MCP image content after the text.
local function tool_result(answer, is_error, images)
  images = images or {}
  if #images > M.MAX_TOOL_IMAGES then
    answer = answer .. string.format("\n[note] %d more images were drawn but not sent (at most %d per call).",
      #images - M.MAX_TOOL_IMAGES, M.MAX_TOOL_IMAGES)
  end
  local content = { { type = "text", text = agent_text.truncate(answer) } }
  for i = 1, math.min(#images, M.MAX_TOOL_IMAGES) do
    content[#content + 1] = { type = "image", data = images[i].base64, mimeType = images[i].mime }
  end
  return { content = content, isError = is_error }
end

function Server:call_tool(tool, args)
  local ok, res, images = tasks.pcall(function()
    if tool.reset then
      local sbx = self.holder:reset()
      return string.format(TEXTS.reset, tostring(sbx.session_id))
    end
    if tool.switches then -- restore: makes the sandbox it runs in (Server:restore)
      return catalogue.run(tool, SURFACE, nil, args, self)
    end
    return self.holder:call(function(sbx) return catalogue.run(tool, SURFACE, sbx, args, self) end)
  end)
  if ok then return tool_result(type(res) == "string" and res or tostring(res), false, images) end
  local err = res
  if is_a(err, "FileNotFoundError") then
    return tool_result(string.format(TEXTS.not_found, tostring(args.path)), true)
  end
  return tool_result(string.format(TEXTS.error, class_name(err) or "Error", message_of(err)), true)
end

function Server:restore(snapshot_id)
  return self.holder:restore(snapshot_id)
end

local function negotiate(requested)
  if type(requested) == "string" then
    for _, v in ipairs(M.PROTOCOL_VERSIONS) do
      if v == requested then return v end
    end
  end
  return M.LATEST_PROTOCOL_VERSION
end

-- Handles one decoded message (a table); returns the response text or nil (notification).
function Server:dispatch(msg)
  local id = msg.id
  local is_notification = id == nil
  if not is_notification and type(id) ~= "string" and type(id) ~= "number" then
    return rpc_error(nil, -32600, "Invalid Request: id must be a string or a number")
  end
  if msg.jsonrpc ~= "2.0" or type(msg.method) ~= "string" then
    if is_notification and msg.result == nil and msg.error == nil then return nil end
    if msg.method == nil and (msg.result ~= nil or msg.error ~= nil) then return nil end -- a response: ignore
    return rpc_error(id, -32600, "Invalid Request")
  end
  local params = msg.params
  if params ~= nil and params ~= json.null and type(params) ~= "table" then
    if is_notification then return nil end
    return rpc_error(id, -32602, "Invalid params: params must be an object")
  end
  if params == json.null then params = nil end
  params = params or {}
  local method = msg.method

  if is_notification then
    if method == "notifications/initialized" then self.initialized = true end
    return nil -- notifications/cancelled and the rest need no answer
  end

  if method == "initialize" then
    return encode_response(id, "result", {
      protocolVersion = negotiate(params.protocolVersion),
      capabilities = { tools = { listChanged = false } },
      serverInfo = { name = M.SERVER_NAME, version = M.version() },
      instructions = M.INSTRUCTIONS,
    })
  elseif method == "ping" then
    return encode_response(id, "result", {}) -- lua-cjson writes {}
  elseif method == "tools/list" then
    return encode_response(id, "result", { tools = M.list_tools() })
  elseif method == "tools/call" then
    local name = params.name
    if type(name) ~= "string" then
      return rpc_error(id, -32602, "Invalid params: 'name' must be the name of a tool")
    end
    local tool = catalogue.find(SURFACE, name)
    if not tool then return rpc_error(id, -32602, "Unknown tool: " .. name) end
    local args = params.arguments
    if is_null(args) then args = {} end
    if type(args) ~= "table" or args[1] ~= nil then
      return rpc_error(id, -32602, "Invalid params: 'arguments' must be an object")
    end
    local checked, problem = catalogue.check(tool, SURFACE, args)
    if not checked then return rpc_error(id, -32602, "Invalid params: " .. problem) end
    return encode_response(id, "result", self:call_tool(tool, checked))
  end
  return rpc_error(id, -32601, "Method not found: " .. method)
end

--- Handles one line of input; returns the text to write back (without newline) or nil.
function Server:handle_line(line)
  line = line:gsub("\r$", "")
  if not line:find("%S") then return nil end
  local msg, err = json.decode(line)
  if msg == nil and err then
    return rpc_error(nil, -32700, "Parse error: " .. tostring(err))
  end
  local first = line:match("^%s*(.)")
  if first == "[" then
    -- A batch (protocol 2025-03-26 and older): one array of answers.
    if type(msg) ~= "table" or #msg == 0 then return rpc_error(nil, -32600, "Invalid Request: empty batch") end
    local answers = {}
    for _, item in ipairs(msg) do
      local answer
      if type(item) ~= "table" then
        answer = rpc_error(nil, -32600, "Invalid Request")
      else
        answer = self:dispatch(item)
      end
      if answer then answers[#answers + 1] = answer end
    end
    if #answers == 0 then return nil end
    return "[" .. table.concat(answers, ",") .. "]"
  end
  if type(msg) ~= "table" or first ~= "{" then return rpc_error(nil, -32600, "Invalid Request") end
  local ok, answer = pcall(self.dispatch, self, msg)
  if ok then return answer end
  local id = msg.id
  if type(id) ~= "string" and type(id) ~= "number" then id = nil end
  return rpc_error(id,
    -32603, "Internal error: " .. message_of(answer))
end

--- Reads messages from `input` until end of file, answering on `output`; then deletes the
-- sandbox (the client disconnected).
function Server:serve(input, output)
  while true do
    local line = input:read("*l")
    if line == nil then break end
    local answer = self:handle_line(line)
    if answer then
      output:write(answer, "\n")
      output:flush()
    end
  end
  self.holder:shutdown()
end

function M.serve(settings, input, output, opts)
  M.server(settings, opts):serve(input, output)
end

return M
