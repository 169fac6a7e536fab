/* A minimal Lua 5.4 host for `make asan-test`: built with -fsanitize=address,undefined and
 * linked against liblua5.4, it runs a Lua script (busted's entry, /usr/bin/busted) so that
 * the ASan-built airlock.core can be loaded without LD_PRELOAD (which would leak libasan into
 * every child process: sh, python3, airlockd).
 *
 *   lua_host SCRIPT [ARGS...]     like `lua5.4 SCRIPT ARGS...` (arg table included)
 *
 * The exit status is the script's (os.exit) or 1 when it raised an error. */
#include <lua.h>
#include <lauxlib.h>
#include <lualib.h>

#include <stdio.h>

static int traceback(lua_State *L)
{
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) msg = luaL_tolstring(L, 1, NULL);
  luaL_traceback(L, L, msg, 1);
  return 1;
}

int main(int argc, char **argv)
{
  lua_State *L;
  int i, status;
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCRIPT [ARGS...]\n", argv[0]);
    return 2;
  }
  L = luaL_newstate();
  if (L == NULL) {
    fprintf(stderr, "%s: cannot create a Lua state\n", argv[0]);
    return 1;
  }
  luaL_openlibs(L);
  /* keep C modules loaded until the process ends (no dlclose at lua_close), so that leak
   * reports can still name the module that allocated */
  lua_getfield(L, LUA_REGISTRYINDEX, "_CLIBS");
  if (lua_getmetatable(L, -1)) {
    lua_pushnil(L);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  /* arg[-1] = host, arg[0] = script, arg[1..] = its arguments (as lua.c does) */
  lua_createtable(L, argc - 2, 2);
  for (i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - 1);
  }
  lua_setglobal(L, "arg");

  lua_pushcfunction(L, traceback);
  status = luaL_loadfile(L, argv[1]);
  if (status == LUA_OK) {
    for (i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
    status = lua_pcall(L, argc - 2, 0, 1);
  }
  if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    fprintf(stderr, "%s: %s\n", argv[0], msg ? msg : "(error object is not a string)");
  }
  lua_close(L);
  return status == LUA_OK ? 0 : 1;
}
