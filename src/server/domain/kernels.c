/* The kernels of sessions (see kernels.h): the table, a kernel's process on its agent slot
 * (start, kill, restart), and its cells read from the kernel wire's events. */
#include "domain/kernels.h"

#include "log/log.h"
#include "sandbox/capture.h"
#include "sandbox/session_sandbox.h"
#include "util/buf.h"
#include "../../agent/protocol.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The longest event line kept (a result's images are base64 in one line); a longer one is
 * dropped whole and counted in the cell's warnings. */
#define LINE_MAX_BYTES (16u * 1024u * 1024u)
/* After a SIGKILL, how long the agent has to say the process ended. */
#define KILL_WAIT_MS 5000
/* How long a kernel waits for its session's sandbox to come back after it died. */
#define REBORROW_MS 30000

struct kernel {
    char id[KERNEL_ID_MAX];
    char session_id[sizeof ((session *)0)->id];
    char *tenant, *root;
    pthread_mutex_t run_mu; /* one cell (or start, restart, end) at a time */
    sandbox *sb;            /* its session's sandbox, borrowed; NULL when none */
    int slot;               /* its process's agent slot; -1 when it has none */
    int refs;               /* table's reference + kernels_get's; under the table's mu */
    bool ended;             /* deleted: no cell runs any more */
    bool busy;              /* a cell runs (for the state); under the table's mu */
    int interrupt_slot;     /* the slot of the process running a cell (SIGINT goes there); -1
                             * outside a cell's run; under the table's mu */
    int restart_says;       /* cells still to say kernel_restarted */
    int next_cell;          /* the wire's request id */
    buffer line;            /* the event line being read */
    bool skipping;          /* a line over LINE_MAX_BYTES: dropped up to its end */
    char payload[FRAME_OUTPUT_MAX]; /* the frame being read (under run_mu; not thread-local
                                     * storage, which would come off every thread's stack) */
    kernel *next;
};

struct kernels {
    warm_pool *w;
    pthread_mutex_t mu;
    kernel *head;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

kernels *kernels_new(warm_pool *w)
{
    kernels *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->w = w;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

/* ---- a cell's events --------------------------------------------------------------- */

typedef struct {
    int id;                 /* the wire's request id */
    capture out, err;
    json_t *results;        /* [{mime: data}] within the budget */
    size_t results_bytes, budget;
    unsigned long long results_omitted, lines_dropped;
    json_t *error;          /* {"name","value","traceback"} or NULL */
    long long execution_count;
    bool done, ready;
    const kernel_events *ev;
} cell;

/* The bytes of a result's mime bundle (its strings), what the budget counts. */
static size_t bundle_bytes(json_t *data)
{
    size_t n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(data, k, v)
        n += strlen(k) + (json_is_string(v) ? json_string_length(v) : 16);
    return n;
}

/* One event line of the wire (a line that is not one is dropped). */
static void take_event(cell *c, const char *line, size_t len)
{
    json_t *e = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(e, "type"));
    json_t *idv = json_object_get(e, "id");
    bool ours = json_is_integer(idv) && json_integer_value(idv) == c->id;
    if (!type) {
        /* not an event */
    } else if (strcmp(type, "ready") == 0) {
        c->ready = true;
    } else if (ours && strcmp(type, "stream") == 0) {
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *text = json_object_get(e, "text");
        int stream = name && strcmp(name, "stderr") == 0 ? 2 : 1;
        if (json_is_string(text)) {
            (void)capture_feed(stream == 1 ? &c->out : &c->err, json_string_value(text), json_string_length(text));
            if (c->ev && c->ev->text)
                c->ev->text(c->ev->ctx, stream, json_string_value(text), json_string_length(text));
        }
    } else if (ours && strcmp(type, "result") == 0) {
        json_t *data = json_object_get(e, "data");
        size_t n = json_is_object(data) ? bundle_bytes(data) : 0;
        if (!json_is_object(data)) {
            /* not a result */
        } else if (c->results_bytes + n > c->budget) {
            c->results_omitted++;
        } else {
            c->results_bytes += n;
            json_array_append(c->results, data);
            if (c->ev && c->ev->result)
                c->ev->result(c->ev->ctx, data);
        }
    } else if (ours && strcmp(type, "error") == 0 && !c->error) {
        c->error = json_pack("{s:O?,s:O?,s:O?}", "name", json_object_get(e, "name"), "value",
                             json_object_get(e, "value"), "traceback", json_object_get(e, "traceback"));
        if (c->error && c->ev && c->ev->error)
            c->ev->error(c->ev->ctx, c->error);
    } else if (ours && strcmp(type, "pong") == 0) {
        c->done = true;
    } else if (ours && strcmp(type, "done") == 0) {
        json_t *n = json_object_get(e, "execution_count");
        c->execution_count = json_is_integer(n) ? json_integer_value(n) : 0;
        c->done = true;
    }
    json_decref(e);
}

/* Stdout bytes of the kernel's process: split into lines, each an event. */
static void take_bytes(kernel *k, cell *c, const char *p, size_t n)
{
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t part = nl ? (size_t)(nl - p) : n;
        if (!k->skipping && k->line.len + part > LINE_MAX_BYTES) {
            k->skipping = true;
            c->lines_dropped++;
            buf_free(&k->line);
        }
        if (!k->skipping && buf_append(&k->line, p, part) != 0) {
            k->skipping = true;
            c->lines_dropped++;
            buf_free(&k->line);
        }
        if (!nl)
            return;
        if (!k->skipping && k->line.len > 0)
            take_event(c, k->line.data, k->line.len);
        buf_truncate(&k->line, 0);
        k->skipping = false;
        p += part + 1;
        n -= part + 1;
    }
}

