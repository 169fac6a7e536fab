/* airlock.core: the C core of the airlock Lua SDK.
 *
 * One driver (a libcurl multi handle) per Lua state. A request is a userdata that starts a
 * transfer and never blocks; core.step(ms) advances every transfer (0 never blocks).
 * Retries are timers inside the driver (contract 3.7), never a blocking sleep. Bodies
 * accumulate in buffers the request owns; no Lua code runs inside libcurl callbacks.
 * Session tokens are small userdata holding a session id; a dropped owning token only queues
 * its id (no I/O in a finalizer) and the Lua layer deletes queued sessions later. */
#define _POSIX_C_SOURCE 200809L

#include <curl/curl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compat.h"

#define CORE_VERSION      "0.1.0"
#define MAX_RETRY_WAIT_S  30
#define MAX_RETRIES_LIMIT 100
#define MAX_CONNECTS      32L
#define DRIVER_MT  "airlock.core.driver"
#define REQUEST_MT "airlock.core.request"
#define SESSION_MT "airlock.core.session"

int luaopen_airlock_core(lua_State *L);

/* ---------------------------------------------------------------- once-only global init */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_result = CURLE_FAILED_INIT;

static void global_init(void)
{
  global_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---------------------------------------------------------------- types */

typedef struct buffer {
  char *data;
  size_t len, cap;
} buffer;

typedef struct pending_delete {
  char *id;
  int settings_ref;
} pending_delete;

struct request;

typedef struct driver {
  CURLM *multi;             /* NULL once the driver has been finalized */
  struct request *head;     /* requests running or waiting for a retry timer */
  size_t nlive;
  pending_delete *pending;
  size_t npending, cappending;
  unsigned long connects, transfers, retries;
} driver;

enum { REQ_NEW = 0, REQ_RUNNING, REQ_WAITING, REQ_DONE };

typedef struct request {
  driver *drv;              /* non-NULL while linked into the driver */
  struct request *prev, *next;
  CURL *easy;
  struct curl_slist *headers;
  char *url;
  char *body;
  size_t body_len;
  size_t body_pos;          /* bytes of the body handed to libcurl in this attempt */
  int replay_refused;       /* libcurl wanted to resend a body that may have arrived */
  char method[8];
  int state;
  int in_multi;
  int aborted;
  int max_retries;
  int attempt;
  double retry_at;          /* monotonic ms */
  buffer resp;
  long status;
  char retry_after[32];
  int has_retry_after;
  char reason[64];
  CURLcode code;
  char errbuf[CURL_ERROR_SIZE];
  long connects;
} request;

typedef struct session_token {
  char *id;
  int owns;
  int closed;
  int settings_ref;
} session_token;

/* ---------------------------------------------------------------- small helpers */

static double now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static int buffer_append(buffer *b, const char *p, size_t n)
{
  size_t need, cap;
  char *nd;
  if (n == 0) return 0;
  if (b->len > SIZE_MAX - n) return -1;
  need = b->len + n;
  if (need > b->cap) {
    cap = b->cap ? b->cap : 4096;
    while (cap < need) {
      if (cap > SIZE_MAX / 2) { cap = need; break; }
      cap *= 2;
    }
    nd = realloc(b->data, cap);
    if (nd == NULL) return -1;
    b->data = nd;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len = need;
  return 0;
}

static void buffer_free(buffer *b)
{
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

static char *dup_mem(const char *s, size_t n)
{
  char *p = malloc(n + 1);
  if (p == NULL) return NULL;
  if (n) memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

static int lower(int c)
{
  return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

static int prefix_nocase(const char *s, size_t n, const char *prefix)
{
  size_t i, m = strlen(prefix);
  if (n < m) return 0;
  for (i = 0; i < m; i++)
    if (lower((unsigned char)s[i]) != lower((unsigned char)prefix[i])) return 0;
  return 1;
}

/* An integer argument/field in [lo, hi]; the double is range-checked before any cast. */
static int number_to_int(lua_State *L, int idx, long lo, long hi, long *out)
{
  lua_Number x;
  if (lua_type(L, idx) != LUA_TNUMBER) return 0;
  x = lua_tonumber(L, idx);
  if (!(x >= (lua_Number)lo && x <= (lua_Number)hi)) return 0;
  if ((lua_Number)(long)x != x) return 0;
  *out = (long)x;
  return 1;
}

/* ---------------------------------------------------------------- retry policy (3.7) */

/* All digits (and not empty) → its value, capped; else -1 (no usable Retry-After). */
static long parse_retry_after(const char *s)
{
  long v = 0;
  if (s == NULL || *s == '\0') return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    if (v < 1000000000L) v = v * 10 + (*s - '0');
  }
  return v;
}

/* Seconds to wait before retry number `attempt` + 1, or -1 to give up. status 0 means the
 * transfer failed without an HTTP answer (a connection failure). */
static long retry_wait(int attempt, int max_retries, const char *method, long status,
                       const char *retry_after)
{
  long backoff = MAX_RETRY_WAIT_S;
  if (attempt < 0 || attempt >= max_retries) return -1;
  if (attempt < 5) backoff = 1L << attempt;
  if (backoff > MAX_RETRY_WAIT_S) backoff = MAX_RETRY_WAIT_S;
  if (status == 429) {
    long ra = parse_retry_after(retry_after);
    long wait = ra >= 0 ? ra : backoff;
    return wait > MAX_RETRY_WAIT_S ? -1 : wait;
  }
  if (status == 503) return backoff;
  if (status == 0 && (strcmp(method, "GET") == 0 || strcmp(method, "DELETE") == 0))
    return backoff;
  return -1;
}

/* core.retry_wait{attempt=, max_retries=, method=, status=, retry_after=} → seconds | nil.
 * status nil (or 0) = connection failure. The same function the driver uses. */
static int l_retry_wait(lua_State *L)
{
  long attempt = 0, max_retries = 3, status = 0, wait;
  const char *method, *ra = NULL;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "attempt");
  if (!number_to_int(L, -1, 0, INT_MAX, &attempt)) return luaL_argerror(L, 1, "attempt: integer >= 0 expected");
  lua_getfield(L, 1, "max_retries");
  if (!lua_isnil(L, -1) && !number_to_int(L, -1, 0, INT_MAX, &max_retries))
    return luaL_argerror(L, 1, "max_retries: integer >= 0 expected");
  lua_getfield(L, 1, "method");
  method = lua_tostring(L, -1);
  if (method == NULL) return luaL_argerror(L, 1, "method: string expected");
  lua_getfield(L, 1, "status");
  if (!lua_isnil(L, -1) && !number_to_int(L, -1, 0, 999, &status))
    return luaL_argerror(L, 1, "status: HTTP status or nil expected");
  lua_getfield(L, 1, "retry_after");
  if (lua_type(L, -1) == LUA_TSTRING) ra = lua_tostring(L, -1);
  else if (!lua_isnil(L, -1)) return luaL_argerror(L, 1, "retry_after: string or nil expected");
  wait = retry_wait((int)attempt, (int)max_retries, method, status, ra);
  if (wait < 0) lua_pushnil(L);
  else lua_pushinteger(L, (lua_Integer)wait);
  return 1;
}

/* ---------------------------------------------------------------- driver */

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

static void link_request(driver *d, request *r)
{
  r->drv = d;
  r->prev = NULL;
  r->next = d->head;
  if (d->head) d->head->prev = r;
  d->head = r;
  d->nlive++;
}

static void unlink_request(request *r)
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

/* Release what the transfer needs; results (status, body, ...) stay. */
static void release_transfer(request *r)
{
  unlink_request(r);
  if (r->easy) curl_easy_cleanup(r->easy);
  r->easy = NULL;
  curl_slist_free_all(r->headers);
  r->headers = NULL;
  free(r->url);
  r->url = NULL;
  free(r->body);
  r->body = NULL;
  r->state = REQ_DONE;
}

static void reset_attempt(request *r)
{
  r->resp.len = 0;
  r->status = 0;
  r->retry_after[0] = '\0';
  r->has_retry_after = 0;
  r->reason[0] = '\0';
  r->errbuf[0] = '\0';
  r->code = CURLE_OK;
  r->body_pos = 0;
  r->replay_refused = 0;
}

static int start_attempt(driver *d, request *r)
{
  reset_attempt(r);
  if (curl_multi_add_handle(d->multi, r->easy) != CURLM_OK) {
    r->code = CURLE_FAILED_INIT;
    snprintf(r->errbuf, sizeof r->errbuf, "could not start the transfer");
    release_transfer(r);
    return -1;
  }
  r->in_multi = 1;
  r->state = REQ_RUNNING;
  return 0;
}

static int start_due_retries(driver *d, double t)
{
  request *r, *next;
  int finished = 0;
  for (r = d->head; r; r = next) {
    next = r->next;
    if (r->state == REQ_WAITING && r->retry_at <= t)
      if (start_attempt(d, r) != 0) finished++;
  }
  return finished;
}

/* Earliest retry timer, or -1 when none is pending. */
static double next_timer(const driver *d)
{
  const request *r;
  double best = -1;
  for (r = d->head; r; r = r->next)
    if (r->state == REQ_WAITING && (best < 0 || r->retry_at < best)) best = r->retry_at;
  return best;
}

static int any_running(const driver *d)
{
  const request *r;
  for (r = d->head; r; r = r->next)
    if (r->state == REQ_RUNNING) return 1;
  return 0;
}

static int tls_config_failure(CURLcode code)
{
  switch (code) {
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    return 1;
  default:
    return 0;
  }
}

/* Handle finished transfers: schedule a retry timer or mark the request done. */
static int collect(driver *d)
{
  CURLMsg *msg;
  int left, finished = 0;
  while ((msg = curl_multi_info_read(d->multi, &left)) != NULL) {
    CURL *easy;
    CURLcode code;
    char *priv = NULL;
    request *r;
    long connects = 0, wait;
    if (msg->msg != CURLMSG_DONE) continue;
    easy = msg->easy_handle;
    code = msg->data.result;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, &priv);
    r = (request *)(void *)priv;
    curl_multi_remove_handle(d->multi, easy);
    if (r == NULL) continue;
    r->in_multi = 0;
    r->code = code;
    if (code == CURLE_OK) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &r->status);
    else r->status = 0;
    if (code != CURLE_OK && r->replay_refused)
      snprintf(r->errbuf, sizeof r->errbuf, "the connection closed before an answer "
               "(the %s was not sent again: it may have run)", r->method);
    if (curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects > 0) {
      r->connects += connects;
      d->connects += (unsigned long)connects;
    }
    d->transfers++;
    /* a certificate the client refuses, or a CA file it cannot use, fails the same way
     * on every try: never retried */
    if (tls_config_failure(code)) wait = -1;
    else wait = retry_wait(r->attempt, r->max_retries, r->method, r->status,
                           r->has_retry_after ? r->retry_after : NULL);
    if (wait >= 0) {
      r->attempt++;
      r->state = REQ_WAITING;
      r->retry_at = now_ms() + (double)wait * 1000.0;
      d->retries++;
    } else {
      release_transfer(r);
      finished++;
    }
  }
  return finished;
}

/* core.step([ms]) → finished, live. Advances all transfers; waits at most ms milliseconds
 * (0 never blocks) for at least one request to finish. Returns at once when nothing is
 * in flight. */
static int l_step(lua_State *L)
{
  driver *d = live_driver(L);
  lua_Number ms = luaL_optnumber(L, 1, 0);
  double deadline;
  int finished = 0, running = 0;
  if (!(ms >= 0)) ms = 0;
  if (ms > 86400000.0) ms = 86400000.0;
  deadline = now_ms() + (double)ms;
  for (;;) {
    double t, wait, timer;
    finished += start_due_retries(d, now_ms());
    if (curl_multi_perform(d->multi, &running) != CURLM_OK) break;
    finished += collect(d);
    if (finished > 0 || d->nlive == 0) break;
    t = now_ms();
    if (t >= deadline) break;
    wait = deadline - t;
    timer = next_timer(d);
    if (timer >= 0 && timer - t < wait) wait = timer - t < 0 ? 0 : timer - t;
    if (any_running(d) || wait > 0) {
      int iw = wait > (double)INT_MAX ? INT_MAX : (int)(wait + 0.999);
      if (curl_multi_poll(d->multi, NULL, 0, iw, NULL) != CURLM_OK) break;
    }
  }
  lua_pushinteger(L, finished);
  lua_pushinteger(L, (lua_Integer)d->nlive);
  return 2;
}

static int l_stats(lua_State *L)
{
  driver *d = upvalue_driver(L);
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, (lua_Integer)d->connects);
  lua_setfield(L, -2, "connects");
  lua_pushinteger(L, (lua_Integer)d->transfers);
  lua_setfield(L, -2, "transfers");
  lua_pushinteger(L, (lua_Integer)d->retries);
  lua_setfield(L, -2, "retries");
  lua_pushinteger(L, (lua_Integer)d->nlive);
  lua_setfield(L, -2, "live");
  lua_pushinteger(L, (lua_Integer)d->npending);
  lua_setfield(L, -2, "pending_deletes");
  return 1;
}

