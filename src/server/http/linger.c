/* Lingering close (http/linger.h). Closing a socket whose receive queue still holds bytes makes
 * the kernel send a reset, and a client still sending its body may then lose the answer it was
 * sent (413, 408, 503 mid-upload). Bounded: LINGER_MAX sockets at once (past that, the plain
 * close), each for at most LINGER_MS and LINGER_BYTES, on a small detached thread each. */
#include "http/linger.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LINGER_MAX 32
#define LINGER_MS 2000
#define LINGER_BYTES (8u << 20)

static atomic_int lingering;

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads and drops until the client's end, an error, the time or the byte bound; then closes. */
static void *drain(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[16384];
    size_t total = 0;
    long long end = now_ms() + LINGER_MS;
    for (;;) {
        long long left = end - now_ms();
        if (left <= 0 || total > LINGER_BYTES)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        total += (size_t)k;
    }
    close(fd);
    atomic_fetch_sub(&lingering, 1);
    return NULL;
}

void http_linger(int fd)
{
    if (fd < 0)
        return;
    if (atomic_fetch_add(&lingering, 1) >= LINGER_MAX) {
        atomic_fetch_sub(&lingering, 1);
        return;
    }
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) {
        atomic_fetch_sub(&lingering, 1);
        return;
    }
    (void)shutdown(d, SHUT_WR); /* the answer is out: the client sees its end */
    pthread_attr_t at;
    pthread_t t;
    bool ok = false;
    if (pthread_attr_init(&at) == 0) {
        ok = pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED) == 0 &&
             pthread_create(&t, &at, drain, (void *)(intptr_t)d) == 0;
        pthread_attr_destroy(&at);
    }
    if (!ok) {
        close(d);
        atomic_fetch_sub(&lingering, 1);
    }
}
