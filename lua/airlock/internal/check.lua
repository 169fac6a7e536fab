-- Argument checks: each raises a ValidationError naming the argument, what was expected and
-- what came (a long string is shown by its length only), before any request is sent.
local errors = require "airlock.errors"
local json = require "airlock.internal.json"

local M = {}

local floor = math.floor

-- check.bad_argument(what, expected, got [, where]): raises; where prefixes the message
-- (the public function whose argument it is, e.g. "airlock.http.request").
function M.bad_argument(what, expected, got, where)
  local shown = type(got) == "string" and string.format("%q", got) or tostring(got)
  if type(got) == "string" and #got > 60 then shown = "a string of " .. #got .. " bytes" end
  errors.raise("ValidationError", (where and where .. ": " or "") .. "bad argument '" .. what ..
    "': expected " .. expected .. ", got " ..
    (type(got) == "string" and shown or type(got) .. (got == nil and "" or " " .. shown)))
end
local bad_argument = M.bad_argument

M.is_integer = json.is_integer

-- Count the code points of a UTF-8 string; nil, byte position for invalid UTF-8
-- (overlong forms, surrogates and values above U+10FFFF are invalid).
function M.utf8_len(s)
  local i, n, len = 1, 0, #s
  local byte = string.byte
  while i <= len do
    local c = byte(s, i)
    local extra, min
    if c < 0x80 then extra, min = 0, 0
    elseif c >= 0xC2 and c <= 0xDF then extra, min = 1, 0x80
    elseif c >= 0xE0 and c <= 0xEF then extra, min = 2, 0x800
    elseif c >= 0xF0 and c <= 0xF4 then extra, min = 3, 0x10000
    else return nil, i end
    if i + extra > len then return nil, i end
    local cp = extra == 0 and c or (c % (2 ^ (6 - extra)))
    for k = 1, extra do
      local cc = byte(s, i + k)
      if cc < 0x80 or cc > 0xBF then return nil, i end
      cp = cp * 64 + (cc - 0x80)
    end
    if cp < min or cp > 0x10FFFF or (cp >= 0xD800 and cp <= 0xDFFF) then return nil, i end
    i = i + extra + 1
    n = n + 1
  end
  return n
end

-- check.string(what, v [, {non_empty, no_nul, utf8}]) → v
function M.check_string(what, v, opts)
  opts = opts or {}
  if type(v) ~= "string" then bad_argument(what, "a string", v) end
  if opts.non_empty and v == "" then bad_argument(what, "a non-empty string", v) end
  if opts.no_nul and v:find("\0", 1, true) then bad_argument(what, "a string without NUL bytes", v) end
  if opts.utf8 and not M.utf8_len(v) then
    local _, pos = M.utf8_len(v)
    errors.raise("ValidationError", "bad argument '" .. what .. "': not valid UTF-8 (byte " .. pos ..
      "); this field is text (files:write sends bytes with {binary = true})")
  end
  return v
end

function M.check_path(what, v)
  return M.check_string(what, v, { non_empty = true, no_nul = true, utf8 = true })
end

function M.check_integer(what, v, lo, hi, where)
  if not M.is_integer(v) or (lo and v < lo) or (hi and v > hi) then
    local range = (lo and hi) and ("an integer from " .. lo .. " to " .. hi)
      or (lo and ("an integer >= " .. lo)) or "an integer"
    bad_argument(what, range, v, where)
  end
  return floor(v)
end

-- A command's timeout: whole seconds from 1 to 60 (the server's range).
function M.check_timeout(v)
  return M.check_integer("timeout", v, 1, 60)
end

-- An HTTP timeout: seconds > 0, at most a day.
function M.check_seconds(what, v, where)
  if type(v) ~= "number" or v ~= v or v <= 0 or v > 86400 then
    bad_argument(what, "a number of seconds > 0", v, where)
  end
  return v
end

-- The timeout of a close([{timeout = s}] or [s]): nil (none given) or seconds > 0.
function M.close_timeout(opts)
  local timeout
  if type(opts) == "table" then timeout = opts.timeout
  elseif opts ~= nil then timeout = opts end
  if timeout ~= nil and (type(timeout) ~= "number" or timeout ~= timeout or timeout <= 0) then
    bad_argument("timeout", "a number of seconds > 0", timeout)
  end
  return timeout
end

-- A URL the SDK may send to.
function M.check_url(what, v, where)
  if type(v) ~= "string" or not v:match("^[hH][tT][tT][pP][sS]?://[^%s]+$") then
    bad_argument(what, "an http:// or https:// URL", v, where)
  end
  return v
end

-- TLS verification: true, false, or a CA file that can be read (a missing one fails here,
-- not as a TLS error at the first request).
function M.check_verify(v, where)
  if type(v) == "boolean" then return v end
  if type(v) ~= "string" or v == "" or v:find("\0", 1, true) then
    bad_argument("verify", "true, false or a CA file path", v, where)
  end
  local f, why = io.open(v, "rb")
  if not f then
    errors.raise("ValidationError", (where and where .. ": " or "") ..
      "bad argument 'verify': cannot read the CA file: " .. tostring(why))
  end
  f:close()
  return v
end

-- The transport option: nil, a name, or an object with send and sleep methods.
function M.check_transport(t, where)
  if t == nil or (type(t) == "string" and t:match("^[%w_]+$")) then return t end
  if type(t) == "table" and type(t.send) == "function" and type(t.sleep) == "function" then return t end
  bad_argument("transport", "\"curl\", \"ngx\", \"uv\" or an object with send and sleep methods", t, where)
end

-- The retry count: an integer from 0 to 100.
function M.check_max_retries(v, where)
  return M.check_integer("max_retries", v, 0, 100, where)
end

return M