/* core.close_connections() → true, or false while requests are in flight. Closes every
 * idle keep-alive connection (the next request opens a new one). */
static int l_close_connections(lua_State *L)
{
  driver *d = live_driver(L);
  CURLM *fresh;
  if (d->nlive > 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  fresh = curl_multi_init();
  if (fresh == NULL) return luaL_error(L, "airlock.core: curl_multi_init failed");
  curl_multi_setopt(fresh, CURLMOPT_MAXCONNECTS, MAX_CONNECTS);
  curl_multi_cleanup(d->multi);
  d->multi = fresh;
  lua_pushboolean(L, 1);
  return 1;
}

static int driver_gc(lua_State *L)
{
  driver *d = (driver *)lua_touserdata(L, 1);
  size_t i;
  if (d == NULL || d->multi == NULL) return 0;
  while (d->head) {
    request *r = d->head;
    r->aborted = 1;
    r->code = CURLE_ABORTED_BY_CALLBACK;
    snprintf(r->errbuf, sizeof r->errbuf, "the airlock driver was closed");
    release_transfer(r);
  }
  curl_multi_cleanup(d->multi);
  d->multi = NULL;
  for (i = 0; i < d->npending; i++) {
    free(d->pending[i].id);
    luaL_unref(L, LUA_REGISTRYINDEX, d->pending[i].settings_ref);
  }
  free(d->pending);
  d->pending = NULL;
  d->npending = d->cappending = 0;
  return 0;
}

/* ---------------------------------------------------------------- libcurl callbacks (no Lua) */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
  request *r = (request *)ud;
  size_t n;
  if (nmemb != 0 && size > SIZE_MAX / nmemb) return 0;
  n = size * nmemb;
  if (buffer_append(&r->resp, ptr, n) != 0) return 0;   /* → CURLE_WRITE_ERROR */
  return n;
}

