/* A drain's moves between nodes (docs/fleet.md "Drain"). The draining node, from its
 * heartbeat, takes each idle session out of service, names its new node in the database and
 * asks that node to take it (POST /v1/fleet/internal/sessions/{id}); the new node reads the
 * database, fetches the workspace as a tar archive from the draining node
 * (GET /v1/fleet/internal/sessions/{id}/archive), unpacks it on a new disk and becomes the
 * owner. Both requests carry the fleet's secret as a bearer token. */
#include "drain/move.h"
#include "log/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STEP_SECONDS 3.0 /* one heartbeat's moves at most (the heartbeat waits for them) */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t to_fd(char *data, size_t size, size_t n, void *ctx)
{
    int fd = *(int *)ctx;
    size_t len = size * n, done = 0;
    while (done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w <= 0)
            return 0;
        done += (size_t)w;
    }
    return len;
}

static size_t discard(char *data, size_t size, size_t n, void *ctx)
{
    (void)data;
    (void)ctx;
    return size * n;
}

/* One internal request (the secret as a bearer token, never in a URL or a log); the body
 * goes to fd (or is dropped when fd < 0). The HTTP status, or -1. */
static long internal_request(const char *method, const char *url, const char *secret, int fd, long timeout_s)
{
    CURL *h = curl_easy_init();
    if (!h)
        return -1;
    char *auth = NULL;
    struct curl_slist *hdrs = NULL;
    long code = -1;
    if (asprintf(&auth, "Authorization: Bearer %s", secret) >= 0 && (hdrs = curl_slist_append(NULL, auth))) {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (strcmp(method, "POST") == 0)
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout_s);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, fd >= 0 ? to_fd : discard);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &fd);
        if (curl_easy_perform(h) == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    }
    curl_slist_free_all(hdrs);
    if (auth) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
    curl_easy_cleanup(h);
    return code;
}

/* tar with fd as its stdin (extract) or stdout (create), in dir; 0 when it succeeded. */
static int run_tar(const char *mode, const char *dir, int fd)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (dup2(fd, strcmp(mode, "-c") == 0 ? 1 : 0) < 0)
            _exit(127);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0)
            dup2(null, strcmp(mode, "-c") == 0 ? 0 : 1);
        /* the archive holds the workspace as it is (symlinks as links, never followed); on
         * extraction owners and modes come back, nothing lands outside dir */
        execlp("tar", "tar", "--numeric-owner", "--same-permissions", "-C", dir, mode, "-f", "-", ".", (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* An unnamed temporary file in the state directory (gone when closed), or -1. */
static int scratch(const app *a)
{
    return open(a->state_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

int move_pack(const app *a, const char *workspace)
{
    int fd = scratch(a);
    if (fd >= 0 && (run_tar("-c", workspace, fd) != 0 || lseek(fd, 0, SEEK_SET) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int move_fetch(const app *a, const char *source_url, const char *id, const char *workspace)
{
    int fd = scratch(a);
    if (fd < 0)
        return -1;
    char url[600];
    snprintf(url, sizeof url, "%s/v1/fleet/internal/sessions/%s/archive", source_url, id);
    long code = internal_request("GET", url, a->cfg->fleet_secret, fd, 300);
    int rc = code == 200 && lseek(fd, 0, SEEK_SET) == 0 ? run_tar("-x", workspace, fd) : -1;
    if (code != 200)
        log_session(LV_WARN, id, NULL, "move of %s: its node answered %ld for the archive", id, code);
    close(fd);
    return rc;
}

/* Moves session id to another node: true when it went. */
static bool move_one(app *a, const char *id)
{
    session *s = NULL;
    if (!registry_move_out_begin(a->reg, id, &s))
        return false; /* a request holds it (a command runs): the next heartbeat tries again */
    char target[400], url[600];
    bool moved = false;
    if (fleet_move_begin(a->fleet, id, target, sizeof target) == 0) {
        snprintf(url, sizeof url, "%s/v1/fleet/internal/sessions/%s", target, id);
        long code = internal_request("POST", url, a->cfg->fleet_secret, -1, 300);
        moved = code == 200;
        if (!moved) {
            log_session(LV_WARN, id, NULL, "drain: %s could not move to %s (answer %ld); it stays here for now", id,
                        target, code);
            fleet_move_cancel(a->fleet, id);
        } else {
            log_session(LV_INFO, id, NULL, "drain: %s moved to %s", id, target);
        }
    }
    registry_move_out_end(a->reg, s, moved);
    return moved;
}

void move_drain_step(void *ctx)
{
    app *a = ctx;
    if (!a->cfg->fleet_secret)
        return; /* no secret: sessions stay until they end (docs/fleet.md) */
    char(*ids)[17] = NULL;
    double *times = NULL;
    size_t n = registry_times(a->reg, &ids, &times);
    double until = now_s() + STEP_SECONDS;
    for (size_t i = 0; ids && i < n && now_s() < until; i++)
        move_one(a, ids[i]);
    free(ids);
    free(times);
}
