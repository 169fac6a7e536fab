-- The one catalogue of the agent surface: every sandbox tool a model can call, its
-- parameters, the argument checks, what it runs and the texts it answers with. Two surfaces
-- read it and differ only where their references differ:
--   "sdk"  airlock.tools: write_file, read_file, run_command with the reference Python SDK's
--          schemas and texts (airlock_sandbox.tools), and run_python (ours: a kernel)
--   "mcp"  the local MCP server (airlock.mcp): those four plus six more, with the reference
--          MCP server's titles, descriptions, defaults and texts (airlock-sandbox-mcp)
local json = require "airlock.internal.json"
local engine = require "airlock.internal.engine"
local tasks = require "airlock.tasks"
local text = require "airlock.internal.agent.text"

local M = {}

local function is_null(v) return v == nil or v == json.null end
M.is_null = is_null

local function clamp(n, lo, hi)
  if n < lo then return lo end
  if n > hi then return hi end
  return n
end

---------------------------------------------------------------- texts

M.TEXTS = {
  sdk = {
    not_json = "Error: tool arguments were not valid JSON: %s",
    not_object = "Error: tool arguments must be a JSON object.",
    unknown = "Error: unknown tool '%s'. Available: ['write_file', 'read_file', 'run_command', 'run_python']",
    missing = "Error: missing required argument '%s' for %s.",
    not_string = "Error: argument '%s' for %s must be a string, not %s.",
    not_found = "Error: file not found: %s",
    sandbox_error = "Error from sandbox (%s): %s",
    failed = "Error: %s failed (%s): %s",
  },
  mcp = {
    missing = "missing required argument '%s' for %s",
    not_string = "argument '%s' for %s must be a string",
    not_integer = "argument '%s' for %s must be an integer",
    not_found = "File not found: %s",
    error = "%s: %s",
    reset = "Started a fresh sandbox (%s). All previous files are gone.",
  },
  wrote = "Wrote %d characters to %s",
  kernel_gone = "[note] The Python kernel was gone; this ran in a new one: earlier variables are lost.\n",
  snapshot = "Snapshot %s taken (%s MB of files). To go back to this state later, call restore with "
    .. "snapshot_id %s: it starts a new sandbox from it.",
  restore = "Restored snapshot %s into a new sandbox (%s): its files are as they were when the snapshot "
    .. "was taken, and the next tools run there.",
}
-- airlock.tools.branching: the SDK's texts, with its tools and snapshot / restore
M.TEXTS.branch = {}
for k, v in pairs(M.TEXTS.sdk) do M.TEXTS.branch[k] = v end
M.TEXTS.branch.unknown = "Error: unknown tool '%s'. Available: ['write_file', 'read_file', 'run_command', "
  .. "'run_python', 'snapshot', 'restore']"

---------------------------------------------------------------- formatting

function M.format_egress(events, sbx)
  if #events == 0 then
    local egress = sbx.egress
    if type(egress) ~= "table" or #egress == 0 then return "This sandbox has no internet access." end
    return "No outbound connections yet."
  end
  local lines = {}
  for i, e in ipairs(events) do
    local host = e.host
    if is_null(host) or host == "" then host = e.target end
    if is_null(host) or host == "" then host = "?" end
    local line = string.format("%-5s  %s", tostring(is_null(e.decision) and "" or e.decision), tostring(host))
    if not is_null(e.reason) and e.reason ~= "" then line = line .. "  (" .. tostring(e.reason) .. ")" end
    local down = tonumber(e.bytes_down)
    if down and down ~= 0 then line = line .. "  " .. text.group_digits(down) .. " bytes in" end
    lines[i] = line
  end
  return table.concat(lines, "\n")
end

function M.format_activity(entries)
  if #entries == 0 then return "No commands recorded yet." end
  local lines = {}
  for i, e in ipairs(entries) do
    local result
    if e.timed_out == true then
      result = "timed out"
    elseif e.oom_killed == true then
      result = "out of memory"
    elseif is_null(e.exit_code) then
      result = "failed"
    else
      result = "exit " .. string.format("%d", e.exit_code)
    end
    local line = string.format("%-13s %s", result, tostring(is_null(e.command) and "" or e.command))
    if not is_null(e.session_id) and e.session_id ~= "" then
      line = line .. "   [" .. tostring(e.session_id) .. "]"
    end
    lines[i] = line
  end
  return table.concat(lines, "\n")
