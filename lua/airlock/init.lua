-- airlock: the Lua client for Airlock sandbox servers (parity with the Python SDK 0.5.0).
--
--   local airlock = require "airlock"
--   local sbx = airlock.sandbox{ api_key = "...", base_url = "https://..." }  -- a to-be-closed
--                                                                          -- variable on 5.4
--   airlock.with(opts, function(sbx) ... end)                            -- 5.1 / LuaJIT
--
-- Library code runs on Lua 5.1/LuaJIT through 5.4 (no to-be-closed variables here). Every
-- request goes through exchange.lua (engine + retry policy) to a transport (libcurl, or
-- OpenResty cosockets, ...): nothing here touches the C core.
local dropped = require "airlock.dropped_sessions"
local engine = require "airlock.internal.engine"
local errors = require "airlock.errors"
local exchange = require "airlock.internal.exchange"
local exec_gate = require "airlock.internal.exec_gate"
local exec_stream = require "airlock.internal.exec_stream"
local file_sink = require "airlock.internal.file_sink"
local kernel = require "airlock.kernel"
local result = require "airlock.result"
local tasks = require "airlock.tasks"
local snapshots = require "airlock.snapshots"
local templates = require "airlock.templates"
local transports = require "airlock.transport"

local unpack = table.unpack or unpack  -- luacheck: ignore 143
local pack = table.pack or function(...) return { n = select("#", ...), ... } end

local M = {
  VERSION = engine.VERSION,
  _VERSION = engine.VERSION,
  __version__ = engine.VERSION,
  errors = errors,
  engine = engine,
  templates = templates, -- airlock.templates.build{...}, .list(), .get(name), .delete(name)
  snapshots = snapshots, -- airlock.snapshots.list(), .get(id), .delete(id)
  Result = result.Result,
  Kernel = kernel.Kernel,
}

local function raise(err) error(err, 0) end

local function call(settings, method, path, body, opts)
  local ok, data = exchange.call(settings, method, path, body, opts)
  if not ok then raise(data) end
  return data
end

local function python_list_repr(list)
  local parts = {}
  for i, v in ipairs(list or {}) do parts[i] = result.python_repr(tostring(v)) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

---------------------------------------------------------------- Sandbox

local Sandbox = {}
Sandbox.__index = Sandbox
Sandbox.__name = "airlock.Sandbox"
M.Sandbox = Sandbox

local Files = {}
Files.__index = Files
Files.__name = "airlock.Files"

function Sandbox.__tostring(self)
  return string.format("<Sandbox %s tenant=%s egress=%s>", self.session_id or "not started",
    self.tenant_id or "None", python_list_repr(self.egress))
end

-- Lua 5.4: a to-be-closed variable holding the sandbox closes (deletes) the session.
function Sandbox.__close(self)
  self:close()
end

local function new_sandbox(opts)
  local settings = engine.settings(opts)
  local self = setmetatable({
    base_url = settings.base_url,
    template = settings.template,
    requested_egress = {},
    egress = {},
    _settings = settings,
  }, Sandbox)
  for i, rule in ipairs(settings.egress) do self.requested_egress[i] = rule end
  self.files = setmetatable({ _sandbox = self }, Files)
  return self
end

local function started(self, what)
  if getmetatable(self) ~= Sandbox then
    engine.bad_argument("self", "a Sandbox (use sbx:" .. what .. "(...))", self)
  end
  if not self.session_id then
    errors.raise("SandboxError",
      "Sandbox not started: use airlock.sandbox{...} or airlock.with(...), or call sbx:start().")
  end
  return self.session_id
end

local function check_self(self, what)
  if getmetatable(self) ~= Sandbox then
    engine.bad_argument("self", "a Sandbox (use sbx:" .. what .. "(...))", self)
  end
end

-- A call on the session went through: a paused one was resumed for it (airlockd).
local function now_active(sbx)
  if sbx.state then sbx.state = "active" end
end

