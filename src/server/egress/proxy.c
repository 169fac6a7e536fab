/* The egress proxy's thread: accepting on the sandboxes' listeners, reading and judging each
 * request head, resolving, connecting (trying up to four addresses), relaying the tunnel both
 * ways with half-close, the deadlines, the caps, and one log event per attempt. */
#include "egress/proxy.h"

#include "egress/addr.h"
#include "egress/dns.h"
#include "egress/loop.h"
#include "egress/policy.h"
#include "egress/request.h"
#include "log/log.h"
#include "obs/metrics.h"
#include "text/utf8.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_TIMEOUT_S 10.0    /* to send a whole request head */
#define CONNECT_TIMEOUT_S 10.0 /* to connect upstream, all addresses together */
#define MAX_ADDRS 4            /* upstream addresses tried, and listed in `ips` */
#define CHUNK (64 * 1024)      /* one read of a tunnel */
#define ROUNDS 16              /* reads per direction and wake-up: fairness among tunnels */
#define ACCEPTS 64             /* accepts per listener and wake-up */
#define TICK_MS 250
#define DRAIN_MAX (64 * 1024)  /* unread input discarded before closing after an answer */
#define CLOSE_WAIT_S 5         /* a request thread waits this long at most for a listener's end */

typedef enum { C_HEAD, C_DNS, C_CONNECTING, C_TUNNEL, C_DEAD } conn_state;

typedef struct conn conn;

/* A list ordered by when each member entered it (or was last touched): the head is the oldest. */
typedef struct {
    conn *head, *tail;
} fifo;

/* Bytes read from one side that the other side has not taken yet (only when it was slow). */
typedef struct {
    char *buf;
    size_t len, off;
    bool eof;  /* the source side finished sending */
    bool shut; /* so the destination was told (shutdown SHUT_WR) */
} flow;

struct conn {
    egress_ev cev, uev; /* EV_CLIENT, EV_UPSTREAM */
    egress_proxy *p;
    egress_listener *l;
    egress_session *s;  /* the listener's session (a reference) */
    int cfd, ufd;
    conn_state st;
    bool orphan;        /* ended during a lookup: the DNS callback frees it */
    bool counted;       /* counts against the caps */
    bool authed;        /* the pass was valid: session and tenant go in the event */
    bool judged;        /* the head was parsed: host/port or target go in the event */
    char *head;
    size_t hlen;
    egress_request req;
    struct sockaddr_storage addr[MAX_ADDRS];
    socklen_t alen[MAX_ADDRS];
    int naddr, ai;
    char ips[MAX_ADDRS][INET6_ADDRSTRLEN];
    int nips;
    flow up, down;      /* up: sandbox -> internet; down: internet -> sandbox */
    uint64_t bytes_up, bytes_down;
    double t0, last;    /* monotonic: accepted, last activity */
    uint32_t cmask, umask;
    conn *lprev, *lnext; /* the listener's connections */
    fifo *in;            /* heads, connects or tunnels */
    conn *prev, *next;
    conn *grave;
};

struct egress_listener {
    egress_ev ev;        /* EV_LISTENER */
    int fd;
    egress_session *s;
    atomic_int refs;     /* the proxy's and the sandbox's */
    atomic_bool closing; /* the sandbox is gone */
    bool done;           /* closed by the proxy, its tunnels logged (under the proxy's mu) */
    bool registered;     /* in epoll */
    bool paused;         /* out of epoll for a tick after EMFILE */
    conn *conns;
    egress_listener *next;
};

struct egress_proxy {
    const egress_settings *cfg;
    pthread_t thread;
    int ep, efd;
    egress_ev control;
    egress_dns *dns;
    pthread_mutex_t mu;      /* guards incoming, stopping and the listeners' done */
    pthread_cond_t closed;   /* a listener is done */
    egress_listener *incoming;
    bool stopping;
    egress_listener *listeners; /* the proxy thread's own */
    fifo heads, connects, tunnels;
    int nconns;
    conn *graveyard;         /* freed after the epoll batch that ended them */
    egress_listener *dead;   /* the same for listeners */
    bool emfile_reported;
    char chunk[CHUNK];
};

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- lists ------------------------------------------------------------------------------- */

