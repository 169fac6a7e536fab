/* airlock-bootstrap.so: lets the agent's prepared container have /bin/bash exec'd, loaded and
 * linked before its command comes, and still run that command exactly as `/bin/bash -c COMMAND`
 * with the request's environment would (exec'ing bash costs ~17 ms under gVisor, most of a
 * spaced command's time).
 *
 * The agent's container child, already uid 1000 in /workspace with its limits, stdin /dev/null
 * and stdout/stderr on its pipes, execs `/bin/bash -c AGENT_BOOTSTRAP_WAITING` with only
 * LD_PRELOAD=AGENT_BOOTSTRAP_PATH in its environment and, open across the exec, the request pipe
 * on fd 3, its ready pipe on fd 4 and its fail pipe on fd 5. The dynamic loader maps bash and its
 * libraries and runs this constructor before bash's main: it says ready, blocks reading the
 * request (u32 length, then u32 timeout_ms, command NUL, env entries NUL-terminated each), closes
 * the three fds, then puts the command in argv[2] and the request's environment in environ, which
 * glibc hands to main as its argv and envp. bash then starts as it would have from an execve of
 * those: $0, BASH_EXECUTION_STRING, error messages ("-c: line 1: ..."), SHLVL, PWD, exported
 * functions, options from the environment. bash writes into its environment strings, so they
 * stay in the (writable) request buffer.
 *
 * What bash's own start cannot see is redone by a real exec: a request whose environment glibc
 * or the loader read before main (LD_*, GLIBC_TUNABLES, MALLOC_*) is exec'd as
 * `/bin/bash -c COMMAND` from here. A failure is text on fd 5, the command's FRAME_FAIL. */
#include "protocol.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FD_REQUEST = 3, FD_READY = 4, FD_FAIL = 5 };

extern char **environ;

static void fail(const char *step, int err)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%s: %s", step, strerror(err));
    if (n > 0)
        (void)frame_write_all(FD_FAIL, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(126);
}

/* Whether bash must be exec'd anew for this environment: the loader and glibc read these
 * before main. */
static bool needs_exec(char *const env[])
{
    for (size_t i = 0; env[i]; i++)
        if (strncmp(env[i], "LD_", 3) == 0 || strncmp(env[i], "GLIBC_TUNABLES=", 15) == 0 ||
            strncmp(env[i], "MALLOC_", 7) == 0)
            return true;
    return false;
}

__attribute__((constructor)) static void bootstrap(int argc, char **argv, char **envp)
{
    (void)envp;
    if (argc != 3 || strcmp(argv[1], "-c") != 0 || strcmp(argv[2], AGENT_BOOTSTRAP_WAITING) != 0)
        return;
    const char ready = WORKER_READY; /* (any byte: the worker waits for one) */
    (void)frame_write_all(FD_READY, &ready, 1);
    close(FD_READY);
    unsigned char h[4];
    if (frame_read_all(FD_REQUEST, h, 4) != 0)
        _exit(0); /* the agent is gone or never needs this container */
    size_t len = frame_get_u32(h);
    char *req = len <= AGENT_REQUEST_MAX ? malloc(len + 1) : NULL;
    if (!req || frame_read_all(FD_REQUEST, req, len) != 0)
        _exit(0);
    close(FD_REQUEST);
    /* static: bash keeps using its environment strings and array after this returns */
    static frame_run run;
    if (frame_run_get(req, len, &run) != 0)
        fail("reading the request", EINVAL);
    char *command = run.command, **env = run.env;
    if (needs_exec(env)) {
        /* close-on-exec: its end of file tells the agent the exec happened */
        if (fcntl(FD_FAIL, F_SETFD, FD_CLOEXEC) != 0)
            fail("exec /bin/bash", errno);
        char *args[] = {"/bin/bash", "-c", command, NULL};
        execve(args[0], args, env);
        fail("exec /bin/bash", errno);
    }
    argv[2] = command;
    environ = env;
    close(FD_FAIL);
}
