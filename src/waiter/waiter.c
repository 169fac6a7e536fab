/* airlock-waiter: the first process of a sandbox booted ahead of its command (airlockd's warm
 * path). It runs `bash -c true` once (gVisor's first exec is the slow one), says "R" on fd 4,
 * waits for the command on fd 3 until end of file, closes both and execs `/bin/bash -c CMD` in
 * its place: the command is then PID 1 with the spec's environment, exactly as on the cold
 * path, and nothing of the waiter is left. It reads only the host pipe airlockd holds and
 * touches nothing in /workspace. Static, so the sandbox needs no loader to run it. */
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

/* airlockd sends shorter commands only (longer ones take the cold path). */
#define COMMAND_MAX (1 << 20)

enum { FD_COMMAND = 3, FD_READY = 4 };

extern char **environ;

static char command[COMMAND_MAX + 1];

/* Runs bash -c text to completion with its output discarded. */
static void warm_up(const char *text)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = {"/bin/bash", "-c", (char *)text, 0};
        int nul = open("/dev/null", O_RDWR);
        if (nul < 0 || dup2(nul, 1) < 0 || dup2(nul, 2) < 0)
            _exit(126);
        close(FD_COMMAND);
        close(FD_READY);
        execve(argv[0], argv, environ);
        _exit(127);
    }
    while (pid > 0 && waitpid(pid, 0, 0) < 0 && errno == EINTR) {
    }
}

int main(void)
{
    warm_up("true");
    ssize_t w;
    do
        w = write(FD_READY, "R", 1);
    while (w < 0 && errno == EINTR);
    if (w != 1)
        return 120;
    size_t len = 0;
    for (;;) {
        ssize_t r = read(FD_COMMAND, command + len, COMMAND_MAX - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return 121;
        if (r == 0)
            break;
        len += (size_t)r;
        if (len == COMMAND_MAX)
            return 122;
    }
    command[len] = '\0';
    close(FD_COMMAND);
    close(FD_READY);
    char *argv[] = {"/bin/bash", "-c", command, 0};
    execve(argv[0], argv, environ);
    return 127;
}