static void fifo_remove(conn *c)
{
    fifo *f = c->in;
    if (!f)
        return;
    if (c->prev)
        c->prev->next = c->next;
    else
        f->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        f->tail = c->prev;
    c->prev = c->next = NULL;
    c->in = NULL;
}

/* Puts c at the tail of f (moving it from wherever it was). */
static void fifo_push(fifo *f, conn *c)
{
    fifo_remove(c);
    c->in = f;
    c->prev = f->tail;
    if (f->tail)
        f->tail->next = c;
    else
        f->head = c;
    f->tail = c;
}

static void listener_unref(egress_listener *l)
{
    if (atomic_fetch_sub(&l->refs, 1) == 1) {
        egress_session_unref(l->s);
        free(l);
    }
}

/* ---- events ------------------------------------------------------------------------------ */

static void put_string(json_t *o, const char *key, const char *value)
{
    size_t n;
    char *clean = utf8_replace(value, strlen(value), &n);
    if (clean)
        json_object_set_new(o, key, json_stringn(clean, n));
    free(clean);
}

/* The contract's event (1.9): which keys appear depends on how far the attempt got. */
static json_t *event_of(const conn *c, bool allow, const char *reason, bool with_ips)
{
    json_t *e = json_object();
    if (!e)
        return NULL;
    json_object_set_new(e, "ts", json_real(floor(wall() * 1000.0 + 0.5) / 1000.0));
    json_object_set_new(e, "decision", json_string(allow ? "allow" : "deny"));
    metrics_egress(allow); /* every event is made here, once */
    json_object_set_new(e, "duration_ms", json_integer((json_int_t)((mono() - c->t0) * 1000.0)));
    if (c->authed) {
        json_object_set_new(e, "session", json_string(c->s->id));
        put_string(e, "tenant", c->s->tenant);
    }
    if (c->judged && c->req.connect) {
        put_string(e, "host", c->req.host);
        json_object_set_new(e, "port", json_integer(c->req.port));
    } else if (c->req.target[0]) {
        put_string(e, "target", c->req.target);
    }
    if (reason)
        json_object_set_new(e, "reason", json_string(reason));
    if (with_ips) {
        json_t *ips = json_array();
        for (int i = 0; i < c->nips; i++)
            json_array_append_new(ips, json_string(c->ips[i]));
        json_object_set_new(e, "ips", ips);
    }
    if (allow) {
        json_object_set_new(e, "ip", json_string(c->ips[c->ai]));
        json_object_set_new(e, "bytes_up", json_integer((json_int_t)c->bytes_up));
        json_object_set_new(e, "bytes_down", json_integer((json_int_t)c->bytes_down));
    }
    return e;
}

/* ---- epoll ------------------------------------------------------------------------------- */

static void watch(egress_proxy *p, int fd, egress_ev *ev, uint32_t *cur, uint32_t want)
{
    if (fd < 0 || *cur == want)
        return;
    struct epoll_event e;
    memset(&e, 0, sizeof e);
    e.events = want;
    e.data.ptr = ev;
    if (epoll_ctl(p->ep, EPOLL_CTL_MOD, fd, &e) == 0)
        *cur = want;
}

static int watch_new(egress_proxy *p, int fd, egress_ev *ev, uint32_t *cur, uint32_t want)
{
    struct epoll_event e;
    memset(&e, 0, sizeof e);
    e.events = want;
    e.data.ptr = ev;
    if (epoll_ctl(p->ep, EPOLL_CTL_ADD, fd, &e) != 0)
        return -1;
    *cur = want;
    return 0;
}

/* ---- ending connections ------------------------------------------------------------------ */

/* Discards what the sandbox sent and we did not read, so closing sends FIN, not a reset that
 * could destroy our answer before the sandbox reads it. */
static void drain_and_close(int fd)
{
    char sink[4096];
    size_t total = 0;
    while (total < DRAIN_MAX) {
        ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r <= 0)
            break;
        total += (size_t)r;
    }
    close(fd);
}

static void uncount(egress_proxy *p, conn *c)
{
    if (c->counted) {
        c->s->conns--;
        p->nconns--;
        c->counted = false;
    }
    if (c->l) {
        if (c->lprev)
            c->lprev->lnext = c->lnext;
        else
            c->l->conns = c->lnext;
        if (c->lnext)
            c->lnext->lprev = c->lprev;
        c->lprev = c->lnext = NULL;
        c->l = NULL;
    }
}

