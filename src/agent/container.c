/* The agent's container child: PID 1 of a fresh container for one command. It runs in new PID,
 * mount, IPC and UTS namespaces, with a new overlay root (writable, thrown away) over the
 * sandbox's read-only root, the sandbox's bind mounts placed again, and new /tmp, /dev/shm and
 * /proc; it drops to uid/gid 1000 with no capabilities and no_new_privs, stdin /dev/null, cwd
 * /workspace, and execs /bin/bash ahead of its command, which then waits in the preloaded
 * bootstrap (bootstrap.c) for the request. A failed step is text on its fail pipe (the
 * command's FRAME_FAIL), and the child ends. */
#include "agent.h"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define UID 1000
#define GID 1000
/* Where the child builds its root, inside a tmpfs of its own mount namespace. */
#define NEW_BASE "/tmp"
#define NEW_ROOT NEW_BASE "/root"
#define TMP_OPTS "size=64m,mode=1777"
#define ROOT_OPTS "size=64m,mode=755"

/* Reports a failed step (text on the fail pipe) and ends the child. */
static void child_fail(int fail_w, const char *step)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%s: %s", step, strerror(errno));
    if (n > 0)
        (void)frame_write_all(fail_w, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(126);
}

static int bind_into(const bind_mount *m)
{
    char dst[PATH_MAX];
    if (snprintf(dst, sizeof dst, "%s%s", NEW_ROOT, m->dir) >= (int)sizeof dst)
        return -1;
    if (mount(m->dir, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return -1;
    if (m->kind == 'd')
        return 0;
    unsigned long fl = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (m->kind == 'w' ? 0 : MS_RDONLY);
    return mount(NULL, dst, NULL, fl, NULL);
}

/* The new root: an overlay over / in a fresh tmpfs, the sandbox's binds, a fresh /tmp,
 * /dev/shm and /proc; pivoted into, the old root detached. */
static void child_mounts(int fail_w)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        child_fail(fail_w, "making mounts private");
    if (mount("tmpfs", NEW_BASE, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_OPTS) != 0)
        child_fail(fail_w, "mounting the root's tmpfs");
    if (mkdir(NEW_BASE "/up", 0755) != 0 || mkdir(NEW_BASE "/work", 0755) != 0 || mkdir(NEW_ROOT, 0755) != 0)
        child_fail(fail_w, "making the overlay's directories");
    if (mount("overlay", NEW_ROOT, "overlay", MS_NOSUID | MS_NODEV,
              "lowerdir=/,upperdir=" NEW_BASE "/up,workdir=" NEW_BASE "/work") != 0)
        child_fail(fail_w, "mounting the overlay root");
    for (int i = 0; i < agent_nbinds; i++)
        if (bind_into(&agent_binds[i]) != 0)
            child_fail(fail_w, agent_binds[i].dir);
    unsigned long noexec = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    if (mount("proc", NEW_ROOT "/proc", "proc", noexec, NULL) != 0)
        child_fail(fail_w, "mounting /proc");
    if (mount("tmpfs", NEW_ROOT "/tmp", "tmpfs", noexec, TMP_OPTS) != 0)
        child_fail(fail_w, "mounting /tmp");
    if (mount("shm", NEW_ROOT "/dev/shm", "tmpfs", noexec, TMP_OPTS) != 0)
        child_fail(fail_w, "mounting /dev/shm");
    if (chdir(NEW_ROOT) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
        chdir("/") != 0)
        child_fail(fail_w, "pivoting into the new root");
    if (sethostname("sandbox", 7) != 0)
        child_fail(fail_w, "setting the host name");
}

/* Drops to UID/GID with no capabilities (bounding set emptied, so nothing regains any),
 * no_new_privs, the command's limits. */
static void child_drop(int fail_w)
{
    /* gVisor counts a uid's tasks from their creation: this child was made as root, so it is
     * not among uid 1000's; one less keeps the command at agent_nproc processes in all */
    struct rlimit nproc = {(rlim_t)agent_nproc - 1, (rlim_t)agent_nproc - 1}, core = {0, 0};
    if (setrlimit(RLIMIT_NPROC, &nproc) != 0 || setrlimit(RLIMIT_CORE, &core) != 0)
        child_fail(fail_w, "setting limits");
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            child_fail(fail_w, "dropping capabilities");
    /* raw system calls: glibc's would set the ids of every thread of the worker whose memory
     * this child shares until its exec (see prepare) */
    if (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setgid, GID) != 0 || syscall(SYS_setuid, UID) != 0)
        child_fail(fail_w, "switching to uid 1000");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        child_fail(fail_w, "setting no_new_privs");
}

