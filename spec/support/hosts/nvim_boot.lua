-- Runs inside `nvim --headless` for support.hosts.nvim: runs the script named by
-- $AIRLOCK_HOST_SCRIPT. An error while it runs ends nvim at once with exit status 3 and the
-- traceback on stderr, rather than leaving nvim waiting until the harness's time limit.
-- (package.path and package.cpath come from $LUA_PATH / $LUA_CPATH, set by the harness.)
local script = os.getenv("AIRLOCK_HOST_SCRIPT")
local ok, err = xpcall(function() dofile(script) end, debug.traceback)
if not ok then
  io.stderr:write("nvim host: ", tostring(err), "\n")
  vim.cmd("cquit 3")
end
