-- luacheck: max line length 160
-- Memory of JSON file writes (issue #16): four tenants each sending one 64 MiB JSON write at
-- once keep airlockd within the body budget (256 MiB) plus a small constant, parsing
-- included, and the memory returns afterwards (VmHWM / VmRSS from /proc/<pid>/status). Not
-- in the ASan run (its figures would be the sanitizer's): tagged #noasan. Loopback only. Lua 5.1-compatible.
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"

local q = proc.shell_quote
local MB = 1048576

local function proc_status_kb(pid, field)
  local status = proc.read_file("/proc/" .. pid .. "/status") or ""
  return tonumber(status:match(field .. ":%s*(%d+) kB"))
end

describe("airlockd storage", function()
  describe("memory #noasan", function()
    it("four 64 MiB JSON writes at once stay within the body budget, and memory returns", function()
      local tenants = {}
      for i = 1, 4 do tenants["t" .. i] = "k" .. i .. "_" .. airlockd.random_hex(16) end
      local server = airlockd.start({ tenants = tenants, env = { SANDBOX_WORKSPACE_QUOTA_MB = "100", SANDBOX_WARM_NEW = "0",
        SANDBOX_TRANSFER_TIMEOUT = "120" } })
      local body = proc.temp_path()
      local ok, err = pcall(function()
        local ids = {}
        for i = 1, 4 do ids[i] = http_client.create(server, tenants["t" .. i]).json.session_id end
        -- 64 MiB less a little: text with escapes, so decoding is exercised
        local chunk = string.rep("abc\\n\\u00e9\\\"xyz ", 4096)
        local f = assert(io.open(body, "wb"))
        f:write('{"path":"big.txt","content":"')
        local chunks = math.floor((64 * MB - 64) / #chunk)
        for _ = 1, chunks do f:write(chunk) end
        f:write('"}')
        f:close()
        local base = proc_status_kb(server.pid, "VmRSS")
        local outs = {}
        for i = 1, 4 do
          outs[i] = proc.temp_path()
          os.execute(string.format("(curl -s -m 120 -o %s -w '%%{http_code}' -H 'Content-Type: application/json' -H %s "
            .. "--data-binary @%s %s > %s.code; echo done >> %s.code) &", q(outs[i]), q("X-API-Key: " .. tenants["t" .. i]),
            q(body), q(server.url .. "/v1/sessions/" .. ids[i] .. "/write"), q(outs[i]), q(outs[i])))
        end
        for i = 1, 4 do
          assert.truthy(proc.wait_until(150, function() return (proc.read_file(outs[i] .. ".code") or ""):find("done") ~= nil end))
          local code = proc.read_file(outs[i] .. ".code")
          assert.are.equal("200", code:match("^(%d+)"), (proc.read_file(outs[i]) or ""))
          os.remove(outs[i] .. ".code")
          os.remove(outs[i])
        end
        local peak = proc_status_kb(server.pid, "VmHWM")
        io.stderr:write(string.format("\n[storage_memory_spec] four 64 MiB JSON writes: VmRSS %d kB before, VmHWM %d kB\n", base, peak))
        -- the documented budget for bodies (256 MiB) plus a small constant
        assert.truthy(peak - base <= 256 * 1024 + 48 * 1024, "peak " .. peak .. " kB from " .. base .. " kB")
        local after
        proc.wait_until(10, function()
          after = proc_status_kb(server.pid, "VmRSS")
          return after - base <= 32 * 1024
        end)
        assert.truthy(after - base <= 32 * 1024, "resident after: " .. after .. " kB from " .. base .. " kB")
        io.stderr:write(string.format("[storage_memory_spec] VmRSS %d kB after\n", after))
        -- the file holds the decoded content, and the answer counts Python's characters
        local size = tonumber(proc.output("stat -c %s " .. q(server.dir .. "/state/workspaces/" .. ids[1] .. "/w" .. "/big.txt")):match("%d+"))
        local per = #"abc\n\xc3\xa9\"xyz "
        assert.are.equal(chunks * 4096 * per, size)
      end)
      os.remove(body)
      airlockd.stop(server)
      assert(ok, err)
    end)
  end)
end)
