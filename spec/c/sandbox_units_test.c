/* Unit test of what bounds a command's cost to airlockd: the output capture
 * (sandbox/capture), the launcher's output budget and cancel descriptor (sandbox/proc) and
 * the host-wide command slots (domain/slots). Real pipes, processes and threads; no gVisor.
 * Built and run by spec/server/units_spec.lua. */
#include "check.h"
#include "domain/slots.h"
#include "sandbox/capture.h"
#include "sandbox/proc.h"
#include "text/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Feeds s to a fresh capture of limit bytes in pieces of step; returns what it keeps. */
static char *kept(size_t limit, const char *s, size_t n, size_t step, size_t *len, uint64_t *omitted)
{
    capture c;
    capture_init(&c, limit);
    for (size_t i = 0; i < n; i += step)
        CHECK(capture_feed(&c, s + i, n - i < step ? n - i : step) == 0);
    CHECK(c.total == n);
    return capture_take(&c, len, omitted);
}

static void test_capture_cuts(void)
{
    size_t len;
    uint64_t om;
    /* limit 10: head 4, tail 6 */
    char *k = kept(10, "0123456789", 10, 3, &len, &om);
    CHECK(k && strcmp(k, "0123456789") == 0 && om == 0);
    free(k);
    k = kept(10, "0123456789AB", 12, 5, &len, &om);
    CHECK(k && om == 2 && strcmp(k, "0123\n\n... [TRUNCATED: 2 bytes omitted] ...\n\n6789AB") == 0);
    free(k);
    k = kept(10, "short", 5, 1, &len, &om);
    CHECK(k && strcmp(k, "short") == 0 && om == 0 && len == 5);
    free(k);
    k = kept(10, "", 0, 1, &len, &om);
    CHECK(k && len == 0 && om == 0);
    free(k);

    /* the ring wraps many times: only the last 6 bytes stay */
    char big[5000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)('a' + i % 26);
    k = kept(10, big, sizeof big, 7, &len, &om);
    CHECK(k && om == sizeof big - 10 && memcmp(k, big, 4) == 0 &&
          memcmp(k + len - 6, big + sizeof big - 6, 6) == 0);
    free(k);

    /* a cut through a 3-byte character ("€" = E2 82 AC) moves before it in the head and
     * after it in the tail; the dropped bytes count as omitted */
    char u[64];
    size_t n = 0;
    memcpy(u + n, "abc\xE2\x82\xAC", 6); /* head_max 4 ends inside the euro sign */
    n += 6;
    memset(u + n, 'x', 20);
    n += 20;
    memcpy(u + n, "\xE2\x82\xAC" "12345", 8); /* tail_max 6 starts inside the last one */
    n += 8;
    k = kept(10, u, n, 4, &len, &om);
    CHECK(k && om == n - 3 - 5);
    CHECK(k && strncmp(k, "abc\n\n... [TRUNCATED: ", 21) == 0 && len >= 5 && strcmp(k + len - 5, "12345") == 0);
    CHECK(k && utf8_valid(k, len));
    free(k);

    /* a complete character at the edge stays; an invalid byte stays as it is (the decoder
     * replaces it exactly as it would in the whole stream) */
    memcpy(u, "a\xC3\xA9" "bbbbbbbbbbbb" "\xFF" "tail5", 21);
    k = kept(10, u, 21, 21, &len, &om);
    CHECK(k && strncmp(k, "a\xC3\xA9" "b\n\n", 6) == 0 && strcmp(k + len - 6, "\xFF" "tail5") == 0);
    free(k);

    /* a UTF-8 text cut anywhere keeps a valid prefix and a valid suffix */
    const char *unit = "h\xC3\xA9llo w\xE2\x82\xACrld \xF0\x9F\x98\x80!"; /* 1-, 2-, 3-, 4-byte chars */
    size_t ul = strlen(unit);
    char text[ 4000];
    size_t tl = 0;
    while (tl + ul < sizeof text) {
        memcpy(text + tl, unit, ul);
        tl += ul;
    }
    bool all_valid = true, all_match = true;
    for (size_t limit = 10; limit < 200; limit++) {
        capture c;
        capture_init(&c, limit);
        capture_feed(&c, text, tl);
        size_t head_max = c.head_max;
        k = capture_take(&c, &len, &om);
        char *marker = k ? strstr(k, "\n\n... [TRUNCATED: ") : NULL;
        char *after = marker ? strstr(marker, "] ...\n\n") : NULL;
        if (!k || !marker || !after) {
            all_valid = false;
            free(k);
            continue;
        }
        size_t hl = (size_t)(marker - k), tail_len = len - (size_t)(after + 7 - k);
        all_valid = all_valid && utf8_valid(k, len) && hl <= head_max && hl + 3 >= head_max;
        all_match = all_match && memcmp(k, text, hl) == 0 && memcmp(after + 7, text + tl - tail_len, tail_len) == 0 &&
                    om == tl - hl - tail_len;
        free(k);
    }
    CHECK(all_valid);
    CHECK(all_match);
}

