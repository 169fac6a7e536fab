-- airlock.http (JSON over HTTP for LLM providers, on the SDK's C core) against the scripted
-- provider endpoint spec/support/fake_llm.py on 127.0.0.1.
local http = require "airlock.http"
local airlock = require "airlock"
local cjson = require "cjson"
local fake_llm = require "support.fake_llm"

local function chat_body()
  return { model = "m", messages = { { role = "user", content = "hi" } }, tools = { { type = "function",
    ["function"] = { name = "f", parameters = { type = "object", properties = { a = { type = "string" } } } } } } }
end

describe("airlock.http.request", function()
  local llm
  before_each(function() llm = fake_llm.start() end)
  after_each(function() fake_llm.stop(llm) end)

  it("POSTs a table as JSON and decodes the JSON answer", function()
    local status, data, headers = http.request{
      method = "POST", url = llm.url .. "/v1/chat/completions",
      headers = { Authorization = "Bearer " .. fake_llm.OPENAI_KEY }, body = chat_body(),
    }
    assert.equal(200, status)
    assert.equal("table", type(headers))
    assert.equal("tool_calls", data.choices[1].finish_reason)
    assert.equal("run_command", data.choices[1].message.tool_calls[1]["function"].name)
    assert.equal(cjson.null, data.choices[1].message.content)
    -- integers stay integers (lua-cjson decodes every number as a float; 5.3+ tells them apart)
    assert.equal("15", tostring(data.usage.total_tokens))
    local math_type = rawget(math, "type")   -- Lua 5.3+
    if math_type then assert.equal("integer", math_type(data.choices[1].index)) end

    local reqs = fake_llm.requests(llm)
    assert.equal(1, #reqs)
    assert.equal("/v1/chat/completions", reqs[1].path)
    assert.equal("application/json", reqs[1].headers["content-type"])
    assert.equal("application/json", reqs[1].headers["accept"])
    assert.equal(http.USER_AGENT, reqs[1].headers["user-agent"])
    assert.equal("Bearer " .. fake_llm.OPENAI_KEY, reqs[1].headers["authorization"])
    assert.same(chat_body(), reqs[1].body)
  end)

  it("sends a string body as it is, and defaults to POST when there is a body", function()
    local raw = '{"model":"m","messages":[],"tools":[]}'
    local status, data = http.request{ url = llm.url .. "/v1/chat/completions",
      headers = { "Authorization: Bearer " .. fake_llm.OPENAI_KEY }, body = raw }
    assert.equal(200, status)
    assert.equal("tool_calls", data.choices[1].finish_reason)
    assert.equal(raw, fake_llm.requests(llm)[1].raw)
  end)

  it("returns HTTP errors with the provider's error body instead of raising", function()
    local status, data = http.request{ method = "POST", url = llm.url .. "/v1/chat/completions",
      headers = { Authorization = "Bearer wrong-key" }, body = chat_body() }
    assert.equal(401, status)
    assert.equal("Incorrect API key provided.", http.error_message(data))
  end)

  it("returns a body that is not JSON as text", function()
    local status, data = http.request{ method = "GET", url = llm.url .. "/v1/models" }
    assert.equal(501, status)
    assert.equal("string", type(data))
    assert.truthy(data:find("Unsupported method", 1, true))
  end)

  it("retries 429 with Retry-After on POST, like the SDK", function()
    fake_llm.stop(llm)
    llm = fake_llm.start({ fail_first = 2 })
    local status, data = http.request{ method = "POST", url = llm.url .. "/v1/chat/completions",
      headers = { Authorization = "Bearer " .. fake_llm.OPENAI_KEY }, body = chat_body() }
    assert.equal(200, status)
    assert.equal("chatcmpl-3", data.id)
    local reqs = fake_llm.requests(llm)
    assert.equal(3, #reqs)
    assert.equal(reqs[1].raw, reqs[3].raw)
  end)

  it("gives up after max_retries and returns the 429 with its Retry-After", function()
    fake_llm.stop(llm)
    llm = fake_llm.start({ fail_first = 5 })
    local status, data, headers = http.request{ method = "POST", url = llm.url .. "/v1/messages",
      headers = { ["x-api-key"] = fake_llm.ANTHROPIC_KEY }, body = { x = 1 }, max_retries = 1 }
    assert.equal(429, status)
    assert.equal("0", headers["retry-after"])
    assert.equal("Slow down (scripted).", http.error_message(data))
    assert.equal(2, #fake_llm.requests(llm))
  end)

  it("raises APIConnectionError without the key or the query when nothing listens", function()
    local ok, err = pcall(http.request, { method = "POST", url = "http://127.0.0.1:1/v1/x?key=secret-in-query",
      headers = { Authorization = "Bearer sk-very-secret-key" }, body = { a = 1 } })
    assert.is_false(ok)
    assert.is_true(airlock.is(err, "APIConnectionError"))
    assert.matches("^Could not reach http://127.0.0.1:1/v1/x: ", err.message)
    assert.falsy(tostring(err):find("sk-very-secret-key", 1, true))
    assert.falsy(tostring(err):find("secret-in-query", 1, true))
  end)

  it("refuses bad input with clear ValidationErrors before sending anything", function()
    local cases = {
      { { url = "ftp://x" }, "bad argument 'url'" },
      { { url = llm.url, bogus = 1 }, "unknown option 'bogus'" },
      { { url = llm.url, headers = { ["Bad Name"] = "x" } }, "bad header name 'Bad Name'" },
      { { url = llm.url, headers = { ["X-Key"] = "a\r\nInjected: 1" } }, "contains a line break" },
      { { url = llm.url, body = 42 }, "bad argument 'body'" },
      { { url = llm.url, timeout = 0 }, "bad argument 'timeout'" },
      { { url = llm.url, max_retries = -1 }, "bad argument 'max_retries'" },
      { { url = llm.url, body = { f = function() end } }, "cannot be encoded as JSON" },
      -- the SDK's own rules for the options they share with airlock.sandbox{...}
      { { url = llm.url, verify = "/nonexistent/ca.pem" }, "bad argument 'verify': cannot read the CA file" },
      { { url = llm.url, connect_timeout = -1 }, "bad argument 'connect_timeout'" },
      { { url = llm.url, transport = 42 }, "bad argument 'transport'" },
    }
    for _, case in ipairs(cases) do
      local ok, err = pcall(http.request, case[1])
      assert.is_false(ok)
      assert.is_true(airlock.is(err, "ValidationError"), tostring(err))
      assert.truthy(err.message:find(case[2], 1, true), err.message)
    end
    assert.equal(0, #fake_llm.requests(llm))
  end)
end)
