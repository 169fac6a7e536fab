-- assert.eventually(fn, opts): a wait and its assertion in one statement, for a condition that
-- becomes true some time after the request that causes it (a log line written after the answer,
-- a sweep, a refill). fn is called every opts.step seconds (0.05) until it returns a truthy
-- value without raising, for at most opts.timeout seconds (10). fn may use assertions (a
-- failed one means "not yet") or return false, what_it_saw. On timeout the failure says what
-- fn last saw: its last assertion's message, or what_it_saw; opts.what names the condition.
-- Loading this module adds assert.eventually; it also returns the function.
local proc = require "support.proc"

local function describe(v)
  if type(v) == "string" then return v end
  local ok, s = pcall(require("cjson").encode, v)
  return ok and s or tostring(v)
end

local function eventually(fn, opts)
  opts = opts or {}
  local timeout, step = opts.timeout or 10, opts.step or 0.05
  local deadline = os.time() + timeout -- whole seconds: a bound, never a measurement
  local tries, last = 0
  repeat
    tries = tries + 1
    local ok, result, seen = pcall(fn)
    if ok and result then return result end
    if ok then
      last = "it returned " .. tostring(result) .. (seen ~= nil and (": " .. describe(seen)) or "")
    else
      last = describe(result)
    end
    proc.sleep(step)
  until os.time() > deadline
  error(string.format("%snot true within %g s (%d tries); last seen: %s", opts.what and (opts.what .. ": ") or "",
    timeout, tries, last), 2)
end

rawset(require("luassert"), "eventually", eventually) -- the `assert` of busted's specs
return eventually
