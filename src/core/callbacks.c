/* callbacks.c: the functions libcurl calls. None of them calls Lua or raises: they copy bytes
 * into buffers the request owns, hand the request body to libcurl, and record which sockets
 * and which timeout libcurl wants watched. A failure is reported to libcurl by its return
 * value and surfaces later as the request's error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ---------------------------------------------------------------- the response */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
  request *r = (request *)ud;
  size_t n;
  if (nmemb != 0 && size > SIZE_MAX / nmemb) return 0;
  n = size * nmemb;
  if (r->streamed && r->resp.len >= STREAM_HOLD) {
    r->paused = 1;   /* the Lua side is behind: libcurl keeps these bytes until req:take() */
    return CURL_WRITEFUNC_PAUSE;
  }
  /* the bound applies to the body kept whole; a streamed one is taken as it arrives */
  if (!r->streamed && r->max_body && n > r->max_body - r->resp.len) {
    r->body_overflow = 1;
    return 0;   /* → CURLE_WRITE_ERROR: the request fails with the bound's message */
  }
  if (buffer_append(&r->resp, ptr, n) != 0) return 0;   /* → CURLE_WRITE_ERROR */
  if (r->streamed && r->drv) r->drv->progressed++;
  return n;
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

/* Keeps the header lines of the last response (a 100 Continue's are dropped when the real
 * status line arrives) and its reason phrase. More than MAX_HEADER_BYTES fails the transfer. */
static size_t on_header(char *buf, size_t size, size_t nitems, void *ud)
{
  request *r = (request *)ud;
  size_t n;
  if (nitems != 0 && size > SIZE_MAX / nitems) return 0;
  n = size * nitems;
  if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
    /* a new response: "HTTP/1.1 429 Too Many Requests" */
    size_t i = 0, spaces = 0;
    r->head.len = 0;
    while (i < n && buf[i] != ' ') i++;
    r->early_status = i + 4 <= n ? strtol(buf + i + 1, NULL, 10) : 0;
    i = 0;
    while (i < n && spaces < 2) { if (buf[i] == ' ') spaces++; i++; }
    if (spaces == 2) copy_trimmed(r->reason, sizeof r->reason, buf + i, n - i);
    else r->reason[0] = '\0';
    return n;
  }
  if (r->head.len + n > MAX_HEADER_BYTES || buffer_append(&r->head, buf, n) != 0) {
    r->head_overflow = 1;
    return 0;   /* → CURLE_WRITE_ERROR */
  }
  return n;
}

/* ---------------------------------------------------------------- the request body */

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
  if (room && r->body_from_file) {
    ssize_t got;
    do
      got = read(r->body_fd, dst, room);
    while (got < 0 && errno == EINTR);
    if (got <= 0) {   /* an error, or the file got shorter than its size when it was opened */
      r->body_file_short = 1;
      return CURL_READFUNC_ABORT;
    }
    room = (size_t)got;
  } else if (room) {
    memcpy(dst, r->body + r->body_pos, room);
  }
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

/* ---------------------------------------------------------------- sockets and the timer */

static watched_socket *find_socket(driver *d, curl_socket_t fd)
{
  size_t i;
  for (i = 0; i < d->nsocks; i++)
    if (d->socks[i].fd == fd) return &d->socks[i];
  return NULL;
}

/* CURLMOPT_SOCKETFUNCTION: libcurl wants fd watched for `what` (or no longer). The entry
 * stays until a host loop has seen its removal; without a host loop it goes at once. One
 * entry per descriptor number, so the table is bounded by the open descriptors. */
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
  driver *d = (driver *)userp;
  watched_socket *w = find_socket(d, fd);
  (void)easy;
  (void)socketp;
  if (what == CURL_POLL_REMOVE) {
    if (w == NULL) return 0;
    if (!d->host_watch) {
      *w = d->socks[--d->nsocks];
      return 0;
    }
    w->want = CURL_POLL_REMOVE;
    w->changed = 1;
    return 0;
  }
  if (w == NULL) {
    if (d->nsocks == d->capsocks) {
      size_t cap = d->capsocks ? d->capsocks * 2 : 16;
      watched_socket *ns = NULL;
      if (cap <= SIZE_MAX / sizeof *ns) ns = realloc(d->socks, cap * sizeof *ns);
      if (ns == NULL) {
        d->socket_failed = 1;
        return -1;
      }
      d->socks = ns;
      d->capsocks = cap;
    }
    w = &d->socks[d->nsocks++];
    w->fd = fd;
    w->fresh = 0;
  } else if (w->want == CURL_POLL_REMOVE) {
    /* closed and reused before the host loop saw the removal: its old watcher must go */
    w->fresh = 1;
  }
  w->want = what;
  w->changed = 1;
  return 0;
}

/* CURLMOPT_TIMERFUNCTION: when libcurl wants a timeout action (-1: no timer). */
static int on_timer(CURLM *multi, long timeout_ms, void *userp)
{
  driver *d = (driver *)userp;
  (void)multi;
  d->timer_at = timeout_ms < 0 ? -1.0 : now_ms() + (double)timeout_ms;
  return 0;
}