/* Puts each of from[i] on the number to[i], open across exec (the sources stay close-on-exec):
 * through copies above them all, so no source is overwritten before it is placed. */
static int place_fds(const int *from, const int *to, int n)
{
    int high[8];
    for (int i = 0; i < n; i++)
        if ((high[i] = fcntl(from[i], F_DUPFD_CLOEXEC, 16)) < 0)
            return -1;
    for (int i = 0; i < n; i++)
        if (dup2(high[i], to[i]) < 0)
            return -1;
    for (int i = 0; i < n; i++)
        close(high[i]);
    return 0;
}

/* PID 1 of a new container: mounts, drops, and execs /bin/bash ahead of its command, with the
 * bootstrap preloaded: bash, loaded, waits in it for the request on fd 3, says ready on fd 4
 * and failures on fd 5 (see bootstrap.c). Never returns. */
static void child_main(int in_r, int cmd_r, int out_w, int err_w, int fail_w, int ready_w)
{
    /* an ignored signal stays ignored across exec: the command gets SIGPIPE's default back */
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* A sibling that died with the agent must not live on. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        child_fail(fail_w, "setting the parent death signal");
    child_mounts(fail_w);
    if (access(AGENT_BOOTSTRAP_PATH, R_OK) != 0)
        child_fail(fail_w, AGENT_BOOTSTRAP_PATH);
    /* Every other descriptor of the agent's is close-on-exec (fds 3 to 5 of the agent's too) */
    int nul = in_r >= 0 ? in_r : open("/dev/null", O_RDONLY | O_CLOEXEC);
    int from[] = {nul, out_w, err_w, cmd_r, ready_w, fail_w}, to[] = {0, 1, 2, 3, 4, 5};
    if (nul < 0 || place_fds(from, to, 6) != 0)
        child_fail(fail_w, "placing the container's descriptors");
    fail_w = 5; /* its old number may now be another's */
    child_drop(fail_w);
    if (chdir("/workspace") != 0)
        child_fail(fail_w, "entering /workspace");
    char *argv[] = {"/bin/bash", "-c", AGENT_BOOTSTRAP_WAITING, NULL};
    char *env[] = {"LD_PRELOAD=" AGENT_BOOTSTRAP_PATH, NULL};
    execve(argv[0], argv, env);
    child_fail(fail_w, "exec /bin/bash");
}

/* The container child's descriptors: its ends, and the worker's ends it closes. */
typedef struct {
    int in_r, cmd_r, out_w, err_w, fail_w, ready_w;
    int out_r, err_r, fail_r, ready_r;
} child_fds;

static int child_entry(void *arg)
{
    const child_fds *f = arg;
    close(f->out_r);
    close(f->err_r);
    close(f->fail_r);
    close(f->ready_r);
    /* out/err survive exec by their dup2 onto 1 and 2; the rest is close-on-exec */
    child_main(f->in_r, f->cmd_r, f->out_w, f->err_w, f->fail_w, f->ready_w);
    return 126;
}

/* The child runs on this stack in the worker's memory until its exec (the worker waits). */
static char child_stack[64 * 1024] __attribute__((aligned(16)));

/* container_prepare (agent.h). The child shares the worker's memory until it execs bash (CLONE_VM |
 * CLONE_VFORK, as posix_spawn does): under gVisor, copying an address space for a fork costs
 * milliseconds the exec would throw away. */
int container_prepare(prepared *p, int cmd_r, int in_r)
{
    int out[2], err[2], fail[2], ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
        close(cmd_r);
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(fail, O_CLOEXEC) != 0) {
        close(cmd_r);
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    child_fds f = {in_r, cmd_r, out[1], err[1], fail[1], ready[1], out[0], err[0], fail[0], ready[0]};
    pid_t pid = clone(child_entry, child_stack + sizeof child_stack,
                      CLONE_VM | CLONE_VFORK | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, &f);
    int e = errno;
    close(ready[1]);
    close(cmd_r);
    close(out[1]);
    close(err[1]);
    close(fail[1]);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        close(fail[0]);
        close(ready[0]);
        errno = e;
        return -1;
    }
    *p = (prepared){.pid = pid, .out_r = out[0], .err_r = err[0], .fail_r = fail[0],
                    .ready_r = ready[0]};
    return 0;
}

void container_discard(prepared *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    p->pid = -1;
    close_fd(&p->out_r);
    close_fd(&p->err_r);
    close_fd(&p->fail_r);
    close_fd(&p->ready_r);
}