end

---------------------------------------------------------------- Python's int()

-- A failure that is not a SandboxError, reported as `failed (<Class>)`.
local Failure = {}
Failure.__index = Failure
M.Failure = Failure

local function fail(class, message)
  error(setmetatable({ class = class, message = message }, Failure), 0)
end

-- Python's int() of a JSON value, as the reference SDK does with timeout_seconds: integers
-- and floats (truncated), booleans, and strings of an integer; otherwise a ValueError (bad
-- string) or TypeError (null, object, array).
local function py_int(v)
  if type(v) == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      fail("ValueError", "cannot convert float " .. tostring(v) .. " to integer")
    end
    return v >= 0 and math.floor(v) or math.ceil(v)
  elseif type(v) == "boolean" then
    return v and 1 or 0
  elseif type(v) == "string" then
    local s = v:match("^%s*([+-]?%d+)%s*$")
    if s then return tonumber(s) end
    fail("ValueError", string.format("invalid literal for int() with base 10: '%s'", v))
  end
  local kind = is_null(v) and "NoneType" or (type(v) == "table" and "dict" or type(v))
  fail("TypeError", "int() argument must be a string, a bytes-like object or a real number, not '"
    .. kind .. "'")
end

---------------------------------------------------------------- the tools

-- A parameter. kind: "string"; "integer" (an integer, or a string of one, like the MCP
-- reference's lax validation); "py_int" (converted by Python's int() when the tool runs, like
-- the SDK reference). opts: default (applied and shown), optional (not required, no shown
-- default), schema (more JSON schema fields).
local function P(name, kind, description, opts)
  opts = opts or {}
  return { name = name, kind = kind, description = description, default = opts.default,
    optional = opts.optional or opts.default ~= nil, schema = opts.schema }
end

local LIST_FILES_PRINTF = "'%y %8s  %p\\n'"

local function run_command(sbx, a)
  return sbx:run(a.command, { timeout = a.timeout_seconds }).output
end

local function write_file(sbx, a)
  sbx.files:write(a.path, a.content)
  return string.format(M.TEXTS.wrote, text.char_count(a.content), a.path)
end

-- Files up to this size are fetched raw to name their kind (PNG, ZIP, ...); larger ones are
-- described by size alone.
local SNIFF_MAX = 1024 * 1024

-- The short text for a binary file at path (its size from the listing, its kind from its
-- first bytes), or nil when the file is not found there or turns out to be text.
local function binary_note(sbx, path)
  local dir, name = path:match("^(.*)/([^/]+)$")
  if not dir then dir, name = ".", path end
  if dir == "" then dir = "/" end
  local entries = sbx.files:list(dir, { limit = 10000 })
  for _, e in ipairs(entries) do
    if e.name == name and e.kind == "file" then
      local kind
      if e.size <= SNIFF_MAX then
        local bytes = sbx.files:read(path, { binary = true })
        if engine.utf8_len(bytes) then return nil end
        kind = text.binary_kind(bytes)
      end
      return text.binary_file(e.size, kind)
    end
  end
  return nil
end

-- The file's text (the contract's read, unchanged); a file the server cannot decode as text
-- (its 500) is described instead of put in the model's context: "binary file, N bytes (kind)".
local function read_file(sbx, a)
  local ok, content = tasks.pcall(sbx.files.read, sbx.files, a.path)
  if ok then return content end
  if type(content) == "table" and content.status == 500 then
    local note_ok, note = tasks.pcall(binary_note, sbx, a.path)
    if note_ok and note then return note end
  end
  error(content, 0)
end

-- run_python's kernels: one per sandbox handle, made on first use; they end with their
-- session (the handle's close), so nothing here deletes them.
local python_kernels = setmetatable({}, { __mode = "k" })

local function kernel_gone(err)
  return type(err) == "table" and err.status == 404 and type(err.detail) == "string"
    and err.detail:find("Kernel", 1, true) ~= nil
end

-- The cell's text form and its images ({mime =, base64 =} each: the MCP server sends them as
-- image content). A kernel deleted behind the tool's back is replaced once, with a note.
local function run_python(sbx, a)
  local note = ""
  local k = python_kernels[sbx]
  if not k or k.session_id ~= sbx.session_id then
    k = sbx:kernel({ language = "python" })
    python_kernels[sbx] = k
  end
  local ok, r = tasks.pcall(k.run, k, a.code, { timeout = a.timeout_seconds })
  if not ok then
    if not kernel_gone(r) then error(r, 0) end
    k = sbx:kernel({ language = "python" })
    python_kernels[sbx] = k
    r, note = k:run(a.code, { timeout = a.timeout_seconds }), M.TEXTS.kernel_gone
  end
  return note .. tostring(r), r:images("*")