/* What reading the process's frames for up to wait_ms came to. */
typedef enum { READ_NOTHING, READ_FRAME, READ_ENDED, READ_GONE } read_rc;

/* Reads one frame of k's process (output taken into c): READ_ENDED with its exit code in
 * *code (-1 when it could not start or was killed) once it ended. */
static read_rc read_frame(kernel *k, cell *c, int wait_ms, int cancel_fd, bool *cancelled, int *code)
{
    char *payload = k->payload;
    frame_head h;
    frame_exit x;
    int rc = sandbox_session_proc_read(k->sb, k->slot, wait_ms, cancel_fd, cancelled, &h, payload, sizeof k->payload);
    if (rc <= 0)
        return rc == 0 ? READ_NOTHING : READ_GONE;
    switch (h.type) {
    case FRAME_STDOUT:
        take_bytes(k, c, payload, h.len);
        return READ_FRAME;
    case FRAME_STDERR: /* the program's own (before it took its fd 2 over): for the log */
        log_debug("kernel %s: %.*s", k->id, (int)(h.len > 200 ? 200 : h.len), payload);
        (void)capture_feed(&c->err, payload, h.len);
        return READ_FRAME;
    case FRAME_EXIT:
        if (frame_exit_get((unsigned char *)payload, h.len, &x) != 0)
            return READ_GONE;
        *code = x.code;
        return READ_ENDED;
    case FRAME_FAIL:
        log_warn("kernel %s could not start: %.*s", k->id, (int)h.len, payload);
        *code = -1;
        return READ_ENDED;
    default:
        return READ_GONE;
    }
}

static void cell_init(cell *c, int id, size_t budget, const kernel_events *ev)
{
    memset(c, 0, sizeof *c);
    c->id = id;
    c->budget = budget;
    c->ev = ev;
    capture_init(&c->out, budget < 2 ? 2 : budget);
    capture_init(&c->err, budget < 2 ? 2 : budget);
    c->results = json_array();
}

static void cell_free(cell *c)
{
    capture_free(&c->out);
    capture_free(&c->err);
    json_decref(c->results);
    json_decref(c->error);
}

/* ---- a kernel's process --------------------------------------------------------------- */

/* Kills k's process and waits (a bounded time) for the agent to say it ended; its slot is
 * free then. Within a turn (the sandbox thawed). */
static void kill_process(kernel *k)
{
    if (k->slot < 0)
        return;
    if (sandbox_session_proc_signal(k->sb, k->slot, SIGKILL) == 0) {
        cell c;
        cell_init(&c, -1, 2, NULL);
        int64_t until = now_ms() + KILL_WAIT_MS;
        bool cancelled = false;
        int code;
        read_rc rc = READ_NOTHING;
        while (rc != READ_ENDED && rc != READ_GONE && now_ms() < until)
            rc = read_frame(k, &c, (int)(until - now_ms()), -1, &cancelled, &code);
        cell_free(&c);
    }
    sandbox_session_proc_release(k->sb, k->slot);
    k->slot = -1;
    buf_free(&k->line);
    k->skipping = false;
}

