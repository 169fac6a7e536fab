-- docs/api.md documents every public function: of the airlock module, Sandbox, Files,
-- Result, airlock.keys and its client, airlock.http, airlock.tools, and the seam for
-- transports and hosts (the transport interface of the curl, ngx and uv transports, the
-- OpenResty host airlock.ngx, airlock.tasks and its schedulers, the C core's hooks). A function
-- counts as documented when a heading (or a table row) shows its call form, e.g. "### sbx:run("
-- or "| `tools.truncate(".
local airlock = require "airlock"
local keys = require "airlock.keys"

local function read_docs()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  local root = src:match("^(.*)spec/unit/docs_spec%.lua$") or ""
  local f = assert(io.open(root .. "docs/api.md", "rb"))
  local text = f:read("*a")
  f:close()
  return text
end

local function public_functions(t)
  local names = {}
  for k, v in pairs(t) do
    if type(k) == "string" and type(v) == "function" and not k:match("^_") then names[#names + 1] = k end
  end
  table.sort(names)
  return names
end

local function documented(docs, form)
  for line in docs:gmatch("[^\n]+") do
    if (line:match("^#+ ") or line:match("^| `")) and line:find(form, 1, true) then return true end
  end
  return false
end

describe("docs/api.md", function()
  local docs = read_docs()
  local files_class = getmetatable(airlock.attach("sbx_000000000000",
    { api_key = "k", base_url = "http://127.0.0.1:9" }).files)

  local surfaces = {
    { "airlock", airlock, "airlock." },
    { "Sandbox", airlock.Sandbox, "sbx:" },
    { "Files", files_class, "sbx.files:" },
    { "Result", airlock.Result, "result:" },
    { "airlock.keys", keys, "keys." },
    { "keys client", keys.Client, "client:" },
    { "airlock.http", require("airlock.http"), "http." },
    { "airlock.tools", require("airlock.tools"), "tools." },
    { "the transport interface (curl)", require("airlock.transport").load("curl"), "t:" },
    { "the transport interface (ngx)", require("airlock.transport.ngx"), "t:",
      { set_trusted_certificate = "ngx_transport." } },
    { "airlock.ngx", require("airlock.ngx"), "airlock.ngx." },
    { "airlock.tasks", require("airlock.tasks"), "tasks." },
    { "schedulers", require("airlock.tasks").Scheduler, "scheduler:" },
    { "airlock.core", require("airlock.core"), "core." },
    -- the libuv transport's own functions (its interface methods are the t: ones)
    { "airlock.transport.uv", require("airlock.transport.uv"), "uv.", { send = "t:", sleep = "t:", close_idle = "t:",
      stats = "t:" } },
  }

  for _, s in ipairs(surfaces) do
    local name, t, prefix, prefixes = s[1], s[2], s[3], s[4] or {}
    it("documents every public function of " .. name, function()
      local names = public_functions(t)
      assert.is_true(#names > 0)
      local missing = {}
      for _, fn in ipairs(names) do
        local form = (prefixes[fn] or prefix) .. fn
        if not documented(docs, form .. "(") then missing[#missing + 1] = form end
      end
      assert.are.same({}, missing)
    end)
  end

  it("documents every error class and every environment variable", function()
    for class in pairs(airlock.errors.CLASSES) do
      if class ~= "PermissionError" then
        assert.is_truthy(docs:find("| `" .. class .. "` |", 1, true), class)
      end
    end
    for _, var in ipairs({ "SANDBOX_API_URL", "SANDBOX_API_KEY", "SANDBOX_ADMIN_KEY", "SANDBOX_API_INSECURE" }) do
      assert.is_truthy(docs:find("| `" .. var .. "` |", 1, true), var)
    end
  end)
end)
