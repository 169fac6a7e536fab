/* The agent protocol's one definition (src/agent/protocol.h), tested alone: every frame type
 * round-trips through a pipe with frame_send and frame_recv, every payload through its encode
 * and decode, and every bound is refused one past it (unknown types, slots, lengths, a
 * request's environment count and termination). Built and run by spec/server/units_spec.lua. */
#include "check.h"

#include "../../src/agent/protocol.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>

static const frame_type ALL[] = {FRAME_RUN,   FRAME_KILL,  FRAME_STDOUT, FRAME_STDERR, FRAME_EXIT,  FRAME_FAIL,
                                 FRAME_SPAWN, FRAME_STDIN, FRAME_SIGNAL, FRAME_CREDIT, FRAME_BOOTED, FRAME_IDLE,
                                 FRAME_PING,  FRAME_PONG};
#define NTYPES (sizeof ALL / sizeof ALL[0])

/* A payload of n bytes of a pattern that depends on seed. */
static unsigned char *pattern(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed);
    return p;
}

/* Sends every type at its smallest and largest length on every slot (the child's side). */
static void send_all(int fd)
{
    for (size_t t = 0; t < NTYPES; t++) {
        uint32_t min, max;
        (void)frame_bounds(ALL[t], &min, &max);
        uint32_t lens[] = {min, max};
        for (unsigned slot = 0; slot < AGENT_SLOTS; slot++)
            for (int k = 0; k < 2; k++) {
                unsigned char *out = pattern(lens[k], (unsigned)t + slot);
                if (frame_send(fd, ALL[t], slot, out, lens[k]) != 0)
                    _exit(1);
                free(out);
            }
    }
    _exit(0);
}

/* Every type at its smallest and largest length, on every slot: sent by a child through a
 * pipe and received unchanged, in order. */
static void round_trip_frames(void)
{
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        send_all(p[1]);
    }
    close(p[1]);
    static unsigned char in[AGENT_REQUEST_MAX];
    for (size_t t = 0; t < NTYPES; t++) {
        uint32_t min, max;
        CHECK(frame_bounds(ALL[t], &min, &max));
        uint32_t lens[] = {min, max};
        for (unsigned slot = 0; slot < AGENT_SLOTS; slot++)
            for (int k = 0; k < 2; k++) {
                unsigned char *out = pattern(lens[k], (unsigned)t + slot);
                frame_head h = {0};
                CHECK(frame_recv(p[0], &h, in, sizeof in) == 0);
                CHECK(h.type == ALL[t]);
                CHECK(h.slot == slot);
                CHECK(h.len == lens[k]);
                CHECK(lens[k] == 0 || memcmp(in, out, lens[k]) == 0);
                free(out);
            }
    }
    frame_head h;
    CHECK(frame_recv(p[0], &h, in, sizeof in) == -1); /* the child's end: end of file */
    int status = -1;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(p[0]);
}

/* Headers one past each bound, and unknown types and slots, are refused. */
static void header_bounds(void)
{
    unsigned char h[FRAME_HEADER];
    frame_head out;
    for (size_t t = 0; t < NTYPES; t++) {
        uint32_t min, max;
        CHECK(frame_bounds(ALL[t], &min, &max));
        frame_head_put(h, ALL[t], 0, max);
        CHECK(frame_head_get(h, &out) == 0);
        frame_head_put(h, ALL[t], 0, max + 1);
        CHECK(frame_head_get(h, &out) == -1);
        if (min > 0) {
            frame_head_put(h, ALL[t], 0, min - 1);
            CHECK(frame_head_get(h, &out) == -1);
        }
        frame_head_put(h, ALL[t], AGENT_SLOTS, min);
        CHECK(frame_head_get(h, &out) == -1);
        frame_head_put(h, ALL[t], FRAME_SLOT_WARMUP, min); /* the agent's own, inside the sandbox */
        CHECK(frame_head_get(h, &out) == 0 && out.slot == FRAME_SLOT_WARMUP);
    }
    int known = 0;
    for (int t = 0; t < 256; t++) {
        uint32_t min, max;
        known += frame_bounds(t, &min, &max);
        h[0] = (unsigned char)t;
        h[1] = 0;
        frame_put_u32(h + 2, 0);
        if (!frame_bounds(t, &min, &max))
            CHECK(frame_head_get(h, &out) == -1);
    }
    CHECK(known == (int)NTYPES);
    /* a frame over the reader's buffer is refused before its payload is read */
    int p[2];
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    unsigned char small[8], data[16] = {0};
    CHECK(frame_send(p[1], FRAME_STDOUT, 1, data, sizeof data) == 0);
    frame_head fh;
    CHECK(frame_recv(p[0], &fh, small, sizeof small) == -2);
    close(p[1]);
    close(p[0]);
    /* end of file, and a header cut short, are -1 */
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    CHECK(write(p[1], "1", 1) == 1);
    close(p[1]);
    CHECK(frame_recv(p[0], &fh, small, sizeof small) == -1);
    close(p[0]);
}

