/* driver.c: the libcurl multi handle of one Lua state, driven through libcurl's socket API.
 * Two ways to drive it, which can be mixed:
 *   - step(ms): the core waits itself (poll(2) on the sockets libcurl named, bounded by ms and
 *     libcurl's timer) and runs the socket actions; 0 never blocks.
 *   - a host loop (libuv, an engine's reactor) watches the sockets from socket_events(),
 *     calls action(fd, events) when one is ready and action() when timeout() expires.
 * Requests finished by either are collected here and marked done; nothing here calls Lua
 * code other than the functions Lua called. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double now_ms(void)
{
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static driver *upvalue_driver(lua_State *L)
{
  return (driver *)lua_touserdata(L, lua_upvalueindex(1));
}

static driver *live_driver(lua_State *L)
{
  driver *d = upvalue_driver(L);
  if (d == NULL || d->multi == NULL) luaL_error(L, "airlock.core: the driver is closed");
  return d;
}

/* A new multi handle with our limits and callbacks; 0, or -1 when libcurl cannot make one. */
static int driver_setup_multi(driver *d)
{
  d->multi = curl_multi_init();
  if (d->multi == NULL) return -1;
  curl_multi_setopt(d->multi, CURLMOPT_MAXCONNECTS, MAX_CONNECTS);
  curl_multi_setopt(d->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, MAX_TOTAL_CONNECTS);
  curl_multi_setopt(d->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
  curl_multi_setopt(d->multi, CURLMOPT_SOCKETDATA, (void *)d);
  curl_multi_setopt(d->multi, CURLMOPT_TIMERFUNCTION, on_timer);
  curl_multi_setopt(d->multi, CURLMOPT_TIMERDATA, (void *)d);
  d->timer_at = -1;
  return 0;
}

static void driver_link(driver *d, request *r)
{
  r->drv = d;
  r->prev = NULL;
  r->next = d->head;
  if (d->head) d->head->prev = r;
  d->head = r;
  d->nlive++;
}

static void driver_unlink(request *r)
{
  driver *d = r->drv;
  if (d == NULL) return;
  if (r->in_multi && d->multi) curl_multi_remove_handle(d->multi, r->easy);
  r->in_multi = 0;
  if (r->prev) r->prev->next = r->next;
  else d->head = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  r->drv = NULL;
  d->nlive--;
}

/* An easy handle for a new request: one kept from an earlier request (*configured: still set
 * up for a plain GET; else reset), or a new one (NULL when libcurl cannot make one). */
static CURL *driver_take_easy(driver *d, int *configured)
{
  *configured = 0;
  if (d->nidle == 0) return curl_easy_init();
  d->nidle--;
  *configured = d->idle[d->nidle].configured;
  return d->idle[d->nidle].easy;
}

/* A request is done with easy (already out of the multi handle). Kept for the next request
 * while there is room: as it is when `configured` (it completed a plain GET; the pointers
 * into the finished request are cleared), else reset (every option back to its default).
 * Otherwise cleaned up. The connections stay in the multi handle's cache either way. */
static void driver_give_easy(driver *d, CURL *easy, int configured)
{
  if (d == NULL || d->multi == NULL || d->nidle == MAX_IDLE_EASY) {
    curl_easy_cleanup(easy);
    return;
  }
  if (configured) {
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, (char *)NULL);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, (struct curl_slist *)NULL);
  } else {
    curl_easy_reset(easy);
  }
  d->idle[d->nidle].easy = easy;
  d->idle[d->nidle].configured = configured;
  d->nidle++;
}

static void driver_free_idle(driver *d)
{
  while (d->nidle > 0) curl_easy_cleanup(d->idle[--d->nidle].easy);
}

/* Hands a linked request to libcurl (its timer callback then asks for a timeout action). */
static int driver_start(driver *d, request *r)
{
  if (curl_multi_add_handle(d->multi, r->easy) != CURLM_OK) return -1;
  r->in_multi = 1;
  r->state = REQ_RUNNING;
  return 0;
}

/* Marks the requests libcurl finished as done; returns how many. */
static int collect(driver *d)
{
  CURLMsg *msg;
  int left, finished = 0;
  while ((msg = curl_multi_info_read(d->multi, &left)) != NULL) {
    char *priv = NULL;
    CURL *easy;
    CURLcode code;
    if (msg->msg != CURLMSG_DONE) continue;
    easy = msg->easy_handle;
    code = msg->data.result;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    if (priv == NULL) {
      curl_multi_remove_handle(d->multi, easy);
      continue;
    }
    request_finished(d, (request *)(void *)priv, code);
    finished++;
  }
  return finished;
}

