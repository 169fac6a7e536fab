rockspec_format = "3.0"
package = "airlock-sandbox"
version = "0.1.0-1"
-- Where the sources are: the release tarball `make dist` makes (the files it chooses: the SDK's
-- sources, docs and examples, not the server, specs or benches). In a .src.rock (`make dist`,
-- or `luarocks pack` of this file) the tarball lies beside this file; in a checkout (this file
-- is <checkout>/rockspec/...) `luarocks pack` takes it from <checkout>/build/dist/, so run
-- `make dist` first. `luarocks make --deps-mode=none rockspec/...` in a checkout builds the
-- current directory and needs no tarball. A rockspec cannot ask for its own path, but
-- LuaRocks loads it under that (absolute) name, which a dumped function carries.
local checkout = ("").dump(function() end):match("(/[^%z]*)/rockspec/airlock%-sandbox%-[^/%z]*%.rockspec")
local tarball = "airlock-sandbox-" .. version:match("^(.*)%-%d+$") .. ".tar.gz"
source = {
   url = "file://" .. (checkout and (checkout .. "/build/dist/") or "") .. tarball,
   dir = tarball:match("^(.*)%.tar%.gz$"),
}
description = {
   summary = "Lua SDK for Airlock sandbox servers: run AI agents' code in isolated gVisor sandboxes",
   detailed = [[
      airlock runs commands in isolated sandboxes (gVisor containers with no network unless
      allowed, hard memory/CPU/process/disk limits) on an Airlock server. One pure-Lua engine
      and retry policy; transports for plain Lua and host loops (libcurl's multi interface in
      a small C core, with keep-alive connections and hooks for a libuv loop) and for
      OpenResty/nginx (cosockets, pure Lua).
      Lua 5.1, LuaJIT and 5.3/5.4: for LuaJIT (OpenResty, Neovim, LOVE) install with
      `luarocks --lua-version=5.1 install <rock> LUA_INCDIR=/usr/include/luajit-2.1`.
   ]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.1",
   "lua-cjson >= 2.1.0",   -- Debian: lua-cjson (then install this rock with --deps-mode=none)
}
external_dependencies = {
   -- library only: Debian keeps curl/curl.h in a multiarch include dir LuaRocks does not search.
   CURL = { library = "curl" },
}
build = {
   type = "builtin",
   modules = {
      -- one compilation unit: core.c includes the other parts of src/core/
      ["airlock.core"] = {
         sources = { "src/core/core.c" },
         libraries = { "curl" },
         libdirs = { "$(CURL_LIBDIR)" },
      },
      ["airlock"] = "lua/airlock/init.lua",
      ["airlock.cell_result"] = "lua/airlock/cell_result.lua",
      ["airlock.dropped_sessions"] = "lua/airlock/dropped_sessions.lua",
      ["airlock.errors"] = "lua/airlock/errors.lua",
      ["airlock.http"] = "lua/airlock/http.lua",
      ["airlock.internal.agent.catalogue"] = "lua/airlock/internal/agent/catalogue.lua",
      ["airlock.internal.agent.text"] = "lua/airlock/internal/agent/text.lua",
      ["airlock.internal.check"] = "lua/airlock/internal/check.lua",
      ["airlock.internal.engine"] = "lua/airlock/internal/engine.lua",
      ["airlock.internal.exchange"] = "lua/airlock/internal/exchange.lua",
      ["airlock.internal.exec_gate"] = "lua/airlock/internal/exec_gate.lua",
      ["airlock.internal.exec_stream"] = "lua/airlock/internal/exec_stream.lua",
      ["airlock.internal.file_sink"] = "lua/airlock/internal/file_sink.lua",
      ["airlock.internal.http1"] = "lua/airlock/internal/http1.lua",
      ["airlock.internal.json"] = "lua/airlock/internal/json.lua",
      ["airlock.internal.request"] = "lua/airlock/internal/request.lua",
      ["airlock.internal.response"] = "lua/airlock/internal/response.lua",
      ["airlock.internal.retry"] = "lua/airlock/internal/retry.lua",
      ["airlock.internal.settings"] = "lua/airlock/internal/settings.lua",
      ["airlock.internal.version"] = "lua/airlock/internal/version.lua",
      ["airlock.kernel"] = "lua/airlock/kernel.lua",
      ["airlock.keys"] = "lua/airlock/keys.lua",
      ["airlock.mcp"] = "lua/airlock/mcp.lua",
      ["airlock.ngx"] = "lua/airlock/ngx/init.lua",
      ["airlock.ngx.scheduler"] = "lua/airlock/ngx/scheduler.lua",
      ["airlock.result"] = "lua/airlock/result.lua",
      ["airlock.tasks"] = "lua/airlock/tasks.lua",
      ["airlock.templates"] = "lua/airlock/templates.lua",
      ["airlock.snapshots"] = "lua/airlock/snapshots.lua",
      ["airlock.tools"] = "lua/airlock/tools.lua",
      ["airlock.transport"] = "lua/airlock/transport/init.lua",
      ["airlock.transport.curl"] = "lua/airlock/transport/curl.lua",
      ["airlock.transport.ngx"] = "lua/airlock/transport/ngx.lua",
      ["airlock.transport.uv"] = "lua/airlock/transport/uv.lua",
   },
   install = {
      bin = { ["airlock-mcp"] = "bin/airlock-mcp" },
   },
   copy_directories = { "docs", "examples" },
}
