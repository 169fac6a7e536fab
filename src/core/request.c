/* request.c: the request userdata. core.request{...} checks every field, then builds one
 * libcurl transfer and starts it (never blocking); req:result() gives the answer or the
 * connection error. core.perform{...} is the same for a caller that blocks (the request lives
 * in the driver). One attempt only: retries are the Lua engine's policy. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static request *check_request(lua_State *L, int idx)
{
  return (request *)luaL_checkudata(L, idx, REQUEST_MT);
}

/* Empties a finished, released request for a new transfer, keeping its buffers' memory. */
static void request_clear(request *r)
{
  buffer resp = r->resp, head = r->head;
  memset(r, 0, sizeof *r);
  resp.len = head.len = 0;
  r->resp = resp;
  r->head = head;
  r->state = REQ_DONE;   /* until it starts */
}

/* An integer field in [lo, hi]; the double is range-checked before any cast. */
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

static const char *opt_string_field(lua_State *L, const char *who, int t, const char *name, size_t *len,
                                    int required)
{
  lua_getfield(L, t, name);
  if (lua_isnil(L, -1)) {
    if (required) luaL_error(L, "%s: field '%s' (a string) is required", who, name);
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "%s: field '%s' must be a string", who, name);
  return lua_tolstring(L, -1, len);   /* stays anchored on the stack */
}

