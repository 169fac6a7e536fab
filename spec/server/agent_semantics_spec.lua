-- luacheck: max line length 160
-- SANDBOX_EXEC_MODE=session (issue #19) runs each command in a bash the agent's container has
-- exec'd before the command came (src/agent/bootstrap.c gives it the command and environment
-- before bash's main): the result must be exactly the one `bash -c COMMAND` gives in the
-- default mode (a sandbox per command). The same table of tricky commands through two real
-- airlockds on 127.0.0.1 with gVisor, one per mode, compared field by field. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"

-- Control characters (no NUL) and multibyte UTF-8 in one argument.
local bytes = {}
for b = 1, 31 do bytes[#bytes + 1] = string.char(b) end
local odd = table.concat(bytes) .. "\127 é € 😀 \\ \" $ ` !"

local CASES = {
  { "syntax error", "echo before\nif" },
  { "syntax error on the first line", "echo x; fi" },
  { "exit code", "exit 7" },
  { "exit in a subshell and after", "(exit 3); echo $?; exit 300" },
  { "set -e", "set -e; false; echo no" },
  { "$0, $#, $@", "echo \"[$0] [$#] [$@]\"" },
  { "command not found", "no_such_command_airlock; echo $?" },
  { "trap on exit", "trap 'echo bye $?' EXIT; echo hi; exit 4" },
  { "here-documents", "cat <<'EOF'\nliteral $HOME `x`\nEOF\ncat <<EOF\nexpanded $HOME\nEOF\ncat <<-EOF\n\ttabs stripped\n\tEOF" },
  { "stdin is closed", "cat; echo cat=$?; read -r x; echo read=$? \"[$x]\"; head -c 5 /dev/stdin | od -c" },
  { "environment", "env | LC_ALL=C sort; echo $SHLVL; echo \"$BASH_EXECUTION_STRING\" | wc -c" },
  { "shell options", "echo $-; shopt -p | md5sum; set -o | md5sum; echo $BASHOPTS; echo $SHELLOPTS" },
  { "pids", "echo $$ $BASHPID $PPID" },
  { "line numbers", "echo $LINENO\n\necho $LINENO; f() { echo $LINENO; }; f" },
  { "quoting", [[printf '[%s]\n' "a  b" 'c"d' $'e\tf' "$(echo 'g h')" \$HOME ~ "~"]] },
  { "control and multibyte bytes", "printf %s '" .. odd:gsub("'", "'\\''") .. "' | od -An -tx1" },
  { "bytes in an error", "printf '" .. odd:gsub("'", "'\\''"):gsub("%%", "%%%%") .. "'; no_such_" .. string.char(1) .. "é" },
  { "open descriptors, cwd, ids, limits",
    "ls /proc/self/fd; pwd; id; umask; ulimit -a | grep -v -- '(-u)'; grep -E '^(Cap|NoNewPrivs|Seccomp|SigIgn|SigBlk)' /proc/self/status" },
  { "signal to itself", "kill -TERM $$; echo after $?" },
  { "exec replaces the shell", "exec sh -c 'echo $0; exit 5'" },
  { "output on stderr and stdout", "echo out; echo err >&2; printf 'no newline'" },
  { "a long command", "echo " .. string.rep("x", 100 * 1024) .. " | wc -c" },
}

describe("a session's commands keep bash -c semantics (SANDBOX_EXEC_MODE=session vs command)", function()
  local servers, sids = {}, {}

  lazy_setup(function()
    for _, mode in ipairs({ "command", "session" }) do
      local server = airlockd.start({ tenants = { acme = "ak_" .. airlockd.random_hex(16) }, env = { SANDBOX_EXEC_MODE = mode } })
      servers[mode] = server
      local r = http_client.create(server, server.tenants.acme)
      assert.are.equal(201, r.status, r.body)
      sids[mode] = r.json.session_id
    end
  end)

  lazy_teardown(function()
    for _, server in pairs(servers) do airlockd.stop(server) end
  end)

  local function result(mode, command)
    local server = servers[mode]
    local r = http_client.exec(server, server.tenants.acme, sids[mode], command, 30)
    if r.status ~= 200 then return { status = r.status, body = r.body } end
    local j = r.json
    return { status = r.status, exit_code = j.exit_code, stdout = j.stdout, stderr = j.stderr,
             timed_out = j.timed_out, oom_killed = j.oom_killed }
  end

  it("runs the session's first command as the default mode does (the agent's first container)", function()
    assert.are.same(result("command", "echo $0 $$; ls /proc/self/fd"), result("session", "echo $0 $$; ls /proc/self/fd"))
  end)

  for _, case in ipairs(CASES) do
    it("gives the same result for: " .. case[1], function()
      local want = result("command", case[2])
      assert.are.equal(200, want.status, want.body)
      assert.are.same(want, result("session", case[2]))
    end)
  end

  it("runs the command in a bash exec'd ahead of it (the bootstrap is mapped in it)", function()
    local r = result("session", "cat /proc/$$/maps | grep -c /airlock/bootstrap.so")
    assert.are.equal(0, r.exit_code, r.stdout .. r.stderr)
    assert.truthy(tonumber(r.stdout) >= 1, r.stdout)
  end)

  it("reports a command's syntax error as bash -c does (named -c, not the bootstrap)", function()
    local r = result("session", "echo a; (")
    assert.are.equal(2, r.exit_code)
    assert.are.equal("", r.stdout)
    assert.truthy(r.stderr:find("^/bin/bash: %-c: line %d: syntax error"), r.stderr)
  end)

  -- (the default mode's waiter cannot exec these: it answers exit 127 with no output)
  it("runs commands longer than one exec string's 128 KiB, up to the request's maximum", function()
    local r = result("session", "echo " .. string.rep("y", 200 * 1024) .. " | wc -c")
    assert.are.same({ 0, "204801\n", "" }, { r.exit_code, r.stdout, r.stderr })
    r = result("session", ": " .. string.rep("z ", 512 * 1024 - 64) .. "; echo done")
    assert.are.same({ 0, "done\n", "" }, { r.exit_code, r.stdout, r.stderr })
  end)
end)
