-- luacheck configuration. Library code is plain Lua that runs on 5.1/LuaJIT .. 5.4 (std
-- "min" plus the 5.2+ names it probes for with a fallback); specs use busted.
std = "min"
max_line_length = 120
read_globals = {
  "unpack",                                   -- 5.1/LuaJIT (used as `table.unpack or unpack`)
  table = { fields = { "pack", "unpack" } },  -- 5.2+ (used with a 5.1 fallback)
  math = { fields = { "tointeger" } },         -- 5.3+ (used only when present)
  "jit",                                      -- LuaJIT detection
}

files["spec/"] = { std = "+busted" }
-- code that runs inside a host: LÖVE's `love`, Neovim's `vim`
files["spec/support/hosts/love_game/"] = { std = "+love" }
files["spec/support/hosts/nvim_boot.lua"] = { read_globals = { "vim" } }
-- the OpenResty host and its transport run inside nginx's Lua module
files["lua/airlock/ngx/"] = { globals = { "ngx" } }   -- ngx.ctx is written
files["examples/openresty/"] = { globals = { "ngx" } }
files["lua/airlock/transport/ngx.lua"] = { read_globals = { "ngx" } }
files["examples/neovim/"] = { globals = { "vim" } }
files["examples/love/"] = { std = "+love" }
files["bench/hosts/nvim_*.lua"] = { globals = { "vim" } }
files["bench/hosts/love_*.lua"] = { std = "+love" }
