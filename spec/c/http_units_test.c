/* Unit test of airlockd's bounded HTTP parts and path resolution: the counter table
 * (http/tally: random adds and removals against a plain array), the body budget (total and
 * per-owner share), the worker pool (places = threads + queue, every job runs once), the
 * connection table's eviction near the cap (oldest silent first, then talking; per lane), and
 * domain/paths (Python realpath results for symlinks, loops and escapes; the length and depth
 * bounds; 400,000 "q/" and as many "../" resolved in time linear in the length). Built and run
 * by spec/server/http_units_spec.lua. */
#include "check.h"
#include "domain/paths.h"
#include "http/budget.h"
#include "http/conns.h"
#include "http/pool.h"
#include "http/tally.h"
#include "util/buf.h"

#include <arpa/inet.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- tally --------------------------------------------------------------------------- */

static void key_of(unsigned n, unsigned char k[TALLY_KEY])
{
    memset(k, 0, TALLY_KEY);
    memcpy(k, &n, sizeof n);
}

static void test_tally(void)
{
    tally t;
    CHECK(tally_init(&t, 100));
    unsigned char k[TALLY_KEY];
    key_of(7, k);
    CHECK(tally_add(&t, k, 3, 5) == 3 && tally_add(&t, k, 2, 5) == 5);
    CHECK(tally_add(&t, k, 1, 5) == 0 && tally_get(&t, k) == 5); /* over the limit: unchanged */
    tally_sub(&t, k, 5);
    CHECK(tally_get(&t, k) == 0 && t.used == 0);

    /* random adds and removals over 150 keys (clusters, wrap-around, backward shifts) against
     * a plain array; at most 100 keys hold a count at once */
    enum { KEYS = 150 };
    uint64_t ref[KEYS] = {0};
    unsigned held = 0;
    srand(12345);
    bool same = true;
    for (int step = 0; step < 200000 && same; step++) {
        unsigned n = (unsigned)rand() % KEYS;
        key_of(n * 2654435761u, k);
        if (rand() % 2 && (ref[n] || held < 100)) {
            uint64_t got = tally_add(&t, k, 1, UINT64_MAX);
            held += ref[n] == 0;
            ref[n]++;
            same = got == ref[n];
        } else if (ref[n]) {
            tally_sub(&t, k, 1);
            ref[n]--;
            held -= ref[n] == 0;
        }
        if (step % 997 == 0)
            for (unsigned i = 0; i < KEYS && same; i++) {
                key_of(i * 2654435761u, k);
                same = tally_get(&t, k) == ref[i];
            }
    }
    CHECK(same);
    CHECK(t.used == held);
    tally_free(&t);
}

/* ---- body buffers grow to exact sizes (what the budget accounts) ------------------------ */

static void test_grow_to(void)
{
    buffer b;
    buf_init(&b, 100);
    CHECK(buf_grow_to(&b, 11) == 0 && b.cap == 11 && b.data[0] == '\0');
    CHECK(buf_append(&b, "0123456789", 10) == 0 && b.cap == 11); /* fits exactly: no growth */
    CHECK(buf_grow_to(&b, 5) == 0 && b.cap == 11);                /* never shrinks */
    CHECK(buf_grow_to(&b, 101) == 0 && b.cap == 101);             /* the limit and the NUL */
    CHECK(buf_grow_to(&b, 102) == -1);
    buf_free(&b);
}

/* ---- budget -------------------------------------------------------------------------- */

static void test_budget(void)
{
    body_budget b;
    CHECK(budget_init(&b, 1000, 400, 16));
    CHECK(budget_take(&b, 1, 400));
    CHECK(!budget_take(&b, 1, 1));      /* owner 1's share is used up */
    CHECK(budget_take(&b, 2, 400));
    CHECK(!budget_take(&b, 3, 201));    /* the total is */
    CHECK(budget_take(&b, 3, 200));
    budget_give(&b, 1, 400);
    CHECK(budget_take(&b, 1, 300) && budget_take(&b, 4, 100));
    CHECK(!budget_take(&b, 4, 1));
    budget_free(&b);
}

/* ---- pool ---------------------------------------------------------------------------- */

static atomic_int ran;
static atomic_int gate; /* jobs wait while it is 0 */

static void job(void *p)
{
    (void)p;
    while (!atomic_load(&gate))
        usleep(1000);
    atomic_fetch_add(&ran, 1);
}

static void count_running(void *j, void *ctx)
{
    (void)j;
    (*(int *)ctx)++;
}