/* Starts k's process in k->sb and waits for its ready event. 0, or -1 with errbuf. */
static int start_process(kernel *k, char *errbuf, size_t errlen)
{
    int slot = sandbox_session_spawn(k->sb, KERNEL_PYTHON_COMMAND, errbuf, errlen);
    if (slot < 0)
        return -1;
    k->slot = slot;
    cell c;
    cell_init(&c, -1, 4096, NULL);
    int64_t until = now_ms() + KERNEL_START_MS;
    bool cancelled = false;
    int code = 0;
    read_rc rc = READ_NOTHING;
    while (!c.ready && rc != READ_ENDED && rc != READ_GONE && now_ms() < until)
        rc = read_frame(k, &c, (int)(until - now_ms()), -1, &cancelled, &code);
    if (!c.ready) {
        size_t len = 0;
        uint64_t omitted;
        char *err = capture_take(&c.err, &len, &omitted);
        snprintf(errbuf, errlen, "the kernel did not start%s%.*s", err && len ? ": " : "",
                 (int)(len > 300 ? 300 : len), err ? err : "");
        free(err);
        if (rc == READ_ENDED) {
            sandbox_session_proc_release(k->sb, k->slot);
            k->slot = -1;
        } else {
            kill_process(k);
        }
    }
    bool hit;
    (void)sandbox_session_proc_end(k->sb, rc == READ_GONE, &hit);
    cell_free(&c);
    return c.ready ? 0 : -1;
}

/* The other kernels of k's session that hold dead (k's sandbox, which died) let go of it, so
 * that the session's next sandbox can boot: their processes died with it, their next cell
 * starts them anew there (and says kernel_restarted). One in a cell or a restart of its own
 * (its run_mu taken) lets go itself when it finds the sandbox dead. Under k's run_mu. */
static void others_let_go(kernels *t, kernel *k, const session *s, sandbox *dead)
{
    kernel *held[AGENT_SLOTS];
    int n = 0;
    pthread_mutex_lock(&t->mu);
    for (kernel *o = t->head; o && n < AGENT_SLOTS; o = o->next)
        if (o != k && !o->ended && o->sb == dead && strcmp(o->session_id, k->session_id) == 0) {
            o->refs++;
            held[n++] = o;
        }
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < n; i++) {
        kernel *o = held[i];
        if (pthread_mutex_trylock(&o->run_mu) == 0) {
            if (o->sb == dead) {
                if (o->slot >= 0)
                    sandbox_session_proc_release(dead, o->slot);
                o->slot = -1;
                buf_free(&o->line);
                o->skipping = false;
                warm_session_give_back(t->w, s, dead);
                o->sb = NULL;
                log_info("kernel %s of session %s lost its process with the sandbox", o->id, o->session_id);
            }
            pthread_mutex_unlock(&o->run_mu);
        }
        kernels_put(t, o);
    }
}

/* Its session's sandbox, borrowed again after it died (a memory kill takes the sandbox down:
 * the session's next one boots once every kernel let go of the dead one; the workspace is
 * untouched). */
static int reborrow(kernels *t, kernel *k, const session *s, char *errbuf, size_t errlen)
{
    if (k->sb) {
        others_let_go(t, k, s, k->sb);
        warm_session_give_back(t->w, s, k->sb);
    }
    k->sb = NULL;
    int64_t until = now_ms() + REBORROW_MS;
    while (!k->sb && now_ms() < until) {
        k->sb = warm_session_borrow(t->w, s, k->tenant, k->root, -1);
        if (k->sb && !sandbox_session_usable(k->sb)) {
            warm_session_give_back(t->w, s, k->sb);
            k->sb = NULL;
        }
        if (!k->sb)
            usleep(100 * 1000);
    }
    if (!k->sb)
        snprintf(errbuf, errlen, "the session's sandbox could not be had again");
    return k->sb ? 0 : -1;
}

/* A new process for k (after a kill or its death): in its sandbox, or in its session's next
 * one when that died. 0, or -1 with errbuf. */
static int restart(kernels *t, kernel *k, const session *s, int says, char *errbuf, size_t errlen)
{
    k->restart_says = says;
    if ((!k->sb || !sandbox_session_usable(k->sb)) && reborrow(t, k, s, errbuf, errlen) != 0)
        return -1;
    return start_process(k, errbuf, errlen);
}

/* ---- the table ------------------------------------------------------------------------ */

