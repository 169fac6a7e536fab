/* Per-session figures kept beside the registry: a hash table of entries by session id,
 * each with its running commands, its count and last command, and its released sandboxes'
 * CPU time and memory peak. */
#include "domain/figures.h"

#include "domain/sessions.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 256
#define ID_LEN 16 /* "sbx_" + 12 hex */

typedef struct running_cmd {
    unsigned long token;
    figures_running shown;
    struct running_cmd *next;
} running_cmd;

typedef struct entry {
    char id[ID_LEN + 1];
    figures_session fig; /* run[] and running unused here: the list below is the truth */
    running_cmd *running;
    int nrunning;
    struct entry *next;
} entry;

struct figures {
    pthread_mutex_t mu;
    entry *bucket[BUCKETS];
    unsigned long next_token;
};

static unsigned hash_id(const char *id)
{
    unsigned h = 2166136261u; /* FNV-1a */
    for (const char *p = id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return h % BUCKETS;
}

static bool plain_id(const char *id)
{
    return strlen(id) == ID_LEN && strncmp(id, "sbx_", 4) == 0;
}

figures *figures_new(void)
{
    figures *f = calloc(1, sizeof *f);
    if (f)
        pthread_mutex_init(&f->mu, NULL);
    return f;
}

static void entry_free(entry *e)
{
    while (e->running) {
        running_cmd *c = e->running;
        e->running = c->next;
        free(c);
    }
    free(e);
}

void figures_free(figures *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < BUCKETS; i++) {
        while (f->bucket[i]) {
            entry *e = f->bucket[i];
            f->bucket[i] = e->next;
            entry_free(e);
        }
    }
    pthread_mutex_destroy(&f->mu);
    free(f);
}

/* Locked: id's entry, made when make; NULL when absent (or out of memory). */
static entry *find_locked(figures *f, const char *id, bool make)
{
    unsigned h = hash_id(id);
    for (entry *e = f->bucket[h]; e; e = e->next)
        if (strcmp(e->id, id) == 0)
            return e;
    if (!make)
        return NULL;
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    memcpy(e->id, id, ID_LEN + 1);
    e->next = f->bucket[h];
    f->bucket[h] = e;
    return e;
}

/* Copies at most FIGURES_COMMAND_MAX - 1 bytes of s, cut between UTF-8 characters. */
static void copy_command(char out[FIGURES_COMMAND_MAX], const char *s, size_t len)
{
    if (len > FIGURES_COMMAND_MAX - 1) {
        len = FIGURES_COMMAND_MAX - 1;
        while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
            len--;
    }
    memcpy(out, s, len);
    out[len] = '\0';
}

unsigned long figures_command_begin(figures *f, const char *session_id, const char *command, size_t len)
{
    if (!f || !plain_id(session_id))
        return 0;
    running_cmd *c = calloc(1, sizeof *c);
    if (!c)
        return 0;
    copy_command(c->shown.command, command, len);
    c->shown.started_at = epoch_now();
    pthread_mutex_lock(&f->mu);
    entry *e = find_locked(f, session_id, true);
    if (e) {
        c->token = ++f->next_token ? f->next_token : ++f->next_token;
        c->next = e->running;
        e->running = c;
        e->nrunning++;
    }
    unsigned long token = e ? c->token : 0;
    pthread_mutex_unlock(&f->mu);
    if (!e)
        free(c);
    return token;
}

void figures_command_end(figures *f, const char *session_id, unsigned long token, int exit_code)
{
    if (!f || !token)
        return;
    double now = epoch_now();
    running_cmd *gone = NULL;
    pthread_mutex_lock(&f->mu);
    entry *e = find_locked(f, session_id, false);
    for (running_cmd **p = e ? &e->running : NULL; p && *p; p = &(*p)->next) {
        if ((*p)->token != token)
            continue;
        gone = *p;
        *p = gone->next;
        e->nrunning--;
        e->fig.commands_run++;
        e->fig.has_last = true;
        memcpy(e->fig.last_command, gone->shown.command, sizeof e->fig.last_command);
        e->fig.last_exit_code = exit_code;
        e->fig.last_ended_at = now;
        break;
    }
    pthread_mutex_unlock(&f->mu);
    free(gone);
}

void figures_retire(void *ctx, const char *id, const sandbox_usage *u)
{
    figures *f = ctx;
    char sid[ID_LEN + 1];
    if (!f || strlen(id) <= ID_LEN || id[ID_LEN] != '-')
        return;
    memcpy(sid, id, ID_LEN);
    sid[ID_LEN] = '\0';
    if (!plain_id(sid))
        return;
    pthread_mutex_lock(&f->mu);
    entry *e = find_locked(f, sid, false); /* a session that never ran a command has none */
    if (e) {
        e->fig.retired_cpu_ns += u->cpu_ns;
        if (u->memory_peak_bytes > e->fig.retired_peak_bytes)
            e->fig.retired_peak_bytes = u->memory_peak_bytes;
    }
    pthread_mutex_unlock(&f->mu);
}

void figures_forget(figures *f, const char *session_id)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    entry *gone = NULL;
    for (entry **p = &f->bucket[hash_id(session_id)]; *p; p = &(*p)->next) {
        if (strcmp((*p)->id, session_id) == 0) {
            gone = *p;
            *p = gone->next;
            break;
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (gone)
        entry_free(gone);
}

void figures_get(figures *f, const char *session_id, figures_session *out)
{
    memset(out, 0, sizeof *out);
    if (!f)
        return;
    pthread_mutex_lock(&f->mu);
    const entry *e = find_locked(f, session_id, false);
    if (e) {
        *out = e->fig;
        out->running = e->nrunning;
        /* the list is newest first: shown oldest first */
        int shown = e->nrunning < FIGURES_RUNNING_MAX ? e->nrunning : FIGURES_RUNNING_MAX;
        int skip = e->nrunning - shown, i = 0;
        for (const running_cmd *c = e->running; c && i < shown + skip; c = c->next, i++)
            if (i >= skip)
                out->run[shown - 1 - (i - skip)] = c->shown;
    }
    pthread_mutex_unlock(&f->mu);
}
