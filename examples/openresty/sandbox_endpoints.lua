-- The OpenResty example's handlers (examples/openresty/locations.conf routes to them):
--
--   POST /run    {"command": "..."} or {"code": "...", "language": "python" | "bash" | "lua"},
--                optional "timeout" (1..60 s)  →  {"exit_code", "stdout", "stderr", "ok"}
--   POST /agent  {"max_steps": n} (optional)  →  the agent loop of examples/agent_openai.lua
--                (examples/openai_loop.lua) on the model API at $OPENAI_BASE_URL:
--                {"finished", "tests_pass", "calc_py", "transcript"}
--
-- Plain SDK code: the same airlock.with / sbx:run / airlock.tools a script uses. Inside nginx
-- the SDK moves its bytes over cosockets, so a request waiting for its sandbox never blocks
-- the worker; every sandbox is deleted when its request ends (airlock.with, and the host's
-- cleanup on client aborts and worker exits). Settings come from the environment that
-- nginx.conf passes on: SANDBOX_API_URL, SANDBOX_API_KEY, OPENAI_API_KEY, OPENAI_BASE_URL,
-- OPENAI_MODEL.
local airlock = require "airlock"
local cjson = require "cjson.safe"

local M = {}

local MAX_BODY = 1024 * 1024

local RUNNERS = {
  python = { file = "main.py", command = "python3 main.py" },
  bash = { file = "main.sh", command = "bash main.sh" },
  lua = { file = "main.lua", command = "lua5.4 main.lua" },
}

-- Status codes for the SDK's error classes; anything else is the upstream's fault (502).
local STATUS = {
  ValidationError = 400, AuthenticationError = 502, RateLimitError = 429, CapacityError = 503,
  QuotaExceededError = 413,
}

local function reply(status, data)
  ngx.status = status
  ngx.header["Content-Type"] = "application/json"
  ngx.say(cjson.encode(data))
  return ngx.exit(status)
end

local function fail(status, message)
  return reply(status, { error = message })
end

-- The request's JSON object, or an error answer.
local function read_json()
  if ngx.req.get_method() ~= "POST" then return nil, fail(405, "use POST") end
  ngx.req.read_body()
  local body = ngx.req.get_body_data()
  if body == nil and ngx.req.get_body_file() then return nil, fail(413, "the body is larger than " .. MAX_BODY) end
  local data = cjson.decode(body or "")
  if type(data) ~= "table" then return nil, fail(400, "the body must be a JSON object") end
  return data
end

local function sdk_error(err)
  for class, status in pairs(STATUS) do
    if airlock.is(err, class) then return fail(status, tostring(err.message)) end
  end
  if airlock.is(err, "SandboxError") then return fail(502, tostring(err.message)) end
  ngx.log(ngx.ERR, "sandbox example: ", tostring(err))
  return fail(500, "internal error")
end

function M.run()
  local req = read_json()
  if not req then return end
  local timeout = req.timeout or 15
  if type(timeout) ~= "number" or timeout < 1 or timeout > 60 or timeout % 1 ~= 0 then
    return fail(400, "timeout: an integer from 1 to 60")
  end
  local runner
  if req.code ~= nil then
    runner = RUNNERS[req.language or "python"]
    if type(req.code) ~= "string" or not runner then
      return fail(400, "code: a string, with language python, bash or lua")
    end
  elseif type(req.command) ~= "string" or req.command == "" then
    return fail(400, "give \"command\" (a string) or \"code\"")
  end
  local ok, result = pcall(airlock.with, {}, function(sbx)
    if runner then sbx.files:write(runner.file, req.code) end
    return sbx:run(runner and runner.command or req.command, { timeout = timeout })
  end)
  if not ok then return sdk_error(result) end
  return reply(200, { exit_code = result.exit_code, stdout = result.stdout, stderr = result.stderr,
                      ok = result.ok })
end

function M.agent()
  local req = read_json()
  if not req then return end
  local task = require "agent_task"
  local loop = require "openai_loop"
  local api_key = task.env("OPENAI_API_KEY")
  if not api_key then return fail(500, "set OPENAI_API_KEY (and `env OPENAI_API_KEY;` in nginx.conf)") end
  local max_steps = req.max_steps or tonumber(task.env("AGENT_MAX_STEPS", "12"))
  if type(max_steps) ~= "number" or max_steps < 1 or max_steps > 50 then
    return fail(400, "max_steps: a number from 1 to 50")
  end
  local model = task.env("OPENAI_MODEL", "gpt-4o-mini")
  local lines = {}
  local function write(text) lines[#lines + 1] = text end
  local ok, result = pcall(airlock.with, {}, function(sbx)
    task.seed(sbx, model, write)
    local finished = loop.run(sbx, {
      api_key = api_key, base_url = task.env("OPENAI_BASE_URL", "https://api.openai.com/v1"):gsub("/+$", ""),
      model = model, max_steps = max_steps, system = task.SYSTEM, task = task.TASK, write = write,
    })
    local check = sbx:run(task.TEST_COMMAND, { timeout = 30 })
    return { finished = finished, tests_pass = check.ok, calc_py = sbx.files:read("calc.py") }
  end)
  if not ok then
    if type(result) == "string" then return fail(502, result) end  -- the model API failed
    return sdk_error(result)
  end
  result.transcript = table.concat(lines)
  return reply(200, result)
end

return M