static void bury(egress_proxy *p, conn *c)
{
    c->grave = p->graveyard;
    p->graveyard = c;
}

/* Ends a connection whose attempt is logged. During a lookup c-ares still holds the
 * connection: it becomes an orphan that the lookup's callback buries. */
static void end_logged(egress_proxy *p, conn *c)
{
    fifo_remove(c);
    uncount(p, c);
    if (c->cfd >= 0)
        drain_and_close(c->cfd);
    if (c->ufd >= 0)
        close(c->ufd);
    c->cfd = c->ufd = -1;
    free(c->head);
    free(c->up.buf);
    free(c->down.buf);
    c->head = c->up.buf = c->down.buf = NULL;
    if (c->st == C_DNS) {
        c->orphan = true;
        c->st = C_DEAD;
        return;
    }
    c->st = C_DEAD;
    bury(p, c);
}

/* Logs the attempt and ends the connection. */
static void finish(egress_proxy *p, conn *c, bool allow, const char *reason, bool with_ips)
{
    if (c->st == C_DEAD)
        return;
    egress_log_add(c->s->log, event_of(c, allow, reason, with_ips));
    end_logged(p, c);
}

/* The event, then an error answer to the sandbox (best effort: the socket is non-blocking and
 * fresh, so a short answer fits), then the end. Logged first: a command that got the answer
 * may end, and its caller read the log, before this thread runs again. */