end

local RUN_PYTHON_DESCRIPTION = "Run Python code in a persistent Python session (a notebook "
  .. "kernel) in the sandbox: variables, imports and loaded data stay from one call to the "
  .. "next, so load data once and reuse it. Returns printed output, the value of the last "
  .. "expression, errors with their traceback, and matplotlib charts (plt.show()) as images. "
  .. "Files in the workspace are shared with run_command."

-- In the order the SDK's models see them (the MCP server's order is mcp.order). Each: name,
-- its surfaces (sdk, mcp: description, params; mcp also title, read_only, destructive,
-- order) and run(sbx, args, server).
M.TOOLS = {
  {
    name = "write_file", run = write_file,
    sdk = {
      description = "Create or overwrite a text file in the sandbox workspace.",
      params = { P("path", "string", "Path relative to the workspace, e.g. 'src/main.py'"),
        P("content", "string", "Full file content") },
    },
    mcp = {
      title = "Write a file", read_only = false, destructive = false, order = 2,
      description = "Create or overwrite a text file in the sandbox workspace (path relative to /workspace).",
      params = { P("path", "string", "Path relative to /workspace"), P("content", "string", "Full file content") },
    },
  },
  {
    name = "read_file", run = read_file,
    sdk = {
      description = "Read a text file from the sandbox workspace.",
      params = { P("path", "string", "Path relative to the workspace") },
    },
    mcp = {
      title = "Read a file", read_only = true, destructive = false, order = 3,
      description = "Read a text file from the sandbox workspace (path relative to /workspace).",
      params = { P("path", "string", "Path relative to /workspace") },
    },
  },
  {
    name = "run_command", run = run_command,
    sdk = {
      description = "Run a shell command in an isolated Linux sandbox (bash, Python 3.11). "
        .. "Files in the workspace persist between commands; processes do not. "
        .. "Returns stdout, stderr and the exit code.",
      params = { P("command", "string", "Shell command, e.g. 'python3 -m pytest -q'"),
        P("timeout_seconds", "py_int", "1-60, default 15",
          { optional = true, schema = { minimum = 1, maximum = 60 } }) },
      defaults = { timeout_seconds = 15 },
    },
    mcp = {
      title = "Run a shell command", read_only = false, destructive = false, order = 1,
      description = "Run a shell command in the sandbox and return stdout, stderr and the exit code.\n\n"
        .. "Each call uses a fresh container; files in /workspace persist between calls. "
        .. "timeout_seconds must be 1-60.",
      params = { P("command", "string", "Shell command to run, e.g. 'python3 -m pytest -q'"),
        P("timeout_seconds", "integer", "1-60, default 30", { default = 30 }) },
    },
  },
  {
    name = "run_python", run = run_python,
    sdk = {
      description = RUN_PYTHON_DESCRIPTION,
      params = { P("code", "string", "Python code; the last expression's value is shown, as in a notebook"),
        P("timeout_seconds", "py_int", "1-60, default 30",
          { optional = true, schema = { minimum = 1, maximum = 60 } }) },
      defaults = { timeout_seconds = 30 },
    },
    mcp = {
      title = "Run Python (stateful)", read_only = false, destructive = false, order = 1.5,
      description = RUN_PYTHON_DESCRIPTION .. "\n\ntimeout_seconds must be 1-60.",
      params = { P("code", "string", "Python code; the last expression's value is shown, as in a notebook"),
        P("timeout_seconds", "integer", "1-60, default 30", { default = 30 }) },
    },
  },
  {
    name = "list_files",
    mcp = {
      title = "List files", read_only = true, destructive = false,
      description = "List files and directories in the sandbox workspace, with sizes "
        .. "(installed packages under .local are skipped).",
      params = { P("path", "string", "Folder relative to /workspace", { default = "." }),
        P("max_depth", "integer", "How deep to descend, 1-10", { default = 3 }) },
    },
    run = function(sbx, a)
      local command = string.format(
        "find %s -maxdepth %d -path '*/.local' -prune -o -printf %s 2>&1 | sort -k3 | head -500",
        text.shell_quote(a.path), clamp(a.max_depth, 1, 10), LIST_FILES_PRINTF)
      return sbx:run(command, { timeout = 15 }).output
    end,
  },
  {
    name = "import_repo",
    mcp = {
      title = "Import a GitHub repository", read_only = false, destructive = false,
      description = "Copy a public GitHub repository into the sandbox workspace.\n\n"
        .. "repo is \"owner/repo\" or https://github.com/owner/repo; ref is a branch, tag or commit "
        .. "(default: the default branch); path is the folder under /workspace (default: the repo "
        .. "name). Works without internet access in the sandbox.",
      params = { P("repo", "string", "owner/repo or https://github.com/owner/repo"),
        P("ref", "string", "Branch, tag or commit (default: the default branch)", { default = "" }),
        P("path", "string", "Folder under /workspace (default: the repo name)", { default = "" }) },
    },
    run = function(sbx, a)
      local r = sbx:import_repo(a.repo, {
        ref = a.ref ~= "" and a.ref or nil, path = a.path ~= "" and a.path or nil })
      return string.format("Imported %s@%s: %s files in %s", tostring(r.repo), tostring(r.ref),
        tostring(r.files), tostring(r.path))
    end,
  },
  {
    name = "egress_log",
    mcp = {
      title = "Egress log", read_only = true, destructive = false,
      description = "Show the sandbox's outbound internet connections: which hosts were allowed or "
        .. "denied, and why.",
      params = { P("limit", "integer", "How many events, newest last (1-500)", { default = 50 }) },
    },
    run = function(sbx, a) return M.format_egress(sbx:egress_log(clamp(a.limit, 1, 500)), sbx) end,
  },
  {
    name = "activity",
    mcp = {
      title = "Activity log", read_only = true, destructive = false,
      description = "Show recent commands run in this tenant's sandboxes (newest first): command, "
        .. "exit code, duration.",
      params = { P("limit", "integer", "How many commands (1-100)", { default = 20 }) },
    },
    run = function(sbx, a)
      local page = sbx:audit({ limit = clamp(a.limit, 1, 100) })
      return M.format_activity(page.entries or {})
    end,
  },
  {
    name = "sandbox_info",
    mcp = {
      title = "Sandbox info", read_only = true, destructive = false,
      description = "Show the sandbox's session, internet access, disk quota and the tenant's limits.",
      params = {},
    },
    run = function(sbx, _, server)
      local usage = sbx:usage()
      local limits = usage.limits or {}
      local egress = type(sbx.egress) == "table" and #sbx.egress > 0 and table.concat(sbx.egress, ", ") or "none"
      return table.concat({
        "Server: " .. server.settings.base_url,
        string.format("Session: %s (tenant %s)", tostring(sbx.session_id), tostring(sbx.tenant_id or usage.tenant_id)),
        "Internet: " .. egress,
        "Disk quota: " .. tostring(sbx.disk_quota_mb) .. " MB",
        string.format("Limits: %s sessions, %s requests/min, %s concurrent commands",
          tostring(limits.max_sessions), tostring(limits.requests_per_minute),
          tostring(limits.max_concurrent_exec)),
      }, "\n")
    end,
  },
  {
    name = "reset_sandbox", reset = true,
    mcp = {
      title = "Reset the sandbox", read_only = false, destructive = true,
      description = "Delete the sandbox workspace and start a fresh, empty one.",
      params = {},
    },
  },
  -- ours (airlockd): agents that branch keep a state and go back to it
  {
    name = "snapshot",
    branch = {
      description = "Keep the sandbox workspace's files as they are now, to come back to them later "
        .. "with restore (e.g. before a risky change). Returns the snapshot_id.",
      params = { P("name", "string", "A short label, e.g. 'before-refactor'", { optional = true }) },
    },
    mcp = {
      title = "Snapshot the workspace", read_only = false, destructive = false,
      description = "Keep the sandbox workspace's files as they are now, to come back to them later "
        .. "with restore. Returns the snapshot_id.",
      params = { P("name", "string", "A short label, e.g. 'before-refactor'", { default = "" }) },
    },
    run = function(sbx, a)
      local id, rec = sbx:snapshot{ name = (a.name ~= nil and a.name ~= "") and a.name or nil }
      return string.format(M.TEXTS.snapshot, id, string.format("%.1f", (tonumber(rec.bytes) or 0) / 1048576), id)
    end,
  },
  {
    name = "restore", switches = true,
    branch = {
      description = "Go back to a snapshot: a new sandbox starts from the snapshot's files and the "
        .. "next tools run there.",
      params = { P("snapshot_id", "string", "The id snapshot returned") },
    },
    mcp = {
      title = "Restore a snapshot", read_only = false, destructive = false,
      description = "Go back to a snapshot: a new sandbox starts from the snapshot's files and the "
        .. "next tools run there (the current one is deleted).",
      params = { P("snapshot_id", "string", "The id snapshot returned") },
    },
    run = function(_, a, server)
      local sbx = server:restore(a.snapshot_id)
      return string.format(M.TEXTS.restore, a.snapshot_id, tostring(sbx.session_id))
    end,
  },
}
-- airlock.tools.branching offers the SDK's three tools as they are, and snapshot and restore
for _, t in ipairs(M.TOOLS) do
  if t.sdk then t.branch = t.sdk end
