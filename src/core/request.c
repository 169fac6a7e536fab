/* request.c: the request userdata. core.request{...} checks every field, then builds one
 * libcurl transfer and starts it (never blocking); req:result() gives the answer or the
 * connection error. One attempt only: retries are the Lua engine's policy. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static request *check_request(lua_State *L, int idx)
{
  return (request *)luaL_checkudata(L, idx, REQUEST_MT);
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

static const char *opt_string_field(lua_State *L, int t, const char *name, size_t *len, int required)
{
  lua_getfield(L, t, name);
  if (lua_isnil(L, -1)) {
    if (required) luaL_error(L, "airlock.core.request: field '%s' (a string) is required", name);
    return NULL;
  }
  if (lua_type(L, -1) != LUA_TSTRING)
    luaL_error(L, "airlock.core.request: field '%s' must be a string", name);
  return lua_tolstring(L, -1, len);   /* stays anchored on the stack */
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

/* Releases what the transfer needs; the results (status, body, headers, ...) stay. */
static void request_release(request *r)
{
  if (r->easy && r->request_bytes == 0) {
    long n = 0;
    if (curl_easy_getinfo(r->easy, CURLINFO_REQUEST_SIZE, &n) == CURLE_OK) r->request_bytes = n;
  }
  driver_unlink(r);
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

/* libcurl finished r's transfer (the driver collected it): keep the outcome, release it. */
static void request_finished(driver *d, request *r, CURLcode code)
{
  long connects = 0;
  if (r->in_multi) curl_multi_remove_handle(d->multi, r->easy);
  r->in_multi = 0;
  r->code = code;
  if (code == CURLE_OK) curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &r->status);
  else r->status = 0;
  if (code != CURLE_OK && r->head_overflow)
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

/* core.request{method=, url=, headers={"Name: value", ...}, body=, timeout_ms=,
 *              connect_timeout_ms=, verify=true|false|"ca.pem", stream=true|nil}
 * → request (already started). A streamed request's body is handed out by req:take(). */
static int l_request(lua_State *L)
{
  driver *d = live_driver(L);
  const char *method, *url, *body, *cainfo = NULL;
  size_t method_len = 0, url_len = 0, body_len = 0, i, nheaders = 0;
  long timeout_ms, connect_ms;
  int verify = 1, hidx, streamed;
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
  lua_getfield(L, 1, "stream");
  streamed = lua_toboolean(L, -1);
  lua_pop(L, 1);
  timeout_ms = opt_int_field(L, 1, "timeout_ms", 0, LONG_MAX / 2, 90000);
  connect_ms = opt_int_field(L, 1, "connect_timeout_ms", 0, LONG_MAX / 2, 10000);
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
  r->state = REQ_DONE;   /* until it starts */
  r->streamed = streamed;

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

  driver_link(d, r);
  if (driver_start(d, r) != 0) {
    request_release(r);
    return luaL_error(L, "airlock.core.request: could not start the transfer");
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
  const char *p = r->head.data, *end = p ? p + r->head.len : NULL;
  lua_newtable(L);
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

/* req:result() → nil while running; else {status=, reason=, headers=, body=, connects=} for
 * an HTTP answer, or {error=, code=, sent=, tls=, connects=} when there was none: `sent`
 * says the request may have reached the server, `tls` that the TLS setup failed (the same
 * on every try). */
static int req_result(lua_State *L)
{
  request *r = check_request(L, 1);
  if (r->state != REQ_DONE) {
    lua_pushnil(L);
    return 1;
  }
  lua_createtable(L, 0, 6);
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
  }
  lua_pushinteger(L, r->connects);
  lua_setfield(L, -2, "connects");
  return 1;
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
