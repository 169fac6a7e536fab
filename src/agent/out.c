/* The agent's output: every frame to airlockd goes out on the agent's stdout (protocol.h: the
 * channels), from the agent's loop and from each worker at once. A frame is one writev under
 * a lock all of them share (a process-shared mutex in memory mapped before the first fork):
 * frames never interleave, whatever their size (a pipe keeps only writes up to PIPE_BUF whole).
 * Robust: a worker that dies holding it (it never does mid-frame) leaves it usable. */
#include "agent.h"

#include <pthread.h>
#include <sys/mman.h>

static pthread_mutex_t *out_lock;

int out_init(void)
{
    void *m = mmap(NULL, sizeof *out_lock, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) != 0)
        return -1;
    int rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) != 0 ||
                     pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) != 0 || pthread_mutex_init(m, &a) != 0
                 ? -1
                 : 0;
    pthread_mutexattr_destroy(&a);
    out_lock = m;
    return rc;
}

int out_send(frame_type t, unsigned slot, const void *p, size_t n)
{
    int rc = pthread_mutex_lock(out_lock);
    if (rc == EOWNERDEAD)
        rc = pthread_mutex_consistent(out_lock);
    if (rc != 0)
        return -1;
    rc = frame_send(FD_OUT, t, slot, p, n);
    pthread_mutex_unlock(out_lock);
    return rc;
}