/* Request bodies go through a read callback (not POSTFIELDS) so that libcurl cannot replay
 * them on its own: when a reused connection dies before an answer, libcurl rewinds and
 * resends the request on a new one. That is fine for GET/DELETE (no body) but could run a
 * POST twice, which the retry policy forbids. The seek callback refuses that rewind. */
static size_t on_read(char *dst, size_t size, size_t nitems, void *ud)
{
  request *r = (request *)ud;
  size_t room, left;
  if (nitems != 0 && size > SIZE_MAX / nitems) return CURL_READFUNC_ABORT;
  room = size * nitems;
  left = r->body_len - r->body_pos;
  if (room > left) room = left;
  if (room) memcpy(dst, r->body + r->body_pos, room);
  r->body_pos += room;
  return room;
}

static int on_seek(void *ud, curl_off_t offset, int origin)
{
  request *r = (request *)ud;
  if (origin != SEEK_SET || offset != 0) return CURL_SEEKFUNC_CANTSEEK;
  if (r->body_pos > 0) {
    r->replay_refused = 1;
    return CURL_SEEKFUNC_FAIL;
  }
  return CURL_SEEKFUNC_OK;
}

static void copy_trimmed(char *dst, size_t cap, const char *s, size_t n)
{
  size_t i = 0, j = n;
  while (i < j && (s[i] == ' ' || s[i] == '\t')) i++;
  while (j > i && (s[j - 1] == ' ' || s[j - 1] == '\t' || s[j - 1] == '\r' || s[j - 1] == '\n')) j--;
  if (j - i >= cap) j = i + cap - 1;
  memcpy(dst, s + i, j - i);
  dst[j - i] = '\0';
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud)
{
  request *r = (request *)ud;
  size_t n = size * nitems;
  if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
    /* a new response (also after 100 Continue): "HTTP/1.1 429 Too Many Requests" */
    size_t i = 0, spaces = 0;
    r->has_retry_after = 0;
    r->retry_after[0] = '\0';
    while (i < n && spaces < 2) { if (buf[i] == ' ') spaces++; i++; }
    if (spaces == 2) copy_trimmed(r->reason, sizeof r->reason, buf + i, n - i);
    else r->reason[0] = '\0';
  } else if (prefix_nocase(buf, n, "retry-after:")) {
    copy_trimmed(r->retry_after, sizeof r->retry_after, buf + 12, n - 12);
    r->has_retry_after = 1;
  }
  return n;
}

