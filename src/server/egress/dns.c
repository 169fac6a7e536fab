/* c-ares for the egress proxy: a channel whose sockets the proxy's epoll watches. */
#include "egress/dns.h"

#include "egress/loop.h"
#include "log/log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define LOOKUP_TIMEOUT_MS 2000
#define LOOKUP_TRIES 2
#define MAX_SOCKETS 32 /* c-ares opens one UDP socket per server (TCP on truncation) */

typedef struct {
    egress_ev ev;
    bool used;
} dns_socket;

struct egress_dns {
    ares_channel ch;
    int epfd;
    size_t pending;
    dns_socket socks[MAX_SOCKETS];
};

typedef struct {
    egress_dns *d;
    egress_dns_cb cb;
    void *arg;
} lookup;

static dns_socket *slot_of(egress_dns *d, int fd, bool create)
{
    dns_socket *free_slot = NULL;
    for (size_t i = 0; i < MAX_SOCKETS; i++) {
        if (d->socks[i].used && d->socks[i].ev.fd == fd)
            return &d->socks[i];
        if (!d->socks[i].used && !free_slot)
            free_slot = &d->socks[i];
    }
    if (!create || !free_slot)
        return NULL;
    free_slot->used = true;
    free_slot->ev.kind = EV_DNS;
    free_slot->ev.fd = fd;
    return free_slot;
}

/* c-ares says which of its sockets to watch for what. */
static void sock_state(void *data, ares_socket_t fd, int readable, int writable)
{
    egress_dns *d = data;
    dns_socket *s = slot_of(d, fd, readable || writable);
    if (!readable && !writable) {
        if (s) {
            epoll_ctl(d->epfd, EPOLL_CTL_DEL, fd, NULL);
            s->used = false;
        }
        return;
    }
    if (!s) { /* more sockets than expected: nothing watches it, its lookups time out */
        log_warn("egress DNS: too many resolver sockets");
        return;
    }
    struct epoll_event e;
    memset(&e, 0, sizeof e);
    e.events = (readable ? EPOLLIN : 0) | (writable ? EPOLLOUT : 0);
    e.data.ptr = &s->ev;
    if (epoll_ctl(d->epfd, EPOLL_CTL_MOD, fd, &e) != 0)
        epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &e);
}

static int init_channel(ares_channel *ch, const char *servers, ares_sock_state_cb cb, void *data,
                        char *errbuf, size_t errlen)
{
    struct ares_options o;
    memset(&o, 0, sizeof o);
    o.sock_state_cb = cb;
    o.sock_state_cb_data = data;
    o.timeout = LOOKUP_TIMEOUT_MS;
    o.tries = LOOKUP_TRIES;
    o.flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES;
    o.lookups = (char *)"b"; /* DNS only: the host's /etc/hosts names are not the internet's */
    int mask = ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_FLAGS |
               ARES_OPT_LOOKUPS;
    int rc = ares_init_options(ch, &o, mask);
    if (rc != ARES_SUCCESS) {
        snprintf(errbuf, errlen, "cannot start the DNS resolver: %s", ares_strerror(rc));
        return -1;
    }
    if (servers && (rc = ares_set_servers_ports_csv(*ch, servers)) != ARES_SUCCESS) {
        snprintf(errbuf, errlen, "SANDBOX_EGRESS_DNS: expected ip[:port][,ip[:port]...], got '%s' (%s)",
                 servers, ares_strerror(rc));
        ares_destroy(*ch);
        return -1;
    }
    return 0;
}

static int once_initialised(char *errbuf, size_t errlen)
{
    static int rc = -1;
    static bool done;
    /* called from the main thread at start-up, before any proxy thread exists */
    if (!done) {
        rc = ares_library_init(ARES_LIB_INIT_ALL);
        done = true;
    }
    if (rc != ARES_SUCCESS) {
        snprintf(errbuf, errlen, "cannot initialise c-ares: %s", ares_strerror(rc));
        return -1;
    }
    return 0;
}

egress_dns *egress_dns_new(int epfd, const char *servers, char *errbuf, size_t errlen)
{
    if (once_initialised(errbuf, errlen) != 0)
        return NULL;
    egress_dns *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    d->epfd = epfd;
    if (init_channel(&d->ch, servers, sock_state, d, errbuf, errlen) != 0) {
        free(d);
        return NULL;
    }
    return d;
}

static void done(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
    (void)timeouts;
    lookup *l = arg;
    l->d->pending--;
    l->cb(l->arg, status, status == ARES_SUCCESS ? res : NULL);
    if (res)
        ares_freeaddrinfo(res);
    free(l);
}

int egress_dns_resolve(egress_dns *d, const char *host, egress_dns_cb cb, void *arg)
{
    if (d->pending >= EGRESS_DNS_MAX_PENDING)
        return -1;
    lookup *l = malloc(sizeof *l);
    if (!l)
        return -1;
    l->d = d;
    l->cb = cb;
    l->arg = arg;
    d->pending++;
    struct ares_addrinfo_hints h;
    memset(&h, 0, sizeof h);
    h.ai_family = AF_UNSPEC;
    h.ai_socktype = SOCK_STREAM;
    h.ai_flags = ARES_AI_NOSORT; /* sorting would probe each address with a UDP connect */
    ares_getaddrinfo(d->ch, host, "443", &h, done, l);
    return 0;
}

void egress_dns_on_event(egress_dns *d, int fd, uint32_t events)
{
    ares_socket_t r = (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) ? fd : ARES_SOCKET_BAD;
    ares_socket_t w = (events & EPOLLOUT) ? fd : ARES_SOCKET_BAD;
    ares_process_fd(d->ch, r, w);
}

void egress_dns_tick(egress_dns *d)
{
    ares_process_fd(d->ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
}

void egress_dns_free(egress_dns *d)
{
    if (!d)
        return;
    ares_destroy(d->ch);
    free(d);
}
