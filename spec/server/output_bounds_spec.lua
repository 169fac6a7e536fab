-- luacheck: max line length 160
-- Output and reads bounded (issue #8 item 3), from real sandboxes: airlockd keeps the first
-- 2/5 and the last 3/5 of its budget of each of a command's stdout and stderr (1 MiB by
-- default, SANDBOX_OUTPUT_MAX_KB), says in `warnings` how much it left out, cuts between
-- UTF-8 characters, and its memory stays flat whatever a command writes (300 MB of stdout,
-- `cat /dev/zero` until the timeout). The read route reads at most SANDBOX_READ_MAX_MB + 1
-- bytes of a file whatever its claimed size (a 300 MB sparse file, a file growing while it
-- is read) and answers 413 past the limit. Memory from airlockd's /proc/<pid>/status:
-- VmHWM reset (clear_refs) before each attack, compared with VmRSS before it.
-- Loopback only. Lua 5.1-compatible (no <close>).
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local host_state = require "support.host_state"

local MiB = 1024 * 1024
local REPLACEMENT = "\239\191\189" -- U+FFFD

-- The growth of airlockd's peak memory (MB) while fn runs; 0 under AddressSanitizer, whose
-- quarantine holds freed memory by design (the figure is printed, not judged, there).
local function peak_growth_mb(server, fn)
  local before = host_state.status_kb(server.pid, "VmRSS")
  assert.is_true(host_state.reset_peak(server.pid))
  fn()
  local growth = (host_state.status_kb(server.pid, "VmHWM") - before) / 1024
  if host_state.sanitized(server.pid) then
    print(string.format("\n(AddressSanitizer: +%.1f MB, not judged)", growth))
    return 0
  end
  return growth
end

-- A server started with env for the enclosing describe block, and a session of tenant acme.
local function server_for_block(env)
  local t = {}
  lazy_setup(function()
    t.server = airlockd.start({ env = env })
    t.key = t.server.tenants.acme
    t.id = http_client.create(t.server, t.key).json.session_id
  end)
  lazy_teardown(function()
    if t.server then airlockd.stop(t.server) end
  end)
  return t
end

local function kept_parts(text)
  local head, omitted, tail = text:match("^(.-)\n\n%.%.%. %[TRUNCATED: (%d+) bytes omitted%] %.%.%.\n\n(.*)$")
  return head, tonumber(omitted), tail
end