/* ---------------------------------------------------------------- requests */

static request *check_request(lua_State *L, int idx)
{
  return (request *)luaL_checkudata(L, idx, REQUEST_MT);
}

static const char *opt_string_field(lua_State *L, int t, const char *name, size_t *len, int required)
{
  const char *s;
  lua_getfield(L, t, name);
  if (lua_isnil(L, -1)) {
    if (required) luaL_error(L, "airlock.core.request: field '%s' (a string) is required", name);
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "airlock.core.request: field '%s' must be a string", name);
  s = lua_tolstring(L, -1, len);
  return s;   /* stays anchored on the stack */
}

static long opt_int_field(lua_State *L, int t, const char *name, long lo, long hi, long dflt)
{
  long v = dflt;
  lua_getfield(L, t, name);
  if (!lua_isnil(L, -1) && !number_to_int(L, -1, lo, hi, &v)) {
    char msg[160];
    snprintf(msg, sizeof msg, "airlock.core.request: field '%s' must be an integer from %ld to %ld",
             name, lo, hi);
    luaL_error(L, "%s", msg);
  }
  lua_pop(L, 1);
  return v;
}

static int valid_header_line(const char *s, size_t n)
{
  size_t i;
  if (n == 0 || strlen(s) != n) return 0;
  for (i = 0; i < n; i++)
    if (s[i] == '\r' || s[i] == '\n') return 0;
  return 1;
}

