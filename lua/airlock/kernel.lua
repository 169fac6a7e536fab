-- Kernels: a long-lived interpreter in a session's sandbox that runs notebook-style cells, its
-- state kept between them (airlockd's /v1/sessions/{id}/kernels routes, docs/api.md
-- "Kernels"). An opt-in beside sbx:run, which keeps starting a fresh process per command.
--
--   local k = sbx:kernel{ language = "python" }      -- (Lua 5.4: a to-be-closed variable)
--   k:run("x = 41")
--   print(k:run("x + 1").text)                        -- 42
--   k:close()
--
-- Every call goes through exchange.lua like the Sandbox's: blocking, or yielding inside
-- airlock.spawn tasks, host loops (libuv) and OpenResty. Lua 5.1-compatible.
local cell_result = require "airlock.cell_result"
local engine = require "airlock.internal.engine"
local errors = require "airlock.errors"
local exchange = require "airlock.internal.exchange"
local exec_stream = require "airlock.internal.exec_stream"

local M = {}

local Kernel = {}
Kernel.__index = Kernel
Kernel.__name = "airlock.Kernel"
M.Kernel = Kernel

M.LANGUAGES = { python = true }

local function call(settings, method, path, body, opts)
  local ok, data = exchange.call(settings, method, path, body, opts)
  if not ok then error(data, 0) end
  return data
end

local function check_self(self, what)
  if getmetatable(self) ~= Kernel then
    engine.bad_argument("self", "a Kernel (use k:" .. what .. "(...))", self)
  end
end

local function path(self, suffix)
  return engine.session_path(self.session_id, "/kernels/" .. engine.quote(self.kernel_id) .. (suffix or ""))
end

local function open_path(self, what)
  check_self(self, what)
  if self.closed then
    errors.raise("SandboxError", "Kernel " .. self.kernel_id .. " is closed.")
  end
  return path(self)
end

function Kernel.__tostring(self)
  return string.format("<Kernel %s %s session=%s%s>", self.kernel_id, self.language,
    tostring(self.session_id), self.closed and " closed" or "")
end

-- Lua 5.4: a to-be-closed variable holding the kernel closes (deletes) it.
function Kernel.__close(self)
  self:close()
end

-- M.start(sbx, session_id, opts) → Kernel (sbx:kernel's work): POST .../kernels.
function M.start(sbx, session_id, opts)
  if opts ~= nil and type(opts) ~= "table" then engine.bad_argument("options", "a table", opts) end
  opts = opts or {}
  for k in pairs(opts) do
    if k ~= "language" then engine.bad_argument("opts." .. tostring(k), "a known option of kernel", opts[k]) end
  end
  local language = opts.language == nil and "python" or opts.language
  if not M.LANGUAGES[language] then engine.bad_argument("language", '"python"', language) end
  local s = sbx._settings
  local data = call(s, "POST", engine.session_path(session_id, "/kernels"), { { "language", language } })
  if type(data) ~= "table" or type(data.kernel_id) ~= "string" or data.kernel_id == "" then
    errors.raise("SandboxError", "The server's create-kernel answer has no kernel_id")
  end
  return setmetatable({
    kernel_id = data.kernel_id,
    language = type(data.language) == "string" and data.language or language,
    session_id = session_id,
    sandbox = sbx,
    _settings = s,
  }, Kernel)
end

-- M.list(sbx, session_id) → the session's kernels as the server lists them.
function M.list(sbx, session_id)
  local data = call(sbx._settings, "GET", engine.session_path(session_id, "/kernels"))
  return type(data) == "table" and type(data.kernels) == "table" and data.kernels or {}
end

local RUN_OPTIONS = { timeout = true, on_stdout = true, on_stderr = true, on_result = true,
  output_limit_bytes = true }

local function run_options(opts)
  if opts == nil then return engine.check_timeout(15), {} end
  if type(opts) ~= "table" then return engine.check_timeout(opts), {} end
  for k in pairs(opts) do
    if not RUN_OPTIONS[k] then engine.bad_argument("opts." .. tostring(k), "a known option of run", opts[k]) end
  end
  for _, k in ipairs({ "on_stdout", "on_stderr", "on_result" }) do
    if opts[k] ~= nil and type(opts[k]) ~= "function" then engine.bad_argument("opts." .. k, "a function", opts[k]) end
  end
  if opts.output_limit_bytes ~= nil then
    engine.check_integer("output_limit_bytes", opts.output_limit_bytes, 16, 1024 * 1024 * 1024)
  end
  return engine.check_timeout(opts.timeout == nil and 15 or opts.timeout), opts
end

-- k:run(code [, {timeout = 1..60, on_stdout = fn, on_stderr = fn, on_result = fn,
-- output_limit_bytes = n}]) → CellResult. With a callback the cell's output and results come
-- as they happen (the streamed execute); the CellResult is the same either way. A cell that
-- fails (an exception, its timeout, out of memory) is a result, not an error.
function Kernel:run(code, opts)
  local p = open_path(self, "run")
  engine.check_string("code", code, { no_nul = true, utf8 = true })
  local timeout, o = run_options(opts)
  local s = self._settings
  local streamed = o.on_stdout ~= nil or o.on_stderr ~= nil or o.on_result ~= nil
  local body = { { "code", code }, { "timeout", timeout } }
  if streamed then body[#body + 1] = { "stream", true } end
  if o.output_limit_bytes ~= nil then body[#body + 1] = { "output_limit_bytes", o.output_limit_bytes } end
  local data = call(s, "POST", p .. "/execute", body, {
    -- the server's grace after the timeout: the interrupt, a kill and a restart
    timeout = math.max(s.timeout, timeout + engine.EXEC_GRACE),
    output_limit_bytes = o.output_limit_bytes,
    stream = streamed and exec_stream.new(o.on_stdout, o.on_stderr, o.on_result) or nil,
  })
  return cell_result.from_response(code, data)
end

-- k:interrupt() → true: interrupts the running cell (KeyboardInterrupt; the state is kept).
-- Nothing happens when no cell runs.
function Kernel:interrupt()
  local p = open_path(self, "interrupt")
  call(self._settings, "POST", p .. "/interrupt")
  return true
end

-- k:close([{timeout = s} or s]) → true | nil, err. Deletes the kernel (its interpreter and its
-- state). Idempotent; a kernel or session already gone counts as closed. Never raises for the
-- DELETE (a to-be-closed variable's close must not): a failure is returned. The session's
-- deletion ends its kernels too.
function Kernel:close(opts)
  check_self(self, "close")
  local timeout = engine.close_timeout(opts)
  if self.closed then return true end
  self.closed = true
  local ok, err = exchange.call(self._settings, "DELETE", path(self), nil,
    timeout and { timeout = timeout, max_retries = 0 } or nil)
  if ok or (type(err) == "table" and err.status == 404) then return true end
  return nil, err
end

return M
