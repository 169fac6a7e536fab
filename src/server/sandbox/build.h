/* Ours: the sandbox side of a template build (domain/templates.h). A build's host program
 * (mmdebstrap) and its setup's gVisor sandbox each run in a cgroup of their own under the
 * builds group beside this server's root, at a low CPU weight (SBX_CG_BUILD_SHARES), with
 * nice 19 and the idle I/O class: a build yields to the host's other work (sessions,
 * airlockd itself, its clients), and its memory and tasks are bounded. */
#ifndef AIRLOCKD_SANDBOX_BUILD_H
#define AIRLOCKD_SANDBOX_BUILD_H

#include "sandbox/sandbox.h"

#include <stddef.h>

/* A build step's memory limit and host tasks. */
#define SANDBOX_BUILD_MEMORY (2048ull * 1024 * 1024)
#define SANDBOX_BUILD_TASKS 4096

/* What one step runs and who sees its output. */
typedef struct {
    const char *name;      /* names its cgroup and container (made unique) */
    const sandbox_tap *tap; /* its output as read (NULL: none) */
    int timeout_seconds;   /* its wall clock (the whole tree is killed at it) */
    int cancel_fd;         /* hung up: killed at once (-1: none) */
} sandbox_build_step;

/* Runs host program argv (argv[0] absolute) as root with envp in the build group: 0 when it
 * ran (its exit code, timeout and output in out: free with sandbox_result_free), -1 when it
 * could not start (errbuf). */
int sandbox_build_exec(sandbox_backend *b, const sandbox_build_step *st, const char *const *argv,
                       const char *const *envp, sandbox_result *out, char *errbuf, size_t errlen);

/* Runs commands[0..n) one after the other (each `sh -c` on its own, the first failure ends the
 * run with its exit code) in a gVisor sandbox whose root is root_dir, writable, as root with
 * the capabilities a package's setup needs (files, owners, uids), without any network, in the
 * build group. The commands are handed over as arguments, never pasted into a script. 0 ran,
 * -1 could not start (errbuf; also without gVisor). */
int sandbox_build_setup(sandbox_backend *b, const sandbox_build_step *st, const char *root_dir,
                        const char *const *commands, size_t n, sandbox_result *out, char *errbuf,
                        size_t errlen);

/* Makes a built tree a sandbox root (sandbox/rootfs.h sbx_rootfs_finish_template) with this
 * server's programs. */
int sandbox_backend_finish_root(sandbox_backend *b, const char *dir, char *errbuf, size_t errlen);

/* Whether templates can run here (gVisor). */
bool sandbox_backend_has_templates(const sandbox_backend *b);

#endif