static void make_id(char id[KERNEL_ID_MAX])
{
    unsigned char r[8];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, r, sizeof r) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof r) { /* never: the clock then */
        int64_t t = now_ms();
        memcpy(r, &t, sizeof r);
    }
    static const char hex[] = "0123456789abcdef";
    memcpy(id, "krn_", 4);
    for (int i = 0; i < 8; i++) {
        id[4 + 2 * i] = hex[r[i] >> 4];
        id[5 + 2 * i] = hex[r[i] & 15];
    }
    id[20] = '\0';
}

static void kernel_free(kernel *k)
{
    pthread_mutex_destroy(&k->run_mu);
    buf_free(&k->line);
    free(k->tenant);
    free(k->root);
    free(k);
}

void kernels_put(kernels *t, kernel *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&t->mu);
    bool last = --k->refs == 0;
    pthread_mutex_unlock(&t->mu);
    if (last)
        kernel_free(k);
}

kernel_start_rc kernels_start(kernels *t, const session *s, const char *tenant, const char *root, int max,
                              int cancel_fd, char id[KERNEL_ID_MAX], char *errbuf, size_t errlen)
{
    kernel *k = calloc(1, sizeof *k);
    if (!k || !(k->tenant = strdup(tenant)) || (root && !(k->root = strdup(root)))) {
        if (k)
            kernel_free(k);
        snprintf(errbuf, errlen, "out of memory");
        return KERNEL_FAILED;
    }
    pthread_mutex_init(&k->run_mu, NULL);
    make_id(k->id);
    snprintf(k->session_id, sizeof k->session_id, "%s", s->id);
    k->slot = -1;
    k->interrupt_slot = -1;
    k->refs = 1;
    buf_init(&k->line, 0);
    /* counted in the table from now on (starting), so two starts at once keep to max */
    pthread_mutex_lock(&t->mu);
    int have = 0;
    for (kernel *o = t->head; o; o = o->next)
        have += strcmp(o->session_id, s->id) == 0;
    if (have >= max) {
        pthread_mutex_unlock(&t->mu);
        kernel_free(k);
        return KERNEL_TOO_MANY;
    }
    k->busy = true;
    k->next = t->head;
    t->head = k;
    k->refs++; /* ours while it starts */
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_lock(&k->run_mu);
    kernel_start_rc rc = KERNEL_OK;
    k->sb = warm_session_borrow(t->w, s, tenant, root, cancel_fd);
    if (!k->sb) {
        snprintf(errbuf, errlen, "the session has no sandbox of its own to run a kernel in");
        rc = KERNEL_NO_SANDBOX;
    } else if (start_process(k, errbuf, errlen) != 0) {
        rc = KERNEL_FAILED;
    }
    pthread_mutex_unlock(&k->run_mu);
    pthread_mutex_lock(&t->mu);
    k->busy = false;
    pthread_mutex_unlock(&t->mu);
    if (rc == KERNEL_OK) {
        memcpy(id, k->id, KERNEL_ID_MAX);
        log_info("kernel %s started in session %s", k->id, s->id);
    } else {
        (void)kernels_delete(t, s->id, k->id);
    }
    kernels_put(t, k);
    return rc;
}

json_t *kernels_describe(kernels *t, const char *session_id)
{
    json_t *list = json_array();
    pthread_mutex_lock(&t->mu);
    for (kernel *k = t->head; list && k; k = k->next)
        if (strcmp(k->session_id, session_id) == 0 && !k->ended)
            json_array_append_new(list, json_pack("{s:s,s:s,s:i,s:b}", "kernel_id", k->id, "language", "python",
                                                  "slot", k->sb ? k->slot : -1, "pings", 1));
    pthread_mutex_unlock(&t->mu);
    return list;
}

bool kernels_adopt(kernels *t, const session *s, const char *tenant, const char *root, sandbox *sb, const char *id,
                   int slot)
{
    kernel *k = calloc(1, sizeof *k);
    if (!k || strlen(id) >= KERNEL_ID_MAX || !(k->tenant = strdup(tenant)) || (root && !(k->root = strdup(root)))) {
        if (k)
            kernel_free(k);
        return false;
    }
    pthread_mutex_init(&k->run_mu, NULL);
    snprintf(k->id, sizeof k->id, "%s", id);
    snprintf(k->session_id, sizeof k->session_id, "%s", s->id);
    /* its process runs on slot (as after start_process); none: its next cell starts one */
    k->sb = sb;
    k->slot = slot >= 0 && slot < AGENT_SLOTS ? slot : -1;
    k->interrupt_slot = -1;
    k->refs = 1;
    buf_init(&k->line, 0);
    pthread_mutex_lock(&t->mu);
    k->next = t->head;
    t->head = k;
    pthread_mutex_unlock(&t->mu);
    log_info("kernel %s of session %s restored with its memory", k->id, s->id);
    return true;
}

