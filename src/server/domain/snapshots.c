/* Taking and deleting snapshots (domain/snapshots.h). */
#include "domain/snapshots.h"

#include "drain/extents.h"
#include "fs/walk.h"
#include "log/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MB (1024.0 * 1024.0)

struct snapshots {
    snapshot_store *store;
    disk_pool *disk;
    pthread_mutex_t take_mu; /* one snapshot at a time: limits checked and freezes never overlap */
    pthread_mutex_t count_mu;
    /* the snapshot bytes this server counts against its disks' cap: those found at start and
     * those it took; a delete gives back at most this much (servers sharing the store delete
     * each other's snapshots) */
    long long counted;
    snapshot_index index; /* in a fleet: the database's list (index.ctx NULL: the directory) */
};

void snapshots_set_index(snapshots *sn, const snapshot_index *ix)
{
    sn->index = *ix;
}

snapshot_record *snapshots_list(snapshots *sn, const char *tenant, size_t *n, bool *ok)
{
    *ok = true;
    if (sn->index.ctx)
        return sn->index.list(sn->index.ctx, tenant, n, ok);
    return snapshot_store_list(sn->store, tenant, n);
}

static void count_bytes(snapshots *sn, long long delta)
{
    pthread_mutex_lock(&sn->count_mu);
    if (delta < 0 && -delta > sn->counted)
        delta = -sn->counted;
    sn->counted += delta;
    pthread_mutex_unlock(&sn->count_mu);
    disk_pool_adjust(sn->disk, delta);
}

snapshots *snapshots_open(const char *dir, const char *owner, disk_pool *disk, char *err, size_t errlen)
{
    snapshots *sn = calloc(1, sizeof *sn);
    if (!sn) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!(sn->store = snapshot_store_open(dir, owner, err, errlen))) {
        free(sn);
        return NULL;
    }
    sn->disk = disk;
    pthread_mutex_init(&sn->take_mu, NULL);
    pthread_mutex_init(&sn->count_mu, NULL);
    count_bytes(sn, snapshot_store_bytes(sn->store)); /* kept on disk: counted before the cap is set */
    return sn;
}

void snapshots_close(snapshots *sn)
{
    if (!sn)
        return;
    snapshot_store_close(sn->store);
    pthread_mutex_destroy(&sn->take_mu);
    pthread_mutex_destroy(&sn->count_mu);
    free(sn);
}

snapshot_store *snapshots_store(snapshots *sn)
{
    return sn->store;
}

/* Whether n snapshots of bytes, with `more` bytes to come, pass the tenant's limits: why says which. */
static bool past_limits(long n, long long bytes, const snapshot_limits *lim, long long more, char *why, size_t whylen)
{
    if (n >= lim->max_count) {
        snprintf(why, whylen, "Snapshot limit reached: %ld of %d snapshots exist (max_snapshots). Delete one first.",
                 n, lim->max_count);
        return true;
    }
    if (bytes + more > lim->max_bytes) {
        snprintf(why, whylen, "Snapshot space limit reached: the tenant's snapshots take %.0f MB and this one may "
                 "take up to %.0f MB, over max_snapshot_mb (%.0f). Delete one first.",
                 bytes / MB, more / MB, lim->max_bytes / MB);
        return true;
    }
    return false;
}

/* Over one of the tenant's limits with `more` bytes to come: 1 (why says which), 0, or -1 when
 * the fleet's database cannot tell (why says so). */
static int over_limits(snapshots *sn, const char *tenant, const snapshot_limits *lim, long long more, char *why,
                       size_t whylen)
{
    long n = 0;
    long long bytes = 0;
    if (sn->index.ctx) {
        if (sn->index.usage(sn->index.ctx, tenant, &n, &bytes) != 0) {
            snprintf(why, whylen, "the fleet's database cannot be reached to count the tenant's snapshots");
            return -1;
        }
    } else {
        size_t k = 0;
        snapshot_record *v = snapshot_store_list(sn->store, tenant, &k);
        for (size_t i = 0; i < k; i++)
            bytes += v[i].bytes;
        snapshot_records_free(v, k);
        n = (long)k;
    }
    return past_limits(n, bytes, lim, more, why, whylen) ? 1 : 0;
}