static int timeout_action(driver *d)
{
  int running = 0;
  d->timer_at = -1;   /* libcurl sets a new one from inside the action when it needs one */
  return curl_multi_socket_action(d->multi, CURL_SOCKET_TIMEOUT, 0, &running) == CURLM_OK ? 0 : -1;
}

/* Waits at most ms for the watched sockets (and libcurl's timer), runs the actions they
 * call for, collects finished requests. Returns early once a request finished; returns at
 * once when nothing is in flight, unless idle_wait (then it waits the whole ms). 0, or -1
 * with errno when poll(2) fails. */
static int drive(driver *d, double ms, int idle_wait, int *finished)
{
  double deadline = now_ms() + ms;
  int rc = 0;
  *finished = 0;
  for (;;) {
    struct pollfd *fds;
    size_t i, nfds = 0;
    double t, wait;
    int n;
    if (d->nlive == 0 && !idle_wait) break;
    if (d->nsocks > d->cappfds) {
      struct pollfd *nf = NULL;
      if (d->nsocks <= SIZE_MAX / sizeof *nf) nf = realloc(d->pfds, d->nsocks * sizeof *nf);
      if (nf == NULL) { rc = -1; errno = ENOMEM; break; }
      d->pfds = nf;
      d->cappfds = d->nsocks;
    }
    fds = d->pfds;
    for (i = 0; i < d->nsocks; i++) {
      const watched_socket *w = &d->socks[i];
      if (w->want == CURL_POLL_REMOVE) continue;
      fds[nfds].fd = w->fd;
      fds[nfds].events = (short)(((w->want & CURL_POLL_IN) ? POLLIN : 0) |
                                 ((w->want & CURL_POLL_OUT) ? POLLOUT : 0));
      fds[nfds].revents = 0;
      nfds++;
    }
    t = now_ms();
    wait = deadline - t;
    if (wait < 0) wait = 0;
    if (d->timer_at >= 0 && d->timer_at - t < wait) wait = d->timer_at - t < 0 ? 0 : d->timer_at - t;
    if (d->nlive == 0 && !idle_wait) wait = 0;
    n = poll(fds, (nfds_t)nfds, wait > (double)INT_MAX ? INT_MAX : (int)(wait + 0.999));
    if (n < 0 && errno != EINTR) { rc = -1; break; }
    for (i = 0; n > 0 && i < nfds; i++) {
      int mask = 0, running = 0;
      if (fds[i].revents == 0) continue;
      if (fds[i].revents & (POLLIN | POLLHUP)) mask |= CURL_CSELECT_IN;
      if (fds[i].revents & POLLOUT) mask |= CURL_CSELECT_OUT;
      if (fds[i].revents & (POLLERR | POLLNVAL)) mask |= CURL_CSELECT_ERR;
      curl_multi_socket_action(d->multi, fds[i].fd, mask, &running);
    }
    if (d->timer_at >= 0 && d->timer_at <= now_ms()) timeout_action(d);
    *finished += collect(d);
    if (*finished > 0 || now_ms() >= deadline) break;
  }
  return rc;
}

/* core.step([ms [, idle_wait]]) → finished, live. Advances all transfers, waiting at most ms
 * milliseconds (0 never blocks) for one of them to finish. With nothing in flight it
 * returns at once, unless idle_wait: then it sleeps ms (the transfers still advance). */
static int l_step(lua_State *L)
{
  driver *d = live_driver(L);
  lua_Number ms = luaL_optnumber(L, 1, 0);
  int idle_wait = lua_toboolean(L, 2), finished = 0;
  if (!(ms >= 0)) ms = 0;
  if (ms > 86400000.0) ms = 86400000.0;
  if (drive(d, (double)ms, idle_wait, &finished) != 0)
    return luaL_error(L, "airlock.core.step: poll failed: %s", strerror(errno));
  lua_pushinteger(L, finished);
  lua_pushinteger(L, (lua_Integer)d->nlive);
  return 2;
}

/* ---------------------------------------------------------------- hooks for a host loop */

static const char *want_name(int want)
{
  switch (want) {
  case CURL_POLL_IN: return "in";
  case CURL_POLL_OUT: return "out";
  case CURL_POLL_INOUT: return "inout";
  default: return "remove";
  }
}

/* core.socket_events() → { {fd =, events = "in"|"out"|"inout"|"remove", fresh = bool}, ... }:
 * the sockets whose watch changed since the last call (the first call: all of them). `fresh`:
 * the descriptor number was closed and reused meanwhile; drop the old watcher first. From
 * the first call on, removals are kept until reported here. */
