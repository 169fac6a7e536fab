-- The engine's pure functions: encoding, settings, argument checks, request building,
-- response decoding and the retry policy.
local engine = require "airlock.internal.engine"
local cjson = require "cjson"
local airlock = require "airlock"

local function env(t) return function(name) return t[name] end end

local function raises(class, fn, pattern)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  assert.is_true(airlock.is(err, class), "expected " .. class .. ", got " .. tostring(err))
  if pattern then
    assert.is_truthy(err.message:find(pattern, 1, true), err.message)
  end
  return err
end

describe("airlock.engine", function()
  describe("form_encode / quote", function()
    it("encodes like Python's urlencode (quote_plus)", function()
      assert.are.equal("a+b%2Fc.txt", engine.form_encode("a b/c.txt"))
      assert.are.equal("x_y-z.~", engine.form_encode("x_y-z.~"))
      assert.are.equal("%C3%A9%26%3D%23%2B%25", engine.form_encode("é&=#+%"))
    end)

    it("percent-encodes the audit cursor's #", function()
      assert.are.equal("00000000001700000000%23deadbeef",
        engine.form_encode("00000000001700000000#deadbeef"))
    end)

    it("quotes a path segment with %20 for spaces", function()
      assert.are.equal("sbx_0123", engine.quote("sbx_0123"))
      assert.are.equal("a%20b%2F..", engine.quote("a b/.."))
    end)
  end)

  describe("JSON bodies", function()
    it("sends an empty egress as [] and keeps key order", function()
      assert.are.equal('{"template":"sandbox-base:latest","egress":[]}',
        engine.encode({ { "template", "sandbox-base:latest" }, { "egress", engine.array({}) } }))
      assert.are.equal('{"egress":["pypi","a.com"]}',
        engine.encode({ { "egress", engine.array({ "pypi", "a.com" }) } }))
    end)

    it("sends nulls, integers and raw UTF-8", function()
      local text = engine.encode({ { "repo", "o/r" }, { "ref", engine.null }, { "n", 15 }, { "c", "é\n" } })
      assert.are.equal('{"repo":"o\\/r","ref":null,"n":15,"c":"é\\n"}', text)
      local back = cjson.decode(text)
      assert.are.equal("o/r", back.repo)
      assert.are.equal(cjson.null, back.ref)
    end)
  end)

  describe("utf8_len", function()
    it("counts code points", function()
      assert.are.equal(5, engine.utf8_len("hello"))
      assert.are.equal(2, engine.utf8_len("é😀"))
      assert.are.equal(0, engine.utf8_len(""))
    end)
    it("rejects invalid UTF-8, overlongs and surrogates", function()
      assert.is_nil(engine.utf8_len("\255"))
      assert.is_nil(engine.utf8_len("\192\175"))
      assert.is_nil(engine.utf8_len("\237\160\128"))
      assert.is_nil(engine.utf8_len("\226\130"))
      assert.is_nil(engine.utf8_len("\244\144\128\128"))
    end)
  end)

  describe("settings", function()
    it("requires base_url and api_key before any request", function()
      local err = raises("SandboxError", function() engine.settings({}, env({})) end)
      assert.are.equal(engine.MISSING_SETTINGS, err.message)
      assert.is_truthy(err.message:find("SANDBOX_API_KEY", 1, true))
      assert.is_truthy(err.message:find("SANDBOX_API_URL", 1, true))
      assert.is_nil(err.status)
      raises("SandboxError", function() engine.settings({ base_url = "http://x" }, env({})) end)
      raises("SandboxError", function() engine.settings({ api_key = "k" }, env({})) end)
    end)

    it("falls back to the environment (also for empty strings) and strips trailing slashes", function()
      local s = engine.settings({ api_key = "" }, env({ SANDBOX_API_URL = "https://h.example//",
        SANDBOX_API_KEY = "envkey" }))
      assert.are.equal("https://h.example", s.base_url)
      assert.are.equal("envkey", s.api_key)
      assert.is_true(s.verify)
      assert.are.equal(90, s.timeout)
      assert.are.equal(3, s.max_retries)
      assert.are.equal("sandbox-base:latest", s.template)
      assert.are.same({}, s.egress)
    end)

    it("drops a trailing /v1 from base_url (the SDK adds /v1/... itself), keeping a host or path named v1", function()
      local function base(url) return engine.settings({ api_key = "k", base_url = url }, env({})).base_url end
      assert.are.equal("http://127.0.0.1:8000", base("http://127.0.0.1:8000/v1"))
      assert.are.equal("https://h.example/sandbox", base("https://h.example/sandbox/v1/"))
      assert.are.equal("http://v1", base("http://v1"))
      assert.are.equal("http://h.example/v1x", base("http://h.example/v1x"))
      assert.are.equal("http://h.example/v2", base("http://h.example/v2"))
    end)

    it("reads SANDBOX_API_INSECURE like Python (1/true/yes, stripped, any case)", function()
      local base = { SANDBOX_API_URL = "https://h", SANDBOX_API_KEY = "k" }
      for _, v in ipairs({ "1", "true", " YES ", "True\n" }) do
        base.SANDBOX_API_INSECURE = v
        assert.is_false(engine.settings({}, env(base)).verify, v)
      end
      for _, v in ipairs({ "0", "no", "", "on" }) do
        base.SANDBOX_API_INSECURE = v
        assert.is_true(engine.settings({}, env(base)).verify, v)
      end
      base.SANDBOX_API_INSECURE = "1"
      assert.is_true(engine.settings({ verify = true }, env(base)).verify)
      local ca = os.tmpname()
      assert.are.equal(ca, engine.settings({ verify = ca }, env(base)).verify)
      os.remove(ca)
      -- a CA file that cannot be read is refused before any request, naming the path
      raises("ValidationError", function() engine.settings({ verify = ca }, env(base)) end, ca)
    end)

    it("rejects bad option values and unknown options", function()
      local o = { base_url = "http://h", api_key = "k" }
      local function with(k, v)
        local t = {}
        for a, b in pairs(o) do t[a] = b end
        t[k] = v
        return function() engine.settings(t, env({})) end
      end
      raises("ValidationError", with("timeout", 0), "timeout")
      raises("ValidationError", with("timeout", "9"), "timeout")
      raises("ValidationError", with("max_retries", -1), "max_retries")
      raises("ValidationError", with("max_retries", 1.5), "max_retries")
      raises("ValidationError", with("egress", "pypi"), "egress")
      raises("ValidationError", with("egress", { 1 }), "egress[1]")
      raises("ValidationError", with("verify", 1), "verify")
      raises("ValidationError", with("verify", ""), "verify")
      raises("ValidationError", with("base_url", "ftp://h"), "base_url")
      raises("ValidationError", with("tempalte", "x"), "unknown option 'tempalte'")
      raises("ValidationError", function() engine.settings("http://h", env({})) end, "options")
    end)
  end)

  describe("argument checks", function()
    it("timeout must be an integer from 1 to 60", function()
      assert.are.equal(15, engine.check_timeout(15))
      for _, v in ipairs({ 0, 61, 600, 1.5, "15" }) do
        raises("ValidationError", function() engine.check_timeout(v) end, "from 1 to 60")
      end
    end)

    it("paths must be non-empty UTF-8 strings without NUL", function()
      raises("ValidationError", function() engine.check_path("path", "") end, "non-empty")
      raises("ValidationError", function() engine.check_path("path", 5) end, "a string")
      raises("ValidationError", function() engine.check_path("path", "a\0b") end, "NUL")
      raises("ValidationError", function() engine.check_path("path", "\255") end, "UTF-8")
      assert.are.equal("a/b c", engine.check_path("path", "a/b c"))
    end)
  end)

  describe("build", function()
    local s = engine.settings({ base_url = "http://h:1", api_key = "key1", timeout = 20 }, env({}))

    it("sends the four headers on every request, even GET", function()
      local spec = engine.build(s, "GET", "/v1/usage")
      assert.are.same({ "X-API-Key: key1", "Content-Type: application/json",
        "Accept: application/json", "User-Agent: airlock-sandbox-lua/" .. engine.VERSION }, spec.headers)
      assert.are.equal("http://h:1/v1/usage", spec.url)
      assert.is_nil(spec.body)
      assert.are.equal(20000, spec.timeout_ms)
      assert.are.equal(10000, spec.connect_timeout_ms)
      assert.are.equal(3, spec.max_retries)
      assert.is_true(spec.verify)
    end)

    it("form-encodes the query and applies per-call timeout and retries", function()
      local spec = engine.build(s, "GET", "/v1/sessions/sbx_1/read", nil,
        { query = { { "path", "a b/c" } }, timeout = 1.5, max_retries = 0 })
      assert.are.equal("http://h:1/v1/sessions/sbx_1/read?path=a+b%2Fc", spec.url)
      assert.are.equal(1500, spec.timeout_ms)
      assert.are.equal(1500, spec.connect_timeout_ms)
      assert.are.equal(0, spec.max_retries)
    end)
  end)

  describe("decode", function()
    local s = { base_url = "http://h", api_key = "kkkk" }
    it("returns decoded JSON with null members removed", function()
      local ok, data = engine.decode(s, { status = 200, body = '{"next":null,"entries":[{"exit_code":null,"a":1}]}' })
      assert.is_true(ok)
      assert.is_nil(data.next)
      assert.is_nil(data.entries[1].exit_code)
      assert.are.equal(1, data.entries[1].a)
    end)
    it("gives integral numbers back as integers (lua-cjson decodes floats)", function()
      local _, data = engine.decode(s, { status = 200, body = '{"exit_code":3,"t":1.5,"l":[2]}' })
      assert.are.equal("3", tostring(data.exit_code))
      assert.are.equal("2", tostring(data.l[1]))
      assert.are.equal(1.5, data.t)
    end)

    it("accepts an empty 2xx body", function()
      local ok, data = engine.decode(s, { status = 204, body = "" })
      assert.is_true(ok)
      assert.is_nil(data)
    end)
    it("reports a non-JSON 2xx body", function()
      local ok, err = engine.decode(s, { status = 200, body = "<html>" })
      assert.is_false(ok)
      assert.are.equal("SandboxError", err.name)
    end)
  end)

  describe("retry policy (contract 3.7)", function()
    local function wait(t) return engine.retry_wait(t) end

    it("backs off 1, 2, 4 s on 503 for any method, then gives up", function()
      assert.are.equal(1, wait({ attempt = 0, method = "POST", status = 503 }))
      assert.are.equal(2, wait({ attempt = 1, method = "POST", status = 503 }))
      assert.are.equal(4, wait({ attempt = 2, method = "GET", status = 503 }))
      assert.is_nil(wait({ attempt = 3, method = "GET", status = 503 }))
      assert.are.equal(30, wait({ attempt = 6, max_retries = 10, method = "GET", status = 503 }))
    end)

    it("honours an all-digits Retry-After on 429, waits 30 but not 31", function()
      assert.are.equal(0, wait({ attempt = 0, method = "POST", status = 429, retry_after = "0" }))
      assert.are.equal(30, wait({ attempt = 0, method = "POST", status = 429, retry_after = "30" }))
      assert.is_nil(wait({ attempt = 0, method = "POST", status = 429, retry_after = "31" }))
      assert.is_nil(wait({ attempt = 0, method = "GET", status = 429, retry_after = "3600" }))
      assert.are.equal(2, wait({ attempt = 1, method = "GET", status = 429 }))
      assert.are.equal(2, wait({ attempt = 1, method = "GET", status = 429, retry_after = "soon" }))
    end)

    it("retries connection failures only for GET and DELETE", function()
      assert.are.equal(1, wait({ attempt = 0, method = "GET" }))
      assert.are.equal(1, wait({ attempt = 0, method = "DELETE" }))
      assert.is_nil(wait({ attempt = 0, method = "POST" }))
    end)

    it("never retries other statuses, and max_retries = 0 never retries", function()
      for _, status in ipairs({ 400, 401, 403, 404, 409, 413, 422, 500, 502 }) do
        assert.is_nil(wait({ attempt = 0, method = "GET", status = status }))
      end
      assert.is_nil(wait({ attempt = 0, max_retries = 0, method = "GET", status = 503 }))
      assert.is_nil(wait({ attempt = 0, max_retries = 0, method = "GET", status = 429, retry_after = "0" }))
    end)
  end)
end)
