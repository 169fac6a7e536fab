/* internal.h: what the parts of airlock.core share: limits, metatable names, the driver and
 * request types, and the prototypes of functions one part defines and another uses. The
 * parts are compiled as one unit (core.c includes them), so every function stays static and
 * only luaopen_airlock_core is exported. */
#ifndef AIRLOCK_INTERNAL_H
#define AIRLOCK_INTERNAL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compat.h"

#define CORE_VERSION        "0.1.0"
#define MAX_CONNECTS        32L      /* idle keep-alive connections kept for reuse */
#define MAX_TOTAL_CONNECTS  64L      /* open connections at once; more transfers wait in libcurl */
#define MAX_HEADER_BYTES    65536    /* response header block kept per request */
#define MAX_IDLE_EASY       8        /* finished easy handles kept for the next requests */
#define KEPT_BUFFER_BYTES   65536    /* core.perform keeps its buffers up to this size */
#define METHOD_BYTES        8        /* an HTTP method name and its NUL */
#define STREAM_HOLD         (1024 * 1024) /* a streamed body's bytes held before libcurl pauses */
#define DRIVER_MT  "airlock.core.driver"
#define REQUEST_MT "airlock.core.request"

/* ---------------------------------------------------------------- buffer (buf.c) */

typedef struct buffer {
  char *data;
  size_t len, cap;
} buffer;

static int buffer_append(buffer *b, const char *p, size_t n);
static void buffer_free(buffer *b);
static char *dup_mem(const char *s, size_t n);

/* ---------------------------------------------------------------- driver (driver.c) */

/* A socket libcurl asked us to watch. `want` is the current interest (CURL_POLL_IN, _OUT,
 * _INOUT, or CURL_POLL_REMOVE once libcurl is done with it). For a host loop reading
 * socket_events(): `changed` says the host has not seen the current interest yet, `fresh`
 * that the descriptor number was closed and reused since the host last looked (its old
 * watcher must go). */
typedef struct watched_socket {
  curl_socket_t fd;
  int want;
  int changed;
  int fresh;
} watched_socket;

struct request;

typedef struct driver {
  CURLM *multi;                /* NULL once the driver has been finalized */
  struct request *head;        /* requests in flight */
  size_t nlive;
  watched_socket *socks;
  size_t nsocks, capsocks;
  struct pollfd *pfds;         /* step()'s poll(2) set, kept between calls */
  size_t cappfds;
  double timer_at;             /* monotonic ms when libcurl wants a timeout action; < 0: none */
  int host_watch;              /* a host loop reads socket_events(): keep removals until read */
  int socket_failed;           /* a socket callback could not record its socket (no memory) */
  unsigned long progressed;    /* body bytes arrived for streamed requests (a count of times) */
  unsigned long connects, transfers;
  /* easy handles to reuse (a new one costs a large zeroed allocation and its cleanup per
   * request); `configured`: still set up for a plain GET, else reset */
  struct idle_easy {
    CURL *easy;
    int configured;
  } idle[MAX_IDLE_EASY];
  size_t nidle;
  struct request *blocking;    /* core.perform's request (allocated at its first call) */
  int blocking_busy;           /* core.perform is using it */
} driver;

static double now_ms(void);
static int driver_setup_multi(driver *d);
static void driver_link(driver *d, struct request *r);
static void driver_unlink(struct request *r);
static int driver_start(driver *d, struct request *r);
static CURL *driver_take_easy(driver *d, int *configured);
static void driver_give_easy(driver *d, CURL *easy, int configured);
static void driver_free_idle(driver *d);

/* ---------------------------------------------------------------- request (request.c) */

enum { REQ_RUNNING = 0, REQ_DONE };

typedef struct request {
  driver *drv;                 /* non-NULL while linked into the driver */
  struct request *prev, *next;
  CURL *easy;
  struct curl_slist *headers;
  char *body;
  size_t body_len;
  size_t body_pos;             /* bytes of the body handed to libcurl */
  int body_from_file;          /* the body is read from body_fd (body_len bytes), not body */
  int body_fd;
  int body_file_short;         /* the file ended before body_len bytes (it changed meanwhile) */
  int replay_refused;          /* libcurl wanted to resend a body that may have arrived */
  char method[METHOD_BYTES];
  int plain;                   /* a GET with default verification: its easy handle can stay set up */
  int completed;               /* libcurl finished the transfer (not cancelled or dropped) */
  int state;
  int in_multi;
  int aborted;
  buffer resp;                 /* the response body */
  buffer head;                 /* the header lines of the last response */
  int head_overflow;
  long status;
  char reason[64];
  CURLcode code;
  char errbuf[CURL_ERROR_SIZE];
  long connects;
  long request_bytes;          /* CURLINFO_REQUEST_SIZE: > 0 once the request went out */
  int streamed;                /* stream = true: req:take() hands out the body as it arrives */
  int paused;                  /* STREAM_HOLD bytes wait for req:take(): libcurl is paused */
  size_t max_body;             /* max_response_bytes: a larger kept body fails (0: no bound) */
  int body_overflow;           /* the body went past max_body: the transfer was failed */
  long early_status;           /* the status line's code, known before the body */
} request;

static void request_release(request *r);
static void request_finished(driver *d, request *r, CURLcode code);

/* ---------------------------------------------------------------- libcurl callbacks (callbacks.c) */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud);
static size_t on_header(char *buf, size_t size, size_t nitems, void *ud);
static size_t on_read(char *dst, size_t size, size_t nitems, void *ud);
static int on_seek(void *ud, curl_off_t offset, int origin);
static int on_socket(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp);
static int on_timer(CURLM *multi, long timeout_ms, void *userp);

#endif /* AIRLOCK_INTERNAL_H */
