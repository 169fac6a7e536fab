/* The cgroup guard: a small process airlockd starts beside itself that outlives it. A killed
 * airlockd (kill -9, OOM) cannot clean up, and its sandboxes booted ahead wait frozen: a
 * frozen task takes no signal, not even the parent-death signal, so they would stay until
 * the next start on the same state dir. The guard holds the read end of a pipe whose write
 * end only airlockd holds; when airlockd is gone it thaws, kills and removes everything under
 * airlockd's cgroup root, then exits. It also holds the state dir's lock meanwhile, so a new
 * airlockd on that state dir starts only once the guard is done (and never has its own
 * sandboxes removed by it). */
#ifndef AIRLOCKD_SANDBOX_GUARD_H
#define AIRLOCKD_SANDBOX_GUARD_H

#include <stddef.h>

/* The option that makes airlockd the guard: airlockd GUARD_OPTION <cgroup root name>. */
#define GUARD_OPTION "--cgroup-guard"

/* Starts the guard for cgroup root cg_root ("airlockd-<16 hex>"), handing it lock_fd (the
 * state dir's lock; -1: none). 0, or -1 with a message (airlockd then runs without one). */
int sbx_guard_spawn(const char *cg_root, int lock_fd, char *errbuf, size_t errlen);

/* The guard's whole life (airlockd started with GUARD_OPTION): the exit status. */
int sbx_guard_main(const char *cg_root);

#endif
