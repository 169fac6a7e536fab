-- The docs stay true to the code:
-- * docs/api.md documents every public function: of the airlock module, Sandbox, Files,
--   Result, airlock.keys and its client, airlock.http, airlock.tools, airlock.errors,
--   airlock.result, airlock.mcp, and the seam for transports and hosts (airlock.transport,
--   the transport interface of the curl, ngx and uv transports, the OpenResty host
--   airlock.ngx, airlock.tasks and its schedulers, the C core's hooks). A
--   function counts as documented when a heading (or a table row) shows its call form, e.g.
--   "### sbx:run(" or "| `tools.truncate(".
-- * every SANDBOX_* and AIRLOCK_* variable airlockd reads (a string literal of that name
--   anywhere under src/server) is documented exactly once: one table row whose first cell
--   names it, across the docs (the SDK's own variables have their second row in docs/api.md's
--   "Environment variables", the client's side).
-- * every relative link of the docs points to an existing file, and a #fragment to a heading
--   of that file (GitHub's anchors).
-- * every `make TARGET` the docs name is a target of the Makefile, and every repository path
--   they show in backquotes (spec/..., bench/..., scripts/..., src/..., ...) exists.
-- * the README stays a short guide, and its quick start is examples/quickstart.lua.
local airlock = require "airlock"
local keys = require "airlock.keys"

local ROOT = (debug.getinfo(1, "S").source:gsub("^@", "")):match("^(.*)spec/unit/docs_spec%.lua$") or ""
local DOCS = { "README.md", "SECURITY.md", "CONTRIBUTING.md", "docs/api.md", "docs/hosts.md", "docs/server.md",
  "docs/fleet.md" }

local function read(path)
  local f = io.open(ROOT .. path, "rb")
  if not f then return nil end
  local text = f:read("*a")
  f:close()
  return text
end

local function read_docs()
  return assert(read("docs/api.md"))
end

-- The lines of a markdown text outside fenced code blocks.
local function prose_lines(text)
  local lines, fenced = {}, false
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^%s*```") then
      fenced = not fenced
    elseif not fenced then
      lines[#lines + 1] = line
    end
  end
  return lines
end

-- GitHub's anchor of a heading: lower case; letters, digits, spaces, '-' and '_' kept (any
-- non-ASCII letter too, lower-cased for Latin-1 capitals); spaces become '-'; other
-- characters (punctuation, arrows and other symbols of U+2000-U+2BFF) dropped.
local function anchor(heading)
  local out = {}
  for ch in heading:gmatch("[%z\1-\127\194-\244][\128-\191]*") do
    local b1, b2 = ch:byte(1), ch:byte(2)
    if #ch == 1 then
      if ch:match("[%w_%-]") then out[#out + 1] = ch:lower()
      elseif ch == " " then out[#out + 1] = "-" end
    elseif #ch == 2 and b1 == 0xC3 and b2 >= 0x80 and b2 <= 0x9E and b2 ~= 0x97 then
      out[#out + 1] = string.char(0xC3, b2 + 0x20)          -- À..Þ → à..þ
    elseif not (#ch == 3 and (b1 == 0xE2)) and not (#ch == 2 and b1 == 0xC2) and ch ~= "×" then
      out[#out + 1] = ch
    end
  end
  return table.concat(out)
end

local function anchors_of(text)
  local set, seen = {}, {}
  for _, line in ipairs(prose_lines(text)) do
    local title = line:match("^#+%s+(.-)%s*$")
    if title then
      local a = anchor(title)
      local n = seen[a]
      seen[a] = (n or -1) + 1
      set[n and (a .. "-" .. (n + 1)) or a] = true
    end
  end
  return set
end

local function dir_of(path)
  return path:match("^(.*/)") or ""
end

-- "docs/../README.md" → "README.md"
local function normalise(path)
  local parts = {}
  for part in path:gmatch("[^/]+") do
    if part == ".." then parts[#parts] = nil elseif part ~= "." then parts[#parts + 1] = part end
  end
  return table.concat(parts, "/")
end

local function is_dir(path)
  local ok, _, code = os.rename(ROOT .. path, ROOT .. path)
  return ok or code == 13
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
    { "Kernel", airlock.Kernel, "k:" },
    { "CellResult", require("airlock.cell_result").CellResult, "r:" },
    { "airlock.keys", keys, "keys." },
    { "keys client", keys.Client, "client:" },
    { "airlock.templates", require("airlock.templates"), "templates." },
    { "Template", require("airlock.templates").Template, "t:" },
    { "airlock.http", require("airlock.http"), "http." },
    { "airlock.tools", require("airlock.tools"), "tools." },
    { "the transport interface (curl)", require("airlock.transport").load("curl"), "t:" },
    { "the transport interface (ngx)", require("airlock.transport.ngx"), "t:",
      { set_trusted_certificate = "ngx_transport." } },
    { "airlock.ngx", require("airlock.ngx"), "airlock.ngx." },
    { "airlock.tasks", require("airlock.tasks"), "tasks." },
    { "schedulers", require("airlock.tasks").Scheduler, "scheduler:" },
    { "airlock.core", require("airlock.core"), "core." },
    { "airlock.errors", require("airlock.errors"), "errors." },
    { "airlock.result", require("airlock.result"), "result." },
    { "airlock.mcp", require("airlock.mcp"), "mcp." },
    { "airlock.transport", require("airlock.transport"), "transport." },
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

  it("documents the SDK's own variables in its Environment variables section", function()
    local section = docs:match("\n## Environment variables\n(.-)\n## ")
      or docs:match("\n## Environment variables\n(.*)$")
    assert.is_truthy(section)
    for _, var in ipairs({ "SANDBOX_API_URL", "SANDBOX_API_KEY", "SANDBOX_ADMIN_KEY", "SANDBOX_API_INSECURE" }) do
      assert.is_truthy(section:find("| `" .. var .. "` |", 1, true), var)
    end
  end)
end)

-- Names of the environment variables airlockd reads: string literals "SANDBOX_..." or
-- "AIRLOCK_..." in src/server, recursively (wherever its configuration is read), except names
-- that are C macros (#define NAME), whose literal is a compile-time message.
local function airlockd_variables()
  local p = assert(io.popen("find " .. ROOT .. "src/server -name '*.[ch]' | sort"))
  local files = {}
  for file in p:lines() do files[#files + 1] = file end
  p:close()
  assert(#files > 0, "no C sources under src/server")
  local names, macros = {}, {}
  for _, file in ipairs(files) do
    local f = assert(io.open(file, "rb"))
    local text = f:read("*a")
    f:close()
    for name in text:gmatch('"((%u+)_[%u%d_]+)"') do
      if name:match("^SANDBOX_") or name:match("^AIRLOCK_") then names[name] = true end
    end
    for name in text:gmatch("#%s*define%s+([%u%d_]+)") do macros[name] = true end
  end
  local list = {}
  for name in pairs(names) do
    if not macros[name] then list[#list + 1] = name end
  end
  table.sort(list)
  return list
end

-- How many table rows of the docs document var: rows whose first cell holds `var` or
-- `var=...` as a code span. docs/api.md's Environment variables section (the SDK's side) is
-- left out.
local function definitions(var)
  local count, where = 0, {}
  for _, path in ipairs(DOCS) do
    local text = assert(read(path), path)
    if path == "docs/api.md" then
      text = text:gsub("\n## Environment variables\n.-\n## ", "\n## "):gsub("\n## Environment variables\n.*$", "\n")
    end
    for _, line in ipairs(prose_lines(text)) do
      local first = line:match("^|([^|]*)|")
      if first then
        for span in first:gmatch("`([^`]+)`") do
          if span == var or span:sub(1, #var + 1) == var .. "=" then
            count = count + 1
            where[#where + 1] = path
          end
        end
      end
    end
  end
  return count, where
end

describe("airlockd's variables", function()
  local vars = airlockd_variables()

  it("are found in src/server", function()
    assert.is_true(#vars >= 30, "found only " .. #vars)
  end)

  it("are each documented exactly once", function()
    local wrong = {}
    for _, var in ipairs(vars) do
      local n, where = definitions(var)
      if n ~= 1 then wrong[#wrong + 1] = var .. ": " .. n .. " (" .. table.concat(where, ", ") .. ")" end
    end
    assert.are.same({}, wrong)
  end)
end)

describe("the docs' links", function()
  for _, path in ipairs(DOCS) do
    it("of " .. path .. " point to existing files and headings", function()
      local text = assert(read(path), path)
      local broken = {}
      for _, line in ipairs(prose_lines(text)) do
        for target in line:gmatch("%]%(([^)%s]+)%)") do
          if not target:match("^%a[%w+.-]*:") then
            local file, fragment = target:match("^([^#]*)#?(.*)$")
            local resolved = file == "" and path or normalise(dir_of(path) .. file)
            local content = read(resolved)
            if not content and not is_dir(resolved) then
              broken[#broken + 1] = target .. " (no file " .. resolved .. ")"
            elseif fragment ~= "" and not (content and anchors_of(content)[fragment]) then
              broken[#broken + 1] = target .. " (no heading #" .. fragment .. " in " .. resolved .. ")"
            end
          end
        end
      end
      assert.are.same({}, broken)
    end)
  end
end)

-- The targets of the Makefile (lines "name:" and "name: prerequisites").
local function make_targets()
  local targets = {}
  for line in (assert(read("Makefile"), "no Makefile") .. "\n"):gmatch("([^\n]*)\n") do
    local name = line:match("^([%w_.-]+)%s*:[^=]") or line:match("^([%w_.-]+)%s*:$")
    if name then targets[name] = true end
  end
  return targets
end

-- The first argument of a make command line that is neither an option nor VAR=value.
local function make_goal(args)
  for word in args:gmatch("%S+") do
    if not word:match("^%-") and not word:find("=", 1, true) then return word end
  end
  return nil
end

local REPO_DIRS = { "spec/", "bench/", "scripts/", "examples/", "src/", "lua/", "bin/", "rockspec/", ".ci/", "docs/" }

describe("the docs' make targets and paths", function()
  local targets = make_targets()

  it("found the Makefile's targets", function()
    assert.is_true(targets.build and targets.test and targets.run or false)
  end)

  for _, path in ipairs(DOCS) do
    it("of " .. path .. " exist", function()
      local text = assert(read(path), path)
      local wrong, fenced = {}, false
      for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        if line:match("^%s*```") then fenced = not fenced end
        local command = fenced and line:match("^%s*make%s+(.*)$")
        local goal = command and make_goal(command)
        if goal and not targets[goal] then wrong[#wrong + 1] = "make " .. goal end
        for span in line:gmatch("`([^`]+)`") do
          goal = span:match("^make%s+(.*)$")
          goal = goal and make_goal(goal)
          if goal and not targets[goal] then wrong[#wrong + 1] = "make " .. goal end
          local file = span:match("^([%w_.-]+/[%w_./-]*)$")
          if file then
            for _, dir in ipairs(REPO_DIRS) do
              if file:sub(1, #dir) == dir and not read(file) and not is_dir(file) then
                wrong[#wrong + 1] = file
              end
            end
          end
        end
      end
      assert.are.same({}, wrong)
    end)
  end
end)

describe("README.md", function()
  local readme = assert(read("README.md"))

  it("is at most 260 lines", function()
    local _, lines = readme:gsub("\n", "")
    assert.is_true(lines <= 260, "README.md has " .. lines .. " lines")
  end)

  it("shows examples/quickstart.lua's code as its quick start", function()
    local example = assert(read("examples/quickstart.lua"))
    local code = example:gsub("^%-%-[^\n]*\n", ""):gsub("\n%-%-[^\n]*", "")
    code = code:gsub("^\n+", "")
    while code:match("^%-%-") do code = code:gsub("^[^\n]*\n", "") end
    local block = readme:match("\n## Quick start\n\n```lua\n(.-)```")
    assert.is_truthy(block)
    assert.are.equal(code, block)
  end)
end)

-- The texts the docs quote from airlockd's answers: each is one of its string literals (C's
-- adjacent literals joined), so the docs cannot drift from what the server sends.
local function server_literals()
  local p = assert(io.popen("cat " .. ROOT .. "src/server/api/*.c " .. ROOT .. "src/server/router/haproxy_config.c"))
  local text = p:read("*a")
  p:close()
  return (text:gsub('"%s*\n%s*"', ""))
end

describe("what a first use meets in the docs", function()
  it("quotes the fleet's create-during-outage answers as the server sends them", function()
    local fleet = assert(read("docs/fleet.md"))
    local row = assert(fleet:match("\n| PostgreSQL is down |([^\n]+)"), "no outage row in docs/fleet.md")
    local literals, quoted = server_literals(), 0
    for text in row:gmatch('`"(.-)"`') do
      quoted = quoted + 1
      assert.truthy(literals:find('"' .. text .. '"', 1, true), "not a text of src/server/api or HAProxy's: " .. text)
    end
    assert.are.equal(3, quoted, row) -- two nodes' answers, HAProxy's own
  end)

  it("says which limits an OpenResty burst needs", function()
    local hosts = assert(read("docs/hosts.md"))
    local section = assert(hosts:match("### The command line across requests\n(.-)\n###"))
    for _, needed in ipairs({ "`max_sessions`", "`requests_per_minute`", "default is 10", "SANDBOX_TENANT_LIMITS" }) do
      assert.truthy(section:find(needed, 1, true), needed .. " missing in:\n" .. section)
    end
  end)
end)
