/* The snapshot store on disk (store/snapshots.h): records, the write-aside-then-rename of a
 * new snapshot, deletion, and the start-up removal of what a crash left half done. */
#include "store/snapshots.h"

#include "fs/walk.h"
#include "log/log.h"
#include "util/sync.h"

#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECORD "snapshot.json"
#define RECORD_FORMAT 1
#define ID_PREFIX "snap_"
#define TMP_PREFIX ".tmp-"
#define DEL_PREFIX ".del-"
#define LOCK_FILE ".lock"
#define OWNER_MAX 40
/* A directory holding more entries than this is not scanned past them (a bound, logged). */
#define SCAN_MAX 100000

struct snapshot_store {
    char *dir;
    char owner[OWNER_MAX + 1];
};

bool snapshot_id_valid(const char *id)
{
    size_t pl = strlen(ID_PREFIX);
    if (strncmp(id, ID_PREFIX, pl) != 0 || strlen(id) != SNAPSHOT_ID_SIZE - 1)
        return false;
    for (const char *p = id + pl; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

static char *join(const char *a, const char *b, const char *c)
{
    char *p = NULL;
    return asprintf(&p, "%s/%s%s", a, b, c ? c : "") < 0 ? NULL : p;
}

/* "<dir>/<prefix><owner>-<id>", malloc'd. */
static char *aside_path(const snapshot_store *st, const char *prefix, const char *id)
{
    char *p = NULL;
    return asprintf(&p, "%s/%s%s-%s", st->dir, prefix, st->owner, id) < 0 ? NULL : p;
}

static void remove_tree(const char *path)
{
    if (fs_rmtree(path) != 0 && errno != ENOENT)
        log_warn("cannot remove %s: %s", path, strerror(errno));
}

static bool copy_field(char *dst, size_t cap, json_t *v)
{
    if (!json_is_string(v) || json_string_length(v) >= cap)
        return false;
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return true;
}

/* The record's memory part, when it has one, into rec (its bytes added to rec->bytes): false
 * when it is malformed. */
static bool read_memory_part(json_t *j, snapshot_record *rec)
{
    json_t *m = json_object_get(json_object_get(j, "parts"), "memory");
    if (!m)
        return true;
    json_int_t mb = json_integer_value(json_object_get(m, "memory_mb"));
    json_int_t cpu = json_integer_value(json_object_get(m, "cpu_percent"));
    json_int_t procs = json_integer_value(json_object_get(m, "max_processes"));
    json_int_t bytes = json_integer_value(json_object_get(m, "bytes"));
    if (!copy_field(rec->runsc_version, sizeof rec->runsc_version, json_object_get(m, "runsc_version")) ||
        bytes <= 0 || mb <= 0 || mb > UINT32_MAX || cpu <= 0 || cpu > UINT32_MAX || procs <= 0 || procs > UINT32_MAX)
        return false;
    rec->memory = true;
    rec->memory_bytes = bytes;
    rec->bytes += bytes;
    rec->memory_mb = (unsigned)mb;
    rec->cpu_percent = (unsigned)cpu;
    rec->max_processes = (unsigned)procs;
    return true;
}

/* Reads dir/<id>/snapshot.json into *rec: false when it is missing or not a complete record. */
static bool read_record(const snapshot_store *st, const char *id, snapshot_record *rec)
{
    memset(rec, 0, sizeof *rec);
    char *path = join(st->dir, id, "/" RECORD);
    json_t *j = path ? json_load_file(path, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(path);
    json_t *ws = json_object_get(json_object_get(j, "parts"), "workspace");
    json_t *tenant = json_object_get(j, "tenant");
    bool ok = json_is_object(j) && json_integer_value(json_object_get(j, "format")) == RECORD_FORMAT &&
              copy_field(rec->id, sizeof rec->id, json_object_get(j, "id")) && strcmp(rec->id, id) == 0 &&
              copy_field(rec->name, sizeof rec->name, json_object_get(j, "name")) &&
              copy_field(rec->session_id, sizeof rec->session_id, json_object_get(j, "session_id")) &&
              copy_field(rec->template_name, sizeof rec->template_name, json_object_get(j, "template")) &&
              json_is_string(tenant) && json_is_integer(json_object_get(j, "quota_bytes")) &&
              json_is_number(json_object_get(j, "created_at")) &&
              json_is_integer(json_object_get(ws, "image_bytes")) && json_is_integer(json_object_get(ws, "bytes"));
    if (ok) {
        rec->quota_bytes = json_integer_value(json_object_get(j, "quota_bytes"));
        rec->created_at = json_number_value(json_object_get(j, "created_at"));
        rec->image_bytes = json_integer_value(json_object_get(ws, "image_bytes"));
        rec->bytes = json_integer_value(json_object_get(ws, "bytes"));
        ok = rec->quota_bytes > 0 && rec->image_bytes > 0 && rec->bytes >= 0 && read_memory_part(j, rec) &&
             (rec->tenant = strdup(json_string_value(tenant))) != NULL;
    }
    json_decref(j);
    return ok;
}

/* Whether the snapshot directory dir/<id> is whole: its record and its workspace image. */
static bool snapshot_whole(const snapshot_store *st, const char *id)
{
    snapshot_record rec;
    bool ok = read_record(st, id, &rec);
    free(rec.tenant);
    char *img = ok ? join(st->dir, id, "/" SNAPSHOT_WORKSPACE) : NULL;
    struct stat sb;
    ok = img && lstat(img, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == rec.image_bytes;
    free(img);
    char *mem = ok && rec.memory ? join(st->dir, id, "/" SNAPSHOT_MEMORY "/checkpoint.img") : NULL;
    if (rec.memory)
        ok = mem && lstat(mem, &sb) == 0 && S_ISREG(sb.st_mode);
    free(mem);
    return ok;
}

/* At start: what this owner left half done, and snapshot directories that are not whole. */
static void remove_leftovers(snapshot_store *st)
{
    DIR *d = opendir(st->dir);
    if (!d)
        return;
    char tmp[64], del[64];
    snprintf(tmp, sizeof tmp, "%s%s-", TMP_PREFIX, st->owner);
    snprintf(del, sizeof del, "%s%s-", DEL_PREFIX, st->owner);
    int removed = 0, kept = 0, seen = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && seen++ < SCAN_MAX) {
        const char *n = e->d_name;
        bool mine_aside = strncmp(n, tmp, strlen(tmp)) == 0 || strncmp(n, del, strlen(del)) == 0;
        bool broken = snapshot_id_valid(n) && !snapshot_whole(st, n);
        if (!mine_aside && !broken) {
            kept += snapshot_id_valid(n);
            continue;
        }
        char *path = join(st->dir, n, NULL);
        if (path) {
            log_warn("removing %s: %s", path, broken ? "a snapshot without a complete record" : "left half done by an earlier run");
            remove_tree(path);
            removed++;
        }
        free(path);
    }
    closedir(d);
    if (removed)
        sync_dir(st->dir);
    log_info("snapshots: %d kept in %s%s", kept, st->dir, removed ? " (half-written ones removed)" : "");
}

snapshot_store *snapshot_store_open(const char *dir, const char *owner, char *err, size_t errlen)
{
    size_t ol = strlen(owner);
    if (ol == 0 || ol > OWNER_MAX || strspn(owner, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != ol) {
        snprintf(err, errlen, "snapshot store owner '%s' is not a valid name", owner);
        return NULL;
    }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create SANDBOX_SNAPSHOT_DIR %s: %s", dir, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "SANDBOX_SNAPSHOT_DIR %s is not a directory", dir);
        return NULL;
    }
    snapshot_store *st = calloc(1, sizeof *st);
    if (!st || !(st->dir = realpath(dir, NULL))) {
        snprintf(err, errlen, "cannot open SANDBOX_SNAPSHOT_DIR %s: %s", dir, st ? strerror(errno) : "out of memory");
        free(st);
        return NULL;
    }
    memcpy(st->owner, owner, ol + 1);
    remove_leftovers(st);
    return st;
}

void snapshot_store_close(snapshot_store *st)
{
    if (!st)
        return;
    free(st->dir);
    free(st);
}

static int new_id(char id[SNAPSHOT_ID_SIZE])
{
    unsigned char b[8];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno != EINTR)
            return -1;
        got += n > 0 ? (size_t)n : 0;
    }
    int k = snprintf(id, SNAPSHOT_ID_SIZE, "%s", ID_PREFIX);
    for (size_t i = 0; i < sizeof b; i++)
        k += snprintf(id + k, SNAPSHOT_ID_SIZE - (size_t)k, "%02x", b[i]);
    return 0;
}

int snapshot_store_begin(snapshot_store *st, char id[SNAPSHOT_ID_SIZE], char **workspace, char *err, size_t errlen)
{
    *workspace = NULL;
    char *tmp = NULL;
    if (new_id(id) != 0 || !(tmp = aside_path(st, TMP_PREFIX, id))) {
        snprintf(err, errlen, "cannot make a snapshot id");
        return -1;
    }
    if (mkdir(tmp, 0700) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    *workspace = join(tmp, SNAPSHOT_WORKSPACE, NULL);
    free(tmp);
    if (!*workspace) {
        snapshot_store_abort(st, id);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

static json_t *record_json(const snapshot_record *rec)
{
    json_t *j = json_pack("{s:i,s:s,s:s,s:s,s:s,s:s,s:I,s:f,s:{s:{s:s,s:I,s:I}}}", "format", RECORD_FORMAT, "id",
                          rec->id, "name", rec->name, "tenant", rec->tenant, "session_id", rec->session_id, "template",
                          rec->template_name, "quota_bytes", (json_int_t)rec->quota_bytes, "created_at",
                          rec->created_at, "parts", "workspace", "file", SNAPSHOT_WORKSPACE, "image_bytes",
                          (json_int_t)rec->image_bytes, "bytes", (json_int_t)(rec->bytes - rec->memory_bytes));
    json_t *m = j && rec->memory ? json_pack("{s:s,s:I,s:s,s:I,s:I,s:I}", "dir", SNAPSHOT_MEMORY, "bytes",
                                             (json_int_t)rec->memory_bytes, "runsc_version", rec->runsc_version,
                                             "memory_mb", (json_int_t)rec->memory_mb, "cpu_percent",
                                             (json_int_t)rec->cpu_percent, "max_processes",
                                             (json_int_t)rec->max_processes)
                                 : NULL;
    if (j && rec->memory && (!m || json_object_set_new(json_object_get(j, "parts"), "memory", m) != 0)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Writes j to path and syncs it: 0, or -1 with errno. */
static int write_synced(const char *path, json_t *j)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    int rc = json_dumpfd(j, fd, JSON_COMPACT) == 0 && fsync(fd) == 0 ? 0 : -1;
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int snapshot_store_commit(snapshot_store *st, const snapshot_record *rec, char *err, size_t errlen)
{
    char *tmp = aside_path(st, TMP_PREFIX, rec->id), *final = join(st->dir, rec->id, NULL);
    char *file = tmp ? join(tmp, RECORD, NULL) : NULL;
    json_t *j = record_json(rec);
    int rc = -1;
    if (!tmp || !final || !file || !j)
        snprintf(err, errlen, "out of memory");
    else if (write_synced(file, j) != 0 || sync_dir(tmp) != 0)
        snprintf(err, errlen, "cannot write %s: %s", file, strerror(errno));
    else if (rename(tmp, final) != 0)
        snprintf(err, errlen, "cannot rename %s into place: %s", tmp, strerror(errno));
    else if (sync_dir(st->dir) != 0) { /* not durable: undone, never acknowledged */
        snprintf(err, errlen, "cannot sync %s: %s", st->dir, strerror(errno));
        remove_tree(final);
    } else
        rc = 0;
    if (rc != 0)
        snapshot_store_abort(st, rec->id);
    json_decref(j);
    free(file);
    free(tmp);
    free(final);
    return rc;
}

void snapshot_store_abort(snapshot_store *st, const char *id)
{
    char *tmp = aside_path(st, TMP_PREFIX, id);
    if (tmp)
        remove_tree(tmp);
    free(tmp);
}

int snapshot_store_lock(snapshot_store *st, char *err, size_t errlen)
{
    char *path = join(st->dir, LOCK_FILE, NULL);
    int fd = path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    while (fd >= 0 && flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR)
            continue;
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        snprintf(err, errlen, "cannot lock %s: %s", path ? path : st->dir, path ? strerror(errno) : "out of memory");
    free(path);
    return fd;
}

void snapshot_store_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* releases the flock */
}

static int newest_first(const void *a, const void *b)
{
    double x = ((const snapshot_record *)a)->created_at, y = ((const snapshot_record *)b)->created_at;
    return x < y ? 1 : x > y ? -1 : 0;
}

snapshot_record *snapshot_store_list(snapshot_store *st, const char *tenant, size_t *n)
{
    *n = 0;
    DIR *d = opendir(st->dir);
    if (!d)
        return NULL;
    snapshot_record *v = NULL;
    size_t cap = 0;
    int seen = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (seen++ >= SCAN_MAX) {
            log_warn("%s holds more than %d entries: the rest are not listed", st->dir, SCAN_MAX);
            break;
        }
        snapshot_record rec;
        if (!snapshot_id_valid(e->d_name) || !read_record(st, e->d_name, &rec))
            continue;
        if (tenant && strcmp(rec.tenant, tenant) != 0) {
            free(rec.tenant);
            continue;
        }
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 8;
            snapshot_record *nv = realloc(v, nc * sizeof *nv);
            if (!nv) {
                free(rec.tenant);
                break;
            }
            v = nv;
            cap = nc;
        }
        v[(*n)++] = rec;
    }
    closedir(d);
    if (*n > 1)
        qsort(v, *n, sizeof *v, newest_first);
    return v;
}

void snapshot_records_free(snapshot_record *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].tenant);
    free(v);
}

bool snapshot_store_get(snapshot_store *st, const char *id, const char *tenant, snapshot_record *out)
{
    if (!snapshot_id_valid(id) || !read_record(st, id, out))
        return false;
    if (tenant && strcmp(out->tenant, tenant) != 0) {
        free(out->tenant);
        out->tenant = NULL;
        return false;
    }
    return true;
}

char *snapshot_store_workspace(snapshot_store *st, const char *id)
{
    return join(st->dir, id, "/" SNAPSHOT_WORKSPACE);
}

char *snapshot_store_memory(snapshot_store *st, const char *id)
{
    return join(st->dir, id, "/" SNAPSHOT_MEMORY);
}

int snapshot_store_remove(snapshot_store *st, const char *id, const char *tenant, long long *freed)
{
    *freed = 0;
    snapshot_record rec;
    if (!snapshot_store_get(st, id, tenant, &rec))
        return 1;
    free(rec.tenant);
    char *final = join(st->dir, id, NULL), *aside = aside_path(st, DEL_PREFIX, id);
    int rc = -1;
    if (!final || !aside) {
        log_error("out of memory deleting snapshot %s", id);
    } else if (rename(final, aside) != 0) {
        rc = errno == ENOENT ? 1 : -1; /* deleted meanwhile (by another server sharing the store) */
        if (rc < 0)
            log_error("cannot delete snapshot %s: %s", id, strerror(errno));
    } else {
        /* gone for every reader from here; a crash before the tree goes leaves it aside,
         * removed at the next start */
        sync_dir(st->dir);
        remove_tree(aside);
        *freed = rec.bytes;
        rc = 0;
    }
    free(final);
    free(aside);
    return rc;
}

long long snapshot_store_bytes(snapshot_store *st)
{
    size_t n = 0;
    snapshot_record *v = snapshot_store_list(st, NULL, &n);
    long long sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i].bytes;
    snapshot_records_free(v, n);
    return sum;
}