static void deny(egress_proxy *p, conn *c, int status, const char *text, const char *reason,
                 bool with_ips)
{
    if (c->st == C_DEAD)
        return;
    egress_log_add(c->s->log, event_of(c, false, reason, with_ips));
    if (c->cfd >= 0) {
        char buf[512];
        const char *extra = status == 407 ? "Proxy-Authenticate: Basic realm=\"airlock egress\"\r\n" : "";
        int n = snprintf(buf, sizeof buf,
                         "HTTP/1.1 %d %s\r\n%sContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n%s\n",
                         status, text, extra, strlen(reason) + 1, reason);
        if (n > 0 && (size_t)n < sizeof buf)
            (void)!send(c->cfd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        shutdown(c->cfd, SHUT_WR);
    }
    end_logged(p, c);
}

/* ---- the tunnel -------------------------------------------------------------------------- */

/* Moves what src has to dst; bytes counted as dst accepts them. -1 on a socket error. */
static int pump(egress_proxy *p, int src, int dst, flow *f, uint64_t *count)
{
    for (int round = 0; round < ROUNDS; round++) {
        if (f->len > 0) {
            ssize_t w = send(dst, f->buf + f->off, f->len, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0)
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
            f->off += (size_t)w;
            f->len -= (size_t)w;
            *count += (uint64_t)w;
            if (f->len > 0)
                return 0;
            free(f->buf);
            f->buf = NULL;
            f->off = 0;
        }
        if (f->eof)
            break;
        ssize_t r = recv(src, p->chunk, CHUNK, MSG_DONTWAIT);
        if (r == 0) {
            f->eof = true;
            break;
        }
        if (r < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        ssize_t w = send(dst, p->chunk, (size_t)r, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -1;
        if (w < 0)
            w = 0;
        *count += (uint64_t)w;
        if (w < r) { /* dst is full: keep the rest and stop reading src until it drains */
            f->buf = malloc((size_t)(r - w));
            if (!f->buf)
                return -1;
            memcpy(f->buf, p->chunk + w, (size_t)(r - w));
            f->len = (size_t)(r - w);
            return 0;
        }
    }
    if (f->eof && f->len == 0 && !f->shut) {
        shutdown(dst, SHUT_WR);
        f->shut = true;
    }
    return 0;
}

/* Level-triggered interest: read a side only while its data has somewhere to go (an end of
 * stream shows as readable; hang-ups and errors are always reported). */
static void tunnel_watch(egress_proxy *p, conn *c)
{
    uint32_t cm = 0, um = 0;
    if (!c->up.eof && c->up.len == 0)
        cm |= EPOLLIN;
    if (c->down.len > 0)
        cm |= EPOLLOUT;
    if (!c->down.eof && c->down.len == 0)
        um |= EPOLLIN;
    if (c->up.len > 0)
        um |= EPOLLOUT;
    watch(p, c->cfd, &c->cev, &c->cmask, cm);
    watch(p, c->ufd, &c->uev, &c->umask, um);
}

static void tunnel_io(egress_proxy *p, conn *c, uint32_t events)
{
    int a = pump(p, c->cfd, c->ufd, &c->up, &c->bytes_up);
    int b = pump(p, c->ufd, c->cfd, &c->down, &c->bytes_down);
    c->last = mono();
    fifo_push(&p->tunnels, c);
    /* EPOLLERR, or a hang-up of both directions: whatever could be moved was moved above */
    bool broken = (events & EPOLLERR) || ((events & EPOLLHUP) && (c->up.eof || c->down.eof));
    if (a < 0 || b < 0 || broken || (c->up.shut && c->down.shut)) {
        finish(p, c, true, NULL, false);
        return;
    }
    tunnel_watch(p, c);
}

static void tunnel_open(egress_proxy *p, conn *c)
{
    static const char ok[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
    c->st = C_TUNNEL;
    int one = 1;
    setsockopt(c->ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ssize_t w = send(c->cfd, ok, sizeof ok - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w != (ssize_t)(sizeof ok - 1)) { /* a fresh socket takes 39 bytes, unless it is gone */
        finish(p, c, true, NULL, false);
        return;
    }
    /* bytes the sandbox sent after its head (an eager TLS hello) go up first */
    size_t end = egress_head_end(c->head, c->hlen);
    if (end < c->hlen) {
        c->up.len = c->hlen - end;
        c->up.buf = malloc(c->up.len);
        if (!c->up.buf) {
            finish(p, c, true, NULL, false);
            return;
        }
        memcpy(c->up.buf, c->head + end, c->up.len);
    }
    free(c->head);
    c->head = NULL;
    c->hlen = 0;
    tunnel_io(p, c, 0);
}

static void try_connect(egress_proxy *p, conn *c)
{
    for (; c->ai < c->naddr; c->ai++) {
        const struct sockaddr_storage *a = &c->addr[c->ai];
        c->ufd = socket(a->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->ufd < 0)
            break;
        if ((connect(c->ufd, (const struct sockaddr *)a, c->alen[c->ai]) == 0 ||
             errno == EINPROGRESS) &&
            watch_new(p, c->ufd, &c->uev, &c->umask, EPOLLOUT) == 0) {
            c->st = C_CONNECTING;
            if (c->in != &p->connects) {
                c->last = mono();
                fifo_push(&p->connects, c);
            }
            return;
        }
        close(c->ufd);
        c->ufd = -1;
    }
    c->ai = 0;
    deny(p, c, 502, "Bad Gateway", "upstream connection failed", true);
}

static void upstream_ready(egress_proxy *p, conn *c)
{
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err == 0) {
        fifo_remove(c);
        tunnel_open(p, c);
        return;
    }
    epoll_ctl(p->ep, EPOLL_CTL_DEL, c->ufd, NULL);
    close(c->ufd);
    c->ufd = -1;
    c->umask = 0;
    c->ai++;
    try_connect(p, c);
}

/* Adds a resolved address (normalised); false when it is not global. */
static bool add_address(conn *c, struct sockaddr_storage *ss, socklen_t len)
{
    if (!egress_addr_normalize(ss, &len))
        return true; /* neither IPv4 nor IPv6: never connected to */
    bool global = egress_addr_is_global((const struct sockaddr *)ss);
    if (c->nips < MAX_ADDRS)
        egress_addr_format((const struct sockaddr *)ss, c->ips[c->nips++], INET6_ADDRSTRLEN);
    if (global && c->naddr < MAX_ADDRS) {
        c->addr[c->naddr] = *ss;
        c->alen[c->naddr] = len;
        c->naddr++;
    }
    return global;
}

/* ---- the request head -------------------------------------------------------------------- */

static bool host_syntax_ok(const char *h)
{
    size_t label = 0;
    for (const char *q = h; *q; q++) {
        char ch = *q;
        if (ch == '.') {
            if (label == 0)
                return false;
            label = 0;
            continue;
        }
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
        if (!ok || ++label > 63)
            return false;
    }
    return label > 0;
}

static bool pass_valid(const conn *c)
{
    return c->req.auth && !atomic_load(&c->s->revoked) && strcmp(c->req.user, c->s->user) == 0 &&
           (egress_pass_equal(c->req.pass, c->s->pass) ||
            (c->s->node_pass[0] && egress_pass_equal(c->req.pass, c->s->node_pass)));
}

static const egress_test_map *mapped(const egress_proxy *p, const char *host)
{
    for (size_t i = 0; i < p->cfg->nmap; i++)
        if (strcmp(p->cfg->map[i].host, host) == 0)
            return &p->cfg->map[i];
    return NULL;
}

static void on_lookup(void *arg, int status, struct ares_addrinfo *res);

/* The whole head is in: decide, in the contract's order. */
static void judge(egress_proxy *p, conn *c, size_t end)
{
    int bad = egress_request_parse(c->head, end, &c->req);
    if (bad) {
        deny(p, c, 400, "Bad Request", "proxy error: BadRequest", false);
        return;
    }
    c->judged = true;
    c->authed = pass_valid(c);
    if (!c->req.connect) {
        deny(p, c, 405, "Method Not Allowed", "only HTTPS (CONNECT) is supported", false);
        return;
    }
    if (!c->authed) {
        deny(p, c, 407, "Proxy Authentication Required", "missing, invalid or expired pass", false);
        return;
    }
    if (c->req.port != 443) {
        char reason[32];
        snprintf(reason, sizeof reason, "port %u not allowed", c->req.port);
        deny(p, c, 403, "Forbidden", reason, false);
        return;
    }
    if (!egress_host_allowed(c->req.host, c->s->rules)) {
        deny(p, c, 403, "Forbidden", "host not on allowlist", false);
        return;
    }
    /* quiet on the sandbox side until the tunnel is up, except for a hang-up */
    watch(p, c->cfd, &c->cev, &c->cmask, EPOLLRDHUP);
    const egress_test_map *m = mapped(p, c->req.host);
    if (m) { /* test only: no DNS and no address check for this name */
        c->addr[0] = m->addr;
        c->alen[0] = m->addr_len;
        egress_addr_format((const struct sockaddr *)&m->addr, c->ips[0], INET6_ADDRSTRLEN);
        c->naddr = c->nips = 1;
        try_connect(p, c);
        return;
    }
    struct sockaddr_storage lit;
    socklen_t lit_len;
    if (egress_addr_parse(c->req.host, 443, &lit, &lit_len)) { /* an IP the rules name */
        if (!add_address(c, &lit, lit_len))
            deny(p, c, 403, "Forbidden", "resolves to a private or reserved address", true);
        else
            try_connect(p, c);
        return;
    }
    if (!host_syntax_ok(c->req.host)) {
        deny(p, c, 502, "Bad Gateway", "DNS lookup failed", false);
        return;
    }
    c->st = C_DNS;
    fifo_remove(c); /* c-ares bounds a lookup's time itself */
    if (egress_dns_resolve(p->dns, c->req.host, on_lookup, c) != 0) {
        c->st = C_HEAD;
        deny(p, c, 503, "Service Unavailable", "proxy error: TooManyLookups", false);
    }
    /* c may be finished already: the callback can run inside egress_dns_resolve */
}

static void client_read(egress_proxy *p, conn *c)
{
    for (;;) {
        if (c->hlen >= EGRESS_HEAD_MAX) {
            deny(p, c, 431, "Request Header Fields Too Large", "proxy error: HeaderTooLarge", false);
            return;
        }
        ssize_t r = recv(c->cfd, c->head + c->hlen, EGRESS_HEAD_MAX - c->hlen, MSG_DONTWAIT);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            finish(p, c, false, "proxy error: ConnectionReset", false);
            return;
        }
        if (r == 0) {
            size_t end = egress_head_end(c->head, c->hlen);
            if (end) {
                judge(p, c, end);
                return;
            }
            deny(p, c, 400, "Bad Request", "proxy error: IncompleteRead", false);
            return;
        }
        size_t before = c->hlen;
        c->hlen += (size_t)r;
        /* look for the end from just before the new bytes (a CR LF CR LF may straddle) */
        size_t from = before > 3 ? before - 3 : 0;
        size_t end = egress_head_end(c->head + from, c->hlen - from);
        if (end) {
            judge(p, c, from + end);
            return;
        }
    }
}

/* A lookup finished (or the resolver is shutting down). Every answer must be global: one
 * private answer refuses the name (there is no second lookup that could rebind it). IPv4
 * addresses are tried first. */
static void on_lookup(void *arg, int status, struct ares_addrinfo *res)
{
    conn *c = arg;
    egress_proxy *p = c->p;
    if (c->orphan) { /* ended while resolving: only the burial is left */
        c->orphan = false;
        bury(p, c);
        return;
    }
    c->st = C_HEAD; /* not resolving any more: deny() and finish() end it at once */
    bool refused = false;
    for (int family = 0; family < 2 && res; family++) {
        for (struct ares_addrinfo_node *n = res->nodes; n; n = n->ai_next) {
            if ((family == 0) != (n->ai_family == AF_INET) || n->ai_addrlen > sizeof(struct sockaddr_storage))
                continue;
            struct sockaddr_storage ss;
            memset(&ss, 0, sizeof ss);
            memcpy(&ss, n->ai_addr, n->ai_addrlen);
            if (!add_address(c, &ss, (socklen_t)n->ai_addrlen))
                refused = true;
        }
    }
    if (status != ARES_SUCCESS || c->nips == 0) {
        deny(p, c, 502, "Bad Gateway", "DNS lookup failed", false);
        return;
    }
    if (refused) {
        deny(p, c, 403, "Forbidden", "resolves to a private or reserved address", true);
        return;
    }
    try_connect(p, c);
}

/* ---- accepting --------------------------------------------------------------------------- */

static void refuse_new(egress_listener *l, int fd, int status, const char *text,
                       const char *reason)
{
    conn tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.s = l->s;
    tmp.cfd = fd;
    tmp.ufd = -1;
    tmp.t0 = mono();
    egress_log_add(l->s->log, event_of(&tmp, false, reason, false)); /* before the answer, as deny() */
    char buf[256];
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s\n",
                     status, text, strlen(reason) + 1, reason);
    (void)!send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    drain_and_close(fd);
}

static void accept_some(egress_proxy *p, egress_listener *l)
{
    for (int i = 0; i < ACCEPTS && !atomic_load(&l->closing); i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* out of descriptors: stop accepting for a tick (the backlog waits) */
                if (!p->emfile_reported)
                    log_error("egress proxy: accept: %s; pausing", strerror(errno));
                p->emfile_reported = true;
                epoll_ctl(p->ep, EPOLL_CTL_DEL, l->fd, NULL);
                l->registered = false;
                l->paused = true;
            }
            return;
        }
        if (p->nconns >= p->cfg->max_tunnels_total) {
            refuse_new(l, fd, 503, "Service Unavailable", "proxy error: ProxyBusy");
            continue;
        }
        if (l->s->conns >= p->cfg->max_tunnels) {
            refuse_new(l, fd, 429, "Too Many Requests", "proxy error: TooManyTunnels");
            continue;
        }
        conn *c = calloc(1, sizeof *c);
        char *head = c ? malloc(EGRESS_HEAD_MAX) : NULL;
        if (!c || !head) {
            free(c);
            free(head);
            close(fd);
            continue;
        }
        c->p = p;
        c->cev.kind = EV_CLIENT;
        c->uev.kind = EV_UPSTREAM;
        c->head = head;
        c->cfd = fd;
        c->ufd = -1;
        c->s = l->s;
        c->l = l;
        c->t0 = c->last = mono();
        c->st = C_HEAD;
        c->lnext = l->conns;
        if (l->conns)
            l->conns->lprev = c;
        l->conns = c;
        c->counted = true;
        l->s->conns++;
        p->nconns++;
        fifo_push(&p->heads, c);
        if (watch_new(p, fd, &c->cev, &c->cmask, EPOLLIN | EPOLLRDHUP) != 0)
            finish(p, c, false, "proxy error: OSError", false);
    }
}