/* core.request{method=, url=, headers={...}, body=, timeout_ms=, connect_timeout_ms=,
 *              max_retries=, verify=true|false|"ca.pem"} → request (already started) */
static int l_request(lua_State *L)
{
  driver *d = live_driver(L);
  const char *method, *url, *body, *cainfo = NULL;
  size_t method_len = 0, url_len = 0, body_len = 0, i, nheaders = 0;
  long timeout_ms, connect_ms, max_retries;
  int verify = 1, hidx;
  request *r;
  CURL *e;

  /* 1. check and convert every argument while nothing is allocated */
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  method = opt_string_field(L, 1, "method", &method_len, 1);            /* index 2 */
  if (method_len == 0 || method_len >= sizeof r->method)
    return luaL_error(L, "airlock.core.request: bad method '%s'", method);
  for (i = 0; i < method_len; i++)
    if (method[i] < 'A' || method[i] > 'Z')
      return luaL_error(L, "airlock.core.request: bad method '%s'", method);
  url = opt_string_field(L, 1, "url", &url_len, 1);                     /* index 3 */
  if (strlen(url) != url_len || url_len == 0)
    return luaL_error(L, "airlock.core.request: bad url");
  body = opt_string_field(L, 1, "body", &body_len, 0);                  /* index 4 */
  timeout_ms = opt_int_field(L, 1, "timeout_ms", 0, LONG_MAX / 2, 90000);
  connect_ms = opt_int_field(L, 1, "connect_timeout_ms", 0, LONG_MAX / 2, 10000);
  max_retries = opt_int_field(L, 1, "max_retries", 0, MAX_RETRIES_LIMIT, 3);
  lua_getfield(L, 1, "verify");                                          /* index 5 */
  if (lua_isboolean(L, -1)) verify = lua_toboolean(L, -1);
  else if (lua_type(L, -1) == LUA_TSTRING) {
    size_t n;
    cainfo = lua_tolstring(L, -1, &n);
    if (n == 0 || strlen(cainfo) != n) return luaL_error(L, "airlock.core.request: bad verify path");
  } else if (!lua_isnil(L, -1))
    return luaL_error(L, "airlock.core.request: field 'verify' must be a boolean or a CA file path");
  lua_getfield(L, 1, "headers");                                         /* index 6 */
  hidx = lua_gettop(L);
  if (!lua_isnil(L, hidx)) {
    if (!lua_istable(L, hidx)) return luaL_error(L, "airlock.core.request: field 'headers' must be a table");
    nheaders = alc_rawlen(L, hidx);
    for (i = 1; i <= nheaders; i++) {
      size_t n = 0;
      const char *h;
      lua_rawgeti(L, hidx, (int)i);
      h = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
      if (h == NULL || !valid_header_line(h, n))
        return luaL_error(L, "airlock.core.request: header %d is not a valid header line", (int)i);
      lua_pop(L, 1);
    }
  }

  /* 2. the userdata owns every resource from here on: an error below leaks nothing, since
   *    its __gc frees whatever was acquired. */
  r = (request *)alc_newuserdata(L, sizeof *r);
  memset(r, 0, sizeof *r);
  luaL_getmetatable(L, REQUEST_MT);
  lua_setmetatable(L, -2);
  memcpy(r->method, method, method_len);
  r->method[method_len] = '\0';
  r->max_retries = (int)max_retries;
  r->state = REQ_NEW;

  r->url = dup_mem(url, url_len);
  if (r->url == NULL) return luaL_error(L, "airlock.core.request: out of memory");
  if (body) {
    r->body = dup_mem(body, body_len);
    if (r->body == NULL) return luaL_error(L, "airlock.core.request: out of memory");
    r->body_len = body_len;
  }
  for (i = 1; i <= nheaders; i++) {
    struct curl_slist *nl;
    lua_rawgeti(L, hidx, (int)i);
    nl = curl_slist_append(r->headers, lua_tostring(L, -1));
    lua_pop(L, 1);
    if (nl == NULL) return luaL_error(L, "airlock.core.request: out of memory");
    r->headers = nl;
  }
  if (body && body_len > 0) {
    /* no "Expect: 100-continue" round trip for larger bodies */
    struct curl_slist *nl = curl_slist_append(r->headers, "Expect:");
    if (nl == NULL) return luaL_error(L, "airlock.core.request: out of memory");
    r->headers = nl;
  }
  e = r->easy = curl_easy_init();
  if (e == NULL) return luaL_error(L, "airlock.core.request: curl_easy_init failed");

  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_URL, r->url);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
  curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)(void *)r);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)r);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, (void *)r);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  if (r->headers) curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  if (!verify) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (cainfo) {
    curl_easy_setopt(e, CURLOPT_CAINFO, cainfo);   /* libcurl copies the string */
  }
  if (strcmp(r->method, "GET") == 0) {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else if (strcmp(r->method, "HEAD") == 0) {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else {
    if (strcmp(r->method, "POST") != 0) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->body || strcmp(r->method, "POST") == 0) {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
      curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(e, CURLOPT_READDATA, (void *)r);
      curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
      curl_easy_setopt(e, CURLOPT_SEEKDATA, (void *)r);
    }
  }

  link_request(d, r);
  if (start_attempt(d, r) != 0) return luaL_error(L, "airlock.core.request: could not start the transfer");
  return 1;
}

