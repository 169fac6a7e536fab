-- expect_error(class, fn, ...): calls fn(...), asserts that it raised an SDK error of class
-- (airlock.is) and returns that error.
local airlock = require "airlock"
local assert = require "luassert" -- busted's assert lives in the spec files' environment only

return function(class, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected " .. class)
  assert.is_true(airlock.is(err, class), "expected " .. class .. ", got " .. tostring(err))
  return err
end
