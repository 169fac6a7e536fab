/* A client of HAProxy's runtime API (router/haproxy_api.h). */
#include "router/haproxy_api.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define API_TIMEOUT_MS 10000

static long long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static int api_fail(int fd, char *err, size_t errlen, const char *what)
{
    snprintf(err, errlen, "HAProxy's stats socket: %s: %s", what, errno ? strerror(errno) : "timed out");
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Waits until fd is ready for events, before the deadline. */
static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - mono_ms();
        if (left <= 0) {
            errno = 0;
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, (int)left);
        if (n > 0)
            return 0;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

int haproxy_api(const char *socket_path, const char *commands, char **answer, char *err, size_t errlen)
{
    if (answer)
        *answer = NULL;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof sa.sun_path) {
        snprintf(err, errlen, "HAProxy's stats socket path is too long");
        return -1;
    }
    memcpy(sa.sun_path, socket_path, strlen(socket_path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return api_fail(fd, err, errlen, "socket");
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 && errno != EINPROGRESS)
        return api_fail(fd, err, errlen, "connect");
    long long deadline = mono_ms() + API_TIMEOUT_MS;
    size_t len = strlen(commands), sent = 0;
    while (sent <= len) { /* the command line and its newline */
        if (wait_fd(fd, POLLOUT, deadline) != 0)
            return api_fail(fd, err, errlen, "write");
        ssize_t w = sent < len ? send(fd, commands + sent, len - sent, MSG_NOSIGNAL) : send(fd, "\n", 1, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return api_fail(fd, err, errlen, "write");
        if (w > 0)
            sent += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        return api_fail(fd, err, errlen, "out of memory");
    for (;;) {
        if (n + 1 >= cap) {
            char *bigger = cap < HAPROXY_API_MAX_ANSWER ? realloc(buf, cap * 2) : NULL;
            if (!bigger) {
                free(buf);
                errno = EFBIG;
                return api_fail(fd, err, errlen, "answer too large");
            }
            buf = bigger;
            cap *= 2;
        }
        if (wait_fd(fd, POLLIN, deadline) != 0) {
            free(buf);
            return api_fail(fd, err, errlen, "read");
        }
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r == 0)
            break;
        if (r < 0 && errno != EAGAIN && errno != EINTR) {
            free(buf);
            return api_fail(fd, err, errlen, "read");
        }
        if (r > 0)
            n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    if (answer)
        *answer = buf;
    else
        free(buf);
    return 0;
}
