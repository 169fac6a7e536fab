-- Runs a real nginx with the Lua module (Debian's libnginx-mod-http-lua on luajit2) for the
-- specs: a generated configuration in a temporary directory, master and workers as children
-- of this process (never a daemon), on a loopback port handed over by nginx_launch.py (so no
-- other process can take it first), with the checkout's lua/, spec/ and build/luajit/ on the
-- Lua paths. Stopping it reads its error log and says whether a worker ever crashed.
--
--   local srv = nginx.start{ server = [[ location = /t { content_by_lua_block { ... } } ]] }
--   finally(function() nginx.stop(srv) end)     -- or nginx.with(opts, function(srv) ... end)
--   http_client.request(srv, "GET", "/t")       -- srv.url is http://127.0.0.1:<port>
local common = require "support.hosts.common"
local proc = require "support.proc"

local M = {}

local q = proc.shell_quote

local MODULES = "/usr/lib/nginx/modules"
local READY_HOST = "harness-ready.invalid"

-- Lines of an error log that mean a worker or the master failed: a worker killed by a signal
-- (a segfault, an abort) or ending with an error status, and anything logged at alert, crit
-- or emerg level.
local CRASH_PATTERNS = { "exited on signal", "exited with code [1-9]", "%[alert%]", "%[crit%]", "%[emerg%]" }

function M.crashes(log)
  local found = {}
  for line in (log or ""):gmatch("[^\n]+") do
    for _, pattern in ipairs(CRASH_PATTERNS) do
      if line:find(pattern) then
        found[#found + 1] = line
        break
      end
    end
  end
  return found
end

-- Lines of log that say the SDK called ngx.sleep(0), which Debian's nginx (no "delayed
-- events" patch) warns about every time: the SDK must never do it.
function M.sleep0_warnings(log)
  local n = 0
  for _ in (log or ""):gmatch("ngx%.sleep%(0%) called") do n = n + 1 end
  return n
end

-- Raises, quoting the lines, when log shows a crash (see crashes).
function M.assert_no_crashes(log)
  local found = M.crashes(log)
  if #found > 0 then error("nginx crashed or alerted:\n" .. table.concat(found, "\n"), 2) end
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t or {}) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function configuration(dir, opts)
  local env_names = { SANDBOX_API_URL = true, SANDBOX_API_KEY = true }
  for name in pairs(opts.env or {}) do env_names[name] = true end
  local lines = {}
  local function add(...)
    for i = 1, select("#", ...) do lines[#lines + 1] = select(i, ...) end
  end
  -- as root, the workers would switch to nobody, who cannot read the temporary directory
  if proc.output("id -u"):match("^%d+") == "0" then add("user root;") end
  add("worker_processes " .. (opts.workers or 1) .. ";",
      "pid " .. dir .. "/nginx.pid;",
      "error_log " .. dir .. "/logs/error.log " .. (opts.log_level or "notice") .. ";",
      "load_module " .. MODULES .. "/ndk_http_module.so;",
      "load_module " .. MODULES .. "/ngx_http_lua_module.so;")
  -- nginx clears the workers' environment except for the names declared here
  for _, name in ipairs(sorted_keys(env_names)) do add("env " .. name .. ";") end
  add(opts.main or "",
      "events { worker_connections " .. (opts.worker_connections or 1024) .. "; }",
      "http {",
      "  access_log " .. (opts.access_log and (dir .. "/logs/access.log") or "off") .. ";")
  for _, kind in ipairs({ "client_body", "proxy", "fastcgi", "uwsgi", "scgi" }) do
    add("  " .. kind .. "_temp_path " .. dir .. "/tmp/" .. kind .. ";")
  end
  add('  lua_package_path "' .. (opts.lua_path and (opts.lua_path .. ";") or "") .. common.lua_path() .. '";',
      '  lua_package_cpath "' .. common.lua_cpath() .. '";')
  for _, name in ipairs(sorted_keys(opts.shared_dicts)) do
    add("  lua_shared_dict " .. name .. " " .. opts.shared_dicts[name] .. ";")
  end
  add(opts.http or "",
      -- the first server on the port: every request that is not the harness's own
      "  server {",
      "    include " .. dir .. "/listen.conf;",
      opts.server or "",
      "  }",
      "  server {",
      "    include " .. dir .. "/listen.conf;",
      "    server_name " .. READY_HOST .. ";",
      "    location / { return 200 ready; }",
      "  }",
      "}")
  return table.concat(lines, "\n") .. "\n"
end

-- Whether nginx answers on port: the harness's own server (a raw HTTP/1.0 request), or for a
-- configuration of the caller's, any HTTP answer to GET `path`.
local function answers(port, path)
  local socket = require "socket"
  local c = socket.tcp()
  c:settimeout(1)
  local ok = c:connect("127.0.0.1", port)
    and c:send("GET " .. (path or "/") .. " HTTP/1.0\r\nHost: " .. (path and "localhost" or READY_HOST) .. "\r\n\r\n")
  local status = ok and c:receive("*l")
  c:close()
  if path then return status ~= nil and status:match("^HTTP/1%.%d %d") ~= nil end
  return status ~= nil and status:match("^HTTP/1%.%d 200") ~= nil
end

function M.log(srv)
  return proc.read_file(srv.error_log) or ""
end

-- The master's pid (nginx's pid file), or nil before it has written it.
function M.master_pid(srv)
  return tonumber((proc.read_file(srv.dir .. "/nginx.pid") or ""):match("%d+"))
end

-- The worker processes' pids, in no particular order.
function M.worker_pids(srv)
  local pids = {}
  local master = M.master_pid(srv)
  if not master then return pids end
  for pid in proc.output("pgrep -P " .. master):gmatch("%d+") do pids[#pids + 1] = tonumber(pid) end
  return pids
end

-- Stops nginx: gracefully (SIGQUIT to the master, up to `grace` seconds, default 5), then
-- every process of its group with SIGTERM and SIGKILL; removes its directory unless
-- srv.keep_dir. Returns the whole error log. Safe to call twice.
function M.stop(srv, grace)
  if srv.stopped then return srv.final_log end
  srv.stopped = true
  local master = M.master_pid(srv)
  if master and proc.alive(srv.pid) then
    os.execute("kill -QUIT " .. master .. " 2>/dev/null")
    proc.wait_until(grace or 5, function() return not proc.alive(srv.pid) end, 0.05)
  end
  common.kill_group(srv.pid, "TERM")
  proc.wait_until(2, function() return not proc.alive(srv.pid) end, 0.05)
  common.kill_group(srv.pid, "KILL")
  srv.final_log = M.log(srv)
  if not srv.keep_dir then proc.remove_tree(srv.dir) end
  return srv.final_log
end

-- Starts nginx and waits (up to 15 s) until it answers. opts (all optional):
--   server        directives inside the server block on the port (locations, ...)
--   http          directives in the http block (init_by_lua_block, upstreams, ...)
--   main          directives in the main context
--   workers       worker_processes (default 1)
--   env           { NAME = value }: nginx's environment, each declared with `env NAME;`
--                 (SANDBOX_API_URL and SANDBOX_API_KEY are always declared)
--   shared_dicts  { name = "1m" }: lua_shared_dict zones
--   lua_path      more lua_package_path entries, before the checkout's ("/x/?.lua;/y/?.lua")
--   log_level     error_log level (default "notice")
--   access_log    true: log requests to <dir>/logs/access.log
--   worker_connections  (default 1024)
--   max_seconds   nginx is killed after this long whatever happens (default 600)
--   keep_dir      true: stop leaves the directory (config, logs) in place
-- Returns srv { url, port, dir, pid (the group's leader), error_log, conf }.
function M.start(opts)
  opts = opts or {}
  local dir = proc.make_temp_dir()
  local srv = { dir = dir, error_log = dir .. "/logs/error.log", conf = dir .. "/nginx.conf" }
  assert(os.execute("mkdir -p " .. q(dir .. "/logs") .. " " .. q(dir .. "/tmp")))
  proc.write_file(srv.conf, configuration(dir, opts))
  return M.launch(srv, opts, { "-p", dir, "-c", srv.conf, "-e", srv.error_log })
end

-- Starts nginx with a configuration of the caller's: conf (a file) must `include
-- <dir>/listen.conf;` in its server block and write its pid to <dir>/nginx.pid, where dir is
-- a fresh directory of the caller's; prefix is nginx's -p. nginx's stderr goes to
-- <dir>/logs/error.log (give the configuration `error_log stderr`). Waits until GET `ready_path`
-- gets any HTTP answer. opts: env, max_seconds, keep_dir (as for start).
function M.start_file(dir, conf, prefix, ready_path, opts)
  opts = opts or {}
  assert(os.execute("mkdir -p " .. q(dir .. "/logs")))
  local srv = { dir = dir, error_log = dir .. "/logs/error.log", conf = conf, ready_path = ready_path }
  return M.launch(srv, opts, { "-p", prefix, "-c", conf })
end

-- Runs nginx (arguments: a list of words) through nginx_launch.py for srv {dir, error_log}.
function M.launch(srv, opts, arguments)
  assert(proc.run("test -f " .. MODULES .. "/ngx_http_lua_module.so"),
    "nginx's Lua module is not installed (scripts/install-deps.sh)")
  local dir = srv.dir
  srv.keep_dir = opts.keep_dir
  local words = {}
  for i, a in ipairs(arguments) do words[i] = q(a) end
  local launch = string.format("timeout -k 5 %d python3 %s %s %s -g %s",
    opts.max_seconds or 600, q(common.top() .. "/spec/support/hosts/nginx_launch.py"), q(dir),
    table.concat(words, " "), q("daemon off;"))
  local stdout = srv.ready_path and srv.error_log or (dir .. "/logs/stdout")
  assert(os.execute(string.format("env %s %s > %s 2>&1 & echo $! > %s", common.env_words(opts.env), launch,
    q(stdout), q(dir .. "/launcher.pid"))))
  srv.pid = tonumber((proc.read_file(dir .. "/launcher.pid") or ""):match("%d+"))

  local ready = proc.wait_until(15, function()
    if not srv.port then
      srv.port = tonumber((proc.read_file(dir .. "/port") or ""):match("%d+"))
    end
    return (srv.port and answers(srv.port, srv.ready_path)) or not proc.alive(srv.pid)
  end, 0.05) and srv.port and answers(srv.port, srv.ready_path)
  if not ready then
    local out = proc.read_file(dir .. "/logs/stdout") or ""
    error("nginx did not start:\n" .. M.stop(srv) .. out, 2)
  end
  srv.url = "http://127.0.0.1:" .. srv.port
  return srv
end

-- Starts nginx, calls fn(srv), stops nginx whatever fn did, then raises fn's error, or a
-- crash found in the error log. Returns the error log.
function M.with(opts, fn)
  local srv = M.start(opts)
  local ok, err = pcall(fn, srv)
  local log = M.stop(srv)
  if not ok then error(err, 0) end
  M.assert_no_crashes(log)
  return log
end

return M
