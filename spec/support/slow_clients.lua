-- Slow HTTP clients against a loopback airlockd, for the hardening specs and the bench: builds
-- spec/c/slow_clients.c once (cc) and runs it in the background. It holds its connections from
-- 127.0.0.2 and up (Linux's loopback takes any 127/8 address), so the spec's own requests from
-- 127.0.0.1 are never counted with them. Lua 5.1-compatible.
local proc = require "support.proc"

local M = {}
local q = proc.shell_quote
local binary

-- The built tool's path (built on first use).
function M.binary()
  if binary then return binary end
  local path = proc.temp_path()
  local rc, out = proc.run_capture("cc -std=c11 -O2 -Wall -Wextra -Werror -o " .. q(path) .. " spec/c/slow_clients.c")
  assert(rc == 0, "cannot build spec/c/slow_clients.c:\n" .. out)
  binary = path
  return binary
end

-- Starts count slow clients against server. opts: mode ("headers", "body", "idle", "read"),
-- count, first (first address's last byte, default 2), addrs (how many addresses, default 20),
-- interval and duration (seconds), reconnect (open a cut connection again), path, key,
-- body_bytes, request_body. Returns a handle:
--   status()   { open =, connects =, cut =, failed =, truncated = } (zeros before the first report)
--   wait_for(seconds, pred)  waits until pred(status()) holds; returns it and the last status
--   stop()     ends the clients and returns their last status
function M.start(server, opts)
  local dir = proc.make_temp_dir()
  local args = {
    q(M.binary()), "--port", server.port, "--count", opts.count, "--mode", opts.mode or "headers",
    "--first", opts.first or 2, "--addrs", opts.addrs or 20, "--interval", opts.interval or 5,
    "--duration", opts.duration or 120, "--status", q(dir .. "/status"),
  }
  if opts.reconnect then args[#args + 1] = "--reconnect" end
  if opts.path then args[#args + 1] = "--path"; args[#args + 1] = q(opts.path) end
  if opts.key then args[#args + 1] = "--key"; args[#args + 1] = q(opts.key) end
  if opts.body_bytes then args[#args + 1] = "--body-bytes"; args[#args + 1] = opts.body_bytes end
  if opts.request_body then args[#args + 1] = "--request-body"; args[#args + 1] = q(opts.request_body) end
  local pid = proc.spawn(table.concat(args, " "), dir .. "/log", dir .. "/pid")
  local handle = {}
  function handle.status()
    local line = proc.read_file(dir .. "/status") or ""
    local s = {}
    for _, k in ipairs({ "open", "connects", "cut", "failed", "truncated" }) do
      s[k] = tonumber(line:match(k .. "=(%d+)")) or 0
    end
    return s
  end
  function handle.wait_for(seconds, pred)
    local ok = proc.wait_until(seconds, function() return pred(handle.status()) end, 0.2)
    return ok, handle.status()
  end
  function handle.stop()
    proc.stop_process(pid, 5)
    local s = handle.status()
    proc.remove_tree(dir)
    return s
  end
  return handle
end

-- "k=v ..." of a status, for assertion messages.
function M.describe(s)
  return string.format("open=%d connects=%d cut=%d failed=%d truncated=%d", s.open, s.connects, s.cut, s.failed,
    s.truncated)
end

return M
