/* The cgroup guard (see guard.h). */
#include "sandbox/guard.h"

#include "log/log.h"
#include "sandbox/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* The guard's descriptors: airlockd's end of the pipe is its stdin, the lock this one. */
#define GUARD_LOCK_FD 3

/* Only a name airlockd makes: "airlockd-" and 16 lowercase hex digits. */
static bool valid_root(const char *name)
{
    static const char prefix[] = "airlockd-";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0 || strlen(name) != sizeof prefix - 1 + 16)
        return false;
    for (const char *p = name + sizeof prefix - 1; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

int sbx_guard_spawn(const char *cg_root, int lock_fd, char *errbuf, size_t errlen)
{
    if (!valid_root(cg_root)) {
        snprintf(errbuf, errlen, "bad cgroup root name %s", cg_root);
        return -1;
    }
    /* the binary itself: readlink, so that under valgrind the guard is airlockd, not the tool */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(errbuf, errlen, "cannot find airlockd's own binary: %s", strerror(errno));
        return -1;
    }
    self[n] = '\0';
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        snprintf(errbuf, errlen, "cannot create a pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_adddup2(&fa, p[0], 0); /* a dup2 drops O_CLOEXEC on the copy */
    if (lock_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, lock_fd, GUARD_LOCK_FD);
    /* its own session: a terminal's ^C to airlockd's process group does not reach it */
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    char *argv[] = {self, (char *)GUARD_OPTION, (char *)cg_root, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, self, &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(p[0]);
    if (rc != 0) {
        close(p[1]);
        snprintf(errbuf, errlen, "cannot start the cgroup guard: %s", strerror(rc));
        return -1;
    }
    /* p[1] stays open (close-on-exec) for airlockd's whole life: its end is the signal */
    return 0;
}

/* The guard is a process of its own (airlockd started again by posix_spawn, not a forked
 * child), so it logs through the logger like airlockd, at its default level and format. */
int sbx_guard_main(const char *cg_root)
{
    if (!valid_root(cg_root)) {
        log_error("" GUARD_OPTION ": bad cgroup root name");
        return 2;
    }
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    char buf[64];
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r == 0 || (r < 0 && errno != EINTR))
            break; /* airlockd is gone (a clean exit too: then there is nothing left to do) */
    }
    sbx_cg_tree t;
    char err[512] = "";
    memset(&t, 0, sizeof t);
    if (sbx_cg_tree_open(&t, cg_root, err, sizeof err) != 0) {
        log_error("guard: %s", err);
        return 1;
    }
    int left = sbx_cg_tree_clear(&t, false);
    sbx_cg_tree_free(&t);
    if (left)
        log_warn("guard: %d cgroup(s) under %s could not be removed", left, cg_root);
    close(GUARD_LOCK_FD); /* the state dir is free for the next airlockd */
    return left ? 1 : 0;
}
