/* GET /v1/sessions/{id}/list?path=<dir>[&limit=N] (ours, docs/api.md): a directory's entries
 * with name, kind (file, dir, symlink, other), size and modification time, in name order. The
 * directory is resolved like every files path (inside the workspace, bounded) and opened
 * without following symlinks; entries are lstat'ed, so a symlink is listed as one and never
 * followed. At most limit entries are read (default LIST_DEFAULT, at most LIST_MAX);
 * "truncated" says the directory holds more. */
#include "api/files.h"
#include "api/handlers.h"

#include "domain/paths.h"
#include "text/utf8.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIST_DEFAULT 1000
#define LIST_MAX 10000

typedef struct {
    char *name;
    struct stat st;
} list_entry;

static int by_name(const void *x, const void *y)
{
    return strcmp(((const list_entry *)x)->name, ((const list_entry *)y)->name);
}

static const char *kind_of(mode_t m)
{
    return S_ISREG(m) ? "file" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "symlink" : "other";
}

/* Reads at most max entries of the open directory dfd (taken); *more when it holds others.
 * NULL with *n 0 for an empty directory too; -1 in *n on failure. */
static list_entry *read_entries(int dfd, size_t max, size_t *n, bool *more)
{
    *n = 0;
    *more = false;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return NULL;
    }
    list_entry *v = NULL;
    size_t cap = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (*n == max) {
            *more = true;
            break;
        }
        if (*n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            list_entry *nv = realloc(v, ncap * sizeof *nv);
            if (!nv)
                break;
            v = nv;
            cap = ncap;
        }
        list_entry *it = &v[*n];
        if (fstatat(dirfd(d), e->d_name, &it->st, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* gone meanwhile (a command removing it) */
        if (!(it->name = strdup(e->d_name)))
            break;
        (*n)++;
    }
    closedir(d);
    return v;
}

static json_t *entry_json(const list_entry *it)
{
    size_t nl;
    char *name = utf8_replace(it->name, strlen(it->name), &nl); /* JSON carries text */
    if (!name)
        return NULL;
    double mtime = (double)it->st.st_mtim.tv_sec + (double)it->st.st_mtim.tv_nsec / 1e9;
    json_t *j = json_pack("{s:s%,s:s,s:I,s:f}", "name", name, nl, "kind", kind_of(it->st.st_mode), "size",
                          (json_int_t)it->st.st_size, "mtime", mtime);
    free(name);
    return j;
}

void api_files_list(app *a, http_request *r, const api_call *c)
{
    long long limit = LIST_DEFAULT;
    if (!limit_query(r, &limit))
        return;
    if (limit < 1 || limit > LIST_MAX) {
        char msg[96];
        snprintf(msg, sizeof msg, "limit must be from 1 to %d entries.", LIST_MAX);
        http_send_detail(r, 400, msg);
        return;
    }
    /* no ?path=: the workspace itself */
    size_t raw_len, path_len = 1;
    char *raw = http_query(r, "path", &raw_len);
    if (raw && files_send_if_nul(r, raw, raw_len, "the query parameter 'path'")) {
        free(raw);
        return;
    }
    char *path = raw ? utf8_replace(raw, raw_len, &path_len) : strdup(".");
    free(raw);
    if (!path) {
        http_send_500(r);
        return;
    }
    session *s = acquire_session(a, r, c);
    if (!s) {
        free(path);
        return;
    }
    char *rel = NULL;
    int dfd = -1;
    int rc = path_resolve(s->workspace, path, path_len, &rel);
    if (rc == PATH_OK)
        rc = path_open_dir(s->workspace, rel, &dfd);
    if (rc == PATH_DENIED) {
        files_send_denied(r, path, path_len);
    } else if (files_send_path_bound(r, rc)) {
    } else if (rc == PATH_MISSING) {
        send_detail_with(r, 404, "Directory '%s' does not exist.", path);
    } else if (rc != PATH_OK) {
        send_detail_with(r, 400, "'%s' is not a directory.", path);
    } else {
        size_t n;
        bool more;
        list_entry *v = read_entries(dfd, (size_t)limit, &n, &more);
        if (n > 1)
            qsort(v, n, sizeof *v, by_name);
        json_t *entries = json_array();
        for (size_t i = 0; i < n; i++) {
            if (json_array_append_new(entries, entry_json(&v[i])) != 0)
                more = true; /* out of memory: say the list is short */
            free(v[i].name);
        }
        free(v);
        http_send_json(r, 200, json_pack("{s:s%,s:o,s:b}", "path", path, path_len, "entries", entries, "truncated",
                                         more));
    }
    free(rel);
    free(path);
    registry_release(a->reg, s);
}