static int req_done(lua_State *L)
{
  request *r = check_request(L, 1);
  lua_pushboolean(L, r->state == REQ_DONE);
  return 1;
}

static int req_state(lua_State *L)
{
  static const char *const names[] = { "new", "running", "waiting", "done" };
  request *r = check_request(L, 1);
  lua_pushstring(L, names[r->state]);
  lua_pushinteger(L, r->attempt);
  return 2;
}

/* req:result() → nil when not finished, else {status=, body=, reason=, retry_after=, error=,
 * code=, attempts=, connects=}. status is nil when there was no HTTP answer (error is set). */
static int req_result(lua_State *L)
{
  request *r = check_request(L, 1);
  if (r->state != REQ_DONE) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 8);
  if (r->code == CURLE_OK && !r->aborted) {
    lua_pushinteger(L, r->status);
    lua_setfield(L, -2, "status");
    lua_pushlstring(L, r->resp.data ? r->resp.data : "", r->resp.len);
    lua_setfield(L, -2, "body");
    lua_pushstring(L, r->reason);
    lua_setfield(L, -2, "reason");
    if (r->has_retry_after) {
      lua_pushstring(L, r->retry_after);
      lua_setfield(L, -2, "retry_after");
    }
  } else {
    lua_pushstring(L, r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->code));
    lua_setfield(L, -2, "error");
  }
  lua_pushinteger(L, (lua_Integer)r->code);
  lua_setfield(L, -2, "code");
  lua_pushinteger(L, r->attempt + 1);
  lua_setfield(L, -2, "attempts");
  lua_pushinteger(L, r->connects);
  lua_setfield(L, -2, "connects");
  return 1;
}