static long opt_int_field(lua_State *L, const char *who, int t, const char *name, long lo, long hi, long dflt)
{
  long v = dflt;
  lua_getfield(L, t, name);
  if (!lua_isnil(L, -1) && !number_to_int(L, -1, lo, hi, &v)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s: field '%s' must be an integer from %ld to %ld", who, name, lo, hi);
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

/* Releases what the transfer needs; the results (status, body, headers, ...) stay. The easy
 * handle goes back to the driver, still set up for a plain GET when it completed one. */
static void request_release(request *r)
{
  driver *d = r->drv;
  if (r->easy && r->request_bytes == 0) {
    long n = 0;
    if (curl_easy_getinfo(r->easy, CURLINFO_REQUEST_SIZE, &n) == CURLE_OK) r->request_bytes = n;
  }
  driver_unlink(r);
  if (r->easy) driver_give_easy(d, r->easy, r->plain && r->completed && r->code == CURLE_OK);
  r->easy = NULL;
  curl_slist_free_all(r->headers);
  r->headers = NULL;
  free(r->body);
  r->body = NULL;
  if (r->body_from_file) close(r->body_fd);
  r->body_from_file = 0;
  r->state = REQ_DONE;
}

/* libcurl finished r's transfer (the driver collected it): keep the outcome, release it. */
static void request_finished(driver *d, request *r, CURLcode code)
{
  long connects = 0;
  if (r->in_multi) curl_multi_remove_handle(d->multi, r->easy);
  r->in_multi = 0;
  r->code = code;
  r->completed = 1;
  if (code == CURLE_OK) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
  else r->status = 0;
  if (code != CURLE_OK && r->body_file_short)
    snprintf(r->errbuf, sizeof r->errbuf, "the body file ended before its %lu bytes were sent "
             "(it changed meanwhile)", (unsigned long)r->body_len);
  else if (code != CURLE_OK && r->body_overflow)
    snprintf(r->errbuf, sizeof r->errbuf, "the response body is larger than %lu bytes",
             (unsigned long)r->max_body);
  else if (code != CURLE_OK && r->head_overflow)
    snprintf(r->errbuf, sizeof r->errbuf, "the response headers exceed %d bytes", MAX_HEADER_BYTES);
  else if (code != CURLE_OK && r->replay_refused)
    snprintf(r->errbuf, sizeof r->errbuf, "the connection closed before an answer "
             "(the %s was not sent again: it may have run)", r->method);
  if (curl_easy_getinfo(r->easy, CURLINFO_NUM_CONNECTS, &connects) == CURLE_OK && connects > 0) {
    r->connects += connects;
    d->connects += (unsigned long)connects;
  }
  d->transfers++;
  request_release(r);
}

/* What core.request or core.perform was asked for, checked and converted; the strings stay
 * anchored on the Lua stack (indices 2..6) until the transfer is set up. */
typedef struct request_spec {
  const char *method, *url, *body, *body_file, *cainfo;
  size_t method_len, body_len, nheaders;
  long timeout_ms, connect_ms, max_body;
  int verify, hidx;
  int streamed;                /* stream = true: the body is handed out by req:take() */
} request_spec;

/* Checks the spec table at index 1 (raising a clear error for a bad field) while nothing is
 * allocated. */
static void read_spec(lua_State *L, const char *who, request_spec *s)
{
  size_t i, url_len = 0, n_file = 0;
  memset(s, 0, sizeof *s);
  s->verify = 1;
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  s->method = opt_string_field(L, who, 1, "method", &s->method_len, 1);            /* index 2 */
  if (s->method_len == 0 || s->method_len >= METHOD_BYTES)
    luaL_error(L, "%s: bad method '%s'", who, s->method);
  for (i = 0; i < s->method_len; i++)
    if (s->method[i] < 'A' || s->method[i] > 'Z') luaL_error(L, "%s: bad method '%s'", who, s->method);
  s->url = opt_string_field(L, who, 1, "url", &url_len, 1);                        /* index 3 */
  if (strlen(s->url) != url_len || url_len == 0) luaL_error(L, "%s: bad url", who);
  s->body = opt_string_field(L, who, 1, "body", &s->body_len, 0);                  /* index 4 */
  lua_getfield(L, 1, "stream");
  s->streamed = lua_toboolean(L, -1);
  lua_pop(L, 1);
  s->timeout_ms = opt_int_field(L, who, 1, "timeout_ms", 0, LONG_MAX / 2, 90000);
  s->connect_ms = opt_int_field(L, who, 1, "connect_timeout_ms", 0, LONG_MAX / 2, 10000);
  s->max_body = opt_int_field(L, who, 1, "max_response_bytes", 1, LONG_MAX / 2, 0);
  lua_getfield(L, 1, "verify");                                                     /* index 5 */
  if (lua_isboolean(L, -1)) s->verify = lua_toboolean(L, -1);
  else if (lua_type(L, -1) == LUA_TSTRING) {
    size_t n;
    s->cainfo = lua_tolstring(L, -1, &n);
    if (n == 0 || strlen(s->cainfo) != n) luaL_error(L, "%s: bad verify path", who);
  } else if (!lua_isnil(L, -1))
    luaL_error(L, "%s: field 'verify' must be a boolean or a CA file path", who);
  lua_getfield(L, 1, "headers");                                                    /* index 6 */
  s->hidx = lua_gettop(L);
  if (!lua_isnil(L, s->hidx)) {
    if (!lua_istable(L, s->hidx)) luaL_error(L, "%s: field 'headers' must be a table", who);
    s->nheaders = alc_rawlen(L, s->hidx);
    for (i = 1; i <= s->nheaders; i++) {
      size_t n = 0;
      const char *h;
      lua_rawgeti(L, s->hidx, (int)i);
      h = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &n) : NULL;
      if (h == NULL || !valid_header_line(h, n))
        luaL_error(L, "%s: header %d is not a valid header line", who, (int)i);
      lua_pop(L, 1);
    }
  }
  /* index 7: a path whose file is the body, read as it is sent (a large upload never sits
   * in memory) */
  s->body_file = opt_string_field(L, who, 1, "body_file", &n_file, 0);
  if (s->body_file && (n_file == 0 || strlen(s->body_file) != n_file))
    luaL_error(L, "%s: bad body_file path", who);
  if (s->body_file && s->body) luaL_error(L, "%s: give body or body_file, not both", who);
}

/* Builds r's transfer from s and starts it (never blocking). NULL, or what failed: r then
 * holds whatever it acquired, for request_release. r is empty and unlinked before.
 *
 * An easy handle is reused from the driver; one that last completed a plain GET (default
 * verification) keeps those options, so a plain GET on it sets only what differs per
 * request. Anything else starts from a reset handle, so no option of an earlier request
 * carries over. */
static const char *request_begin(lua_State *L, driver *d, request *r, const request_spec *s)
{
  size_t i;
  int configured = 0;
  CURL *e;
  memcpy(r->method, s->method, s->method_len);
  r->method[s->method_len] = '\0';
  r->streamed = s->streamed;
  r->max_body = (size_t)s->max_body;
  if (s->body) {
    r->body = dup_mem(s->body, s->body_len);
    if (r->body == NULL) return "out of memory";
    r->body_len = s->body_len;
  } else if (s->body_file) {
    struct stat st;
    r->body_fd = open(s->body_file, O_RDONLY | O_CLOEXEC);
    if (r->body_fd < 0) {
      snprintf(r->errbuf, sizeof r->errbuf, "cannot open the body file: %s", strerror(errno));
      return r->errbuf;
    }
    r->body_from_file = 1;
    if (fstat(r->body_fd, &st) != 0 || !S_ISREG(st.st_mode)) return "the body file is not a regular file";
    r->body_len = (size_t)st.st_size;
  }
  for (i = 1; i <= s->nheaders; i++) {
    struct curl_slist *nl;
    lua_rawgeti(L, s->hidx, (int)i);
    nl = curl_slist_append(r->headers, lua_tostring(L, -1));
    lua_pop(L, 1);
    if (nl == NULL) return "out of memory";
    r->headers = nl;
  }
  if (s->body && s->body_len > 0) {
    /* no "Expect: 100-continue" round trip for larger bodies held in memory; a body file
     * keeps it: a server that refuses the upload (413 over a quota) answers before any
     * byte is sent, instead of closing on a client still sending */
    struct curl_slist *nl = curl_slist_append(r->headers, "Expect:");
    if (nl == NULL) return "out of memory";
    r->headers = nl;
  }
  r->plain = s->verify && s->cainfo == NULL && strcmp(r->method, "GET") == 0;
  e = r->easy = driver_take_easy(d, &configured);
  if (e == NULL) return "curl_easy_init failed";
  if (configured && !r->plain) {
    curl_easy_reset(e);
    configured = 0;
  }
  if (!configured) {
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  }
  /* libcurl keeps its own copy of the URL */
  if (curl_easy_setopt(e, CURLOPT_URL, s->url) != CURLE_OK) return "out of memory";
  curl_easy_setopt(e, CURLOPT_PRIVATE, (char *)(void *)r);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, (void *)r);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, (void *)r);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, s->timeout_ms);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, s->connect_ms);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->headers);
  if (!s->verify) {
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (s->cainfo) {
    curl_easy_setopt(e, CURLOPT_CAINFO, s->cainfo);   /* libcurl copies the string */
  }
  if (strcmp(r->method, "GET") == 0) {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else if (strcmp(r->method, "HEAD") == 0) {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else {
    if (strcmp(r->method, "POST") != 0) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r->method);
    if (r->body || r->body_from_file || strcmp(r->method, "POST") == 0) {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
      curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(e, CURLOPT_READDATA, (void *)r);
      curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
      curl_easy_setopt(e, CURLOPT_SEEKDATA, (void *)r);
    }
  }
  driver_link(d, r);
  if (driver_start(d, r) != 0) return "could not start the transfer";
  return NULL;
}

/* core.request{method=, url=, headers={"Name: value", ...}, body=, timeout_ms=,
 *              connect_timeout_ms=, verify=true|false|"ca.pem", stream=true|nil,
 *              max_response_bytes=n|nil}
 * → request (already started). A streamed request's body is handed out by req:take(). A
 * kept body larger than max_response_bytes fails the request ("the response body is larger
 * than n bytes", too_large = true in its result); nil: no bound. */
static int l_request(lua_State *L)
{
  driver *d = live_driver(L);
  request_spec s;
  request *r;
  const char *why;
  read_spec(L, "airlock.core.request", &s);
  /* the userdata owns every resource from here on: an error below leaks nothing, since its
   * __gc frees whatever was acquired */
  r = (request *)alc_newuserdata(L, sizeof *r);
  memset(r, 0, sizeof *r);
  r->state = REQ_DONE;   /* until it starts */
  luaL_getmetatable(L, REQUEST_MT);
  lua_setmetatable(L, -2);
  why = request_begin(L, d, r, &s);
  if (why != NULL) {
    request_release(r);
    return luaL_error(L, "airlock.core.request: %s", why);
  }
  return 1;
}

/* req:take() → the body bytes that arrived since the last take (a streamed request), and the
 * status code once the status line is in (else nil). Lets a paused transfer go on. */
static int req_take(lua_State *L)
{
  request *r = check_request(L, 1);
  lua_pushlstring(L, r->resp.data ? r->resp.data : "", r->resp.len);
  r->resp.len = 0;
  if (r->paused && r->easy && r->state != REQ_DONE) {
    r->paused = 0;
    curl_easy_pause(r->easy, CURLPAUSE_CONT);   /* may deliver held bytes right away */
  }
  if (r->early_status > 0) lua_pushinteger(L, r->early_status);
  else lua_pushnil(L);
  return 2;
}

static int req_done(lua_State *L)
{
  request *r = check_request(L, 1);
  lua_pushboolean(L, r->state == REQ_DONE);
  return 1;
}

/* Adds headers = { ["lower-case-name"] = "value", ... } from the kept header lines; a name
 * seen twice gets its values joined with ", ". */
static void push_headers(lua_State *L, const request *r)
{
  const char *p = r->head.data, *end = p ? p + r->head.len : NULL, *q = p;
  int lines = 0;
  /* sized for every line at once: growing a table step by step rehashes it each time */
  while (q && q < end && (q = memchr(q, '\n', (size_t)(end - q))) != NULL) {
    lines++;
    q++;
  }
  lua_createtable(L, 0, lines);
  while (p && p < end) {
    const char *eol = memchr(p, '\n', (size_t)(end - p)), *colon, *v, *ve;
    char name[128];
    size_t n, i;
    if (eol == NULL) eol = end;
    colon = memchr(p, ':', (size_t)(eol - p));
    if (colon && colon > p && (size_t)(colon - p) < sizeof name) {
      n = (size_t)(colon - p);
      for (i = 0; i < n; i++) name[i] = (char)((p[i] >= 'A' && p[i] <= 'Z') ? p[i] - 'A' + 'a' : p[i]);
      v = colon + 1;
      ve = eol;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      lua_pushlstring(L, name, n);
      lua_pushvalue(L, -1);
      lua_rawget(L, -3);
      if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushlstring(L, v, (size_t)(ve - v));
      } else {
        lua_pushliteral(L, ", ");
        lua_pushlstring(L, v, (size_t)(ve - v));
        lua_concat(L, 3);
      }
      lua_rawset(L, -3);
    }
    p = eol + 1;
  }
}

