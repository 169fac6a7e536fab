-- Quick start: a sandbox, a file, a command. Needs SANDBOX_API_URL and SANDBOX_API_KEY
-- (`make run` starts a local airlockd and sets both). Lua 5.4: the session is deleted
-- when `sbx` goes out of scope, error or not.
local airlock = require "airlock"

do
  local sbx <close> = airlock.sandbox{}
  sbx.files:write("main.py", "print(2 ** 16)")
  local result = sbx:run("python3 main.py")
  io.write(result.stdout)        --> 65536
  print(result.exit_code)        --> 0
end