/* ---- control ----------------------------------------------------------------------------- */

/* Closes a listener and everything made through it. */
static void listener_close(egress_proxy *p, egress_listener *l)
{
    /* oldest first (the list is newest first), so the log stays in the order of the attempts */
    conn *c = l->conns;
    while (c && c->lnext)
        c = c->lnext;
    while (c) {
        conn *older_next = c->lprev;
        if (c->st == C_TUNNEL)
            finish(p, c, true, NULL, false);
        else
            finish(p, c, false, "proxy error: SandboxClosed", false);
        c = older_next;
    }
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    for (egress_listener **pp = &p->listeners; *pp; pp = &(*pp)->next) {
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    }
    l->next = p->dead;
    p->dead = l;
    pthread_mutex_lock(&p->mu);
    l->done = true;
    pthread_cond_broadcast(&p->closed);
    pthread_mutex_unlock(&p->mu);
}

static void control(egress_proxy *p)
{
    uint64_t v;
    (void)!read(p->efd, &v, sizeof v);
    pthread_mutex_lock(&p->mu);
    egress_listener *in = p->incoming;
    p->incoming = NULL;
    pthread_mutex_unlock(&p->mu);
    while (in) {
        egress_listener *l = in;
        in = l->next;
        l->next = p->listeners;
        p->listeners = l;
        struct epoll_event e;
        memset(&e, 0, sizeof e);
        e.events = EPOLLIN;
        e.data.ptr = &l->ev;
        l->registered = epoll_ctl(p->ep, EPOLL_CTL_ADD, l->fd, &e) == 0;
    }
    for (egress_listener *l = p->listeners, *nx; l; l = nx) {
        nx = l->next;
        bool revoked = atomic_load(&l->s->revoked);
        if (atomic_load(&l->closing) || revoked)
            listener_close(p, l);
        if (revoked) /* its last events are written: the session's file handle goes now */
            egress_log_close_file(l->s->log);
    }
}

