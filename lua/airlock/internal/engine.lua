-- The engine's one face (`airlock.engine`): the pure functions every transport and the
-- facade use, gathered from the files that each do one job:
--   check.lua     argument checks            settings.lua  options + environment → settings
--   json.lua      lua-cjson's quirks          request.lua   request building
--   response.lua  decoding, error mapping     retry.lua     THE retry policy
-- No I/O here or there; exchange.lua applies the policy between tries.
local check = require "airlock.internal.check"
local json = require "airlock.internal.json"
local request = require "airlock.internal.request"
local response = require "airlock.internal.response"
local retry = require "airlock.internal.retry"
local settings = require "airlock.internal.settings"
local version = require "airlock.internal.version"

local M = {}

M.VERSION = version.VERSION
M.USER_AGENT = version.USER_AGENT
M.IMPORT_TIMEOUT = 240
M.EXEC_GRACE = 30               -- exec HTTP timeout = max(timeout, command timeout + grace)

-- name → the module that owns it
local FROM = {
  [check] = { "bad_argument", "is_integer", "utf8_len", "check_string", "check_path", "check_integer",
    "check_timeout", "check_transport", "close_timeout" },
  [json] = { "array", "null" },
  [settings] = { "DEFAULT_TEMPLATE", "DEFAULT_TIMEOUT", "DEFAULT_CONNECT_TIMEOUT", "MISSING_SETTINGS", "SIZES",
    "env_flag", "timeouts_ms" },
  [request] = { "MAX_RAW_READ", "MAX_RESPONSE_BYTES", "form_encode", "quote", "headers", "build",
    "session_path" },
  [response] = { "REASONS", "http_error", "connection_error", "decode", "missing_file_text",
    "concurrency_limit" },
  [retry] = { "DEFAULT_MAX_RETRIES", "MAX_RETRY_WAIT", "parse_retry_after", "may_retry", "retry_wait" },
}
for mod, names in pairs(FROM) do
  for _, name in ipairs(names) do M[name] = mod[name] end
end

M.settings = settings.resolve
M.encode = json.encode_pairs
M.strip_nulls = json.strip
M.set_native_strip = json.set_native_walk

return M
