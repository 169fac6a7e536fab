-- luacheck: max line length 140
-- Random request heads for airlockd's egress proxy (the sibling of support.fuzz, which fuzzes
-- the API port): malformed request lines, targets, versions, line ends, headers and passes,
-- cut-off heads, oversized heads and binary junk. The cases are sent from inside a sandbox by
-- egress_probe.py's "raw" step (the proxy is reachable only from there); "@OWN@" in a case
-- stands for base64 of the sandbox's own id:pass. Same PRNG as support.fuzz, so a seed repeats
-- a run on Lua 5.1, LuaJIT and 5.4.
local fuzz = require "support.fuzz"

local M = {}

-- Every status the proxy may answer (contract 1.9 plus our 400/408/429/431/503).
M.allowed_status = {}
for _, s in ipairs({ 200, 400, 403, 405, 407, 408, 429, 431, 502, 503 }) do M.allowed_status[s] = true end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chars = {}
    for k = 3, 0, -1 do
      local v = math.floor(n / 64 ^ k) % 64
      chars[#chars + 1] = B64:sub(v + 1, v + 1)
    end
    if not b then chars[3], chars[4] = "=", "=" elseif not c then chars[4] = "=" end
    out[#out + 1] = table.concat(chars)
  end
  return table.concat(out)
end
M.base64 = base64

-- n cases: { {bytes, half_close}, ... }.
function M.cases(seed, n)
  local rnd = fuzz.prng(seed)
  local methods = { "CONNECT", "CONNECT", "CONNECT", "connect", "GET", "POST", "PUT", "CONNECT\0", "C\tONNECT", "",
    "\255\254" }
  local hosts = { "pypi.org", "files.pythonhosted.org", "sink.test", "evil.example", "loopback.test", "PYPI.ORG.", "[::1]",
    "[::ffff:127.0.0.1]", "127.0.0.1", "10.9.8.7", "", ".", "..", "a..b", "*.wild.test", "x.wild.test", string.rep("a", 64) .. ".test",
    string.rep("b.", 130) .. "test", "h\195\169llo.test", "ho st", "host%00", "[::1", "::1", "@", "a:b" }
  local ports = { "443", "443", "443", "22", "80", "0", "65535", "65536", "99999999", "-1", "", "443 ", "0x1bb", "4\0" }
  local versions = { "HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2", "http/1.1", "HTTP/1.1x", "", "HTTP/1.1 extra" }
  local eols = { "\r\n", "\r\n", "\r\n", "\n", "\r", "\n\r" }
  local auths = { "Basic @OWN@", "Basic @OWN@", "Basic " .. base64("sbx_000000000000:" .. string.rep("0", 32)), "Bearer @OWN@",
    "Basic !!!", "Basic " .. base64("nocolon"), "Basic ", "basic @OWN@", "Basic @OWN@=", "Basic " .. string.rep("A", 3000),
    "Basic @OWN@\0" }

  local function request_line()
    local target
    if rnd.chance(0.1) then
      target = "http://" .. rnd.pick(hosts) .. "/" .. rnd.bytes(rnd.int(0, 20)):gsub("[%s%z]", "x")
    else
      target = rnd.pick(hosts) .. (rnd.chance(0.9) and ":" or "") .. rnd.pick(ports)
    end
    local sep = rnd.chance(0.9) and " " or rnd.pick({ "  ", "\t", "" })
    return rnd.pick(methods) .. sep .. target .. sep .. rnd.pick(versions)
  end

  local function headers(eol)
    local out = {}
    if rnd.chance(0.85) then out[#out + 1] = "Proxy-Authorization: " .. rnd.pick(auths) end
    if rnd.chance(0.1) then out[#out + 1] = "Proxy-Authorization: Basic @OWN@" end -- twice
    local extra = rnd.int(0, 3)
    if rnd.chance(0.03) then extra = 70 end -- over the header count
    for _ = 1, extra do
      local roll = rnd.int(1, 6)
      if roll == 1 then out[#out + 1] = "Host: " .. rnd.pick(hosts)
      elseif roll == 2 then out[#out + 1] = " folded: continuation"
      elseif roll == 3 then out[#out + 1] = "NoColonHere"
      elseif roll == 4 then out[#out + 1] = "X-Junk: " .. rnd.bytes(rnd.int(0, 40)):gsub("[\r\n]", "_")
      elseif roll == 5 then out[#out + 1] = "Bad Name: x"
      else out[#out + 1] = "User-Agent: fuzz" end
    end
    if rnd.chance(0.03) then out[#out + 1] = "X-Big: " .. string.rep("z", 9000) end
    return table.concat(out, eol) .. (#out > 0 and eol or "")
  end

  local cases = {}
  for i = 1, n do
    local roll = rnd.int(1, 100)
    local bytes
    local half = rnd.chance(0.5)
    if roll <= 8 then -- binary junk
      bytes = rnd.bytes(rnd.int(0, 300))
      if rnd.chance(0.5) then bytes = bytes .. "\r\n\r\n" end
    elseif roll <= 16 then -- a head cut short
      local full = request_line() .. "\r\n" .. headers("\r\n") .. "\r\n"
      bytes, half = full:sub(1, rnd.int(0, #full - 1)), true
    else
      local eol = rnd.pick(eols)
      bytes = request_line() .. eol .. headers(eol) .. eol
      if rnd.chance(0.1) then bytes = bytes .. "\22\3\1early TLS bytes" end
    end
    cases[i] = { bytes, half }
  end
  return cases
end

return M