/* req:cancel(): stop the transfer (or its retry timer); the request is done, aborted. */
static int req_cancel(lua_State *L)
{
  request *r = check_request(L, 1);
  if (r->state != REQ_DONE) {
    r->aborted = 1;
    r->code = CURLE_ABORTED_BY_CALLBACK;
    snprintf(r->errbuf, sizeof r->errbuf, "request cancelled");
    release_transfer(r);
  }
  return 0;
}

static int req_gc(lua_State *L)
{
  request *r = (request *)lua_touserdata(L, 1);
  release_transfer(r);
  buffer_free(&r->resp);
  return 0;
}

static int req_tostring(lua_State *L)
{
  request *r = check_request(L, 1);
  lua_pushfstring(L, "airlock.core.request (%s, %s)", r->method,
                  r->state == REQ_DONE ? "done" : r->state == REQ_WAITING ? "waiting" : "running");
  return 1;
}

/* ---------------------------------------------------------------- session tokens */

static session_token *check_token(lua_State *L, int idx)
{
  return (session_token *)luaL_checkudata(L, idx, SESSION_MT);
}

/* core.session(id, owns [, settings]) → token. settings (a table) travels with the id into
 * the pending-delete queue if an owning token is dropped unclosed. */
static int l_session(lua_State *L)
{
  size_t n;
  const char *id = luaL_checklstring(L, 1, &n);
  int owns = lua_toboolean(L, 2);
  session_token *t;
  if (n == 0 || strlen(id) != n) return luaL_argerror(L, 1, "non-empty session id expected");
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  t = (session_token *)alc_newuserdata(L, sizeof *t);
  t->id = NULL;
  t->owns = owns;
  t->closed = 0;
  t->settings_ref = LUA_NOREF;
  luaL_getmetatable(L, SESSION_MT);
  lua_setmetatable(L, -2);
  t->id = dup_mem(id, n);
  if (t->id == NULL) return luaL_error(L, "airlock.core.session: out of memory");
  if (!lua_isnil(L, 3)) {
    lua_pushvalue(L, 3);
    t->settings_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  }
  return 1;
}

static int tok_id(lua_State *L)
{
  session_token *t = check_token(L, 1);
  if (t->closed || t->id == NULL) lua_pushnil(L);
  else lua_pushstring(L, t->id);
  return 1;
}

static int tok_owns(lua_State *L)
{
  session_token *t = check_token(L, 1);
  lua_pushboolean(L, t->owns);
  return 1;
}

/* token:close() → the id the first time (the caller then sends the DELETE), nil afterwards. */
static int tok_close(lua_State *L)
{
  session_token *t = check_token(L, 1);
  if (t->closed || t->id == NULL) {
    lua_pushnil(L);
    return 1;
  }
  t->closed = 1;
  lua_pushstring(L, t->id);
  free(t->id);
  t->id = NULL;
  luaL_unref(L, LUA_REGISTRYINDEX, t->settings_ref);
  t->settings_ref = LUA_NOREF;
  return 1;
}

/* Finalizer: no I/O. An owning, unclosed token queues its id for the Lua layer to delete. */
static int tok_gc(lua_State *L)
{
  session_token *t = (session_token *)lua_touserdata(L, 1);
  driver *d = upvalue_driver(L);
  if (t->id && !t->closed && t->owns && d && d->multi) {
    if (d->npending == d->cappending) {
      size_t cap = d->cappending ? d->cappending * 2 : 8;
      pending_delete *np = NULL;
      if (cap <= SIZE_MAX / sizeof *np) np = realloc(d->pending, cap * sizeof *np);
      if (np) {
        d->pending = np;
        d->cappending = cap;
      }
    }
    if (d->npending < d->cappending) {
      d->pending[d->npending].id = t->id;
      d->pending[d->npending].settings_ref = t->settings_ref;
      d->npending++;
      t->id = NULL;
      t->settings_ref = LUA_NOREF;
    }
  }
  free(t->id);
  t->id = NULL;
  luaL_unref(L, LUA_REGISTRYINDEX, t->settings_ref);
  t->settings_ref = LUA_NOREF;
  t->closed = 1;
  return 0;
}