-- The template and size a server answered with (airlockd; another server's answer has none,
-- and the handle keeps what it had).
local function take_shape(self, data)
  if type(data.template) == "string" then self.template = data.template end
  if data.state == "active" or data.state == "paused" then self.state = data.state end
  for _, name in ipairs(engine.SIZES) do
    if type(data[name]) == "number" then self[name] = data[name] end
  end
end

-- sbx:start() → self. Creates the session (POST /v1/sessions) unless it has one. The host is
-- told before the create starts (OpenResty: a client that hangs up meanwhile gets the new
-- session deleted as soon as the create is over).
function Sandbox:start()
  check_self(self, "start")
  if self.session_id then return self end
  local s = self._settings
  local created = dropped.creating(s)
  local body = { { "template", s.template }, { "egress", engine.array(self.requested_egress) } }
  if s.from_snapshot then -- its template is the snapshot's unless one was asked for
    -- (no rules asked: none sent, so a memory snapshot's session gets the snapshot's rules)
    body = { { "from_snapshot", s.from_snapshot } }
    if #self.requested_egress > 0 then body[2] = { "egress", engine.array(self.requested_egress) } end
    if s.template_given then body[#body + 1] = { "template", s.template } end
  end
  for _, name in ipairs(engine.SIZES) do -- only those asked for: the server's defaults otherwise
    if s.sizes[name] ~= nil then body[#body + 1] = { name, s.sizes[name] } end
  end
  if s.on_idle ~= nil then body[#body + 1] = { "on_idle", s.on_idle } end
  local called, ok, data = tasks.pcall(exchange.call, s, "POST", "/v1/sessions", body)
  if called and ok and type(data) == "table" and type(data.session_id) == "string" and data.session_id ~= "" then
    self.session_id = data.session_id
    self.tenant_id = data.tenant_id
    self.egress = type(data.egress) == "table" and data.egress or {}
    self.disk_quota_mb = data.disk_quota_mb
    take_shape(self, data)
    -- the guard deletes the session if this handle is dropped unclosed (queued, no I/O in GC)
    self._guard = dropped.guard(data.session_id, s)
  end
  created(self._guard and self._guard.state)
  if not called then error(ok, 0) end
  if not ok then raise(data) end
  if not self.session_id then
    errors.raise("SandboxError", "The server's create-session answer has no session_id")
  end
  return self
end

-- sbx:close([{timeout = s}] or [s]) → true | nil, err. Deletes the session. Idempotent: the
-- handle lets go of the session at once (a second close sends nothing), the SDK does not:
-- the session stays in the queue of sessions to delete (airlock.dropped_sessions) until its
-- DELETE succeeded or answered 404 (already gone is not an error). A DELETE that failed is
-- not raised: close returns nil and the error (err.queued: it will be tried again by a later
-- SDK call, poll or drain, with backoff; err.session_id). With a timeout: that HTTP timeout
-- and no retries (quick shutdown).
function Sandbox:close(opts)
  check_self(self, "close")
  local timeout = engine.close_timeout(opts)
  local id = self.session_id
  if not id then return true end
  -- queued (in flight) before the handle forgets it: a close cut short loses nothing
  local item = dropped.hold(id, self._settings)
  self.session_id = nil
  if self._guard then
    self._guard:disarm()
    self._guard = nil
  end
  local ok, err, queued = exchange.delete_item(item, timeout and { timeout = timeout, max_retries = 0 } or {})
  if ok then return true end
  err.queued, err.session_id = queued, id
  return nil, err
end

local RUN_OPTIONS = { timeout = true, on_stdout = true, on_stderr = true, output_limit_bytes = true, spill = true }

local function run_options(opts)
  local timeout = 15
  if type(opts) == "table" then
    for k in pairs(opts) do
      if not RUN_OPTIONS[k] then
        engine.bad_argument("opts." .. tostring(k), "a known option of run", opts[k])
      end
    end
    if opts.timeout ~= nil then timeout = opts.timeout end
    for _, k in ipairs({ "on_stdout", "on_stderr" }) do
      if opts[k] ~= nil and type(opts[k]) ~= "function" then
        engine.bad_argument("opts." .. k, "a function", opts[k])
      end
    end
    if opts.output_limit_bytes ~= nil then
      engine.check_integer("output_limit_bytes", opts.output_limit_bytes, 16, 1024 * 1024 * 1024)
    end
    if opts.spill ~= nil and type(opts.spill) ~= "boolean" then
      engine.bad_argument("opts.spill", "a boolean", opts.spill)
    end
    return engine.check_timeout(timeout), opts
  elseif opts ~= nil then
    timeout = opts
  end
  return engine.check_timeout(timeout), {}
end

-- sbx:run(command [, {timeout = 1..60, on_stdout = fn, on_stderr = fn, output_limit_bytes = n,
-- spill = true}]) → Result. With on_stdout or on_stderr the command's output comes as it is
-- written (the streaming exec, an airlock extension); the Result is the same either way.
function Sandbox:run(command, opts)
  local id = started(self, "run")
  engine.check_string("command", command, { no_nul = true, utf8 = true })
  local timeout, o = run_options(opts)
  local s = self._settings
  local body = { { "command", command }, { "timeout_seconds", timeout } }
  local streamed = o.on_stdout ~= nil or o.on_stderr ~= nil
  if streamed then body[#body + 1] = { "stream", true } end
  if o.output_limit_bytes ~= nil then body[#body + 1] = { "output_limit_bytes", o.output_limit_bytes } end
  if o.spill ~= nil then body[#body + 1] = { "spill", o.spill } end
  local data = call(s, "POST", engine.session_path(id, "/exec"), body,
    { timeout = math.max(s.timeout, timeout + engine.EXEC_GRACE), command = true,
      output_limit_bytes = o.output_limit_bytes,
      stream = streamed and exec_stream.new(o.on_stdout, o.on_stderr) or nil })
  now_active(self) -- a paused session resumes for its command
  return result.from_response(data)
end

-- sbx:kernel([{language = "python"}]) → Kernel: a long-lived interpreter in the session's
-- sandbox whose state lasts from one k:run(code) to the next (airlock/kernel.lua).
function Sandbox:kernel(opts)
  return kernel.start(self, started(self, "kernel"), opts)
end

-- sbx:kernels() → the session's kernels ({kernel_id, language, state, ...} each).
function Sandbox:kernels()
  return kernel.list(self, started(self, "kernels"))
end

-- sbx:run_command(command [, timeout_seconds]) → the output text (agent-loop compat)
function Sandbox:run_command(command, timeout_seconds)
  return self:run(command, { timeout = timeout_seconds == nil and 15 or timeout_seconds }).output
end

function Sandbox:read_file(path)
  return self.files:read(path)
end

-- → "Successfully wrote <n> characters to <path>" (n in code points, like the server)
function Sandbox:write_file(path, content)
  self.files:write(path, content)
  return "Successfully wrote " .. engine.utf8_len(content) .. " characters to " .. path
end

-- sbx:info() → the session as the server shows it (GET /v1/sessions/{id}, airlockd): template,
-- memory_mb, cpus, disk_mb, max_processes, egress, created_at, expires_at, ...; the handle's
-- fields follow it. Does not count as a use of the session (its idle time goes on).
function Sandbox:info()
  local id = started(self, "info")
  local data = call(self._settings, "GET", engine.session_path(id, ""))
  if type(data) == "table" then take_shape(self, data) end
  return data
end

-- sbx:snapshot{ name = "before-refactor", memory = true } → id, record. Keeps the session's
-- workspace as it is now (airlockd: POST /v1/sessions/{id}/snapshots) while the session goes on;
-- memory = true keeps its kernels' memory too (a session without a kernel: files only, and
-- record.memory says false). airlock.sandbox{ from_snapshot = id } starts a new session from it
-- (its kernels with their state). record: snapshot_id, name, bytes, memory, created_at,
-- session_id, template, disk_mb (and memory_bytes with memory).
function Sandbox:snapshot(opts)
  local id = started(self, "snapshot")
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  local body = {}
  for k, v in pairs(opts) do
    if k == "name" then
      body[#body + 1] = { "name", engine.check_string("name", v, { non_empty = true, utf8 = true }) }
    elseif k == "memory" then
      if type(v) ~= "boolean" then engine.bad_argument("memory", "a boolean", v) end
      body[#body + 1] = { "memory", v }
    else
      errors.raise("ValidationError", "unknown option '" .. tostring(k) .. "'")
    end
  end
  local data = call(self._settings, "POST", engine.session_path(id, "/snapshots"), body)
  if type(data) ~= "table" or type(data.snapshot_id) ~= "string" then
    errors.raise("SandboxError", "The server's snapshot answer has no snapshot_id")
  end
  return data.snapshot_id, data
end

-- sbx:from_snapshot(snapshot_id) → a new, started Sandbox with this one's settings (server, key,
-- egress, sizes) whose workspace is the snapshot's; this one is left as it is. Agents that
-- branch use it to go back to a state they kept (airlock.tools.branching).
function Sandbox:from_snapshot(snapshot_id)
  check_self(self, "from_snapshot")
  engine.check_string("snapshot_id", snapshot_id, { non_empty = true, utf8 = true })
  local s = {}
  for k, v in pairs(self._settings) do s[k] = v end
  s.from_snapshot, s.template_given = snapshot_id, false
  local new = setmetatable({ base_url = s.base_url, template = s.template, requested_egress = {}, egress = {},
    _settings = s }, Sandbox)
  for i, rule in ipairs(self.requested_egress) do new.requested_egress[i] = rule end
  new.files = setmetatable({ _sandbox = new }, Files)
  return new:start()
end

-- sbx:pause() → {state = "paused", image_bytes, pause_ms, paused_at} (airlockd): the session's
-- sandbox stops and its workspace is kept; nothing of it runs until it is resumed. Pausing a
-- paused session answers the same. Raises a SandboxError (409) while a command runs in it.
function Sandbox:pause()
  local id = started(self, "pause")
  local s = self._settings
  local data = call(s, "POST", engine.session_path(id, "/pause"), nil, { timeout = math.max(s.timeout, 120) })
  if type(data) == "table" then take_shape(self, data) end
  return data
end

-- sbx:resume() → {state = "active", resumed, resume_ms} (airlockd). Any call on a paused session
-- resumes it anyway; this one does only that (resumed is false when it was active).
function Sandbox:resume()
  local id = started(self, "resume")
  local s = self._settings
  local data = call(s, "POST", engine.session_path(id, "/resume"), nil, { timeout = math.max(s.timeout, 120) })
  if type(data) == "table" then take_shape(self, data) end
  return data
end

function Sandbox:usage()
  check_self(self, "usage")
  return call(self._settings, "GET", "/v1/usage")
end

-- sbx:metrics() → the session's live figures (an airlock extension, GET .../metrics):
-- {session_id, tenant_id, cpu_seconds, memory_bytes, memory_peak_bytes, memory_limit_bytes,
-- disk_used_bytes, disk_quota_bytes, processes, sandboxes, commands_run, running_commands,
-- state, sampled_at}
function Sandbox:metrics()
  local id = started(self, "metrics")
  return call(self._settings, "GET", engine.session_path(id, "/metrics"))
end

function Sandbox:health()
  check_self(self, "health")
  return call(self._settings, "GET", "/healthz")
end

-- sbx:egress_log([{limit = 200}]) → events
function Sandbox:egress_log(opts)
  local id = started(self, "egress_log")
  local limit = 200
  if type(opts) == "table" then limit = opts.limit == nil and 200 or opts.limit
  elseif opts ~= nil then limit = opts end
  limit = engine.check_integer("limit", limit)
  local data = call(self._settings, "GET", engine.session_path(id, "/egress"), nil,
    { query = { { "limit", string.format("%d", limit) } } })
  return data and data.events or {}
end

function Sandbox:egress_policy()
  check_self(self, "egress_policy")
  local data = call(self._settings, "GET", "/v1/egress/policy")
  return data and data.allowed or {}
end

-- sbx:audit([{limit = 100, before = cursor}]) → {tenant_id, entries, next, retention_days}
function Sandbox:audit(opts)
  check_self(self, "audit")
  opts = opts or {}
  if type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  local limit = opts.limit == nil and 100 or opts.limit
  limit = engine.check_integer("limit", limit)
  local query = { { "limit", string.format("%d", limit) } }
  if opts.before ~= nil then
    query[2] = { "before", engine.check_string("before", opts.before, { no_nul = true }) }
  end
  return call(self._settings, "GET", "/v1/audit", nil, { query = query })
end

-- sbx:import_repo(repo [, {ref =, path =}]) → {repo, ref, path, dest, files, archive_bytes}
function Sandbox:import_repo(repo, opts)
  local id = started(self, "import_repo")
  engine.check_string("repo", repo, { non_empty = true, utf8 = true })
  opts = opts or {}
  if type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  local ref, path = opts.ref, opts.path
  if ref ~= nil then engine.check_string("ref", ref, { utf8 = true }) end
  if path ~= nil then engine.check_string("path", path, { utf8 = true }) end
  local s = self._settings
  return call(s, "POST", engine.session_path(id, "/import"),
    { { "repo", repo }, { "ref", ref == nil and engine.null or ref },
      { "path", path == nil and engine.null or path } },
    { timeout = math.max(s.timeout, engine.IMPORT_TIMEOUT), command = true })
end

---------------------------------------------------------------- Files

-- files:write(path, data [, {binary = true | false}]): any Lua string. binary = nil (auto):
-- valid UTF-8 goes as the contract's JSON text, anything else as raw bytes (the airlock
-- extension, application/octet-stream); true: always raw; false: always JSON text.
function Files:write(path, content, opts)
  local sbx = self._sandbox
  local id = started(sbx, "files:write")
  engine.check_path("path", path)
  local binary = opts and opts.binary
  if opts ~= nil and type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  if binary ~= nil and type(binary) ~= "boolean" then engine.bad_argument("binary", "a boolean", binary) end
  if binary == nil then
    engine.check_string("content", content)
    binary = engine.utf8_len(content) == nil
  end
  if binary then
    engine.check_string("content", content)
    call(sbx._settings, "POST", engine.session_path(id, "/write"), nil,
      { query = { { "path", path } }, raw_body = content })
    now_active(sbx)
    return
  end
  engine.check_string("content", content, { utf8 = true })
  call(sbx._settings, "POST", engine.session_path(id, "/write"),
    { { "path", path }, { "content", content } })
  now_active(sbx)
end

-- Raises the error Python's open() would for a local file: FileNotFoundError (no such file
-- or directory), PermissionError, else a SandboxError naming the file and the cause.
local function local_file_error(local_path, message)
  if message:find("No such file", 1, true) then
    errors.raise("FileNotFoundError", "Local file not found: " .. local_path .. " (" .. message .. ")",
      { path = local_path })
  end
  local class = message:find("Permission denied", 1, true) and "PermissionError" or "SandboxError"
  errors.raise(class, message, { path = local_path })
end

-- GET .../read of the exact bytes (the raw extension), to sink as they arrive when given:
-- the bytes (or "" with a sink); raises FileNotFoundError for a missing file, the local
-- file's error when the sink could not write.
local function raw_read(sbx, id, path, sink)
  local ok, data = exchange.call(sbx._settings, "GET", engine.session_path(id, "/read"), nil,
    { query = { { "path", path } }, raw_response = true, stream = sink })
  if ok then return data end
  if sink and sink.failure then local_file_error(sink.path, sink.failure) end
  if data.status == 404 and data.detail == "File '" .. path .. "' does not exist." then
    errors.raise("FileNotFoundError", "File not found: " .. path, { path = path })
  end
  raise(data)
end

-- files:read(path [, {binary = true}]) → the file's text (JSON, the contract), or with
-- binary = true its exact bytes (the airlock extension: nothing decoded or normalised).
function Files:read(path, opts)
  local sbx = self._sandbox
  local id = started(sbx, "files:read")
  engine.check_path("path", path)
  if opts ~= nil and type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  if opts and opts.binary then return raw_read(sbx, id, path) end
  local data = call(sbx._settings, "GET", engine.session_path(id, "/read"), nil,
    { query = { { "path", path } } })
  now_active(sbx)
  local content = data and data.content
  if content == engine.missing_file_text(path) then
    errors.raise("FileNotFoundError", "File not found: " .. path, { path = path })
  end
  if type(content) ~= "string" then
    errors.raise("SandboxError", "The server's read answer has no content")
  end
  return content
end

-- The size of a local file for files:upload, or raises the error a user expects of a bad path.
local function readable_local_file(local_path)
  engine.check_string("local_path", local_path, { non_empty = true, no_nul = true })
  local f, err = io.open(local_path, "rb")
  if f then
    local _, read_err = f:read(1)   -- a directory opens on Linux but cannot be read
    local size = not read_err and f:seek("end")
    f:close()
    if size then return size end
    err = local_path .. ": " .. tostring(read_err or "cannot seek")
  end
  local_file_error(local_path, "Cannot read the local file " .. tostring(err))
end

-- files:upload(path, local_path): the local file's exact bytes become the sandbox file path
-- (the raw body of files:write{binary = true}, read from disk as it is sent: the SDK's memory
-- stays flat whatever the size). Returns the number of bytes sent.
function Files:upload(path, local_path)
  local sbx = self._sandbox
  local id = started(sbx, "files:upload")
  engine.check_path("path", path)
  local size = readable_local_file(local_path)
  call(sbx._settings, "POST", engine.session_path(id, "/write"), nil,
    { query = { { "path", path } }, raw_body_file = local_path })
  return size
end

-- files:download(path, local_path) → bytes: the sandbox file's exact bytes written to
-- local_path as they arrive (through a temporary file beside it, renamed into place once
-- complete: a failed download leaves nothing, and the SDK never holds the whole file).
function Files:download(path, local_path)
  local sbx = self._sandbox
  local id = started(sbx, "files:download")
  engine.check_path("path", path)
  engine.check_string("local_path", local_path, { non_empty = true, no_nul = true })
  local sink = file_sink.new(local_path)
  raw_read(sbx, id, path, sink)
  return sink.bytes
end

-- files:list([dir [, {limit = n}]]) → entries, truncated: each entry {name, kind = "file" |
-- "dir" | "symlink" | "other", size (bytes), mtime (seconds since the epoch)}, in name order;
-- truncated is true when the directory holds more than limit (default 1000, at most 10000)
-- entries. Symlinks are listed, never followed. An airlock extension (GET .../list).
function Files:list(dir, opts)
  local sbx = self._sandbox
  local id = started(sbx, "files:list")
  if dir == nil then dir = "." end
  engine.check_path("dir", dir)
  if opts ~= nil and type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  local query = { { "path", dir } }
  if opts and opts.limit ~= nil then
    query[2] = { "limit", engine.check_integer("limit", opts.limit, 1, 10000) }
  end
  local data = call(sbx._settings, "GET", engine.session_path(id, "/list"), nil, { query = query })
  now_active(sbx)
  if type(data) ~= "table" or type(data.entries) ~= "table" then
    errors.raise("SandboxError", "The server's list answer has no entries")
  end
  return data.entries, data.truncated == true
end

---------------------------------------------------------------- module functions

-- airlock.sandbox{...} → Sandbox, its session created at once (start = false: later).
function M.sandbox(opts)
  local sbx = new_sandbox(opts)
  if opts == nil or opts.start ~= false then sbx:start() end
  return sbx
end

-- airlock.attach(session_id [, opts]) → Sandbox on an existing session; no network call.
-- Such a handle never deletes the session when garbage-collected, only on close().
function M.attach(session_id, opts)
  engine.check_string("session_id", session_id, { non_empty = true, no_nul = true })
  local sbx = new_sandbox(opts)
  sbx.session_id = session_id
  return sbx
end

-- airlock.with(opts, fn) → fn's results. Creates a sandbox, calls fn(sbx), always closes it
-- (error or not) and re-raises fn's error. A DELETE that fails is never raised here (nor
-- does it hide fn's error): the session stays queued and is deleted later (airlock.stats()
-- counts it). The scoped form for Lua 5.1/LuaJIT; fn may wait (yield) inside a task on
-- every Lua version.
function M.with(opts, fn)
  if type(fn) ~= "function" then engine.bad_argument("fn", "a function", fn) end
  local sbx = M.sandbox(opts)
  local r = pack(tasks.pcall(fn, sbx))
  sbx:close()
  if not r[1] then error(r[2], 0) end
  return unpack(r, 2, r.n)
end

-- airlock.pcall(fn, ...): pcall that an SDK call inside a task may yield through, also on
-- PUC Lua 5.1 (whose own pcall cannot be yielded across).
M.pcall = tasks.pcall

-- airlock.list_sessions([opts]) → sessions (newest first), tenant_id
function M.list_sessions(opts)
  local data = call(engine.settings(opts), "GET", "/v1/sessions")
  return data and data.sessions or {}, data and data.tenant_id
end

-- airlock.is(err, "SandboxError"): hierarchy-aware error test
M.is = errors.is

-- airlock.spawn(fn, ...) → Task: fn runs as a task of the current scheduler (the plain
-- program's, or the one its host gives: an OpenResty request's, a libuv loop's).
function M.spawn(fn, ...)
  if type(fn) ~= "function" then engine.bad_argument("fn", "a function", fn) end
  return tasks.current():spawn(fn, ...)
end

-- airlock.poll([ms]) → number of tasks still running: advances the current scheduler's tasks
-- (0, the default, never blocks) and starts the DELETEs of dropped sessions in the background.
function M.poll(ms)
  ms = ms or 0
  if type(ms) ~= "number" or ms ~= ms or ms < 0 then engine.bad_argument("ms", "a number >= 0", ms) end
  exchange.delete_dropped(false)
  return tasks.current():poll(ms)
end

-- airlock.close_connections() → true (false while requests are in flight): closes the idle
-- keep-alive connections (e.g. before a long idle period or a fork).
function M.close_connections()
  local t = transports.auto()
  if t.close_idle then return t:close_idle() end
  return true
end

-- airlock.drain() → n: sends now the DELETE of every queued session (dropped, unclosed
-- handles; closes whose DELETE failed), whatever its backoff. Returns how many are gone;
-- those that failed again stay queued (airlock.stats().dropped_waiting).
function M.drain()
  return exchange.delete_dropped(true, true)
end

-- The transport stats() reports: a Sandbox's (its transport option), a transport choice
-- (name or object), else the automatic one.
local function stats_transport(choice)
  if getmetatable(choice) == Sandbox then choice = choice._settings.transport end
  return transports.resolve(engine.check_transport(choice))
end

-- airlock.stats([sbx | transport]) → counters: requests, retries, requeued, commands
-- running/waiting in the client-side line, dropped sessions waiting, tasks, and the
-- transport's own (the one configured for sbx, the one named, else the automatic one).
function M.stats(choice)
  local t = stats_transport(choice)
  local s = exchange.stats()
  local gate = exec_gate.stats()
  s.commands_running, s.commands_waiting, s.commands_queued = gate.running, gate.waiting, gate.queued
  s.server_full = gate.refusals
  local d = dropped.stats()
  s.dropped_waiting, s.dropped_in_flight, s.dropped_overflow = d.waiting, d.in_flight, d.overflow
  s.dropped_deleted, s.cleanup_failures, s.dropped_given_up = d.deleted, d.failed, d.given_up
  s.tasks = tasks.current():running()
  s.transport = t.name
  if t.stats then
    for k, v in pairs(t:stats()) do s[k] = v end
  end
  return s
end

return M
