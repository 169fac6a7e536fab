-- airlockd writes its log only through src/server/log (issue 27 item 1): no other file of
-- src/server writes to stderr itself; and the check that no log holds a secret
-- (support.log_secrets, run by the airlockd and fleet launchers at stop) finds one when it is
-- there, naming it without quoting it.
local log_secrets = require "support.log_secrets"

local ROOT = (debug.getinfo(1, "S").source:gsub("^@", "")):match("^(.*)spec/unit/[^/]+$") or ""

describe("airlockd's logging", function()
  it("has no stderr writes outside src/server/log (config_usage's --help text aside)", function()
    local p = assert(io.popen("find " .. ROOT .. "src/server -name '*.c' | sort"))
    local offenders = {}
    for file in p:lines() do
      if not file:find("src/server/log/", 1, true) then
        local n = 0
        for line in io.lines(file) do
          n = n + 1
          local code = line:gsub("/%*.*", ""):gsub("^%s*%*.*", "")
          if code:find("fprintf%(%s*stderr") or code:find("perror%(") or code:find("vfprintf%(%s*stderr")
            or code:find("fputs%(.*stderr%)") and not code:find("config_usage(stderr)", 1, true)
            or code:find("STDERR_FILENO") or code:find("write%(%s*2%s*,") then
            offenders[#offenders + 1] = file:gsub("^.*/src/", "src/") .. ":" .. n .. ": " .. line
          end
        end
      end
    end
    p:close()
    assert.are.same({}, offenders)
  end)

  it("finds a secret a server was started with in its log, naming it and never quoting it", function()
    local secrets = log_secrets.from_env({ SANDBOX_API_KEYS = "acme:ak_0123456789abcdef,b:k1",
      SANDBOX_ADMIN_KEY = "adm_" .. string.rep("z", 32),
      SANDBOX_DATABASE_URL = "postgresql://airlock:pw_secret_99@127.0.0.1:5432/airlock" },
      { other = "ok_fedcba9876543210" })
    -- the short "k1" is too short to look for: it could be in any log by chance
    assert.are.equal(4, #secrets)
    assert.is_nil(log_secrets.leaks("2026-05-04T09:12:30.118Z info  airlockd: listening", secrets, "the log"))
    local leak = log_secrets.leaks("… connect failed for airlock:pw_secret_99@127.0.0.1 and key ok_fedcba9876543210",
      secrets, "the log")
    assert.are.equal("the log holds the API key of tenant other, the password of SANDBOX_DATABASE_URL", leak)
  end)
end)