static int l_socket_events(lua_State *L)
{
  driver *d = live_driver(L);
  size_t i = 0;
  int n = 0;
  if (!d->host_watch) {
    d->host_watch = 1;
    for (i = 0; i < d->nsocks; i++) d->socks[i].changed = 1;
  }
  lua_createtable(L, (int)d->nsocks, 0);
  i = 0;
  while (i < d->nsocks) {
    watched_socket *w = &d->socks[i];
    if (!w->changed) { i++; continue; }
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)w->fd);
    lua_setfield(L, -2, "fd");
    lua_pushstring(L, want_name(w->want));
    lua_setfield(L, -2, "events");
    lua_pushboolean(L, w->fresh);
    lua_setfield(L, -2, "fresh");
    lua_rawseti(L, -2, ++n);
    if (w->want == CURL_POLL_REMOVE) {
      *w = d->socks[--d->nsocks];   /* the swapped-in entry is looked at next */
    } else {
      w->changed = 0;
      w->fresh = 0;
      i++;
    }
  }
  return 1;
}

/* core.action([fd, events]) → finished, live. A host loop saw fd ready for events ("in",
 * "out", "inout", "err"), or (no fd) the timeout from core.timeout() expired. */
static int l_action(lua_State *L)
{
  driver *d = live_driver(L);
  int running = 0, finished;
  if (lua_isnoneornil(L, 1)) {
    timeout_action(d);
  } else {
    lua_Integer fd = luaL_checkinteger(L, 1);
    const char *ev = luaL_optstring(L, 2, "inout");
    int mask = 0;
    if (fd < 0 || fd > INT_MAX) return luaL_argerror(L, 1, "a socket descriptor expected");
    if (strcmp(ev, "in") == 0) mask = CURL_CSELECT_IN;
    else if (strcmp(ev, "out") == 0) mask = CURL_CSELECT_OUT;
    else if (strcmp(ev, "inout") == 0) mask = CURL_CSELECT_IN | CURL_CSELECT_OUT;
    else if (strcmp(ev, "err") == 0) mask = CURL_CSELECT_ERR;
    else return luaL_argerror(L, 2, "\"in\", \"out\", \"inout\" or \"err\" expected");
    curl_multi_socket_action(d->multi, (curl_socket_t)fd, mask, &running);
  }
  finished = collect(d);
  lua_pushinteger(L, finished);
  lua_pushinteger(L, (lua_Integer)d->nlive);
  return 2;
}

/* core.timeout() → milliseconds until libcurl wants action() (0: now), or nil: no timer. */
static int l_timeout(lua_State *L)
{
  driver *d = live_driver(L);
  double left;
  if (d->timer_at < 0) {
    lua_pushnil(L);
    return 1;
  }
  left = d->timer_at - now_ms();
  lua_pushinteger(L, left <= 0 ? 0 : (lua_Integer)(left + 0.999));
  return 1;
}

/* ---------------------------------------------------------------- the rest */

/* core.now() → a monotonic clock in milliseconds (for deadlines in Lua). */
static int l_now(lua_State *L)
{
  lua_pushnumber(L, (lua_Number)now_ms());
  return 1;
}

static int l_stats(lua_State *L)
{
  driver *d = upvalue_driver(L);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)d->connects);
  lua_setfield(L, -2, "connects");
  lua_pushinteger(L, (lua_Integer)d->transfers);
  lua_setfield(L, -2, "transfers");
  lua_pushinteger(L, (lua_Integer)d->nlive);
  lua_setfield(L, -2, "live");
  lua_pushinteger(L, (lua_Integer)d->nsocks);
  lua_setfield(L, -2, "sockets");
  return 1;
}

/* core.close_connections() → true, or false while requests are in flight. Closes every
 * idle keep-alive connection (the next request opens a new one). */
static int l_close_connections(lua_State *L)
{
  driver *d = live_driver(L);
  if (d->nlive > 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  curl_multi_cleanup(d->multi);   /* its socket callbacks record the removals */
  driver_free_idle(d);
  if (driver_setup_multi(d) != 0) return luaL_error(L, "airlock.core: curl_multi_init failed");
  lua_pushboolean(L, 1);
  return 1;
}

static int driver_gc(lua_State *L)
{
  driver *d = (driver *)lua_touserdata(L, 1);
  if (d == NULL || d->multi == NULL) return 0;
  while (d->head) {
    request *r = d->head;
    r->aborted = 1;
    r->code = CURLE_ABORTED_BY_CALLBACK;
    snprintf(r->errbuf, sizeof r->errbuf, "the airlock driver was closed");
    request_release(r);
  }
  if (d->blocking) {
    buffer_free(&d->blocking->resp);
    buffer_free(&d->blocking->head);
    free(d->blocking);
    d->blocking = NULL;
  }
  driver_free_idle(d);
  curl_multi_cleanup(d->multi);
  d->multi = NULL;
  free(d->socks);
  d->socks = NULL;
  d->nsocks = d->capsocks = 0;
  free(d->pfds);
  d->pfds = NULL;
  d->cappfds = 0;
  return 0;
}
