-- A private PostgreSQL cluster for the specs that test the fleet's SQL without a fleet: initdb
-- in a temporary directory, the postmaster on a free loopback port with a password (as
-- scripts/fleet.sh does it: when this runs as root, PostgreSQL, which refuses root, runs as the
-- system user airlock-pg), the schema applied by airlockd's own migrations
-- (`airlockd --migrate-only`), psql sessions run at once in the background, and stop, which
-- always leaves nothing running.
local proc = require "support.proc"

local M = {}
local q = proc.shell_quote

local PG_BIN = os.getenv("PG_BIN") or "/usr/lib/postgresql/15/bin"
local PG_USER = "airlock-pg"

local function is_root()
  return proc.output("id -u"):match("^0") ~= nil
end

-- cmd (a shell command line) as PostgreSQL's OS user.
local function as_pg(cmd)
  if is_root() then return "runuser -u " .. PG_USER .. " -- " .. cmd end
  return cmd
end

local function free_port()
  return tonumber(proc.output(
    "python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 0)); print(s.getsockname()[1])'"))
end

local function airlockd_bin()
  return os.getenv("AIRLOCKD_BIN") or (proc.repo_root() .. "/build/airlockd")
end

-- Stops the cluster (fast, then immediate) and removes its directory.
function M.stop(pg)
  if not pg or not pg.dir then return end
  if pg.started then
    local data = q(pg.dir .. "/data")
    if not proc.run(as_pg(PG_BIN .. "/pg_ctl -D " .. data .. " -m fast -w -t 30 stop") .. " > /dev/null 2>&1") then
      proc.run(as_pg(PG_BIN .. "/pg_ctl -D " .. data .. " -m immediate -w -t 30 stop") .. " > /dev/null 2>&1")
    end
    pg.started = false
  end
  proc.remove_tree(pg.dir)
  pg.dir = nil
end

-- A running cluster with a database `airlock` at the schema's newest version; errors (after
-- stopping what started) when it could not be made. Returns
-- { dir, port, url, passfile, psql(sql), start(sql), stop }.
function M.start()
  local pg = { dir = proc.make_temp_dir() }
  local ok, err = pcall(function()
    local dir = pg.dir
    if is_root() then
      if not proc.run("id " .. PG_USER .. " > /dev/null 2>&1") then
        assert(proc.run("useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "
          .. PG_USER), "cannot add the user " .. PG_USER)
      end
      assert(proc.run("chmod 711 " .. q(dir) .. " && chown " .. PG_USER .. " " .. q(dir)))
    end
    local password = proc.output("head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \\n'")
    proc.write_file(dir .. "/pwfile", password .. "\n")
    assert(proc.run("chmod 600 " .. q(dir .. "/pwfile") .. (is_root() and (" && chown " .. PG_USER .. " "
      .. q(dir .. "/pwfile")) or "")))
    local rc, out = proc.run_capture(as_pg(PG_BIN .. "/initdb -D " .. q(dir .. "/data") .. " -U airlock --pwfile="
      .. q(dir .. "/pwfile") .. " --auth=scram-sha-256 -E UTF8 --locale=C.UTF-8"))
    assert(rc == 0, "initdb failed: " .. out)
    os.remove(dir .. "/pwfile")
    for _ = 1, 3 do
      pg.port = free_port()
      -- a test cluster: durability traded for speed on a shared machine (as fleet.sh's)
      rc, out = proc.run_capture(as_pg(PG_BIN .. "/pg_ctl -D " .. q(dir .. "/data") .. " -l "
        .. q(dir .. "/data/postgres.log") .. " -w -t 30 start -o " .. q("-c listen_addresses=127.0.0.1 -c port="
        .. pg.port .. " -c unix_socket_directories=" .. dir .. "/data -c max_connections=100 -c fsync=off"
        .. " -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=32MB")))
      if rc == 0 then break end
    end
    assert(rc == 0, "PostgreSQL did not start: " .. out .. (proc.read_file(dir .. "/data/postgres.log") or ""))
    pg.started = true
    pg.passfile = dir .. "/pgpass"
    proc.write_file(pg.passfile, string.format("127.0.0.1:%d:*:airlock:%s\n", pg.port, password))
    assert(proc.run("chmod 600 " .. q(pg.passfile)))
    rc, out = proc.run_capture(string.format("PGPASSFILE=%s psql -X -q -h 127.0.0.1 -p %d -U airlock -d postgres"
      .. " -c 'CREATE DATABASE airlock'", q(pg.passfile), pg.port))
    assert(rc == 0, "CREATE DATABASE: " .. out)
    pg.url = string.format("postgresql://airlock:%s@127.0.0.1:%d/airlock", password, pg.port)
    proc.write_file(dir .. "/database.url", pg.url .. "\n")
    rc, out = proc.run_capture(string.format("SANDBOX_DATABASE_URL_FILE=%s %s --migrate-only",
      q(dir .. "/database.url"), q(airlockd_bin())))
    assert(rc == 0, "airlockd --migrate-only: " .. out)
    pg.migrate_output = out
  end)
  if not ok then
    M.stop(pg)
    error(err, 2)
  end
  local psql = string.format("PGPASSFILE=%s psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p %d -U airlock -d airlock",
    q(pg.passfile), pg.port)
  -- Runs sql (one or more statements) in one psql session; returns its output, trimmed
  -- (errors on a failed statement, with psql's message).
  function pg.psql(sql)
    local rc, out = proc.run_capture(psql .. " -c " .. q(sql))
    assert(rc == 0, "psql failed: " .. out)
    return (out:gsub("%s+$", ""))
  end
  -- Starts sql in a psql session of its own in the background (a connection at once with
  -- the others): wait() returns its exit status and output.
  function pg.start(sql)
    local out_path, rc_path = proc.temp_path(), proc.temp_path()
    assert(os.execute(string.format("(%s -f - > %s 2>&1 <<'AIRLOCK_SQL_END'\n%s\nAIRLOCK_SQL_END\necho $? > %s) &",
      psql, q(out_path), sql, q(rc_path))))
    return { wait = function(seconds)
      local done = proc.wait_until(seconds or 120, function() return (proc.read_file(rc_path) or ""):match("%d") end)
      local out = proc.read_file(out_path) or ""
      os.remove(out_path)
      if not done then return nil, "still running after " .. tostring(seconds or 120) .. " s: " .. out end
      local rc = tonumber((proc.read_file(rc_path)):match("%d+"))
      os.remove(rc_path)
      return rc, out
    end }
  end
  pg.stop = function() M.stop(pg) end
  return pg
end

return M
