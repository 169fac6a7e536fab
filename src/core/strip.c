/* strip.c: core.strip_nulls, the engine's walk over a decoded JSON answer done in C. lua-cjson
 * gives `null` as a sentinel and every number as a float; the SDK's answers drop the object
 * members that are null (missing == null) and, on Lua 5.3+, give integral numbers (within
 * +-2^53) as integers. In Lua that walk is one library call per value (next, type,
 * tointeger) and costs more than the rest of a small call's Lua path; here it is a loop. */
#include "internal.h"

#define MAX_STRIP_DEPTH 1000   /* lua-cjson's own default nesting limit */
#define EXACT_INTEGERS  9007199254740992.0   /* 2^53 */

/* Walks the table at index t, nesting `depth`; 0 when the nesting goes deeper than
 * MAX_STRIP_DEPTH (what was walked stays done: the walk can be repeated). */
static int strip_table(lua_State *L, int t, int null_idx, int depth)
{
  if (depth > MAX_STRIP_DEPTH || !lua_checkstack(L, 4)) return 0;
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {   /* key at -2, value at -1 */
    switch (lua_type(L, -1)) {
    case LUA_TNUMBER:
#if LUA_VERSION_NUM >= 503
      if (!lua_isinteger(L, -1)) {
        lua_Number x = lua_tonumber(L, -1);
        /* in range first: the cast is defined there (and NaN fails it) */
        if (x >= -EXACT_INTEGERS && x <= EXACT_INTEGERS && (lua_Number)(lua_Integer)x == x) {
          lua_pushvalue(L, -2);
          lua_pushinteger(L, (lua_Integer)x);
          lua_rawset(L, t);   /* an existing key: allowed while traversing */
        }
      }
#endif
      break;
    case LUA_TTABLE:
      if (!strip_table(L, lua_gettop(L), null_idx, depth + 1)) {
        lua_pop(L, 2);
        return 0;
      }
      break;
    default:
      if (lua_type(L, -2) == LUA_TSTRING && lua_rawequal(L, -1, null_idx)) {
        lua_pushvalue(L, -2);
        lua_pushnil(L);
        lua_rawset(L, t);     /* clearing an existing field: allowed while traversing */
      }
      break;
    }
    lua_pop(L, 1);
  }
  return 1;
}

/* core.strip_nulls(t, null) → true, with t (a table from cjson.decode) changed in place; or
 * false when it nests deeper than lua-cjson's default limit (the caller walks it itself). */
static int l_strip_nulls(lua_State *L)
{
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checkany(L, 2);
  lua_settop(L, 2);
  lua_pushboolean(L, strip_table(L, 1, 2, 1));
  return 1;
}
