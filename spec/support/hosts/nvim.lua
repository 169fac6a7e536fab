-- Runs a Lua file in a real Neovim (`nvim --headless -u NONE --clean`, Neovim 0.7: LuaJIT and
-- libuv as `vim.loop`) to completion under a time limit, with the checkout's lua/, spec/ and
-- build/luajit/ on its package paths, and gives back its exit status and output.
--
-- Neovim 0.7 has no `-l`: the script runs as `-c 'luafile <boot>'` (nvim_boot.lua), and ends
-- nvim itself when it is done, e.g. `vim.schedule(function() vim.cmd("qa!") end)` (or
-- `cquit N` for exit status N). `print` goes to stderr with CRLF line ends; write results
-- with io.stdout:write or support.hosts.report.
local common = require "support.hosts.common"
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

-- opts:
--   script   path of the Lua file to run, or
--   code     Lua source to run (written to a temporary file)
--   timeout  seconds before nvim is killed (default 30)
--   env      extra environment variables { NAME = value }
-- Returns { code, timed_out, stdout, stderr, result } (result: what the script handed to
-- support.hosts.report, or nil). Raises if nvim is not installed.
function M.run(opts)
  assert(proc.run("command -v nvim >/dev/null"), "nvim is not installed (scripts/install-deps.sh)")
  local boot = common.top() .. "/spec/support/hosts/nvim_boot.lua"
  return common.run_host("nvim --headless -u NONE --clean -n -c " .. q("luafile " .. boot), opts, "script.lua")
end

return M
