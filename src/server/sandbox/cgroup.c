/* Host cgroups for one sandbox run: limits, membership, OOM evidence, cleanup. */
#include "sandbox/cgroup.h"

#include "util/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup"
#define CG_PARENT "airlock"

static const char *const v1_controllers[3] = {"memory", "pids", "cpu"};

static bool is_v1(void)
{
    return access(CG_ROOT "/memory/memory.limit_in_bytes", F_OK) == 0;
}

static bool is_v2(void)
{
    return access(CG_ROOT "/cgroup.controllers", F_OK) == 0;
}

#define CONTROL_PATH_MAX (SBX_CG_PATH_MAX + 64)

/* dir/file into path; false when it does not fit. */
static bool control_path(char path[CONTROL_PATH_MAX], const char *dir, const char *file)
{
    int n = snprintf(path, CONTROL_PATH_MAX, "%s/%s", dir, file);
    return n >= 0 && n < CONTROL_PATH_MAX;
}

/* Writes a short string to a control file; returns 0 or an errno value. */
static int write_file(const char *dir, const char *file, const char *value)
{
    char path[CONTROL_PATH_MAX];
    if (!control_path(path, dir, file))
        return ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    size_t len = strlen(value);
    ssize_t w = write(fd, value, len);
    int err = (w == (ssize_t)len) ? 0 : (w < 0 ? errno : EIO);
    if (close(fd) != 0 && err == 0)
        err = errno;
    return err;
}

/* Reads a whole control file (NUL-terminated, caller frees); NULL on error. */
static char *read_file(const char *dir, const char *file)
{
    char path[CONTROL_PATH_MAX];
    if (!control_path(path, dir, file))
        return NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    buffer b = {0};
    int rc = buf_read_all(&b, fd);
    close(fd);
    if (rc != 0) {
        buf_free(&b);
        return NULL;
    }
    return buf_take(&b, NULL);
}

/* Value of "key N" in a flat-keyed control file (memory.oom_control, memory.events). */
static uint64_t keyed_value(const char *text, const char *key)
{
    size_t klen = strlen(key);
    const char *p = text;
    while (p && *p) {
        if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
            return strtoull(p + klen + 1, NULL, 10);
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    return 0;
}

static int mkdir_ok(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    return errno;
}

int sbx_cg_probe(char *errbuf, size_t errlen)
{
    char path[SBX_CG_PATH_MAX];
    if (is_v1()) {
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, CG_ROOT "/%s", v1_controllers[i]);
            if (access(path, F_OK) != 0)
                continue; /* a missing pids/cpu controller only weakens limits */
            snprintf(path, sizeof path, CG_ROOT "/%s/" CG_PARENT, v1_controllers[i]);
            int err = mkdir_ok(path);
            if (err) {
                snprintf(errbuf, errlen, "cannot create cgroup %s: %s", path, strerror(err));
                return -1;
            }
        }
        return 0;
    }
    if (is_v2()) {
        int err = mkdir_ok(CG_ROOT "/" CG_PARENT);
        if (err) {
            snprintf(errbuf, errlen, "cannot create cgroup " CG_ROOT "/" CG_PARENT ": %s",
                     strerror(err));
            return -1;
        }
        /* Controllers must be enabled at every level above the leaf groups. */
        err = write_file(CG_ROOT, "cgroup.subtree_control", "+memory +pids +cpu");
        if (!err)
            err = write_file(CG_ROOT "/" CG_PARENT, "cgroup.subtree_control",
                             "+memory +pids +cpu");
        if (err) {
            snprintf(errbuf, errlen, "cannot enable cgroup v2 controllers: %s", strerror(err));
            return -1;
        }
        return 0;
    }
    snprintf(errbuf, errlen, "no usable cgroup hierarchy under " CG_ROOT);
    return -1;
}

/* Writes one limit to dir/file; on failure errbuf says "cannot <what>: <reason>". optional
 * tolerates a missing file: the kernel then lacks that accounting and so the thing it limits. */
