/* Slow HTTP clients for airlockd's hardening specs and benchmarks: holds many connections
 * open from 127.0.0.<first>.. (spread over several loopback addresses), each sending its
 * request as slowly as the mode says, on one epoll loop so the attacker itself costs almost
 * no CPU. Reports what it holds and how often the server cut it in a status file.
 *
 *   slow_clients --port P --count N [--mode headers|body|idle|read] [--first 2] [--addrs 20]
 *                [--interval S] [--duration S] [--reconnect] [--status FILE]
 *                [--path /healthz] [--key K] [--body-bytes N] [--request-body TEXT]
 *
 * headers: a request line, then one header line every interval (slowloris).
 * body:    complete headers with a Content-Length of --body-bytes, then one body byte per
 *          interval.
 * idle:    connects and sends nothing.
 * read:    sends a whole request (--request-body as its JSON body, if any) with a 4 KiB
 *          receive buffer and never reads the response (a slow reader).
 * A connection the server closes counts as cut; with --reconnect it is opened again.
 * Status (rewritten every 0.5 s and at the end): "open=N connects=N cut=N failed=N
 * truncated=N", truncated being read-mode connections cut before the whole response came. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef enum { MODE_HEADERS, MODE_BODY, MODE_IDLE, MODE_READ } client_mode;

typedef struct {
    int fd;
    bool connected, started;
    double next_send;
    unsigned addr;
} conn;

static struct {
    unsigned port, count, first, addrs;
    client_mode mode;
    double interval, duration;
    bool reconnect;
    const char *status, *path, *key, *request_body;
    unsigned long body_bytes;
} opt = {0, 0, 2, 20, MODE_HEADERS, 5, 60, false, NULL, "/healthz", "x", NULL, 1000000};

static long n_open, n_connects, n_cut, n_failed, n_truncated;
static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void write_status(void)
{
    if (!opt.status)
        return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", opt.status);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fprintf(f, "open=%ld connects=%ld cut=%ld failed=%ld truncated=%ld\n", n_open, n_connects, n_cut, n_failed,
            n_truncated);
    if (fclose(f) == 0)
        rename(tmp, opt.status);
}

static int epfd;

static void open_conn(conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    c->connected = c->started = false;
    if (c->fd < 0) {
        n_failed++;
        return;
    }
    if (opt.mode == MODE_READ) {
        int small = 4096;
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    struct sockaddr_in local = {.sin_family = AF_INET};
    local.sin_addr.s_addr = htonl(0x7f000000u | (opt.first + c->addr % opt.addrs));
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port)};
    to.sin_addr.s_addr = htonl(0x7f000001u);
    if (bind(c->fd, (struct sockaddr *)&local, sizeof local) != 0 ||
        (connect(c->fd, (struct sockaddr *)&to, sizeof to) != 0 && errno != EINPROGRESS)) {
        close(c->fd);
        c->fd = -1;
        n_failed++;
        return;
    }
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLRDHUP | EPOLLIN, .data.ptr = c};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        close(c->fd);
        c->fd = -1;
        n_failed++;
        return;
    }
    n_open++;
}

static bool send_all(conn *c, const char *s, size_t n)
{
    ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    return w == (ssize_t)n || (w < 0 && errno == EAGAIN);
}

/* What a connection sends once connected. */
static bool send_start(conn *c)
{
    char req[8192];
    int n = 0;
    switch (opt.mode) {
    case MODE_IDLE:
        return true;
    case MODE_HEADERS:
        n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n", opt.path);
        break;
    case MODE_BODY:
        n = snprintf(req, sizeof req,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %lu\r\n\r\n",
                     opt.path, opt.key, opt.body_bytes);
        break;
    case MODE_READ:
        n = opt.request_body
                ? snprintf(req, sizeof req,
                           "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: %s\r\nContent-Type: application/json\r\n"
                           "Content-Length: %zu\r\n\r\n%s",
                           opt.path, opt.key, strlen(opt.request_body), opt.request_body)
                : snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: %s\r\n\r\n", opt.path,
                           opt.key);
        break;
    }
    return n > 0 && (size_t)n < sizeof req && send_all(c, req, (size_t)n);
}

/* The server closed c: count it; a slow reader also checks whether its response was whole. */
static void on_cut(conn *c)
{
    if (opt.mode == MODE_READ) {
        /* read what arrived: a response cut short has fewer bytes than its Content-Length */
        static char buf[1 << 16];
        size_t got = 0, header_end = 0;
        long clen = -1;
        char head[4096];
        size_t hl = 0;
        for (;;) {
            ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r <= 0)
                break;
            if (hl < sizeof head - 1) {
                size_t k = (size_t)r < sizeof head - 1 - hl ? (size_t)r : sizeof head - 1 - hl;
                memcpy(head + hl, buf, k);
                hl += k;
                head[hl] = '\0';
            }
            got += (size_t)r;
        }
        char *e = hl ? strstr(head, "\r\n\r\n") : NULL;
        char *cl = hl ? strcasestr(head, "content-length:") : NULL;
        if (e)
            header_end = (size_t)(e - head) + 4;
        if (cl)
            clen = strtol(cl + 15, NULL, 10);
        if (!e || clen < 0 || got < header_end + (size_t)clen)
            n_truncated++;
    }
    epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    n_open--;
    if (c->connected)
        n_cut++;
    else
        n_failed++; /* refused or reset before it connected */
    if (opt.reconnect && !stop)
        open_conn(c);
}