/* A request: encoded, decoded in place, its fields intact; the environment's bounds. */
static void run_payloads(void)
{
    const char *env[FRAME_ENV_MAX + 2];
    static char names[FRAME_ENV_MAX + 1][16];
    for (int i = 0; i <= FRAME_ENV_MAX; i++) {
        snprintf(names[i], sizeof names[i], "V%d=%d", i, i * 7);
        env[i] = names[i];
    }
    env[FRAME_ENV_MAX] = NULL;
    const char *cmd = "echo 'a b' | tr a-z A-Z; exit 3";
    size_t n = frame_run_len(cmd, env);
    CHECK(n > 0);
    char *buf = malloc(n);
    frame_run_put((unsigned char *)buf, 30000, cmd, env);
    frame_run r;
    CHECK(frame_run_get(buf, n, &r) == 0);
    CHECK(r.timeout_ms == 30000);
    CHECK(strcmp(r.command, cmd) == 0);
    int count = 0;
    while (r.env[count])
        count++;
    CHECK(count == FRAME_ENV_MAX);
    CHECK(strcmp(r.env[0], "V0=0") == 0 && strcmp(r.env[FRAME_ENV_MAX - 1], names[FRAME_ENV_MAX - 1]) == 0);
    /* one more entry than allowed: refused on both sides */
    env[FRAME_ENV_MAX] = names[FRAME_ENV_MAX];
    env[FRAME_ENV_MAX + 1] = NULL;
    CHECK(frame_run_len(cmd, env) == 0);
    size_t n2 = n + strlen(names[FRAME_ENV_MAX]) + 1;
    char *over = malloc(n2);
    memcpy(over, buf, n);
    memcpy(over + n, names[FRAME_ENV_MAX], strlen(names[FRAME_ENV_MAX]) + 1);
    CHECK(frame_run_get(over, n2, &r) == -1);
    /* not NUL-terminated, too short, over the request bound */
    buf[n - 1] = 'x';
    CHECK(frame_run_get(buf, n, &r) == -1);
    CHECK(frame_run_get(buf, 4, &r) == -1);
    CHECK(frame_run_get(buf, (size_t)AGENT_REQUEST_MAX + 1, &r) == -1);
    /* no environment at all */
    const char *none[] = {NULL};
    size_t n3 = frame_run_len("true", none);
    CHECK(n3 == 9);
    char small[16];
    frame_run_put((unsigned char *)small, 0, "true", none);
    CHECK(frame_run_get(small, n3, &r) == 0 && r.env[0] == NULL && strcmp(r.command, "true") == 0);
    /* a command at the request bound is refused by frame_run_len, one under it fits */
    size_t big = AGENT_REQUEST_MAX - 4; /* + its NUL: one over */
    char *huge = malloc(big + 1);
    memset(huge, 'a', big);
    huge[big] = '\0';
    CHECK(frame_run_len(huge, none) == 0);
    huge[big - 1] = '\0';
    CHECK(frame_run_len(huge, none) == AGENT_REQUEST_MAX);
    free(huge);
    free(over);
    free(buf);
}