static int tok_tostring(lua_State *L)
{
  session_token *t = check_token(L, 1);
  lua_pushfstring(L, "airlock.core.session (%s)%s", t->id ? t->id : "-",
                  t->closed ? " [closed]" : (t->owns ? "" : " [attached]"));
  return 1;
}

/* core.take_pending() → { {id=, settings=}, ... }: the queue of dropped sessions, emptied. */
static int l_take_pending(lua_State *L)
{
  driver *d = upvalue_driver(L);
  size_t i, n = d->npending;
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, d->pending[i].id);
    lua_setfield(L, -2, "id");
    if (d->pending[i].settings_ref != LUA_NOREF && d->pending[i].settings_ref != LUA_REFNIL) {
      lua_rawgeti(L, LUA_REGISTRYINDEX, d->pending[i].settings_ref);
      lua_setfield(L, -2, "settings");
    }
    lua_rawseti(L, -2, (int)(i + 1));
  }
  /* everything is on the Lua side now: release the C copies */
  for (i = 0; i < n; i++) {
    free(d->pending[i].id);
    luaL_unref(L, LUA_REGISTRYINDEX, d->pending[i].settings_ref);
  }
  d->npending = 0;
  return 1;
}

static int l_pending_count(lua_State *L)
{
  lua_pushinteger(L, (lua_Integer)upvalue_driver(L)->npending);
  return 1;
}

/* ---------------------------------------------------------------- module */

static const luaL_Reg request_methods[] = {
  { "done", req_done },
  { "state", req_state },
  { "result", req_result },
  { "cancel", req_cancel },
  { NULL, NULL }
};

static const luaL_Reg session_methods[] = {
  { "id", tok_id },
  { "owns", tok_owns },
  { "close", tok_close },
  { NULL, NULL }
};

static const luaL_Reg functions[] = {
  { "request", l_request },
  { "step", l_step },
  { "stats", l_stats },
  { "session", l_session },
  { "take_pending", l_take_pending },
  { "pending_count", l_pending_count },
  { "retry_wait", l_retry_wait },
  { "close_connections", l_close_connections },
  { NULL, NULL }
};

/* metatable at -1, driver at -2 after this call: methods get the driver as upvalue 1 */
static void new_class(lua_State *L, const char *name, const luaL_Reg *methods,
                      lua_CFunction gc, lua_CFunction tostr)
{
  if (luaL_newmetatable(L, name)) {
    lua_pushvalue(L, -2);
    lua_pushcclosure(L, gc, 1);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, tostr);
    lua_setfield(L, -2, "__tostring");
    lua_newtable(L);
    lua_pushvalue(L, -3);
    alc_setfuncs(L, methods, 1);
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
    if (luaL_newmetatable(L, DRIVER_MT)) {
      lua_pushcfunction(L, driver_gc);
      lua_setfield(L, -2, "__gc");
      lua_pushliteral(L, "locked");
      lua_setfield(L, -2, "__metatable");
    }
    lua_setmetatable(L, -2);
    d->multi = curl_multi_init();
    if (d->multi == NULL) return luaL_error(L, "airlock.core: curl_multi_init failed");
    curl_multi_setopt(d->multi, CURLMOPT_MAXCONNECTS, MAX_CONNECTS);
    lua_pushvalue(L, -1);
    alc_rawsetp(L, LUA_REGISTRYINDEX, &driver_key);
  }
  new_class(L, REQUEST_MT, request_methods, req_gc, req_tostring);
  new_class(L, SESSION_MT, session_methods, tok_gc, tok_tostring);

  lua_newtable(L);
  lua_pushvalue(L, -2);
  alc_setfuncs(L, functions, 1);
  lua_pushliteral(L, CORE_VERSION);
  lua_setfield(L, -2, "_VERSION");
  lua_pushstring(L, curl_version());
  lua_setfield(L, -2, "curl_version");
  lua_pushinteger(L, MAX_RETRY_WAIT_S);
  lua_setfield(L, -2, "MAX_RETRY_WAIT");
  return 1;
}