/* ---- timers ------------------------------------------------------------------------------ */

static void tick(egress_proxy *p)
{
    double now = mono();
    egress_dns_tick(p->dns);
    while (p->heads.head && now - p->heads.head->t0 >= HEAD_TIMEOUT_S)
        deny(p, p->heads.head, 408, "Request Timeout", "proxy error: Timeout", false);
    while (p->connects.head && now - p->connects.head->last >= CONNECT_TIMEOUT_S) {
        conn *c = p->connects.head;
        c->ai = 0;
        deny(p, c, 502, "Bad Gateway", "upstream connection failed", true);
    }
    while (p->tunnels.head && now - p->tunnels.head->last >= p->cfg->idle_seconds)
        finish(p, p->tunnels.head, true, NULL, false);
    for (egress_listener *l = p->listeners; l; l = l->next) {
        if (!l->paused)
            continue;
        struct epoll_event e;
        memset(&e, 0, sizeof e);
        e.events = EPOLLIN;
        e.data.ptr = &l->ev;
        l->registered = epoll_ctl(p->ep, EPOLL_CTL_ADD, l->fd, &e) == 0;
        l->paused = !l->registered;
    }
}

/* ---- the loop ---------------------------------------------------------------------------- */

static void dispatch(egress_proxy *p, egress_ev *ev, uint32_t events)
{
    if (ev->kind == EV_CONTROL) {
        control(p);
    } else if (ev->kind == EV_DNS) {
        egress_dns_on_event(p->dns, ev->fd, events);
    } else if (ev->kind == EV_LISTENER) {
        egress_listener *l = (egress_listener *)ev;
        if (l->fd >= 0)
            accept_some(p, l);
    } else {
        bool client = ev->kind == EV_CLIENT;
        conn *c = client ? (conn *)((char *)ev - offsetof(conn, cev))
                         : (conn *)((char *)ev - offsetof(conn, uev));
        switch (c->st) {
        case C_HEAD:
            client_read(p, c);
            break;
        case C_DNS:
        case C_CONNECTING:
            if (client && (events & (EPOLLHUP | EPOLLERR)))
                finish(p, c, false, "proxy error: ConnectionClosed", c->st == C_CONNECTING);
            else if (client) /* a half-close (EPOLLRDHUP): the client still reads our answer,
                              * which comes within the lookup's and the connect's bounds */
                watch(p, c->cfd, &c->cev, &c->cmask, 0);
            else
                upstream_ready(p, c);
            break;
        case C_TUNNEL:
            tunnel_io(p, c, events);
            break;
        case C_DEAD:
            break;
        }
    }
}

