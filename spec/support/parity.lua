-- The transport-parity cases: the same calls, bounds and errors through one transport. The
-- curl and uv transports run them from spec/integration/transport_parity_spec.lua, the ngx
-- transport inside nginx from spec/hosts/ngx_parity_spec.lua; both compare the outcome with
-- M.expected, which is the same for every transport. LuaJIT/5.1-compatible (it runs in
-- nginx too).
--
--   parity.run{ url =, key = (airlockd), bad_url = (support/badserver.py), tag = (the
--               transport's name: badserver keys of its own), transport = "curl" | "uv" | nil,
--               tls_url =, ca = (support/tlsproxy: verify = the CA file) }
local M = {}

M.LOWERED = 1000                 -- the bound while the lowered-bound cases run
M.DEFAULT = 64 * 1024 * 1024     -- the SDK's bound on a kept answer

-- An outcome: {ok = true, value} or {ok = false, class, status, message} with the URL of the
-- call written as <url> (the transports share everything else).
local function outcome(airlock, url, fn)
  local ok, r = airlock.pcall(fn)
  if ok then return { ok = true, value = r } end
  if type(r) ~= "table" then return { ok = false, class = "raw", message = tostring(r) } end
  local message = r.message
  if url then
    local s, e = message:find(url, 1, true)
    if s then message = message:sub(1, s - 1) .. "<url>" .. message:sub(e + 1) end
  end
  return { ok = false, class = r.name, status = r.status, message = message }
end

function M.run(c)
  local airlock = require "airlock"
  local request = require "airlock.internal.request"
  local out = {}
  local opts = { base_url = c.url, api_key = c.key, transport = c.transport }

  -- the same calls against airlockd
  out.calls = outcome(airlock, c.url, function()
    return airlock.with(opts, function(sbx)
      sbx.files:write("p.txt", "parity\n")
      local r = sbx:run("cat p.txt; echo err >&2; exit 3")
      local m = sbx:metrics()
      -- pause and resume (airlockd): the handle's state follows; a command resumes it
      local paused = sbx:pause()
      local state_paused = sbx.state
      local resumed = sbx:resume()
      sbx:pause()
      local again = sbx:run("cat p.txt")
      return { content = sbx.files:read("p.txt"), bytes = sbx.files:read("p.txt", { binary = true }),
               stdout = r.stdout, stderr = r.stderr, exit_code = r.exit_code, ok = r.ok,
               metrics = { own = m.session_id == sbx.session_id, commands_run = m.commands_run },
               pause = { paused.state, state_paused, resumed.state, resumed.resumed, again.stdout, sbx.state } }
    end)
  end)

  -- a handle on the misbehaving server whose key picks the behaviour (tagged per transport)
  local function bad(mode, extra)
    local o = { base_url = c.bad_url, api_key = mode .. ":" .. c.tag, transport = c.transport }
    for k, v in pairs(extra or {}) do o[k] = v end
    return airlock.attach("sbx_0123456789ab", o)
  end
  local function health(mode)
    return outcome(airlock, c.bad_url, function() return #bad(mode):health().pad end)
  end

  -- bounds: an answer larger than the bound fails the call, with or without a length, and is
  -- not sent again (a GET: retryable, were it a connection failure)
  local saved = request.MAX_RESPONSE_BYTES
  request.MAX_RESPONSE_BYTES = M.LOWERED
  out.fits = health("big:" .. (M.LOWERED - 1))
  out.over = health("big:" .. (M.LOWERED + 1))
  out.over_chunked = health("bigchunked:" .. (M.LOWERED * 5))
  request.MAX_RESPONSE_BYTES = saved
  out.over_default = health("big:" .. (M.DEFAULT + 1))

  -- errors
  out.not_found = outcome(airlock, c.url, function()
    return airlock.attach("sbx_000000000000", opts):run("true")
  end)
  out.unreachable = outcome(airlock, "http://127.0.0.1:9", function()
    return airlock.attach("sbx_0123456789ab", { base_url = "http://127.0.0.1:9", api_key = "k",
      transport = c.transport, max_retries = 0 }):health()
  end)
  out.unreachable.message = out.unreachable.message and out.unreachable.message:match("^Could not reach <url>: ")
  out.rate = outcome(airlock, c.bad_url, function() return bad("429:1:none", { max_retries = 0 }):health() end)
  out.not_json = outcome(airlock, c.bad_url, function() return bad("text500", { max_retries = 0 }):health() end)

  -- the server's "too many commands": read from the text alone, or from the header alone
  for _, mode in ipairs({ "fulltext", "fullheader" }) do
    local before = airlock.stats().server_full
    local r = outcome(airlock, c.bad_url, function() return bad(mode .. ":1", { max_retries = 0 }):run("true") end)
    r.learned = airlock.stats().server_full - before
    out[mode] = r
  end

  -- verify = the CA file (nginx: the file lua_ssl_trusted_certificate names, declared)
  if c.tls_url then
    out.tls = outcome(airlock, c.tls_url, function()
      return airlock.attach("sbx_0123456789ab", { base_url = c.tls_url, api_key = c.key, verify = c.ca,
        transport = c.transport, max_retries = 0 }):health().status
    end)
  end

  -- airlock.stats(sbx) reports the counters of the transport that sandbox is configured with
  local s = airlock.stats(airlock.attach("sbx_0123456789ab", opts))
  out.stats = { transport = s.transport, counted = (s.transfers or 0) > 0 }
  return out
end

-- What every transport gives (stats.transport is the transport's own name).
function M.expected(tag)
  local too_large = function(n)
    return { ok = false, class = "APIConnectionError",
             message = "Could not reach <url>: the response body is larger than " .. n .. " bytes" }
  end
  return {
    calls = { ok = true, value = { content = "parity\n", bytes = "parity\n", stdout = "parity\n",
                                   stderr = "err\n", exit_code = 3, ok = false,
                                   metrics = { own = true, commands_run = 1 },
                                   pause = { "paused", "paused", "active", true, "parity\n", "active" } } },
    fits = { ok = true, value = M.LOWERED - 1 - 10 },
    over = too_large(M.LOWERED),
    over_chunked = too_large(M.LOWERED),
    over_default = too_large(M.DEFAULT),
    not_found = { ok = false, class = "NotFoundError", status = 404, message = "Session not found or expired" },
    unreachable = { ok = false, class = "APIConnectionError", message = "Could not reach <url>: " },
    rate = { ok = false, class = "RateLimitError", status = 429,
             message = "Rate limit of 2 requests per minute exceeded; retry in none:" .. tag .. " s." },
    not_json = { ok = false, class = "SandboxError", status = 500, message = "Internal Server Error" },
    fulltext = { ok = false, class = "RateLimitError", status = 429, learned = 1,
                 message = "Too many commands running at once: 2 allowed. Wait for one to finish." },
    fullheader = { ok = false, class = "RateLimitError", status = 429, learned = 1,
                   message = "The sandbox runs enough commands already." },
    tls = { ok = true, value = "healthy" },
    stats = { transport = tag, counted = true },
  }
end

return M