describe("airlockd output budget, default 1 MiB per stream", function()
  local t = server_for_block({ SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000}}' })
  local server, key, id

  before_each(function()
    server, key, id = t.server, t.key, t.id
  end)

  it("runs an ordinary command first, so the baseline holds what every exec allocates", function()
    assert.are.equal(0, http_client.exec(server, key, id, "echo warm").json.exit_code)
  end)

  -- Under AddressSanitizer memory is not judged (peak_growth_mb): the same paths run on 40 MB
  -- and 2 s there, not 300 MB and 5 s, which only the memory figure needs.
  local function sized(plain, sanitized)
    return host_state.sanitized(server.pid) and sanitized or plain
  end

  it("keeps head and tail of 300 MB of stdout, says what it dropped, and stays within 64 MB", function()
    local r
    local bytes = sized(300000000, 40000000)
    local growth = peak_growth_mb(server, function()
      r = http_client.exec(server, key, id, "yes | head -c " .. bytes .. "; echo THE END; echo on stderr >&2", 60)
    end)
    assert.are.equal(200, r.status, r.body:sub(1, 300))
    local res = r.json
    assert.are.equal(0, res.exit_code)
    assert.is_false(res.timed_out)
    local head, omitted, tail = kept_parts(res.stdout)
    assert.truthy(head, res.stdout:sub(1, 200))
    local total = bytes + #"THE END\n"
    assert.are.equal(math.floor(MiB * 2 / 5), #head)
    assert.are.equal(MiB - math.floor(MiB * 2 / 5), #tail)
    assert.are.equal(total - MiB, omitted)
    assert.are.equal(string.rep("y\n", 10), head:sub(1, 20))
    assert.are.equal("y\ny\nTHE END\n", tail:sub(-12))
    assert.are.equal("on stderr\n", res.stderr)
    assert.are.same({ string.format("Output truncated: stdout had %d bytes; %d bytes from its middle were left out "
      .. "(this server keeps %d bytes of each stream).", total, total - MiB, MiB) }, res.warnings)
    -- the agent text carries the kept parts and the warning
    assert.truthy(res.output:find("[TRUNCATED: " .. omitted .. " bytes omitted]", 1, true))
    assert.truthy(res.output:find("[WARNING]: Output truncated: stdout had", 1, true))
    print(string.format("\n%d MB of stdout: airlockd peak +%.1f MB, response %d bytes", math.floor(bytes / 1000000), growth, #r.body))
    assert.truthy(growth <= 64, "airlockd grew by " .. growth .. " MB")
  end)

  it("drains `cat /dev/zero` until the timeout with flat memory", function()
    local r
    local seconds = sized(5, 2)
    local growth = peak_growth_mb(server, function()
      r = http_client.exec(server, key, id, "cat /dev/zero", seconds)
    end)
    assert.are.equal(200, r.status)
    assert.is_true(r.json.timed_out)
    assert.are.equal("", r.json.stdout)
    assert.are.same({ "Execution exceeded " .. seconds .. "s limit." }, r.json.warnings)
    print(string.format("\ncat /dev/zero for %d s: airlockd peak +%.1f MB", seconds, growth))
    assert.truthy(growth <= 64, "airlockd grew by " .. growth .. " MB")
  end)

  it("bounds stderr the same way, and a stream within the budget is returned whole", function()
    local r = http_client.exec(server, key, id, "head -c 5000000 /dev/zero | tr '\\0' e >&2; printf 'exactly'", 60)
    local res = r.json
    assert.are.equal("exactly", res.stdout)
    local head, omitted, tail = kept_parts(res.stderr)
    assert.are.equal(5000000 - MiB, omitted)
    assert.are.equal(string.rep("e", #head), head)
    assert.are.equal(string.rep("e", #tail), tail)
    assert.are.same({ string.format("Output truncated: stderr had 5000000 bytes; %d bytes from its middle were left out "
      .. "(this server keeps %d bytes of each stream).", 5000000 - MiB, MiB) }, res.warnings)
    r = http_client.exec(server, key, id, "head -c " .. MiB .. " /dev/zero | tr '\\0' o", 60)
    assert.are.equal(MiB, #r.json.stdout)
    assert.are.same({}, r.json.warnings)
  end)
end)

describe("airlockd output budget across UTF-8 characters (SANDBOX_OUTPUT_MAX_KB=1)", function()
  local t = server_for_block({ SANDBOX_OUTPUT_MAX_KB = "1" })
  local server, key, id

  before_each(function()
    server, key, id = t.server, t.key, t.id
  end)

  it("never splits a character: head and tail decode as the whole stream does", function()
    -- 1024 bytes kept: head 409, tail 615 of "XY", 3000 euro signs (3 bytes each) and "Z":
    -- the head ends 2 bytes into the 136th sign, the tail starts 1 byte into the 2796th
    local r = http_client.exec(server, key, id, "printf XY; for i in $(seq 3000); do printf '\\342\\202\\254'; done; printf Z")
    local res = r.json
    assert.are.equal(0, res.exit_code)
    local head, omitted, tail = kept_parts(res.stdout)
    assert.truthy(head, res.stdout)
    assert.is_nil(res.stdout:find(REPLACEMENT, 1, true))
    assert.are.equal("XY" .. string.rep("\226\130\172", 135), head)
    assert.are.equal(string.rep("\226\130\172", 204) .. "Z", tail)
    assert.are.equal(9003 - #head - #tail, omitted)
    assert.truthy(res.warnings[1]:find("stdout had 9003 bytes; " .. omitted .. " bytes from its middle", 1, true))
  end)

  it("replaces invalid bytes near the cut exactly as in a whole stream", function()
    -- an invalid byte in the kept tail becomes one U+FFFD, as the plain route makes it
    local r = http_client.exec(server, key, id, "head -c 3000 /dev/zero | tr '\\0' a; printf 'b\\377c'")
    local _, _, tail = kept_parts(r.json.stdout)
    assert.are.equal("b" .. REPLACEMENT .. "c", tail:sub(-5))
    local _, count = r.json.stdout:gsub(REPLACEMENT, "")
    assert.are.equal(1, count)
  end)
end)

describe("airlockd file reads (SANDBOX_READ_MAX_MB=1)", function()
  local t = server_for_block({ SANDBOX_READ_MAX_MB = "1", SANDBOX_TENANT_LIMITS = '{"*":{"requests_per_minute":100000}}' })
  local server, key, id

  before_each(function()
    server, key, id = t.server, t.key, t.id
  end)

  local function too_large(path)
    return string.format("Reading %s: the file is larger than this server's 1 MB read limit. "
      .. "Read it in parts with a command (head -c, tail -c or split).", path)
  end

  it("returns a file of exactly the limit and refuses one byte more with a 413 naming the limit", function()
    local r = http_client.exec(server, key, id, "head -c " .. MiB .. " /dev/zero | tr '\\0' z > at; cp at over; printf x >> over")
    assert.are.equal(0, r.json.exit_code)
    r = http_client.read(server, key, id, "at")
    assert.are.equal(200, r.status)
    assert.are.equal(MiB, #r.json.content)
    r = http_client.read(server, key, id, "over")
    assert.are.equal(413, r.status)
    assert.are.equal(too_large("over"), r.json.detail)
  end)

  it("refuses a 300 MB sparse file without allocating its size", function()
    local r = http_client.exec(server, key, id, "truncate -s 300M sparse && stat -c %s sparse")
    assert.are.equal("314572800\n", r.json.stdout)
    local growth = peak_growth_mb(server, function()
      r = http_client.read(server, key, id, "sparse")
    end)
    assert.are.equal(413, r.status)
    assert.are.equal(too_large("sparse"), r.json.detail)
    print(string.format("\nread of a 300 MB sparse file: airlockd peak +%.1f MB", growth))
    assert.truthy(growth <= 16, "airlockd grew by " .. growth .. " MB")
  end)

  it("reads a file that grows while it is read without following it", function()
    -- (one process appending 400 chunks of 250 kB, unbuffered, a little apart: a shell loop of
    -- `head | tr` spawned 800 processes, most of this file's CPU in gVisor)
    local writer = "import time\nwith open('growing', 'ab', buffering=0) as f:\n" ..
      "    for i in range(400):\n        f.write(b'g' * 250000)\n        time.sleep(0.005)\n"
    local job = http_client.exec_async(server, key, id, "python3 -c \"" .. writer .. "\"", 60)
    local answers, seen = 0, {}
    local growth = peak_growth_mb(server, function()
      for _ = 1, 200 do
        if job.done() then break end
        local r = http_client.read(server, key, id, "growing")
        seen[#seen + 1] = tostring(r.status) .. (r.status ~= 200 and r.status ~= 413 and (" " .. r.body) or "")
        answers = answers + 1
        if r.status == 200 then assert.truthy(#r.json.content <= MiB) end
      end
    end)
    local res = job.wait(90)
    assert.are.equal(0, res and res.exit_code)
    assert.truthy(answers > 0)
    for _, status in ipairs(seen) do assert.truthy(status == "200" or status == "413", table.concat(seen, ", ")) end
    assert.are.equal(413, http_client.read(server, key, id, "growing").status)
    print(string.format("\n%d reads of a growing file: airlockd peak +%.1f MB", answers, growth))
    assert.truthy(growth <= 16, "airlockd grew by " .. growth .. " MB")
  end)
end)