/* Copies the frozen image img into the store's new file path: its bytes on the host in *bytes. */
static int copy_image(const char *img, const char *path, long long image_bytes, long long *bytes, char *why,
                      size_t whylen)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    long long data = 0;
    struct stat sb;
    int rc = -1;
    if (fd < 0)
        snprintf(why, whylen, "cannot create %s: %s", path, strerror(errno));
    else if (ftruncate(fd, image_bytes) != 0) /* sparse: reads as zeros where nothing is copied */
        snprintf(why, whylen, "cannot size %s: %s", path, strerror(errno));
    else if (extents_copy(img, fd, image_bytes, &data, why, whylen) != 0)
        ; /* why says it */
    else if (fdatasync(fd) != 0 || fstat(fd, &sb) != 0)
        snprintf(why, whylen, "cannot sync %s: %s", path, strerror(errno));
    else {
        *bytes = (long long)sb.st_blocks * 512;
        rc = 0;
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

/* The workspace's copy: the session's filesystem frozen (its writers wait) while its image is
 * copied into the store, then thawed. */
typedef struct {
    snapshots *sn;
    const session *s;
    const char *tenant, *img, *dest;
    long long image_bytes, bytes;
    char *why;
    size_t whylen;
} workspace_copy;

static int copy_workspace(void *arg)
{
    workspace_copy *c = arg;
    if (disk_freeze(c->sn->disk, c->s->id) != 0) {
        snprintf(c->why, c->whylen, "cannot freeze the session's filesystem: %s", strerror(errno));
        return -1;
    }
    int copied = copy_image(c->img, c->dest, c->image_bytes, &c->bytes, c->why, c->whylen);
    if (disk_thaw(c->sn->disk, c->s->id) != 0)
        log_session(LV_ERROR, c->s->id, c->tenant, "cannot thaw its filesystem after a snapshot: %s", strerror(errno));
    return copied;
}

/* With mem: the session's memory saved beside the workspace (dest's directory, SNAPSHOT_MEMORY),
 * the workspace copied while the session is held still; its bytes in *mem_bytes. Without:
 * flushed, then copied. 0, 1 (busy: why), -1. */
static int take_parts(workspace_copy *c, const snapshot_memory *mem, snapshot_flush_fn flush, void *flush_ctx,
                      long long *mem_bytes)
{
    *mem_bytes = 0;
    if (!mem) {
        if (flush && flush(flush_ctx) != 0) {
            snprintf(c->why, c->whylen, "the session's sandbox did not write its files out");
            return -1;
        }
        return copy_workspace(c);
    }
    size_t dl = strlen(c->dest) - strlen(SNAPSHOT_WORKSPACE);
    char *dir = NULL;
    if (asprintf(&dir, "%.*s%s", (int)dl, c->dest, SNAPSHOT_MEMORY) < 0 || mkdir(dir, 0700) != 0) {
        snprintf(c->why, c->whylen, "cannot create the memory image's directory: %s", strerror(errno));
        free(dir);
        return -1;
    }
    /* (the checkpoint writes what the sandbox holds out to the workspace itself) */
    int rc = mem->checkpoint(mem->ctx, dir, copy_workspace, c, c->why, c->whylen);
    if (rc == 0 && (*mem_bytes = fs_tree_usage(dir)) <= 0) {
        snprintf(c->why, c->whylen, "the memory image is empty");
        rc = -1;
    }
    free(dir);
    return rc;
}

snapshot_result snapshots_take(snapshots *sn, session *s, const char *tenant, const char *name,
                               const snapshot_limits *lim, snapshot_flush_fn flush, void *flush_ctx,
                               const snapshot_memory *mem, snapshot_record *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    char *img = disk_image_path(sn->disk, s->id);
    struct stat sb;
    if (!img || stat(img, &sb) != 0) {
        snprintf(why, whylen, "the session's disk image is not there: %s", strerror(errno));
        free(img);
        return SNAP_ERROR;
    }
    long long image_bytes = (long long)sb.st_size;
    /* at most the image less its filesystem's free blocks (what the copy may write), and the
     * sandbox's memory: reserved first, set right after the copy */
    struct statvfs fs;
    long long most = image_bytes;
    if (statvfs(s->workspace, &fs) == 0 && (long long)fs.f_bfree * (long long)fs.f_frsize < image_bytes)
        most = image_bytes - (long long)fs.f_bfree * (long long)fs.f_frsize;
    if (mem)
        most += mem->most_bytes;
    pthread_mutex_lock(&sn->take_mu);
    snapshot_result rc = SNAP_ERROR;
    char id[SNAPSHOT_ID_SIZE] = "";
    char *dest = NULL;
    bool taken = false;
    /* held from the count to the commit: servers sharing the store take one at a time */
    int lock = snapshot_store_lock(sn->store, why, whylen);
    if (lock < 0)
        goto done;
    int over = over_limits(sn, tenant, lim, 0, why, whylen);
    if (over != 0) {
        rc = over > 0 ? SNAP_LIMIT : SNAP_ERROR;
        goto done;
    }
    if (!(taken = disk_pool_take(sn->disk, most, why, whylen))) {
        rc = SNAP_FULL;
        goto done;
    }
    if (snapshot_store_begin(sn->store, id, &dest, why, whylen) != 0)
        goto done;
    workspace_copy wc = {.sn = sn, .s = s, .tenant = tenant, .img = img, .dest = dest, .image_bytes = image_bytes,
                         .why = why, .whylen = whylen};
    long long mem_bytes = 0;
    int parts = take_parts(&wc, mem, flush, flush_ctx, &mem_bytes);
    if (parts != 0) {
        snapshot_store_abort(sn->store, id);
        rc = parts > 0 ? SNAP_BUSY : SNAP_ERROR;
        goto done;
    }
    long long bytes = wc.bytes + mem_bytes;
    if ((over = over_limits(sn, tenant, lim, bytes, why, whylen)) != 0) { /* its real size passes max_snapshot_mb */
        snapshot_store_abort(sn->store, id);
        rc = over > 0 ? SNAP_LIMIT : SNAP_ERROR;
        goto done;
    }
    memcpy(out->id, id, sizeof id);
    snprintf(out->name, sizeof out->name, "%s", name);
    snprintf(out->session_id, sizeof out->session_id, "%s", s->id);
    snprintf(out->template_name, sizeof out->template_name, "%s", s->template_name);
    out->quota_bytes = s->quota_bytes;
    out->image_bytes = image_bytes;
    out->bytes = bytes;
    out->created_at = epoch_now();
    if (mem) {
        out->memory = true;
        out->memory_bytes = mem_bytes;
        snprintf(out->runsc_version, sizeof out->runsc_version, "%s", mem->runsc_version);
        out->memory_mb = s->size.memory_mb;
        out->cpu_percent = s->size.cpu_percent;
        out->max_processes = s->size.max_processes;
    }
    if (!(out->tenant = strdup(tenant))) {
        snprintf(why, whylen, "out of memory");
        snapshot_store_abort(sn->store, id);
        goto done;
    }
    /* in a fleet its row first, counted under the tenant's lock: exact across machines */
    long have = 0;
    long long used = 0;
    int added = sn->index.ctx ? sn->index.add(sn->index.ctx, out, lim, &have, &used) : 0;
    if (added != 0) {
        if (added > 0)
            past_limits(have, used, lim, bytes, why, whylen);
        else
            snprintf(why, whylen, "the fleet's database cannot be reached to record the snapshot");
        rc = added > 0 ? SNAP_LIMIT : SNAP_ERROR;
    }
    if (added != 0 || snapshot_store_commit(sn->store, out, why, whylen) != 0) {
        if (added == 0 && sn->index.ctx)
            sn->index.remove(sn->index.ctx, id);
        if (added != 0)
            snapshot_store_abort(sn->store, id);
        free(out->tenant);
        out->tenant = NULL;
        goto done;
    }
    disk_pool_adjust(sn->disk, -most); /* the reservation becomes what it really takes */
    count_bytes(sn, bytes);
    taken = false;
    rc = SNAP_OK;
done:
    if (taken)
        disk_pool_adjust(sn->disk, -most);
    snapshot_store_unlock(lock);
    pthread_mutex_unlock(&sn->take_mu);
    if (rc == SNAP_ERROR)
        log_session(LV_ERROR, s->id, tenant, "snapshot failed: %s", why);
    free(dest);
    free(img);
    return rc;
}

int snapshots_delete(snapshots *sn, const char *id, const char *tenant)
{
    long long freed = 0;
    int rc = snapshot_store_remove(sn->store, id, tenant, &freed);
    if (rc == 0)
        count_bytes(sn, -freed);
    if (rc == 0 && sn->index.ctx)
        sn->index.remove(sn->index.ctx, id);
    return rc;
}
