/* compat.h: the few Lua C API calls airlock.core uses that differ between Lua 5.1/LuaJIT
 * and 5.2..5.4. Written against the 5.4 API; the 5.1 fallbacks carry an `alc_` prefix so
 * they never clash with the same names that LuaJIT's lauxlib.h already declares. */
#ifndef AIRLOCK_COMPAT_H
#define AIRLOCK_COMPAT_H

#include <lua.h>
#include <lauxlib.h>

#if LUA_VERSION_NUM < 502

static inline void alc_setfuncs(lua_State *L, const luaL_Reg *l, int nup)
{
  luaL_checkstack(L, nup + 1, "too many upvalues");
  for (; l->name != NULL; l++) {
    int i;
    for (i = 0; i < nup; i++) lua_pushvalue(L, -nup);
    lua_pushcclosure(L, l->func, nup);
    lua_setfield(L, -(nup + 2), l->name);
  }
  lua_pop(L, nup);
}

static inline void alc_rawgetp(lua_State *L, int idx, const void *p)
{
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  lua_pushlightuserdata(L, (void *)p);
  lua_rawget(L, idx);
}

static inline void alc_rawsetp(lua_State *L, int idx, const void *p)
{
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = lua_gettop(L) + idx + 1;
  lua_pushlightuserdata(L, (void *)p);
  lua_insert(L, -2);
  lua_rawset(L, idx);
}

static inline void *alc_testudata(lua_State *L, int ud, const char *tname)
{
  void *p = lua_touserdata(L, ud);
  if (p == NULL || !lua_getmetatable(L, ud)) return NULL;
  lua_getfield(L, LUA_REGISTRYINDEX, tname);
  if (!lua_rawequal(L, -1, -2)) p = NULL;
  lua_pop(L, 2);
  return p;
}

#define alc_newuserdata(L, sz)  lua_newuserdata((L), (sz))
#define alc_rawlen(L, i)        lua_objlen((L), (i))
#define alc_newlib(L, l)        (lua_newtable(L), alc_setfuncs((L), (l), 0))

#else

#define alc_setfuncs(L, l, n)   luaL_setfuncs((L), (l), (n))
#define alc_rawgetp(L, i, p)    ((void)lua_rawgetp((L), (i), (p)))
#define alc_rawsetp(L, i, p)    lua_rawsetp((L), (i), (p))
#define alc_testudata(L, i, n)  luaL_testudata((L), (i), (n))
#define alc_rawlen(L, i)        lua_rawlen((L), (i))
#define alc_newlib(L, l)        luaL_newlib((L), (l))
#if LUA_VERSION_NUM >= 504
#define alc_newuserdata(L, sz)  lua_newuserdatauv((L), (sz), 0)
#else
#define alc_newuserdata(L, sz)  lua_newuserdata((L), (sz))
#endif

#endif

#endif /* AIRLOCK_COMPAT_H */