/* FRAME_SIGNAL: every signal number round-trips; 0, one past FRAME_SIGNAL_MAX and a wrong
 * length are refused. */
static void signal_payloads(void)
{
    for (int sig = 1; sig <= FRAME_SIGNAL_MAX; sig++) {
        unsigned char p = (unsigned char)sig;
        CHECK(frame_signal_get(&p, 1) == sig);
    }
    unsigned char zero = 0, over = FRAME_SIGNAL_MAX + 1, two[2] = {2, 0};
    CHECK(frame_signal_get(&zero, 1) == -1);
    CHECK(frame_signal_get(&over, 1) == -1);
    CHECK(frame_signal_get(two, 2) == -1);
    CHECK(frame_signal_get(two, 0) == -1);
}

/* FRAME_EXIT: every ending and the extremes of the code round-trip; a bad ending or length is
 * refused. */
static void exit_payloads(void)
{
    int32_t codes[] = {0, 1, 127, 137, -1, INT32_MAX, INT32_MIN};
    frame_ending endings[] = {FRAME_ENDED_EXITED, FRAME_ENDED_TIMED_OUT, FRAME_ENDED_KILLED};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        for (size_t e = 0; e < 3; e++) {
            unsigned char p[5];
            frame_exit x;
            frame_exit_put(p, codes[i], endings[e]);
            CHECK(frame_exit_get(p, 5, &x) == 0 && x.code == codes[i] && x.ending == endings[e]);
        }
    unsigned char p[6] = {0, 0, 0, 0, 3, 0};
    frame_exit x;
    CHECK(frame_exit_get(p, 5, &x) == -1);
    p[4] = 0;
    CHECK(frame_exit_get(p, 4, &x) == -1);
    CHECK(frame_exit_get(p, 6, &x) == -1);
}

/* Each type's direction: what the agent sends on its stdout, what airlockd sends on its stdin;
 * FRAME_CREDIT's window round-trips. */
static void directions(void)
{
    static const frame_type from_agent[] = {FRAME_STDOUT, FRAME_STDERR, FRAME_EXIT, FRAME_FAIL,
                                            FRAME_BOOTED, FRAME_IDLE,   FRAME_PONG};
    static const frame_type to_agent[] = {FRAME_RUN,    FRAME_KILL,   FRAME_SPAWN, FRAME_STDIN,
                                          FRAME_SIGNAL, FRAME_CREDIT, FRAME_PING};
    CHECK(sizeof from_agent / sizeof from_agent[0] + sizeof to_agent / sizeof to_agent[0] == NTYPES);
    for (size_t i = 0; i < sizeof from_agent / sizeof from_agent[0]; i++)
        CHECK(frame_from_agent(from_agent[i]));
    for (size_t i = 0; i < sizeof to_agent / sizeof to_agent[0]; i++)
        CHECK(!frame_from_agent(to_agent[i]));
    uint32_t windows[] = {0, 1, AGENT_WINDOW / 2, AGENT_WINDOW, UINT32_MAX};
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        unsigned char p[4];
        frame_put_u32(p, windows[i]);
        CHECK(frame_get_u32(p) == windows[i]);
    }
}

/* Random headers never pass with a length outside their type's bounds. */
static void random_headers(void)
{
    srand(12345);
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        unsigned char h[FRAME_HEADER];
        for (int k = 0; k < FRAME_HEADER; k++)
            h[k] = (unsigned char)rand();
        if (i % 3 == 0)
            h[0] = (unsigned char)ALL[(size_t)i % NTYPES];
        frame_head out;
        uint32_t min, max;
        if (frame_head_get(h, &out) == 0 &&
            (!frame_bounds(out.type, &min, &max) || out.len < min || out.len > max ||
             (out.slot >= AGENT_SLOTS && out.slot != FRAME_SLOT_WARMUP)))
            bad++;
    }
    CHECK(bad == 0);
}

int main(void)
{
    round_trip_frames();
    header_bounds();
    run_payloads();
    exit_payloads();
    signal_payloads();
    directions();
    random_headers();
    return CHECK_SUMMARY();
}
