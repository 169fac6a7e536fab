-- Issue 25's "a matplotlib plot returns a PNG on a template with python3-matplotlib": a real
-- template of that package built from the archive (with its dependencies, not what it only
-- recommends: 225 packages, ~190 MB of downloads), a session on it, a Python kernel there (the
-- kernel program is copied into every template's root) drawing a chart and importing numpy from
-- the template's own /usr.
-- With the cached base the whole file took 73 s on the quiet 2-CPU development machine (its
-- own job, started first: scripts/test.sh LONG_SPECS); at load average 25 to 45, before the
-- base, its build took 600 to 1380 s, hence the generous bounds.
local airlockd = require "support.airlockd"
local http_client = require "support.http_client"
local proc = require "support.proc"
local cjson = require "cjson"

local function post(server, key, path, body)
  return http_client.request(server, "POST", path, { key = key, body = cjson.encode(body) })
end

local function get(server, key, path)
  return http_client.request(server, "GET", path, { key = key })
end

describe("a Python kernel on a template built with python3-matplotlib", function()
  local s, key

  lazy_setup(function()
    s = airlockd.start({ env = { SANDBOX_TEMPLATE_BUILD_TIMEOUT = "3600" } })
    key = s.tenants.acme
  end)

  lazy_teardown(function()
    if s then airlockd.stop(s) end
  end)

  -- The first n bytes of base64 text b64 decoded, as lowercase hex pairs without spaces.
  local function decoded_hex(b64, n, tail)
    local pick = tail and ("tail -c " .. n) or ("head -c " .. n)
    return (proc.output("printf %s " .. proc.shell_quote(b64) .. " | base64 -d | " .. pick .. " | od -An -tx1 -v")
      :gsub("%s+", ""))
  end

  it("draws a chart as a real PNG and imports numpy from the template", function()
    local res = post(s, key, "/v1/templates", { name = "plots", packages = { "python3-matplotlib" } })
    assert.are.equal(202, res.status, res.body)
    local last
    assert(proc.wait_until(3600, function()
      last = get(s, key, "/v1/templates/plots")
      return last.status == 200 and last.json.status ~= "building"
    end, 2), "still building: " .. tostring(last and last.body))
    assert.are.equal("ready", last.json.status, last.json.log_tail)

    local sid = http_client.create(s, key, cjson.encode({ template = "plots" })).json.session_id
    local k = http_client.request(s, "POST", "/v1/sessions/" .. sid .. "/kernels",
      { key = key, body = cjson.encode({ language = "python" }) })
    assert.are.equal(201, k.status, k.body)
    local function cell(code)
      local r = http_client.request(s, "POST", "/v1/sessions/" .. sid .. "/kernels/" .. k.json.kernel_id .. "/execute",
        { key = key, body = cjson.encode({ code = code, timeout = 60 }), max_time = 120 })
      assert.are.equal(200, r.status, r.body)
      assert.are.equal(cjson.null, r.json.error, r.body)
      return r.json
    end
    local np = cell("import numpy\nint(numpy.arange(6).reshape(2, 3).sum()), numpy.__file__")
    local np_text = np.results[1]["text/plain"]
    assert.truthy(np_text:find("^%(15, '/usr/lib/python3/dist%-packages/numpy/"), np_text)

    local chart = cell("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
    assert.are.equal(1, #chart.results, cjson.encode(chart))
    local png = chart.results[1]["image/png"]
    assert.is_string(png)
    -- signature, then the IHDR chunk (length 13) whose width and height are a chart's
    local head = decoded_hex(png, 24)
    assert.are.equal("89504e470d0a1a0a" .. "0000000d" .. "49484452", head:sub(1, 32))
    local width, height = tonumber(head:sub(33, 40), 16), tonumber(head:sub(41, 48), 16)
    assert.truthy(width >= 200 and width <= 2000 and height >= 150 and height <= 2000, width .. "x" .. height)
    -- whole: it ends with the IEND chunk
    assert.are.equal("0000000049454e44ae426082", decoded_hex(png, 12, true))
    http_client.delete(s, key, sid)
  end)
end)