/* The result table of a finished request: {status=, reason=, headers=, body=, connects=} for
 * an HTTP answer, or {error=, code=, sent=, tls=, connects=} when there was none: `sent`
 * says the request may have reached the server, `tls` that the TLS setup failed (the same
 * on every try). */
static void push_result(lua_State *L, const request *r)
{
  lua_createtable(L, 0, 5);
  if (r->code == CURLE_OK && !r->aborted) {
    lua_pushinteger(L, r->status);
    lua_setfield(L, -2, "status");
    lua_pushlstring(L, r->resp.data ? r->resp.data : "", r->resp.len);
    lua_setfield(L, -2, "body");
    lua_pushstring(L, r->reason);
    lua_setfield(L, -2, "reason");
    push_headers(L, r);
    lua_setfield(L, -2, "headers");
  } else {
    lua_pushstring(L, r->errbuf[0] ? r->errbuf : curl_easy_strerror(r->code));
    lua_setfield(L, -2, "error");
    lua_pushinteger(L, (lua_Integer)r->code);
    lua_setfield(L, -2, "code");
    lua_pushboolean(L, r->request_bytes > 0 || r->body_pos > 0 || r->replay_refused);
    lua_setfield(L, -2, "sent");
    lua_pushboolean(L, tls_config_failure(r->code));
    lua_setfield(L, -2, "tls");
    lua_pushboolean(L, r->body_overflow);
    lua_setfield(L, -2, "too_large");
  }
  lua_pushinteger(L, r->connects);
  lua_setfield(L, -2, "connects");
}