static void usage(void)
{
    fputs("usage: slow_clients --port P --count N [--mode headers|body|idle|read] [--first 2] [--addrs 20]\n"
          "       [--interval S] [--duration S] [--reconnect] [--status FILE] [--path P] [--key K]\n"
          "       [--body-bytes N] [--request-body TEXT]\n",
          stderr);
    exit(2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--reconnect") == 0) {
            opt.reconnect = true;
            continue;
        }
        if (!v)
            usage();
        i++;
        if (strcmp(a, "--port") == 0)
            opt.port = (unsigned)atoi(v);
        else if (strcmp(a, "--count") == 0)
            opt.count = (unsigned)atoi(v);
        else if (strcmp(a, "--first") == 0)
            opt.first = (unsigned)atoi(v);
        else if (strcmp(a, "--addrs") == 0)
            opt.addrs = (unsigned)atoi(v);
        else if (strcmp(a, "--interval") == 0)
            opt.interval = atof(v);
        else if (strcmp(a, "--duration") == 0)
            opt.duration = atof(v);
        else if (strcmp(a, "--status") == 0)
            opt.status = v;
        else if (strcmp(a, "--path") == 0)
            opt.path = v;
        else if (strcmp(a, "--key") == 0)
            opt.key = v;
        else if (strcmp(a, "--body-bytes") == 0)
            opt.body_bytes = strtoul(v, NULL, 10);
        else if (strcmp(a, "--request-body") == 0)
            opt.request_body = v;
        else if (strcmp(a, "--mode") == 0)
            opt.mode = strcmp(v, "body") == 0 ? MODE_BODY : strcmp(v, "idle") == 0 ? MODE_IDLE
                       : strcmp(v, "read") == 0 ? MODE_READ : MODE_HEADERS;
        else
            usage();
    }
    if (!opt.port || !opt.count || !opt.addrs || opt.first < 2 || opt.first + opt.addrs > 255)
        usage();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    signal(SIGPIPE, SIG_IGN);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    conn *conns = calloc(opt.count, sizeof *conns);
    if (epfd < 0 || !conns) {
        perror("slow_clients");
        return 1;
    }
    for (unsigned i = 0; i < opt.count; i++) {
        conns[i].addr = i;
        open_conn(&conns[i]);
    }
    double t0 = now_s(), next_status = 0;
    struct epoll_event evs[256];
    while (!stop && now_s() - t0 < opt.duration) {
        int n = epoll_wait(epfd, evs, 256, 50);
        for (int i = 0; i < n; i++) {
            conn *c = evs[i].data.ptr;
            if (c->fd < 0)
                continue;
            if (!c->connected && (evs[i].events & EPOLLOUT) && !(evs[i].events & EPOLLERR)) {
                /* connected, and maybe cut already in the same batch of events */
                c->connected = true;
                n_connects++;
            }
            if (evs[i].events & (EPOLLERR | EPOLLHUP | EPOLLRDHUP)) {
                on_cut(c);
                continue;
            }
            if (evs[i].events & EPOLLIN && opt.mode != MODE_READ) {
                char buf[4096];
                ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
                if (r == 0 || (r < 0 && errno != EAGAIN)) {
                    on_cut(c);
                    continue;
                }
            }
            if (c->connected && !c->started) {
                c->started = true;
                struct epoll_event ev = {.events = EPOLLRDHUP | (opt.mode == MODE_READ ? 0u : EPOLLIN), .data.ptr = c};
                epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
                c->next_send = now_s() + opt.interval;
                if (!send_start(c))
                    on_cut(c);
            }
        }
        double t = now_s();
        if (opt.mode == MODE_HEADERS || opt.mode == MODE_BODY) {
            for (unsigned i = 0; i < opt.count; i++) {
                conn *c = &conns[i];
                if (c->fd < 0 || !c->connected || c->next_send > t)
                    continue;
                c->next_send = t + opt.interval;
                const char *line = opt.mode == MODE_HEADERS ? "X-Slow: a\r\n" : " ";
                if (!send_all(c, line, strlen(line)))
                    on_cut(c);
            }
        }
        if (t >= next_status) {
            write_status();
            next_status = t + 0.5;
        }
    }
    write_status();
    printf("open=%ld connects=%ld cut=%ld failed=%ld truncated=%ld\n", n_open, n_connects, n_cut, n_failed,
           n_truncated);
    return 0;
}
