-- Error objects, hierarchy, status map (contract 3.6/3.8) and key scrubbing.
local errors = require "airlock.errors"
local engine = require "airlock.internal.engine"
local airlock = require "airlock"

local SETTINGS = { base_url = "http://127.0.0.1:9", api_key = "secret-key-123" }

local function http_error(status, body, extra)
  local res = { status = status, body = body, reason = "" }
  for k, v in pairs(extra or {}) do res[k] = v end
  local ok, err = engine.decode(SETTINGS, res)
  assert.is_false(ok)
  return err
end

describe("airlock.errors", function()
  it("maps every status of STATUS_ERRORS to its class, all SandboxErrors", function()
    local expected = {
      [400] = "ValidationError", [401] = "AuthenticationError", [403] = "PermissionDeniedError",
      [404] = "NotFoundError", [413] = "QuotaExceededError", [422] = "ValidationError",
      [429] = "RateLimitError", [503] = "CapacityError",
    }
    for status, class in pairs(expected) do
      local err = http_error(status, '{"detail":"d' .. status .. '"}')
      assert.are.equal(class, err.name)
      assert.are.equal(status, err.status)
      assert.are.equal("d" .. status, err.message)
      assert.are.equal("d" .. status, err.detail)
      assert.is_true(airlock.is(err, "SandboxError"))
      assert.is_true(airlock.is(err, class))
    end
    assert.are.equal("RateLimitError", errors.STATUS_ERRORS[429])
  end)

  it("gives other statuses a plain SandboxError with the status", function()
    for _, status in ipairs({ 405, 409, 500, 501, 502 }) do
      local err = http_error(status, '{"detail":"x"}')
      assert.are.equal("SandboxError", err.name)
      assert.are.equal(status, err.status)
    end
  end)

  it("JSON-encodes a list detail (422 validation) and keeps the raw detail", function()
    local err = http_error(422,
      '{"detail":[{"type":"missing","loc":["query","path"],"msg":"Field required","input":null}]}')
    assert.are.equal("ValidationError", err.name)
    assert.are.equal("table", type(err.detail))
    assert.are.equal("missing", err.detail[1].type)
    local decoded = require("cjson").decode(err.message)
    assert.are.equal("Field required", decoded[1].msg)
  end)

  it("falls back to the reason phrase for a non-JSON body or no detail", function()
    local err = http_error(500, "Internal Server Error")
    assert.are.equal("Internal Server Error", err.message)
    err = http_error(502, "<html>oops</html>", { reason = "Bad Gateway" })
    assert.are.equal("Bad Gateway", err.message)
    err = http_error(404, "{}")
    assert.are.equal("Not Found", err.message)
    err = http_error(409, '["not", "an object"]', { reason = "Conflict" })
    assert.are.equal("Conflict", err.message)
  end)

  it("reads an all-digits Retry-After into retry_after, else nil", function()
    assert.are.equal(60, http_error(429, '{"detail":"r"}', { headers = { ["retry-after"] = "60" } }).retry_after)
    assert.is_nil(http_error(429, '{"detail":"r"}', { headers = { ["retry-after"] = "1.5" } }).retry_after)
    local date = { headers = { ["retry-after"] = "Wed, 21 Oct 2015 07:28:00 GMT" } }
    assert.is_nil(http_error(429, '{"detail":"r"}', date).retry_after)
    assert.is_nil(http_error(429, '{"detail":"r"}').retry_after)
  end)

  it("builds APIConnectionError messages from the base URL", function()
    local ok, err = engine.decode(SETTINGS, nil, { message = "Couldn't connect to server", sent = false })
    assert.is_false(ok)
    assert.are.equal("APIConnectionError", err.name)
    assert.are.equal("Could not reach http://127.0.0.1:9: Couldn't connect to server", err.message)
    assert.is_nil(err.status)
  end)

  it("never lets the API key into a message", function()
    local err = http_error(400, '{"detail":"bad key secret-key-123 here"}')
    assert.are.equal("bad key *** here", err.message)
    assert.is_nil(tostring(err):find("secret-key-123", 1, true))
    local _, cerr = engine.decode(SETTINGS, { error = "failed for secret-key-123" })
    assert.is_nil(cerr.message:find("secret-key-123", 1, true))
  end)

  it("tostring gives the class and message", function()
    local err = errors.new("NotFoundError", "Session not found", { status = 404 })
    assert.are.equal("NotFoundError: Session not found", tostring(err))
    assert.are.equal("Session not found", err.detail)
  end)

  it("is() knows the hierarchy and rejects non-errors", function()
    local fnf = errors.new("FileNotFoundError", "File not found: x", { path = "x" })
    assert.is_true(airlock.is(fnf, "FileNotFoundError"))
    assert.is_false(airlock.is(fnf, "SandboxError"))
    assert.are.equal("x", fnf.path)
    local perm = errors.new("PermissionDeniedError", "no")
    assert.is_true(airlock.is(perm, "PermissionError"))
    assert.is_false(airlock.is(perm, "NotFoundError"))
    assert.is_false(airlock.is("SandboxError: x", "SandboxError"))
    assert.is_false(airlock.is({ name = "SandboxError" }, "SandboxError"))
    assert.is_true(airlock.is(perm))
  end)

  it("raises error objects through error()", function()
    local ok, err = pcall(errors.raise, "QuotaExceededError", "full", { status = 413 })
    assert.is_false(ok)
    assert.are.equal("QuotaExceededError", err.name)
    assert.are.equal(413, err.status)
  end)
end)