static void free_graves(egress_proxy *p)
{
    while (p->graveyard) {
        conn *c = p->graveyard;
        p->graveyard = c->grave;
        free(c);
    }
    while (p->dead) {
        egress_listener *l = p->dead;
        p->dead = l->next;
        listener_unref(l);
    }
}

static void *proxy_main(void *arg)
{
    egress_proxy *p = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    struct epoll_event evs[256];
    double last_tick = mono();
    for (;;) {
        pthread_mutex_lock(&p->mu);
        bool stop = p->stopping;
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        int n = epoll_wait(p->ep, evs, 256, TICK_MS);
        for (int i = 0; i < n; i++)
            dispatch(p, evs[i].data.ptr, evs[i].events);
        if (mono() - last_tick >= TICK_MS / 1000.0) {
            tick(p);
            last_tick = mono();
        }
        free_graves(p);
    }
    while (p->listeners)
        listener_close(p, p->listeners);
    egress_dns_free(p->dns); /* orphaned lookups end now, burying their connections */
    p->dns = NULL;
    free_graves(p);
    return NULL;
}

/* ---- the public side (request threads) --------------------------------------------------- */

static void wake(egress_proxy *p)
{
    uint64_t one = 1;
    (void)!write(p->efd, &one, sizeof one);
}