typedef struct {
    int fd;
    size_t bytes;
} writer_arg;

static void *write_zeros(void *p)
{
    writer_arg *w = p;
    static char chunk[65536];
    size_t left = w->bytes;
    while (left) {
        ssize_t n = write(w->fd, chunk, left < sizeof chunk ? left : sizeof chunk);
        if (n <= 0)
            break;
        left -= (size_t)n;
    }
    static const char end[] = "THE END";
    (void)!write(w->fd, end, sizeof end - 1);
    close(w->fd);
    return NULL;
}

/* 40 MB through a pipe, tiny budget (scratch reads) and a 1 MiB one (reads into the ring). */
static void test_capture_pipe(void)
{
    size_t limits[2] = {100, 1024 * 1024};
    for (int i = 0; i < 2; i++) {
        int p[2];
        CHECK(pipe(p) == 0);
        writer_arg w = {p[1], 40u * 1000 * 1000};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, write_zeros, &w) == 0);
        capture c;
        capture_init(&c, limits[i]);
        ssize_t got;
        size_t reads = 0;
        while ((got = capture_read(&c, p[0])) > 0)
            reads++;
        CHECK(got == 0);
        pthread_join(t, NULL);
        close(p[0]);
        CHECK(c.total == 40u * 1000 * 1000 + 7);
        CHECK(reads < 40u * 1000 * 1000 / 4096); /* large reads, whatever the budget */
        size_t len;
        uint64_t om;
        char *k = capture_take(&c, &len, &om);
        CHECK(k && len < limits[i] + 64 && len >= 7 && memcmp(k + len - 7, "THE END", 7) == 0);
        CHECK(om == 40u * 1000 * 1000 + 7 - limits[i]);
        free(k);
    }
}

/* ---- the launcher ------------------------------------------------------------------- */

static const char *const env[] = {"PATH=/usr/bin:/bin", NULL};

typedef struct {
    int fd;
    long after_ms;
    bool send_data_only;
} hangup_arg;

static void *hang_up(void *p)
{
    hangup_arg *h = p;
    sleep_ms(h->after_ms);
    if (h->send_data_only)
        (void)!write(h->fd, "more request bytes", 18);
    else
        close(h->fd);
    return NULL;
}

static void test_proc_budget(void)
{
    const char *argv[] = {"/bin/sh", "-c", "head -c 5000000 /dev/zero; printf 'last words'; echo oops >&2", NULL};
    sbx_proc_opts o = {.argv = argv, .envp = env, .timeout_ms = 30000, .output_limit = 1000, .cancel_fd = -1};
    sbx_proc_result r;
    char eb[256] = "";
    CHECK(sbx_proc_run(&o, &r, eb, sizeof eb) == 0);
    CHECK(!r.timed_out && !r.cancelled && sbx_proc_exit_code(r.status) == 0);
    CHECK(r.out.total == 5000010 && r.err.total == 5);
    size_t len;
    uint64_t om;
    char *out = capture_take(&r.out, &len, &om);
    CHECK(out && om == 5000010 - 1000 && strcmp(out + len - 10, "last words") == 0);
    free(out);
    sbx_proc_result_free(&r);
}

static void test_proc_cancel(void)
{
    /* the client hangs up 300 ms into a 30 s command: killed at once, marked cancelled */
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    const char *argv[] = {"/bin/sh", "-c", "echo started; sleep 30; echo never", NULL};
    sbx_proc_opts o = {.argv = argv, .envp = env, .timeout_ms = 60000, .cancel_fd = sp[0]};
    hangup_arg h = {sp[1], 300, false};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, hang_up, &h) == 0);
    sbx_proc_result r;
    char eb[256] = "";
    double t0 = now_s();
    CHECK(sbx_proc_run(&o, &r, eb, sizeof eb) == 0);
    double took = now_s() - t0;
    pthread_join(t, NULL);
    CHECK(r.cancelled && !r.timed_out);
    CHECK(took < 5.0);
    printf("cancelled a 30 s command after %.2f s (hang-up at 0.30 s)\n", took);
    sbx_proc_result_free(&r);
    close(sp[0]);

    /* data from the client is no hang-up: the command finishes */
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    const char *argv2[] = {"/bin/sh", "-c", "sleep 1; echo done", NULL};
    o.argv = argv2;
    o.cancel_fd = sp[0];
    h = (hangup_arg){sp[1], 200, true};
    CHECK(pthread_create(&t, NULL, hang_up, &h) == 0);
    CHECK(sbx_proc_run(&o, &r, eb, sizeof eb) == 0);
    pthread_join(t, NULL);
    CHECK(!r.cancelled && sbx_proc_exit_code(r.status) == 0);
    CHECK(strcmp(capture_head(&r.out, NULL), "done\n") == 0);
    sbx_proc_result_free(&r);
    close(sp[0]);
    close(sp[1]);
}

