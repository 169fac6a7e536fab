-- What the SDK specs do with airlock.spawn tasks: run them to the end, and check that two
-- streams advanced together. Lua 5.1-compatible.
local assert = require "luassert"

local M = {}

-- Runs airlock's loop until no task is left; returns each given task's result, asserting that
-- it ran without error.
function M.results(airlock, ...)
  while airlock.poll(100) > 0 do end
  local out = {}
  for i = 1, select("#", ...) do
    local ok, r = select(i, ...):result()
    assert.is_true(ok, tostring(r))
    out[i] = r
  end
  return (table.unpack or unpack)(out, 1, select("#", ...))
end

-- Asserts that in log (pieces in arrival order) the first piece holding `first` came before
-- the last one holding `last`: the two streams interleaved.
function M.assert_interleaved(log, first, last)
  local first_at, last_at
  for i, s in ipairs(log) do
    if s:find(first, 1, true) and not first_at then first_at = i end
    if s:find(last, 1, true) then last_at = i end
  end
  assert.truthy(first_at and last_at and first_at < last_at, table.concat(log, ","))
end

return M
