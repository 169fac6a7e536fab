-- Starts spec/support/fake_llm.py (a scripted OpenAI/Anthropic endpoint on 127.0.0.1) for
-- the agent specs, reads back the requests it recorded, and stops it.
local cjson = require "cjson"
local proc = require "support.proc"

local M = {}

M.OPENAI_KEY = "sk-test-openai-0123456789"
M.ANTHROPIC_KEY = "sk-ant-test-0123456789"

local q = proc.shell_quote
M.shell_quote = q
M.read_file = proc.read_file

local function here()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return src:match("^(.*)/[^/]*$") or "."
end

-- opts.fail_first: answer the first N requests with 429 + Retry-After: 0; opts.script: "fix"
-- (the default: the failing test) or "csv" (the data analyst of examples/agent_kernel.lua)
function M.start(opts)
  opts = opts or {}
  local dir = proc.make_temp_dir()
  local log_path = dir .. "/requests.jsonl"
  local server = proc.start_server({
    name = "fake_llm.py", dir = dir, log = dir .. "/stderr",
    command = string.format(
      "python3 %s --port-file %s --log %s --openai-key %s --anthropic-key %s --fail-first %d --script %s",
      q(here() .. "/fake_llm.py"), q(dir .. "/port"), q(log_path), q(M.OPENAI_KEY),
      q(M.ANTHROPIC_KEY), opts.fail_first or 0, q(opts.script or "fix")),
  })
  server.log_path = log_path
  return server
end

-- The requests received so far, in order: { {n, method, path, headers, body, raw}, ... }
function M.requests(server)
  local out = {}
  for line in (proc.read_file(server.log_path) or ""):gmatch("[^\n]+") do
    out[#out + 1] = cjson.decode(line)
  end
  return out
end

M.stop = proc.stop_server

return M