json_t *kernels_list(kernels *t, const char *session_id)
{
    json_t *list = json_array();
    pthread_mutex_lock(&t->mu);
    for (kernel *k = t->head; k; k = k->next)
        if (strcmp(k->session_id, session_id) == 0 && !k->ended)
            json_array_append_new(list, json_pack("{s:s,s:s,s:s}", "kernel_id", k->id, "language", "python", "state",
                                                  k->busy ? "busy" : "idle"));
    pthread_mutex_unlock(&t->mu);
    return list;
}

size_t kernels_count(kernels *t, const char *session_id)
{
    size_t n = 0;
    pthread_mutex_lock(&t->mu);
    for (kernel *k = t->head; k; k = k->next)
        n += strcmp(k->session_id, session_id) == 0 && !k->ended;
    pthread_mutex_unlock(&t->mu);
    return n;
}

kernel *kernels_get(kernels *t, const char *session_id, const char *id)
{
    pthread_mutex_lock(&t->mu);
    kernel *k = t->head;
    while (k && (strcmp(k->session_id, session_id) != 0 || strcmp(k->id, id) != 0 || k->ended))
        k = k->next;
    if (k)
        k->refs++;
    pthread_mutex_unlock(&t->mu);
    return k;
}

/* Ends k (taken out of the table already): its cell under way killed, its process killed
 * and its sandbox given back. */
static void end_kernel(kernels *t, kernel *k)
{
    pthread_mutex_lock(&t->mu);
    if (k->interrupt_slot >= 0) /* a cell under way ends at once (and its kernel is not restarted) */
        (void)sandbox_session_proc_signal(k->sb, k->interrupt_slot, SIGKILL);
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_lock(&k->run_mu);
    if (k->sb && k->slot >= 0) {
        char err[64];
        if (sandbox_session_proc_begin(k->sb, err, sizeof err) == 0) {
            kill_process(k);
            bool hit;
            (void)sandbox_session_proc_end(k->sb, false, &hit);
        } else {
            sandbox_session_proc_release(k->sb, k->slot);
            k->slot = -1;
        }
    }
    if (k->sb) {
        session s = {0};
        snprintf(s.id, sizeof s.id, "%s", k->session_id);
        warm_session_give_back(t->w, &s, k->sb);
        k->sb = NULL;
    }
    pthread_mutex_unlock(&k->run_mu);
    log_info("kernel %s of session %s ended", k->id, k->session_id);
}

/* Takes the kernels that match out of the table (all of session_id's when id is NULL) and
 * ends them. The number ended. */
static int end_matching(kernels *t, const char *session_id, const char *id)
{
    kernel *gone = NULL;
    pthread_mutex_lock(&t->mu);
    for (kernel **p = &t->head; *p;) {
        kernel *k = *p;
        if ((!session_id || strcmp(k->session_id, session_id) == 0) && (!id || strcmp(k->id, id) == 0) &&
            !k->ended) {
            k->ended = true;
            *p = k->next;
            k->next = gone;
            gone = k;
        } else {
            p = &k->next;
        }
    }
    pthread_mutex_unlock(&t->mu);
    int n = 0;
    while (gone) {
        kernel *k = gone;
        gone = k->next;
        end_kernel(t, k);
        kernels_put(t, k);
        n++;
    }
    return n;
}

bool kernels_delete(kernels *t, const char *session_id, const char *id)
{
    return end_matching(t, session_id, id) > 0;
}

void kernels_forget_session(kernels *t, const char *session_id)
{
    if (t)
        (void)end_matching(t, session_id, NULL);
}

