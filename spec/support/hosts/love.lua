-- Runs a game script in a real LÖVE 11 (LuaJIT), headless (love_game/conf.lua: no window,
-- graphics or audio, so no display is needed), to completion under a time limit, with the
-- checkout's lua/, spec/ and build/luajit/ on its package paths, and gives back its exit
-- status and output.
--
-- The script is what a game's main.lua holds (it defines love.update and friends); it ends
-- the game with love.event.quit(status), or the harness does after opts.frames frames. An
-- error in it ends LÖVE with status 1 and the traceback on stdout.
local common = require "support.hosts.common"
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

-- opts:
--   script   path of the game's main Lua file, or
--   code     its Lua source (written to a temporary file)
--   frames   quit with status 0 after this many love.update calls (default: the game quits)
--   timeout  seconds before LÖVE is killed (default 30)
--   env      extra environment variables { NAME = value }
-- Returns { code, timed_out, stdout, stderr, result } (result: what the script handed to
-- support.hosts.report, or nil). Raises if LÖVE is not installed.
function M.run(opts)
  assert(proc.run("command -v love >/dev/null"), "love is not installed (scripts/install-deps.sh)")
  return common.run_host("love " .. q(common.top() .. "/spec/support/hosts/love_game"), opts, "main.lua",
    { AIRLOCK_HOST_FRAMES = opts.frames and tostring(opts.frames) or nil })
end

return M
