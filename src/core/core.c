/* core.c: luaopen_airlock_core, the C module airlock.core: HTTP transfers on libcurl's multi
 * interface, one driver per Lua state, nothing that blocks unless asked to wait. No
 * protocol and no policy here: requests are built, retried and decoded by the Lua engine.
 *
 * The parts are one compilation unit (this file includes them), so that every function is
 * static and luaopen_airlock_core is the only exported symbol:
 *   buf.c        the growable buffer
 *   callbacks.c  what libcurl calls (no Lua inside)
 *   driver.c     the multi handle: step(), and the socket/timer hooks for a host loop
 *   request.c    the request userdata
 *   strip.c      the engine's walk over decoded JSON answers, in C
 *   compat.h     Lua 5.1/LuaJIT .. 5.4 differences */
#include "internal.h"

#include <pthread.h>
#include <string.h>

#include "buf.c"
#include "callbacks.c"
#include "driver.c"
#include "request.c"
#include "strip.c"

int luaopen_airlock_core(lua_State *L);

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_result = CURLE_FAILED_INIT;

static void global_init(void)
{
  global_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static const luaL_Reg request_methods[] = {
  { "done", req_done },
  { "result", req_result },
  { "cancel", req_cancel },
  { NULL, NULL }
};

static const luaL_Reg functions[] = {
  { "request", l_request },
  { "perform", l_perform },
  { "step", l_step },
  { "socket_events", l_socket_events },
  { "action", l_action },
  { "timeout", l_timeout },
  { "now", l_now },
  { "stats", l_stats },
  { "close_connections", l_close_connections },
  { "strip_nulls", l_strip_nulls },
  { NULL, NULL }
};

/* The request class: its __gc gets the driver (at -1) as upvalue 1. */
static void new_request_class(lua_State *L)
{
  if (luaL_newmetatable(L, REQUEST_MT)) {
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, req_gc, 1);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, req_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_newtable(L);
    lua_pushvalue(L, -3);
    alc_setfuncs(L, request_methods, 1);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
  }
  lua_pop(L, 1);
}

static const char driver_key = 'd';

int luaopen_airlock_core(lua_State *L)
{
  driver *d;
  pthread_once(&global_once, global_init);
  if (global_result != CURLE_OK)
    return luaL_error(L, "airlock.core: curl_global_init failed: %s", curl_easy_strerror(global_result));

  /* one driver per Lua state, kept in the registry (require may run this twice) */
  alc_rawgetp(L, LUA_REGISTRYINDEX, &driver_key);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    d = (driver *)alc_newuserdata(L, sizeof *d);
    memset(d, 0, sizeof *d);
    d->timer_at = -1;
    if (luaL_newmetatable(L, DRIVER_MT)) {
      lua_pushcfunction(L, driver_gc);
      lua_setfield(L, -2, "__gc");
      lua_pushliteral(L, "locked");
      lua_setfield(L, -2, "__metatable");
    }
    lua_setmetatable(L, -2);
    if (driver_setup_multi(d) != 0) return luaL_error(L, "airlock.core: curl_multi_init failed");
    lua_pushvalue(L, -1);
    alc_rawsetp(L, LUA_REGISTRYINDEX, &driver_key);
  }
  new_request_class(L);

  lua_newtable(L);
  lua_pushvalue(L, -2);
  alc_setfuncs(L, functions, 1);
  lua_pushliteral(L, CORE_VERSION);
  lua_setfield(L, -2, "_VERSION");
  lua_pushstring(L, curl_version());
  lua_setfield(L, -2, "curl_version");
  return 1;
}