void kernels_free(kernels *t)
{
    if (!t)
        return;
    (void)end_matching(t, NULL, NULL);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void kernel_interrupt(kernels *t, kernel *k)
{
    /* only while the cell's process runs it: a slot freed by a kill may be a command's */
    pthread_mutex_lock(&t->mu);
    if (k->interrupt_slot >= 0)
        (void)sandbox_session_proc_signal(k->sb, k->interrupt_slot, SIGINT);
    pthread_mutex_unlock(&t->mu);
}

/* ---- a cell ------------------------------------------------------------------------- */

/* The request line of a cell: {"op":"execute","id":N,"code":...}\n. NULL when out of memory. */
static char *request_line(int id, const char *code, size_t code_len, size_t *len)
{
    json_t *r = json_pack("{s:s,s:i,s:s%}", "op", "execute", "id", id, "code", code, code_len);
    char *line = r ? json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(r);
    if (!line)
        return NULL;
    size_t n = strlen(line);
    char *out = realloc(line, n + 2);
    if (!out) {
        free(line);
        return NULL;
    }
    out[n] = '\n';
    out[n + 1] = '\0';
    *len = n + 1;
    return out;
}

/* How the cell's process fared. */
typedef struct {
    bool timed_out, killed, ended, gone, oom, cancelled;
    int code;
} cell_end;

/* Sends the cell and reads its events until done, the timeout (SIGINT, then after the grace
 * SIGKILL), the client's hang-up (SIGINT) or the process's end. */
static void run_cell(kernel *k, cell *c, const char *line, size_t len, int timeout_seconds, int cancel_fd,
                     cell_end *e)
{
    if (sandbox_session_proc_send(k->sb, k->slot, FRAME_STDIN, line, len) != 0) {
        e->gone = true;
        return;
    }
    int64_t deadline = now_ms() + (int64_t)timeout_seconds * 1000, kill_at = 0, give_up = 0;
    bool interrupted = false;
    while (!c->done) {
        int64_t now = now_ms();
        if (!e->timed_out && now >= deadline) {
            e->timed_out = true;
            (void)sandbox_session_proc_signal(k->sb, k->slot, SIGINT);
            kill_at = now + KERNEL_INTERRUPT_GRACE_MS;
        }
        if (e->cancelled && !interrupted && !e->timed_out) { /* nobody waits for this cell */
            interrupted = true;
            (void)sandbox_session_proc_signal(k->sb, k->slot, SIGINT);
            kill_at = now + KERNEL_INTERRUPT_GRACE_MS;
        }
        if (kill_at && !e->killed && now >= kill_at) {
            e->killed = true;
            (void)sandbox_session_proc_signal(k->sb, k->slot, SIGKILL);
            give_up = now + KILL_WAIT_MS;
        }
        if (give_up && now >= give_up) {
            e->gone = true;
            return;
        }
        if (c->ev && c->ev->tick)
            c->ev->tick(c->ev->ctx);
        int64_t next = give_up ? give_up : kill_at ? kill_at : deadline;
        read_rc rc = read_frame(k, c, (int)(next - now > 1000 ? 1000 : next - now), cancel_fd, &e->cancelled,
                                &e->code);
        if (rc == READ_GONE) {
            e->gone = true;
            return;
        }
        if (rc == READ_ENDED) {
            e->ended = true;
            return;
        }
    }
}

/* The kept text of a capture (UTF-8 as the kernel sent it), a warning when cut. */
static json_t *kept_text(capture *cp, const char *name, size_t limit, json_t *warnings)
{
    size_t len = 0;
    uint64_t omitted = 0;
    unsigned long long total = cp->total;
    char *s = capture_take(cp, &len, &omitted);
    json_t *v = s ? json_stringn(s, len) : NULL;
    if (!v)
        v = json_string("");
    if (omitted) {
        char w[200];
        snprintf(w, sizeof w, "Output truncated: %s had %llu bytes; %llu bytes from its middle were left out (this "
                              "server keeps %zu bytes of each stream).", name, total, (unsigned long long)omitted, limit);
        json_array_append_new(warnings, json_string(w));
    }
    free(s);
    return v;
}

json_t *kernel_execute(kernels *t, kernel *k, const session *s, const char *code, size_t code_len,
                       int timeout_seconds, size_t output_limit, int cancel_fd, const kernel_events *ev,
                       char *errbuf, size_t errlen)
{
    int64_t t0 = now_ms();
    pthread_mutex_lock(&k->run_mu);
    pthread_mutex_lock(&t->mu);
    bool ended = k->ended;
    k->busy = !ended;
    pthread_mutex_unlock(&t->mu);
    if (ended) {
        pthread_mutex_unlock(&k->run_mu);
        snprintf(errbuf, errlen, "the kernel was deleted");
        return NULL;
    }
    json_t *answer = NULL;
    cell c;
    cell_init(&c, ++k->next_cell, output_limit, ev);
    cell_end e = {0};
    size_t len = 0;
    char *line = request_line(c.id, code, code_len, &len);
    bool began = false;
    if (!line) {
        snprintf(errbuf, errlen, "out of memory");
        goto out;
    }
    /* a kernel without a process (its restart failed), or whose sandbox died, starts anew */
    if (k->slot < 0 || !k->sb || !sandbox_session_usable(k->sb)) {
        if (k->slot >= 0 && k->sb)
            sandbox_session_proc_release(k->sb, k->slot);
        k->slot = -1;
        if (restart(t, k, s, 1, errbuf, errlen) != 0) /* (this cell says so) */
            goto out;
    }
    if (sandbox_session_proc_begin(k->sb, errbuf, errlen) != 0)
        goto out;
    began = true;
    pthread_mutex_lock(&t->mu);
    ended = k->ended; /* deleted since it began: the cell does not run */
    k->interrupt_slot = ended ? -1 : k->slot;
    pthread_mutex_unlock(&t->mu);
    if (!ended)
        run_cell(k, &c, line, len, timeout_seconds, cancel_fd, &e);
    pthread_mutex_lock(&t->mu);
    k->interrupt_slot = -1;
    ended = k->ended; /* deleted meanwhile: its process was killed, no restart */
    pthread_mutex_unlock(&t->mu);
    bool limit_hit = false;
    e.oom = sandbox_session_proc_end(k->sb, e.gone, &limit_hit);
    began = false;
    /* as for commands: a SIGKILL at the memory limit is the memory */
    e.oom = e.oom || (e.ended && !e.killed && e.code == 137 && limit_hit);
    if (e.ended || e.killed || e.gone || e.oom) {
        if (e.ended || !sandbox_session_usable(k->sb)) {
            sandbox_session_proc_release(k->sb, k->slot);
            k->slot = -1;
        } else if (sandbox_session_proc_begin(k->sb, errbuf, errlen) == 0) {
            kill_process(k);
            (void)sandbox_session_proc_end(k->sb, false, &limit_hit);
        }
        if (!ended) {
            log_info("kernel %s of session %s restarts: its process %s", k->id, k->session_id,
                     e.oom ? "hit the memory limit" : e.killed ? "ignored its interrupt" : "ended");
            if (restart(t, k, s, 2, errbuf, errlen) != 0) /* this cell and the next say so */
                log_warn("kernel %s could not restart: %s", k->id, errbuf);
        }
    }
    json_t *warnings = json_array();
    json_t *out = kept_text(&c.out, "stdout", output_limit, warnings);
    json_t *err = kept_text(&c.err, "stderr", output_limit, warnings);
    if (c.results_omitted || c.lines_dropped) {
        char w[200];
        snprintf(w, sizeof w, "Results truncated: %llu results were left out (this server keeps %zu bytes of "
                              "results per cell).", c.results_omitted + c.lines_dropped, output_limit);
        json_array_append_new(warnings, json_string(w));
    }
    if (e.timed_out) {
        char w[64];
        snprintf(w, sizeof w, "Execution exceeded %ds limit.", timeout_seconds);
        json_array_append_new(warnings, json_string(w));
    }
    json_t *error = c.error ? json_incref(c.error) : json_null();
    if (!c.error && ended)
        error = json_pack("{s:s,s:s,s:s}", "name", "KernelDeleted", "value", "the kernel was deleted while the cell ran",
                          "traceback", "");
    else if (!c.error && (e.oom || e.ended || e.gone || e.killed))
        error = json_pack("{s:s,s:s,s:s}", "name", e.oom ? "MemoryError" : "KernelRestarted", "value",
                          e.oom      ? "the kernel hit the session's memory limit and was restarted: its state is gone"
                          : e.killed ? "the cell ignored its interrupt: the kernel was killed and restarted, its "
                                       "state is gone"
                                     : "the kernel's process ended and was restarted: its state is gone",
                          "traceback", "");
    bool said = k->restart_says > 0;
    if (k->restart_says > 0)
        k->restart_says--;
    answer = json_pack("{s:o,s:o,s:O,s:o,s:I,s:b,s:b,s:b,s:I,s:o}", "stdout", out, "stderr", err, "results",
                       c.results, "error", error, "execution_count", (json_int_t)c.execution_count, "timed_out",
                       e.timed_out, "oom_killed", e.oom, "kernel_restarted", said, "duration_ms",
                       (json_int_t)(now_ms() - t0), "warnings", warnings);
out:
    if (began) {
        bool hit;
        (void)sandbox_session_proc_end(k->sb, false, &hit);
    }
    free(line);
    cell_free(&c);
    pthread_mutex_lock(&t->mu);
    k->busy = false;
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_unlock(&k->run_mu);
    return answer;
}

/* ---- the check after a restore ------------------------------------------------------- */

/* How long a restored kernel has to answer its ping (its first run after the restore maps its
 * pages again: tens of ms, seconds on a loaded host). */
#define PING_TIMEOUT_S 30

/* k's process answers a ping ({"op":"ping"} -> {"type":"pong"}, its request loop's own). */
static int ping(kernel *k, char *errbuf, size_t errlen)
{
    pthread_mutex_lock(&k->run_mu);
    int rc = -1;
    cell c;
    cell_init(&c, ++k->next_cell, 64, NULL);
    char line[64];
    int n = snprintf(line, sizeof line, "{\"op\":\"ping\",\"id\":%d}\n", c.id);
    if (k->slot < 0 || !k->sb || !sandbox_session_usable(k->sb)) {
        snprintf(errbuf, errlen, "kernel %s has no process after the restore", k->id);
    } else if (sandbox_session_proc_begin(k->sb, errbuf, errlen) == 0) {
        /* (no interrupt at the deadline, as a cell's: what does not answer is ended with the
         * restored sandbox, its image kept) */
        read_rc got = sandbox_session_proc_send(k->sb, k->slot, FRAME_STDIN, line, (size_t)n) == 0 ? READ_NOTHING
                                                                                                : READ_GONE;
        int64_t deadline = now_ms() + PING_TIMEOUT_S * 1000;
        int code = 0;
        bool cancelled = false;
        while (!c.done && (got == READ_NOTHING || got == READ_FRAME) && now_ms() < deadline)
            got = read_frame(k, &c, 1000, -1, &cancelled, &code);
        bool hit;
        (void)sandbox_session_proc_end(k->sb, got == READ_GONE, &hit);
        if (c.done)
            rc = 0;
        else if (got == READ_NOTHING || got == READ_FRAME)
            snprintf(errbuf, errlen, "kernel %s did not answer its ping within %d s of the restore", k->id,
                     PING_TIMEOUT_S);
        else
            snprintf(errbuf, errlen, "kernel %s did not answer its ping after the restore (%s)", k->id,
                     got == READ_ENDED ? "its process ended" : "its sandbox is gone");
    }
    cell_free(&c);
    pthread_mutex_unlock(&k->run_mu);
    return rc;
}

json_t *kernels_of_image(const char *image_dir, char *errbuf, size_t errlen)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/kernels.json", image_dir) >= (int)sizeof path) {
        snprintf(errbuf, errlen, "the memory image's path is too long");
        return NULL;
    }
    json_t *list = json_load_file(path, 0, NULL);
    if (!json_is_array(list)) {
        snprintf(errbuf, errlen, "the memory image has no list of its kernels");
        json_decref(list);
        return NULL;
    }
    return list;
}

int kernels_check_restored(kernels *t, const char *session_id, const char *image_dir, char *errbuf, size_t errlen)
{
    char unlisted[64];
    json_t *list = kernels_of_image(image_dir, unlisted, sizeof unlisted);
    int answered = 0;
    size_t i;
    json_t *entry;
    json_array_foreach(list, i, entry) { /* (no list, its keeping failed: none is asked) */
        const char *id = json_string_value(json_object_get(entry, "kernel_id"));
        /* (one without a process, slot -1, had no memory to bring back: its next cell starts one) */
        if (answered < 0 || !id || !json_is_true(json_object_get(entry, "pings")) ||
            json_integer_value(json_object_get(entry, "slot")) < 0)
            continue;
        kernel *k = kernels_get(t, session_id, id);
        if (!k) {
            snprintf(errbuf, errlen, "kernel %s was not restored", id);
            answered = -1;
        } else {
            answered = ping(k, errbuf, errlen) == 0 ? answered + 1 : -1;
        }
        kernels_put(t, k);
    }
    json_decref(list);
    return answered;
}
