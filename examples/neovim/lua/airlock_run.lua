-- The AirlockRun plugin (examples/neovim): run the current buffer in a sandbox, output in a
-- split, the editor never frozen. Each run is a task (airlock.spawn). Inside Neovim the SDK
-- picks its libuv transport by itself: the sockets are watched by vim.loop, and the task is
-- resumed through vim.schedule, so the code after each SDK call below runs in Neovim's main
-- loop, where the editor API is allowed. Nothing polls: between runs the plugin costs nothing.
--
--   require("airlock_run").setup{ base_url = ..., api_key = ..., timeout = 30 }  -- optional:
--                                      -- else $SANDBOX_API_URL and $SANDBOX_API_KEY
--   :AirlockRun
local airlock = require "airlock"

local M = {}

local config = { timeout = 30 }
local sandbox_options = {}

-- How each filetype runs: the file written into the sandbox, and the command.
local RUNNERS = {
  python = { file = "main.py", command = "python3 main.py" },
  sh = { file = "main.sh", command = "sh main.sh" },
  bash = { file = "main.sh", command = "bash main.sh" },
}

local open = {}        -- sandboxes of runs in flight → true
local runs = 0

-- setup{ base_url, api_key, template, timeout (seconds per run, 1..60) }
function M.setup(opts)
  opts = opts or {}
  config.timeout = opts.timeout or config.timeout
  sandbox_options = { base_url = opts.base_url, api_key = opts.api_key, template = opts.template }
end

local function split_lines(text)
  local lines = {}
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = line end
  if lines[#lines] == "" then lines[#lines] = nil end
  return lines
end

-- What the split shows for a result (or an error).
local function report_lines(name, runner, ok, result, seconds)
  if not ok then
    return { "airlock: " .. name .. " could not run", "", tostring(result) }
  end
  local lines = { string.format("$ %s   (exit %s, %.1f s)", runner.command, tostring(result.exit_code), seconds), "" }
  for _, line in ipairs(split_lines(result.stdout)) do lines[#lines + 1] = line end
  if result.stderr ~= "" then
    lines[#lines + 1] = ""
    lines[#lines + 1] = "[stderr]"
    for _, line in ipairs(split_lines(result.stderr)) do lines[#lines + 1] = line end
  end
  if result.timed_out then lines[#lines + 1] = "[timed out]" end
  return lines
end

-- A scratch split below with the lines; the cursor stays where it was.
local function show(title, lines)
  local from = vim.api.nvim_get_current_win()
  vim.cmd("botright new")
  local buf = vim.api.nvim_get_current_buf()
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  vim.api.nvim_buf_set_name(buf, title)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.api.nvim_set_current_win(from)
  return buf
end

-- M.run([buf]) → the task running it (nil when the filetype has no runner).
function M.run(buf)
  buf = buf or vim.api.nvim_get_current_buf()
  local filetype = vim.bo[buf].filetype
  local runner = RUNNERS[filetype]
  if not runner then
    vim.notify("AirlockRun: no runner for filetype '" .. filetype .. "' (python, sh, bash)", vim.log.levels.WARN)
    return nil
  end
  local code = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n") .. "\n"
  local name = vim.fn.fnamemodify(vim.api.nvim_buf_get_name(buf), ":t")
  if name == "" then name = "[No Name]" end
  runs = runs + 1
  local title = string.format("airlock://%d/%s", runs, name)
  vim.notify("airlock: running " .. name .. " in a sandbox...")
  local started = vim.loop.hrtime()
  return airlock.spawn(function()
    local sbx
    local ok, result = airlock.pcall(function()
      sbx = airlock.sandbox(sandbox_options)
      open[sbx] = true
      sbx.files:write(runner.file, code)
      return sbx:run(runner.command, { timeout = config.timeout })
    end)
    if sbx then
      open[sbx] = nil
      airlock.pcall(sbx.close, sbx)
    end
    -- resumed through vim.schedule: the editor API is allowed here
    M.last = { title = title, ok = ok, buf = show(title, report_lines(name, runner, ok, result,
      (vim.loop.hrtime() - started) / 1e9)) }
    vim.cmd("doautocmd <nomodeline> User AirlockRunDone")
  end)
end

-- Sandboxes of runs still in flight.
function M.running()
  local n = 0
  for _ in pairs(open) do n = n + 1 end
  return n
end

-- Deletes the sandboxes of runs in flight (blocking, 2 s each at most): Neovim is quitting.
-- A sandbox still being created at that moment (its id not known yet) is left to the
-- server's idle timeout.
function M.close_all()
  for sbx in pairs(open) do
    open[sbx] = nil
    pcall(sbx.close, sbx, { timeout = 2 })
  end
end

return M