static void test_pool(void)
{
    worker_pool *p = pool_new(2, 3, job);
    CHECK(p != NULL);
    int reserved = 0;
    while (reserved < 10 && pool_reserve(p))
        reserved++;
    CHECK(reserved == 5); /* 2 threads + 3 waiting */
    for (int i = 0; i < reserved; i++)
        pool_submit(p, &ran);
    usleep(50000);
    int running = 0;
    pool_each_running(p, count_running, &running);
    CHECK(running == 2);
    CHECK(pool_pending(p) == 5);
    atomic_store(&gate, 1);
    for (int i = 0; i < 500 && pool_pending(p); i++)
        usleep(2000);
    CHECK(atomic_load(&ran) == 5 && pool_pending(p) == 0);
    CHECK(pool_reserve(p)); /* places are given back */
    pool_submit(p, &ran);
    pool_free(p);
    CHECK(atomic_load(&ran) == 6);
}

/* ---- paths --------------------------------------------------------------------------- */

static char ws[PATH_MAX];

static void mk(const char *rel, bool dir)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", ws, rel);
    if (dir)
        CHECK(mkdir(p, 0755) == 0);
    else
        CHECK(fclose(fopen(p, "w")) == 0);
}

static void ln(const char *target, const char *rel)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", ws, rel);
    CHECK(symlink(target, p) == 0);
}

/* path resolves to want (relative to the workspace) or to rc */
static void expect(const char *path, int want_rc, const char *want_rel)
{
    char *rel = NULL;
    int rc = path_resolve(ws, path, strlen(path), &rel);
    bool ok = rc == want_rc && (!want_rel || (rel && strcmp(rel, want_rel) == 0));
    if (!ok)
        printf("path '%.60s': rc %d rel '%s', want rc %d rel '%s'\n", path, rc, rel ? rel : "(null)", want_rc,
               want_rel ? want_rel : "(null)");
    CHECK(ok);
    free(rel);
}

/* The same tree as Python's os.path.realpath was asked about (3.11, non-strict). */
static void test_paths(void)
{
    char tmpl[] = "/tmp/airlock-paths-XXXXXX";
    char *dir = mkdtemp(tmpl);
    CHECK(dir != NULL);
    CHECK(realpath(dir, ws) != NULL);
    mk("d", true);
    mk("d/f", false);
    ln("d", "inside");
    ln("/etc", "outside");
    ln("l2", "l1");
    ln("l1", "l2");
    ln("d/../..", "up");
    ln("loopdir/x", "loopdir");
    ln("f", "d/ff");
    ln("//x", "abs2");
    char evil[PATH_MAX + 16];
    snprintf(evil, sizeof evil, "%s_evil", ws);
    ln(evil, "evil");

    expect("a/../b.txt", PATH_OK, "b.txt");
    expect("../x", PATH_DENIED, NULL);
    expect("/etc/passwd", PATH_DENIED, NULL);
    expect("inside/f", PATH_OK, "d/f");
    expect("outside/passwd", PATH_DENIED, NULL);
    expect("l1", PATH_OK, "l1");            /* a loop: Python keeps the link's own path */
    expect("l1/x", PATH_OK, "l1/x");
    expect("l1/../y", PATH_OK, "y");
    expect("evil/z", PATH_DENIED, NULL);    /* <workspace>_evil is a sibling, not inside */
    expect("loopdir/a/b", PATH_OK, "loopdir/x/a/b");
    expect("d/ff", PATH_OK, "d/f");
    expect("d/f/x/../g", PATH_OK, "d/f/g"); /* under a file nothing exists: read lexically */
    expect("d/nope/../f", PATH_OK, "d/f");
    expect("inside/../inside/f", PATH_OK, "d/f");
    expect("abs2/q", PATH_DENIED, NULL);
    expect("", PATH_OK, "");
    char up[PATH_MAX + 32];
    snprintf(up, sizeof up, "up%s/d", strrchr(ws, '/'));
    expect(up, PATH_OK, "d");

    /* the bounds, before any filesystem work */
    char *p = malloc(PATH_MAX_BYTES + 2);
    memset(p, 'a', PATH_MAX_BYTES + 1);
    p[PATH_MAX_BYTES + 1] = '\0';
    expect(p, PATH_TOO_LONG, NULL);
    p[PATH_MAX_BYTES] = '\0';
    expect(p, PATH_OK, p); /* 4,096 bytes is allowed (opening a name that long fails later) */
    size_t n = 0;
    for (int i = 0; i < PATH_MAX_DEPTH + 1; i++)
        n += (size_t)sprintf(p + n, "q/");
    expect(p, PATH_TOO_DEEP, NULL);
    n = 0;
    for (int i = 0; i < PATH_MAX_DEPTH; i++)
        n += (size_t)sprintf(p + n, "q/");
    expect(p, PATH_OK, NULL);
    n = 0;
    for (int i = 0; i < 600; i++)
        n += (size_t)sprintf(p + n, "q/../");
    expect(p, PATH_OK, ""); /* long but never deeper than one level */
    free(p);
    /* a symlink that makes a short path resolve too deep */
    char deep[PATH_MAX_DEPTH * 2 + 8] = "";
    for (int i = 0; i < PATH_MAX_DEPTH; i++)
        strcat(deep, "z/");
    ln(deep, "deeplink");
    expect("deeplink/x", PATH_TOO_DEEP, NULL);

    /* linear: 400,000 "q/" and as many "../" (2.0 MB), with the bounds lifted, and a quarter
     * of it; the old resolution took 14.6 s for the full one */
    for (int round = 0; round < 2; round++) {
        size_t levels = round ? 400000 : 100000;
        char *big = malloc(levels * 5 + 8);
        size_t o = 0;
        for (size_t i = 0; i < levels; i++, o += 2)
            memcpy(big + o, "q/", 2);
        for (size_t i = 0; i < levels; i++, o += 3)
            memcpy(big + o, "../", 3);
        memcpy(big + o, "f", 2);
        char *rel = NULL;
        double t0 = now_ms();
        int rc = path_resolve_bounded(ws, big, o + 1, o + 1, levels, &rel);
        double ms = now_ms() - t0;
        CHECK(rc == PATH_OK && rel && strcmp(rel, "f") == 0);
        printf("resolved %zu levels up and down (%zu bytes) in %.1f ms\n", levels, o + 1, ms);
        free(rel);
        rc = path_resolve(ws, big, o + 1, &rel);
        CHECK(rc == PATH_TOO_LONG);
        free(big);
    }
    char cmd[PATH_MAX + 32];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
    CHECK(system(cmd) == 0);
}

