/* Runs one host program (runsc or bwrap) for the sandbox backend (private): stdin /dev/null
 * (or a pipe: sbx_proc_opts.stdin_fd), stdout and stderr captured separately and concurrently
 * within a byte budget each (sandbox/capture.h), a wall-clock deadline, a client connection
 * whose hang-up cancels the run, and on expiry or cancel the whole process tree killed
 * (through its cgroup, else its process group). */
#ifndef AIRLOCKD_SANDBOX_PROC_H
#define AIRLOCKD_SANDBOX_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>

#include "sandbox/capture.h"
#include "sandbox/cgroup.h"
#include "sandbox/sandbox.h"

typedef struct {
    int resource;  /* RLIMIT_* */
    rlim_t value;  /* soft = hard */
} sbx_rlimit;

typedef struct {
    const char *const *argv;  /* argv[0] is an absolute path */
    const char *const *envp;
    const sbx_cgroup *cg;     /* joined before exec when non-NULL */
    /* Disk I/O in the idle class and CPU nice 19 (a template build), inherited by all it
     * starts; set before joining cg, so no process in cg is ever seen at a higher priority. */
    bool lowest_priority;
    const sbx_rlimit *rlimits;
    size_t nrlimits;
    /* Runs in the child, still root, after joining the cgroup and before dropping
     * privileges; must be async-signal-safe. Nonzero (an errno) aborts the start. */
    int (*pre_exec)(void *ctx);
    void *pre_exec_ctx;
    bool drop_privs;          /* switch to uid/gid (no supplementary groups) before exec */
    unsigned uid, gid;
    int timeout_ms;           /* <= 0: no deadline */
    /* At the deadline: a polite stop (e.g. `runsc kill`), then grace_ms for the tree to end
     * before everything in the cgroup / process group is SIGKILLed. */
    void (*on_deadline)(void *ctx);
    void *ctx;
    int grace_ms;
    size_t output_limit;      /* bytes kept of each of stdout and stderr; 0: SANDBOX_OUTPUT_LIMIT */
    /* A descriptor to watch (a client's connection): POLLHUP, POLLERR or POLLRDHUP on it
     * kills the tree at once and marks the result cancelled. -1 or 0: none. */
    int cancel_fd;
    const sandbox_tap *tap;   /* ours: sees the output as it is read; NULL: none */
    /* Descriptors the launcher also gets, at its fds 4, 5, ... in this order (e.g. the pipes
     * `runsc run --pass-fd 4:3` hands on to a sandbox booted ahead). At most SBX_PASS_FDS_MAX. */
    const int *pass_fds;
    int npass_fds;
    int stdin_fd;             /* > 0: the launcher's stdin (a session agent's requests); else /dev/null */
    /* > 0: the launcher's stdout / stderr instead of captured pipes (`runsc create`, whose
     * sandbox keeps them as its agent's: the collect cannot wait for their end); the result
     * then has no output of that stream. */
    int stdout_fd;
    int stderr_fd;
} sbx_proc_opts;

#define SBX_PASS_FDS_MAX 8

/* A launcher started (sbx_proc_start) and not yet collected. */
typedef struct {
    pid_t pid;
    int out, err; /* the read ends of its stdout and stderr */
} sbx_proc_child;

typedef struct {
    capture out;
    capture err;
    bool timed_out;  /* deadline hit: the tree was killed */
    bool cancelled;  /* cancel_fd hung up: the tree was killed */
    int status;      /* waitpid status */
} sbx_proc_result;

/* Returns 0 when the program ran (any status, timeout included), -1 when it could not be
 * started (message in errbuf). The result's buffers are owned by the caller either way. */
int sbx_proc_run(const sbx_proc_opts *o, sbx_proc_result *r, char *errbuf, size_t errlen);

/* The first half of sbx_proc_run: starts the launcher (o's argv, cgroup, rlimits, pass_fds)
 * and returns at once. The calling thread must outlive it: the launcher gets SIGKILL when
 * that thread ends (PR_SET_PDEATHSIG). 0, or -1 with a message in errbuf. */
int sbx_proc_start(const sbx_proc_opts *o, sbx_proc_child *c, char *errbuf, size_t errlen);

/* The second half: reads its output and waits for it under o's deadline (counted from now),
 * output budget and cancel_fd, as sbx_proc_run does; any thread may call it. Takes over c
 * (its descriptors are closed, the launcher reaped) whatever it returns. */
int sbx_proc_collect(const sbx_proc_opts *o, sbx_proc_child *c, sbx_proc_result *r, char *errbuf,
                     size_t errlen);

/* Exit code in shell conventions (128+N for signal N). */
int sbx_proc_exit_code(int status);

void sbx_proc_result_free(sbx_proc_result *r);

#endif
