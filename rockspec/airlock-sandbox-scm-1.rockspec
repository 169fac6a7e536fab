rockspec_format = "3.0"
package = "airlock-sandbox"
version = "scm-1"
source = {
   url = "git+file:///airlock",   -- built from a checkout: luarocks make --deps-mode=none
}
description = {
   summary = "Lua SDK for Airlock sandbox servers: run AI agents' code in isolated gVisor sandboxes",
   detailed = [[
      airlock runs commands in isolated sandboxes (gVisor containers with no network unless
      allowed, hard memory/CPU/process/disk limits) on an Airlock server. The C core does
      HTTP on libcurl's multi interface, with retries as timers and keep-alive connections.
   ]],
   license = "MIT",
}
dependencies = {
   "lua >= 5.1",
   "lua-cjson",
}
external_dependencies = {
   -- library only: Debian keeps curl/curl.h in a multiarch include dir LuaRocks does not search.
   CURL = { library = "curl" },
}
build = {
   type = "builtin",
   modules = {
      ["airlock.core"] = {
         sources = { "src/core/core.c" },
         libraries = { "curl" },
         libdirs = { "$(CURL_LIBDIR)" },
      },
      ["airlock"] = "lua/airlock/init.lua",
      ["airlock.engine"] = "lua/airlock/engine.lua",
      ["airlock.errors"] = "lua/airlock/errors.lua",
      ["airlock.http"] = "lua/airlock/http.lua",
      ["airlock.keys"] = "lua/airlock/keys.lua",
      ["airlock.mcp"] = "lua/airlock/mcp.lua",
      ["airlock.result"] = "lua/airlock/result.lua",
      ["airlock.tools"] = "lua/airlock/tools.lua",
      ["airlock.transport"] = "lua/airlock/transport.lua",
   },
   install = {
      bin = { ["airlock-mcp"] = "bin/airlock-mcp" },
   },
   copy_directories = { "docs", "examples" },
}
