/* Finds and kills the runsc processes of this server's runsc root through /proc. */
#include "sandbox/leftovers.h"

#include "util/buf.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A command line longer than this is read only this far (runsc's flags come first). */
#define CMDLINE_MAX (64 * 1024)
#define ROUNDS 50

/* Whether the NUL-separated arguments a[0..n) name runsc_root as --root. */
static bool has_root(const char *a, size_t n, const char *runsc_root)
{
    size_t rl = strlen(runsc_root);
    bool after_flag = false;
    for (size_t i = 0; i < n;) {
        const char *arg = a + i;
        size_t len = strnlen(arg, n - i);
        if (after_flag && len == rl && memcmp(arg, runsc_root, rl) == 0)
            return true;
        if (len == 7 + rl && memcmp(arg, "--root=", 7) == 0 && memcmp(arg + 7, runsc_root, rl) == 0)
            return true;
        after_flag = len == 6 && memcmp(arg, "--root", 6) == 0;
        i += len + 1;
    }
    return false;
}

static bool matches(long pid, const char *runsc_root)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    buffer b;
    buf_init(&b, CMDLINE_MAX);
    while (b.len < CMDLINE_MAX && buf_read(&b, fd, CMDLINE_MAX - b.len) > 0) {
    }
    close(fd);
    bool hit = b.data && has_root(b.data, b.len, runsc_root);
    buf_free(&b);
    return hit;
}

/* One pass over /proc: kills the matches, returns how many. */
static int kill_round(const char *runsc_root)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    pid_t self = getpid();
    int killed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        long pid = strtol(e->d_name, NULL, 10);
        if (pid <= 1 || pid == (long)self || !matches(pid, runsc_root))
            continue;
        if (kill((pid_t)pid, SIGKILL) == 0)
            killed++;
    }
    closedir(d);
    return killed;
}

int sbx_kill_runsc_leftovers(const char *runsc_root)
{
    int most = 0; /* a process killed in one round may still be listed in the next */
    for (int round = 0; round < ROUNDS; round++) {
        int n = kill_round(runsc_root);
        if (n == 0)
            break;
        most = n > most ? n : most;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return most;
}