/* ---- slots -------------------------------------------------------------------------- */

typedef struct {
    slots *s;
    size_t tenant;
    int cancel_fd;
    slot_result result;
    double waited;
    volatile bool done;
} acquirer;

static void *acquire_one(void *p)
{
    acquirer *a = p;
    double t0 = now_s();
    a->result = slots_acquire(a->s, a->tenant, a->cancel_fd);
    a->waited = now_s() - t0;
    a->done = true;
    return NULL;
}

static void test_slots(void)
{
    /* 2 slots, tenant 0 holds both; tenant 0 queues first, tenant 1 second: the freed slot
     * goes to tenant 1, which holds none */
    slots *s = slots_new(2, 4, 2, 5000);
    CHECK(s && slots_max(s) == 2);
    CHECK(slots_acquire(s, 0, -1) == SLOT_OK && slots_acquire(s, 0, -1) == SLOT_OK);
    acquirer a0 = {s, 0, -1, SLOT_BUSY, 0, false}, a1 = {s, 1, -1, SLOT_BUSY, 0, false};
    pthread_t t0, t1;
    CHECK(pthread_create(&t0, NULL, acquire_one, &a0) == 0);
    sleep_ms(100);
    CHECK(pthread_create(&t1, NULL, acquire_one, &a1) == 0);
    sleep_ms(100);
    /* the queue (2) is full: a third waiter is refused at once */
    double q0 = now_s();
    CHECK(slots_acquire(s, 2, -1) == SLOT_BUSY && now_s() - q0 < 0.5);
    CHECK(!a0.done && !a1.done && slots_running(s) == 2);
    slots_release(s, 0);
    sleep_ms(200);
    CHECK(a1.done && a1.result == SLOT_OK && !a0.done);
    slots_release(s, 0);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    CHECK(a0.result == SLOT_OK && slots_running(s) == 2);
    slots_release(s, 0);
    slots_release(s, 1);
    CHECK(slots_running(s) == 0);
    slots_free(s);

    /* one slot: tenant 0 runs, queues a second command, tenant 1 queues after it; both then
     * hold none, and tenant 1, never served, goes first */
    s = slots_new(1, 2, 4, 5000);
    CHECK(slots_acquire(s, 0, -1) == SLOT_OK);
    a0 = (acquirer){s, 0, -1, SLOT_BUSY, 0, false};
    a1 = (acquirer){s, 1, -1, SLOT_BUSY, 0, false};
    CHECK(pthread_create(&t0, NULL, acquire_one, &a0) == 0);
    sleep_ms(100);
    CHECK(pthread_create(&t1, NULL, acquire_one, &a1) == 0);
    sleep_ms(100);
    slots_release(s, 0);
    sleep_ms(200);
    CHECK(a1.done && a1.result == SLOT_OK && !a0.done);
    slots_release(s, 1);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    CHECK(a0.result == SLOT_OK);
    slots_release(s, 0);
    slots_free(s);

    /* a waiter gives up after the wait, or at once when its client hangs up */
    s = slots_new(1, 2, 4, 400);
    CHECK(slots_acquire(s, 0, -1) == SLOT_OK);
    double w0 = now_s();
    CHECK(slots_acquire(s, 1, -1) == SLOT_BUSY);
    double waited = now_s() - w0;
    CHECK(waited >= 0.35 && waited < 3.0);
    slots_free(s);
    s = slots_new(1, 2, 4, 30000);
    CHECK(slots_acquire(s, 0, -1) == SLOT_OK);
    int sp[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
    acquirer ac = {s, 1, sp[0], SLOT_OK, 0, false};
    CHECK(pthread_create(&t0, NULL, acquire_one, &ac) == 0);
    sleep_ms(200);
    close(sp[1]);
    pthread_join(t0, NULL);
    CHECK(ac.result == SLOT_CANCELLED && ac.waited < 2.0);
    slots_release(s, 0);
    CHECK(slots_running(s) == 0);
    close(sp[0]);
    /* no waiting configured: busy at once */
    slots_free(s);
    s = slots_new(1, 1, 4, 0);
    CHECK(slots_acquire(s, 0, -1) == SLOT_OK && slots_acquire(s, 0, -1) == SLOT_BUSY);
    slots_free(s);
}

int main(void)
{
    test_capture_cuts();
    test_capture_pipe();
    test_proc_budget();
    test_proc_cancel();
    test_slots();
    return CHECK_SUMMARY();
}