egress_proxy *egress_proxy_start(const egress_settings *s, char *errbuf, size_t errlen)
{
    egress_proxy *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    p->cfg = s;
    p->control.kind = EV_CONTROL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->closed, NULL);
    p->ep = epoll_create1(EPOLL_CLOEXEC);
    p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event e;
    memset(&e, 0, sizeof e);
    e.events = EPOLLIN;
    e.data.ptr = &p->control;
    if (p->ep < 0 || p->efd < 0 || epoll_ctl(p->ep, EPOLL_CTL_ADD, p->efd, &e) != 0) {
        snprintf(errbuf, errlen, "egress proxy: %s", strerror(errno));
        goto fail;
    }
    p->dns = egress_dns_new(p->ep, s->dns, errbuf, errlen);
    if (!p->dns)
        goto fail;
    int rc = pthread_create(&p->thread, NULL, proxy_main, p);
    if (rc != 0) {
        snprintf(errbuf, errlen, "cannot start the egress proxy thread: %s", strerror(rc));
        goto fail;
    }
    return p;
fail:
    egress_dns_free(p->dns);
    if (p->ep >= 0)
        close(p->ep);
    if (p->efd >= 0)
        close(p->efd);
    pthread_cond_destroy(&p->closed);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
}

void egress_proxy_stop(egress_proxy *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_mutex_unlock(&p->mu);
    wake(p);
    pthread_join(p->thread, NULL);
    /* listeners handed over after the thread's last look */
    while (p->incoming) {
        egress_listener *l = p->incoming;
        p->incoming = l->next;
        close(l->fd);
        listener_unref(l);
    }
    close(p->ep);
    close(p->efd);
    pthread_cond_destroy(&p->closed);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

egress_listener *egress_proxy_add_listener(egress_proxy *p, int fd, egress_session *s)
{
    egress_listener *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        return NULL;
    }
    l->ev.kind = EV_LISTENER;
    l->fd = fd;
    l->s = egress_session_ref(s);
    atomic_init(&l->refs, 2);
    atomic_init(&l->closing, false);
    pthread_mutex_lock(&p->mu);
    l->next = p->incoming;
    p->incoming = l;
    pthread_mutex_unlock(&p->mu);
    wake(p);
    return l;
}

void egress_proxy_close_listener(egress_proxy *p, egress_listener *l)
{
    if (!l)
        return;
    atomic_store(&l->closing, true);
    wake(p);
    /* so that every attempt of the run is in the log when its exec answers; the loop never
     * blocks, so this is one turn of it (bounded anyway) */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += CLOSE_WAIT_S;
    pthread_mutex_lock(&p->mu);
    while (!l->done && !p->stopping && pthread_cond_timedwait(&p->closed, &p->mu, &until) == 0) {
    }
    pthread_mutex_unlock(&p->mu);
    listener_unref(l);
}

void egress_proxy_wake(egress_proxy *p)
{
    wake(p);
}
