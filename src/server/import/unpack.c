/* Unpacking an imported archive in the sandbox: the server never parses the tarball. */
#include "import/unpack.h"

#include "text/pystr.h"
#include "domain/paths.h"
#include "text/utf8.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DETAIL_CHARS 500
#define TIMEOUT_WARNING "Execution exceeded 120s limit."
#define OOM_WARNING "Process killed by cgroups (Memory limit exceeded)."

int import_dest_exists(const char *ws, const char *dest)
{
    char *rel = NULL;
    int rc = path_resolve(ws, dest, strlen(dest), &rel);
    if (rc == PATH_DENIED)
        return -1;
    if (rc != PATH_OK)
        return 0;
    int dfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int found = 0;
    char *p = rel;
    while (dfd >= 0 && *p) {
        char *slash = strchr(p, '/');
        if (slash)
            *slash = '\0';
        struct stat st;
        if (fstatat(dfd, p, &st, AT_SYMLINK_NOFOLLOW) != 0)
            break; /* missing */
        if (!slash) {
            found = 1;
            break;
        }
        if (!S_ISDIR(st.st_mode)) {
            /* a symlink swapped in since the resolution: something is there */
            found = S_ISLNK(st.st_mode);
            break;
        }
        int nfd = openat(dfd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(dfd);
        dfd = nfd;
        p = slash + 1;
    }
    if (!*rel)
        found = 1; /* resolves to the workspace itself */
    if (dfd >= 0)
        close(dfd);
    free(rel);
    return found;
}

/* Single-quoted for bash; dest and the archive name never hold quotes, but be safe. */
static char *sh_quote(const char *s)
{
    size_t n = 2;
    for (const char *p = s; *p; p++)
        n += *p == '\'' ? 4 : 1;
    char *q = malloc(n + 1), *w = q;
    if (!q)
        return NULL;
    *w++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(w, "'\\''", 4);
            w += 4;
        } else {
            *w++ = *p;
        }
    }
    *w++ = '\'';
    *w = '\0';
    return q;
}

int import_archive_file(const char *ws)
{
    int wsfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (wsfd < 0)
        return -1;
    int fd = openat(wsfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    int e = errno;
    close(wsfd);
    /* tar reads it in the sandbox as the sandbox user */
    if (fd >= 0 && fchown(fd, SANDBOX_UID, SANDBOX_GID) != 0 && errno != EPERM) {
        e = errno;
        close(fd);
        fd = -1;
    }
    errno = e;
    return fd;
}

/* Names the downloaded archive at the top of the workspace (a fresh name, never through a
 * symlink): the same blocks, no copy. */
static int place_archive(int wsfd, const char *tmp_name, int archive_fd)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", archive_fd);
    return linkat(AT_FDCWD, proc, wsfd, tmp_name, AT_SYMLINK_FOLLOW);
}

/* The count printed last by the command: digits and surrounding whitespace only. */
static bool parse_count(const char *s, size_t n, long long *out)
{
    size_t a, b;
    py_strip(s, n, &a, &b);
    if (a == b || b - a > 18)
        return false;
    long long v = 0;
    for (size_t i = a; i < b; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* The last MAX_DETAIL_CHARS characters of the stripped stderr, else the warnings, else
 * "unknown error". */
static char *failure_detail(const import_spec *spec, const sandbox_result *res)
{
    size_t len = 0;
    char *err = utf8_replace(res->err ? res->err : "", res->err ? res->err_len : 0, &len);
    if (!err)
        return NULL;
    const char *text = err;
    size_t a = 0, b = 0;
    if (res->timed_out) {
        text = TIMEOUT_WARNING; /* streams are discarded on a timeout */
        b = strlen(text);
    } else {
        py_strip(err, len, &a, &b);
        if (a == b && res->oom_killed) {
            text = OOM_WARNING;
            a = 0;
            b = strlen(text);
        } else if (a == b) {
            text = "unknown error";
            a = 0;
            b = strlen(text);
        }
    }
    size_t chars = utf8_count(text + a, b - a);
    while (chars > MAX_DETAIL_CHARS) {
        uint32_t cp;
        a += utf8_seq_len((const unsigned char *)text + a, b - a, &cp);
        chars--;
    }
    char *msg = NULL;
    if (asprintf(&msg, "Unpacking %s/%s failed: %.*s", spec->owner, spec->name, (int)(b - a), text + a) < 0)
        msg = NULL;
    free(err);
    return msg;
}

import_result import_unpack(sandbox_backend *sb, const sandbox_opts *o, int archive_fd,
                            const import_spec *spec, long long *files, char **msg, char *errbuf,
                            size_t errlen)
{
    const char *ws = o->workspace_dir, *name = o->name;
    *files = 0;
    *msg = NULL;
    char tmp_name[128], rel_archive[140];
    snprintf(tmp_name, sizeof tmp_name, ".airlock-import-%s.tar.gz", name);
    snprintf(rel_archive, sizeof rel_archive, "./%s", tmp_name);
    int wsfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (wsfd < 0) {
        snprintf(errbuf, errlen, "open workspace: %s", strerror(errno));
        return IMPORT_FAILED;
    }
    if (place_archive(wsfd, tmp_name, archive_fd) != 0) {
        snprintf(errbuf, errlen, "placing the archive: %s", strerror(errno));
        unlinkat(wsfd, tmp_name, 0);
        close(wsfd);
        return IMPORT_FAILED;
    }
    /* "./" keeps a dest starting with "-" from being read as an option */
    char *rel_dest = NULL, *qd = NULL, *qa = NULL, *cmd = NULL;
    import_result rc = IMPORT_FAILED;
    if (asprintf(&rel_dest, "./%s", spec->dest) < 0)
        rel_dest = NULL;
    if (rel_dest && (qd = sh_quote(rel_dest)) != NULL && (qa = sh_quote(rel_archive)) != NULL &&
        asprintf(&cmd, "mkdir -p %s || exit; if tar -xzf %s -C %s --strip-components=1; then "
                       "find %s -type f -printf . | wc -c; else s=$?; rm -rf %s 2>/dev/null; exit $s; fi",
                 qd, qa, qd, qd, qd) < 0)
        cmd = NULL;
    if (!cmd) {
        snprintf(errbuf, errlen, "out of memory");
    } else {
        sandbox_result res;
        memset(&res, 0, sizeof res);
        if (sandbox_exec(sb, o, cmd, IMPORT_UNPACK_TIMEOUT, &res, errbuf, errlen) == 0) {
            if (res.cancelled) {
                snprintf(errbuf, errlen, "cancelled: the client disconnected");
            } else if (!res.timed_out && res.exit_code == 0 && parse_count(res.out ? res.out : "", res.out_len, files)) {
                rc = IMPORT_OK;
            } else {
                *msg = failure_detail(spec, &res);
                rc = *msg ? IMPORT_UNPACK_FAILED : IMPORT_FAILED;
                if (!*msg)
                    snprintf(errbuf, errlen, "out of memory");
            }
        }
        sandbox_result_free(&res);
    }
    unlinkat(wsfd, tmp_name, 0);
    close(wsfd);
    free(rel_dest);
    free(qd);
    free(qa);
    free(cmd);
    return rc;
}