/* req:result() → nil while running; else the result table (push_result). */
static int req_result(lua_State *L)
{
  request *r = check_request(L, 1);
  if (r->state != REQ_DONE) {
    lua_pushnil(L);
    return 1;
  }
  push_result(L, r);
  return 1;
}

/* core.perform(spec) → result, finished: the blocking form of core.request(spec) + waiting +
 * req:result(), for a caller that would block anyway. Every transfer in flight advances
 * meanwhile; `finished` counts the transfers that finished (this one included). Its request
 * lives in the driver (no userdata, its buffers kept for the next call), so the call costs
 * no garbage beyond the result. → nil when that request is already in use: a finalizer
 * calling the SDK while the result of another call is being built (use core.request). */
static int l_perform(lua_State *L)
{
  driver *d = live_driver(L);
  request_spec s;
  request *r;
  const char *why;
  int finished = 0;
  lua_Integer total = 0;
  read_spec(L, "airlock.core.perform", &s);
  if (d->blocking_busy) {
    lua_pushnil(L);
    return 1;
  }
  if (d->blocking == NULL) {
    d->blocking = (request *)calloc(1, sizeof *d->blocking);
    if (d->blocking == NULL) return luaL_error(L, "airlock.core.perform: out of memory");
  }
  r = d->blocking;
  request_clear(r);
  d->blocking_busy = 1;   /* until the result is built: an error before leaves it set (then nil) */
  why = request_begin(L, d, r, &s);
  if (why != NULL) {
    request_release(r);
    d->blocking_busy = 0;
    return luaL_error(L, "airlock.core.perform: %s", why);
  }
  while (r->state != REQ_DONE) {
    if (drive(d, 1000.0, 0, &finished) != 0) {
      int err = errno;
      r->aborted = 1;
      request_release(r);
      d->blocking_busy = 0;
      return luaL_error(L, "airlock.core.perform: poll failed: %s", strerror(err));
    }
    total += finished;
  }
  push_result(L, r);
  lua_pushinteger(L, total);
  /* a large answer's memory is not kept for the next call */
  if (r->resp.cap > KEPT_BUFFER_BYTES) buffer_free(&r->resp);
  if (r->head.cap > KEPT_BUFFER_BYTES) buffer_free(&r->head);
  d->blocking_busy = 0;
  return 2;
}

/* req:cancel(): stop the transfer; the request is done, with the error "request cancelled". */
static int req_cancel(lua_State *L)
{
  request *r = check_request(L, 1);
  if (r->state != REQ_DONE) {
    r->aborted = 1;
    r->code = CURLE_ABORTED_BY_CALLBACK;
    snprintf(r->errbuf, sizeof r->errbuf, "request cancelled");
    request_release(r);
  }
  return 0;
}

static int req_gc(lua_State *L)
{
  request *r = (request *)lua_touserdata(L, 1);
  request_release(r);
  buffer_free(&r->resp);
  buffer_free(&r->head);
  return 0;
}

static int req_tostring(lua_State *L)
{
  request *r = check_request(L, 1);
  lua_pushfstring(L, "airlock.core.request (%s, %s)", r->method,
                  r->state == REQ_DONE ? "done" : "running");
  return 1;
}
