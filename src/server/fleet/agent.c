/* The node's load report for HAProxy's agent-check (SANDBOX_FLEET_AGENT_PORT): a TCP listener
 * that answers each connection with one line (the reply function it was given: nodes.c's
 * fleet_agent_reply) and closes it. HAProxy sets the node's weight in the `create` backend
 * from it, so new sessions go where there is room. */
#include "fleet/agent.h"
#include "log/log.h"

#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

struct fleet_agent {
    fleet_agent_reply_fn reply;
    void *ctx;
    int fd;
    int wake[2]; /* written once to stop the thread */
    pthread_t thread;
};

static void answer(struct fleet_agent *ag, int c)
{
    /* a reader that never reads must not hold the thread */
    struct timeval tv = {.tv_sec = 1};
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    char line[64];
    ag->reply(ag->ctx, line, sizeof line);
    ssize_t w = send(c, line, strlen(line), MSG_NOSIGNAL);
    (void)w; /* HAProxy counts a short answer as a failed check */
    close(c);
}

static void *agent_main(void *arg)
{
    struct fleet_agent *ag = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = ag->fd, .events = POLLIN}, {.fd = ag->wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (p[1].revents)
            break;
        int c = accept(ag->fd, NULL, NULL);
        if (c >= 0)
            answer(ag, c);
    }
    return NULL;
}

static int listen_on(const char *host, int port, char *err, size_t errlen)
{
    char service[8];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "agent address %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                    bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 16) != 0)) {
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        snprintf(err, errlen, "cannot listen for HAProxy's agent-check on %s port %d: %s", host, port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

struct fleet_agent *fleet_agent_start(fleet_agent_reply_fn reply, void *ctx, const char *host, int port, char *err,
                                     size_t errlen)
{
    struct fleet_agent *ag = calloc(1, sizeof *ag);
    if (!ag) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ag->reply = reply;
    ag->ctx = ctx;
    ag->wake[0] = ag->wake[1] = -1;
    if ((ag->fd = listen_on(host, port, err, errlen)) < 0 || pipe2(ag->wake, O_CLOEXEC) != 0 ||
        pthread_create(&ag->thread, NULL, agent_main, ag) != 0) {
        if (ag->fd >= 0)
            snprintf(err, errlen, "cannot start the agent-check thread");
        if (ag->fd >= 0)
            close(ag->fd);
        if (ag->wake[0] >= 0) {
            close(ag->wake[0]);
            close(ag->wake[1]);
        }
        free(ag);
        return NULL;
    }
    log_info("fleet: load report for HAProxy's agent-check on %s port %d", host, port);
    return ag;
}

void fleet_agent_stop(struct fleet_agent *ag)
{
    if (!ag)
        return;
    ssize_t w = write(ag->wake[1], "x", 1);
    (void)w;
    pthread_join(ag->thread, NULL);
    close(ag->fd);
    close(ag->wake[0]);
    close(ag->wake[1]);
    free(ag);
}