end

-- The tools of a surface, in its order (a surface's `order`, else the catalogue's); and one
-- by name (nil when the surface has no such tool).
function M.tools(surface)
  local list = {}
  for i, t in ipairs(M.TOOLS) do
    if t[surface] then list[#list + 1] = { t = t, key = t[surface].order or i } end
  end
  table.sort(list, function(a, b) return a.key < b.key end)
  for i, item in ipairs(list) do list[i] = item.t end
  return list
end

function M.find(surface, name)
  for _, t in ipairs(M.TOOLS) do
    if t.name == name and t[surface] then return t end
  end
  return nil
end

-- The JSON schema of a tool's parameters on a surface (a new table each call). lua-cjson
-- writes an empty table as {}: right for `properties`; an empty `required` is left out.
function M.schema(tool, surface)
  local properties, required = {}, {}
  for _, p in ipairs(tool[surface].params) do
    local prop = { type = p.kind == "string" and "string" or "integer", description = p.description }
    if p.default ~= nil then prop.default = p.default end
    for k, v in pairs(p.schema or {}) do prop[k] = v end
    if not p.optional then required[#required + 1] = p.name end
    properties[p.name] = prop
  end
  local schema = { type = "object", properties = properties }
  if #required > 0 then schema.required = required end
  return schema
end

local function kind_of(v)
  if type(v) == "table" then return "an object or array" end
  return "a " .. type(v)
end

-- Checks args (a table) for tool on surface and completes the defaults: the arguments to
-- run with, or nil and the text that says what is wrong.
function M.check(tool, surface, args)
  local texts = M.TEXTS[surface]
  local out = {}
  for _, p in ipairs(tool[surface].params) do
    local v = args[p.name]
    -- a py_int's null goes to int() like the reference's (a TypeError), not to the default
    if v == nil or (is_null(v) and p.kind ~= "py_int") then
      if not p.optional then return nil, string.format(texts.missing, p.name, tool.name) end
      v = p.default
    elseif p.kind == "string" then
      if type(v) ~= "string" then
        return nil, string.format(texts.not_string, p.name, tool.name, kind_of(v))
      end
    elseif p.kind == "integer" then
      local n = type(v) == "number" and v or (type(v) == "string" and tonumber(v:match("^%s*([+-]?%d+)%s*$")))
      if type(n) ~= "number" or n ~= math.floor(n) or n ~= n or n == math.huge or n == -math.huge then
        return nil, string.format(texts.not_integer, p.name, tool.name)
      end
      v = math.floor(n)
    end
    out[p.name] = v
  end
  for k, v in pairs(tool[surface].defaults or {}) do
    if out[k] == nil then out[k] = v end
  end
  return out
end

-- Runs a checked call: converts its py_int arguments (a bad one fails like Python's int()),
-- then the tool. Raises what the tool raises.
function M.run(tool, surface, sbx, args, server)
  for _, p in ipairs(tool[surface].params) do
    if p.kind == "py_int" and args[p.name] ~= nil then args[p.name] = py_int(args[p.name]) end
  end
  return tool.run(sbx, args, server)
end

return M
