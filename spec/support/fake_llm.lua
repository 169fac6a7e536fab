-- Starts spec/support/fake_llm.py (a scripted OpenAI/Anthropic endpoint on 127.0.0.1) for
-- the agent specs, reads back the requests it recorded, and stops it.
local cjson = require "cjson"

local M = {}

M.OPENAI_KEY = "sk-test-openai-0123456789"
M.ANTHROPIC_KEY = "sk-ant-test-0123456789"

local function q(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end
M.shell_quote = q

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local data = f:read("*a")
  f:close()
  return data
end
M.read_file = read_file

local function here()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return src:match("^(.*)/[^/]*$") or "."
end

-- opts.fail_first: answer the first N requests with 429 + Retry-After: 0
function M.start(opts)
  opts = opts or {}
  local dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p " .. q(dir)))
  local server = { dir = dir, log_path = dir .. "/requests.jsonl" }
  local cmd = string.format(
    "python3 %s --port-file %s --log %s --openai-key %s --anthropic-key %s --fail-first %d "
      .. "> %s 2>&1 & echo $! > %s",
    q(here() .. "/fake_llm.py"), q(dir .. "/port"), q(server.log_path), q(M.OPENAI_KEY),
    q(M.ANTHROPIC_KEY), opts.fail_first or 0, q(dir .. "/stderr"), q(dir .. "/pid"))
  assert(os.execute(cmd))
  server.pid = tonumber((read_file(dir .. "/pid") or ""):match("%d+"))
  for _ = 1, 200 do
    local port = tonumber((read_file(dir .. "/port") or ""):match("^%s*(%d+)%s*$"))
    if port then
      server.port = port
      server.url = "http://127.0.0.1:" .. port
      return server
    end
    os.execute("sleep 0.05")
  end
  local log = read_file(dir .. "/stderr") or ""
  M.stop(server)
  error("fake_llm.py did not start:\n" .. log, 2)
end

-- The requests received so far, in order: { {n, method, path, headers, body, raw}, ... }
function M.requests(server)
  local out = {}
  for line in (read_file(server.log_path) or ""):gmatch("[^\n]+") do
    out[#out + 1] = cjson.decode(line)
  end
  return out
end

function M.stop(server)
  if server.pid then
    os.execute("kill " .. server.pid .. " 2>/dev/null")
    server.pid = nil
  end
  os.execute("rm -rf " .. q(server.dir))
end

return M
