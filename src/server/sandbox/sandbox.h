/* The isolation backend of airlockd: runs one command in a fresh sandbox (gVisor's runsc,
 * or bubblewrap as the weaker fallback) with the session's workspace mounted at /workspace.
 * Thread-safe: several commands may run at once from different server threads. */
#ifndef AIRLOCKD_SANDBOX_H
#define AIRLOCKD_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

/* Inside the sandbox commands run as this uid/gid; the server owns workspace files by it. */
#define SANDBOX_UID 1000
#define SANDBOX_GID 1000

typedef struct sandbox_backend sandbox_backend;

typedef struct {
    char *out;          /* raw stdout bytes, NUL-terminated, caller frees via sandbox_result_free */
    size_t out_len;
    char *err;          /* raw stderr bytes, NUL-terminated */
    size_t err_len;
    int exit_code;      /* bash conventions; 128+N for signal N; -1 on timeout */
    bool timed_out;     /* wall-clock limit hit: the whole sandbox was killed, streams empty */
    bool oom_killed;    /* the memory limit killed the command */
} sandbox_result;

/* Prepares the backend under state_dir (root filesystem, runsc state). runsc_path may be
 * NULL (then $AIRLOCK_RUNSC, then PATH). With require_gvisor and no working runsc, fails.
 * Returns NULL with a message in errbuf on failure. */
sandbox_backend *sandbox_backend_open(const char *state_dir, const char *runsc_path,
                                      bool require_gvisor, char *errbuf, size_t errlen);

/* "gvisor" or "bubblewrap". */
const char *sandbox_backend_name(const sandbox_backend *b);

/* Runs `/bin/bash -c command` in a new sandbox: cwd /workspace (workspace_dir bind-mounted
 * read-write), read-only root, /tmp tmpfs 64 MB noexec, uid SANDBOX_UID, no capabilities,
 * no network, 256 MB memory without swap, 64 processes, 1 CPU, timeout_seconds wall clock.
 * name is unique among running sandboxes' prefixes (e.g. the session id).
 * Returns 0 when the command ran (whatever its exit status, timeout included), -1 when the
 * sandbox could not be started (message in errbuf). */
int sandbox_exec(sandbox_backend *b, const char *workspace_dir, const char *name,
                 const char *command, int timeout_seconds, sandbox_result *out,
                 char *errbuf, size_t errlen);

void sandbox_result_free(sandbox_result *r);
void sandbox_backend_close(sandbox_backend *b);

#endif
