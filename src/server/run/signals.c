/* airlockd's signal handlers and the pipe that brings a signal to the main thread. */
#include "run/signals.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* The signal handler can only reach the main thread through this pipe. */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(signal_pipe[1], &b, 1) < 0) {
        /* nothing more can be done inside a signal handler */
    }
    errno = saved;
}

static void on_sigpipe(int sig)
{
    (void)sig;
}

int signals_catch(void)
{
    if (pipe2(signal_pipe, O_CLOEXEC) != 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_sigpipe;
    sigaction(SIGPIPE, &sa, NULL);
    return 0;
}

int signals_wait(void)
{
    unsigned char sig = 0;
    while (read(signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    return sig;
}

bool signals_poll(int ms)
{
    struct pollfd p = {.fd = signal_pipe[0], .events = POLLIN};
    unsigned char sig;
    return poll(&p, 1, ms) > 0 && read(signal_pipe[0], &sig, 1) == 1;
}