/* ---- conns: eviction near the cap ---------------------------------------------------- */

typedef struct {
    int fd, peer;
    conn_slot *slot;
} test_conn;

/* A connection from 127.0.0.<n> (n 0: from the unix socket) on a socket pair. */
static test_conn open_test_conn(conn_table *t, unsigned n)
{
    test_conn c = {-1, -1, NULL};
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    c.fd = sv[0];
    c.peer = sv[1];
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(0x7f000000u | n);
    c.slot = conns_open(t, c.fd, n ? (struct sockaddr *)&sin : NULL);
    CHECK(c.slot != NULL);
    return c;
}

static void close_test_conn(conn_table *t, test_conn *c)
{
    conns_close(t, c->slot);
    close(c->fd);
    close(c->peer);
}

static void test_conns(void)
{
    conn_table t;
    CHECK(conns_init(&t, 64, 100, 4, 10));
    test_conn c[12];
    for (int i = 0; i < 4; i++) /* up to evict_at: nobody goes */
        c[i] = open_test_conn(&t, 1 + (unsigned)i % 2);
    for (int i = 0; i < 4; i++)
        CHECK(!c[i].slot->cut);
    conns_talking(&t, c[0].slot);              /* 0 sent its request line */
    conns_set(&t, c[1].slot, PHASE_BODY, 0);   /* 1 sends its body: owes no headers */
    c[4] = open_test_conn(&t, 3);              /* 5 open: the oldest silent one (2) goes */
    CHECK(c[2].slot->cut && !c[0].slot->cut && !c[1].slot->cut && !c[3].slot->cut && !c[4].slot->cut);
    char b;
    CHECK(read(c[2].peer, &b, 1) == 0);        /* the client sees the end */
    conns_set(&t, c[1].slot, PHASE_HEADERS, 0); /* 1 answered, kept alive: silent, newest */
    c[5] = open_test_conn(&t, 4);              /* 3, then 4, then 1 before the talking 0 */
    CHECK(c[3].slot->cut);
    c[6] = open_test_conn(&t, 4);
    CHECK(c[4].slot->cut && !c[1].slot->cut);
    c[7] = open_test_conn(&t, 0);              /* the unix socket's lane counts apart */
    CHECK(!c[1].slot->cut && !c[7].slot->cut);
    c[8] = open_test_conn(&t, 5);
    CHECK(c[1].slot->cut && !c[0].slot->cut);
    for (int i = 5; i <= 8; i++)               /* every silent one goes before the talking 0 */
        if (i != 7)
            conns_talking(&t, c[i].slot);
    c[9] = open_test_conn(&t, 6);              /* the talking ones, oldest first: 0 */
    CHECK(c[0].slot->cut && !c[5].slot->cut && !c[9].slot->cut);
    c[10] = open_test_conn(&t, 6);             /* silent before talking, however new: 9 */
    CHECK(c[9].slot->cut && !c[5].slot->cut && !c[10].slot->cut);
    CHECK(atomic_load(&t.evicted) == 6);
    for (int i = 0; i <= 10; i++)
        close_test_conn(&t, &c[i]);
    CHECK(t.lanes[CONN_TCP].open == 0 && t.lanes[CONN_LOCAL].open == 0);
    CHECK(t.lanes[CONN_TCP].head[WAIT_SILENT] == -1 && t.lanes[CONN_TCP].head[WAIT_TALKING] == -1);
    conns_free(&t);
}

int main(void)
{
    test_tally();
    test_conns();
    test_grow_to();
    test_budget();
    test_pool();
    test_paths();
    return CHECK_SUMMARY();
}