static int set_limit(const char *dir, const char *file, const char *value, bool optional,
                     const char *what, char *errbuf, size_t errlen)
{
    int err = write_file(dir, file, value);
    if (!err || (optional && err == ENOENT))
        return 0;
    snprintf(errbuf, errlen, "cannot %s: %s", what, strerror(err));
    return -1;
}

static int apply_v1(const sbx_cgroup *cg, const sbx_cg_limits *lim, char *errbuf, size_t errlen)
{
    char v[64];
    snprintf(v, sizeof v, "%" PRIu64, lim->memory_bytes);
    /* memsw exists only with swap accounting; without it there is no swap to forbid. */
    if (set_limit(cg->dirs[0], "memory.limit_in_bytes", v, false, "set memory limit", errbuf, errlen) ||
        set_limit(cg->dirs[0], "memory.memsw.limit_in_bytes", v, true, "set memory+swap limit", errbuf,
                  errlen))
        return -1;
    (void)write_file(cg->dirs[0], "memory.swappiness", "0"); /* best effort */
    if (cg->dirs[1][0]) {
        snprintf(v, sizeof v, "%" PRIu64, lim->pids);
        if (set_limit(cg->dirs[1], "pids.max", v, false, "set pids limit", errbuf, errlen))
            return -1;
    }
    if (cg->dirs[2][0]) {
        snprintf(v, sizeof v, "%u", 1000u * lim->cpu_percent);
        if (set_limit(cg->dirs[2], "cpu.cfs_period_us", "100000", false, "set cpu quota", errbuf, errlen) ||
            set_limit(cg->dirs[2], "cpu.cfs_quota_us", v, false, "set cpu quota", errbuf, errlen))
            return -1;
    }
    return 0;
}

static int apply_v2(const sbx_cgroup *cg, const sbx_cg_limits *lim, char *errbuf, size_t errlen)
{
    char mem[32], pids[32], cpu[48];
    snprintf(mem, sizeof mem, "%" PRIu64, lim->memory_bytes);
    snprintf(pids, sizeof pids, "%" PRIu64, lim->pids);
    snprintf(cpu, sizeof cpu, "%u 100000", 1000u * lim->cpu_percent);
    const char *dir = cg->dirs[0];
    if (set_limit(dir, "memory.max", mem, false, "set memory limit", errbuf, errlen) ||
        set_limit(dir, "memory.swap.max", "0", true, "forbid swap", errbuf, errlen) ||
        set_limit(dir, "pids.max", pids, false, "set pids limit", errbuf, errlen) ||
        set_limit(dir, "cpu.max", cpu, false, "set cpu quota", errbuf, errlen))
        return -1;
    return 0;
}

/* SIGKILLs every pid listed in dir/cgroup.procs; returns how many were listed. */
static int kill_listed(const char *dir)
{
    char *list = read_file(dir, "cgroup.procs");
    if (!list)
        return 0;
    int count = 0;
    for (char *p = list; *p;) {
        char *end;
        long pid = strtol(p, &end, 10);
        if (end == p)
            break;
        if (pid > 1) {
            count++;
            /* ESRCH is fine (already gone); any other failure shows up next round. */
            (void)kill((pid_t)pid, SIGKILL);
        }
        p = end;
        while (*p == '\n')
            p++;
    }
    free(list);
    return count;
}

int sbx_cg_create(sbx_cgroup *cg, const char *id, const sbx_cg_limits *lim,
                  char *errbuf, size_t errlen)
{
    memset(cg, 0, sizeof *cg);
    cg->v2 = !is_v1();
    for (int i = 0; i < 3; i++) {
        if (cg->v2 && i > 0)
            break;
        char ctl[SBX_CG_PATH_MAX];
        int n = cg->v2 ? snprintf(ctl, sizeof ctl, CG_ROOT)
                       : snprintf(ctl, sizeof ctl, CG_ROOT "/%s", v1_controllers[i]);
        if (n < 0 || (size_t)n >= sizeof ctl || access(ctl, F_OK) != 0) {
            if (i == 0) {
                snprintf(errbuf, errlen, "memory cgroup controller not found under " CG_ROOT);
                goto fail;
            }
            continue;
        }
        char dir[SBX_CG_PATH_MAX];
        n = snprintf(dir, sizeof dir, "%s/" CG_PARENT "/%s", ctl, id);
        if (n < 0 || (size_t)n + strlen("/cgroup.procs") >= sizeof dir) {
            snprintf(errbuf, errlen, "cgroup path too long for id %s", id);
            goto fail;
        }

        /* A group left by a crashed server whose pid came back: empty it and reuse. */
        if (mkdir(dir, 0755) != 0 && errno == EEXIST) {
            (void)kill_listed(dir);
            (void)rmdir(dir);
        }
        if (access(dir, F_OK) != 0 && mkdir(dir, 0755) != 0) {
            snprintf(errbuf, errlen, "cannot create cgroup %s: %s", dir, strerror(errno));
            goto fail;
        }
        memcpy(cg->dirs[i], dir, (size_t)n + 1);
        memcpy(cg->procs[i], dir, (size_t)n);
        memcpy(cg->procs[i] + n, "/cgroup.procs", sizeof "/cgroup.procs");
    }
    if ((cg->v2 ? apply_v2(cg, lim, errbuf, errlen) : apply_v1(cg, lim, errbuf, errlen)) != 0)
        goto fail;
    return 0;
fail:
    sbx_cg_destroy(cg);
    return -1;
}

int sbx_cg_join_self(const sbx_cgroup *cg)
{
    /* Only async-signal-safe calls: this runs in a child forked from a threaded server. */
    char num[24];
    int len = 0;
    pid_t pid = getpid();
    char rev[24];
    do {
        rev[len++] = (char)('0' + pid % 10);
        pid /= 10;
    } while (pid > 0);
    for (int i = 0; i < len; i++)
        num[i] = rev[len - 1 - i];
    for (int i = 0; i < 3; i++) {
        if (!cg->procs[i][0])
            continue;
        int fd = open(cg->procs[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        ssize_t w = write(fd, num, (size_t)len);
        close(fd);
        if (w != len)
            return -1;
    }
    return 0;
}

void sbx_cg_oom_status(const sbx_cgroup *cg, bool *oom_killed, bool *limit_hit)
{
    *oom_killed = false;
    *limit_hit = false;
    if (!cg->dirs[0][0])
        return;
    if (cg->v2) {
        char *ev = read_file(cg->dirs[0], "memory.events");
        if (ev) {
            *oom_killed = keyed_value(ev, "oom_kill") > 0;
            *limit_hit = keyed_value(ev, "max") > 0;
            free(ev);
        }
        return;
    }
    char *oc = read_file(cg->dirs[0], "memory.oom_control");
    if (oc) {
        *oom_killed = keyed_value(oc, "oom_kill") > 0;
        free(oc);
    }
    char *fc = read_file(cg->dirs[0], "memory.failcnt");
    if (fc) {
        *limit_hit = strtoull(fc, NULL, 10) > 0;
        free(fc);
    }
}

int sbx_cg_kill_all(const sbx_cgroup *cg)
{
    if (cg->v2 && cg->dirs[0][0])
        (void)write_file(cg->dirs[0], "cgroup.kill", "1"); /* kernel >= 5.14; else loop below */
    int left = 0;
    /* Killed tasks leave the group asynchronously; a fork racing with the kill shows up in
     * the next round. 200 rounds of 5 ms bound this at about a second. */
    for (int round = 0; round < 200; round++) {
        left = 0;
        for (int i = 0; i < 3; i++)
            if (cg->dirs[i][0])
                left += kill_listed(cg->dirs[i]);
        if (left == 0)
            break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return left;
}

void sbx_cg_destroy(sbx_cgroup *cg)
{
    (void)sbx_cg_kill_all(cg);
    for (int i = 0; i < 3; i++) {
        if (!cg->dirs[i][0])
            continue;
        /* rmdir fails with EBUSY until the last killed task is released. */
        for (int tries = 0; tries < 200; tries++) {
            if (rmdir(cg->dirs[i]) == 0 || errno == ENOENT)
                break;
            if (errno != EBUSY)
                break;
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        cg->dirs[i][0] = '\0';
        cg->procs[i][0] = '\0';
    }
}
