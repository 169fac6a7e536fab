/* Host-wide command slots: a count, a bounded queue of waiting threads, tenant-fair handoff. */
#include "domain/slots.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* A waiter checks its client this often. */
#define CANCEL_CHECK_MS 100

/* A queued command: one entry of the fixed pool (queue_max entries). */
typedef struct {
    bool waiting;
    bool granted; /* a releasing thread handed this waiter its slot */
    size_t tenant;
    uint64_t order; /* arrival: oldest first within a tenant */
} waiter;

struct slots {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int max, running, queued, queue_max, wait_ms;
    size_t tenant_cap;
    int *per_tenant;       /* slots held by each tenant */
    uint64_t *served;      /* when each tenant last got a slot (grant count; 0: never) */
    uint64_t grants, arrivals;
    waiter *pool;          /* queue_max entries */
};

slots *slots_new(int max_running, size_t tenant_cap, int queue_max, int wait_ms)
{
    slots *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->per_tenant = calloc(tenant_cap ? tenant_cap : 1, sizeof *s->per_tenant);
    s->served = calloc(tenant_cap ? tenant_cap : 1, sizeof *s->served);
    s->queue_max = queue_max < 0 ? 0 : queue_max;
    s->pool = calloc(s->queue_max ? (size_t)s->queue_max : 1, sizeof *s->pool);
    pthread_condattr_t ca;
    if (!s->per_tenant || !s->served || !s->pool || pthread_condattr_init(&ca) != 0) {
        free(s->per_tenant);
        free(s->served);
        free(s->pool);
        free(s);
        return NULL;
    }
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    s->max = max_running < 1 ? 1 : max_running;
    s->tenant_cap = tenant_cap ? tenant_cap : 1;
    s->wait_ms = wait_ms < 0 ? 0 : wait_ms;
    return s;
}

void slots_free(slots *s)
{
    if (!s)
        return;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->per_tenant);
    free(s->served);
    free(s->pool);
    free(s);
}

static size_t clamp_tenant(const slots *s, size_t tenant)
{
    return tenant < s->tenant_cap ? tenant : s->tenant_cap - 1;
}

static void grant(slots *s, size_t tenant)
{
    s->running++;
    s->per_tenant[tenant]++;
    s->served[tenant] = ++s->grants;
}

/* Whether waiter a goes before b: its tenant holds fewer slots, else was served longer ago,
 * else it came first. */
static bool before(const slots *s, const waiter *a, const waiter *b)
{
    if (s->per_tenant[a->tenant] != s->per_tenant[b->tenant])
        return s->per_tenant[a->tenant] < s->per_tenant[b->tenant];
    if (s->served[a->tenant] != s->served[b->tenant])
        return s->served[a->tenant] < s->served[b->tenant];
    return a->order < b->order;
}

/* Free slots go to the queued tenants in turn (see before). */
static void hand_over(slots *s)
{
    while (s->running < s->max && s->queued > 0) {
        waiter *best = NULL;
        for (int i = 0; i < s->queue_max; i++) {
            waiter *w = &s->pool[i];
            if (w->waiting && !w->granted && (!best || before(s, w, best)))
                best = w;
        }
        if (!best)
            break;
        best->granted = true;
        s->queued--;
        grant(s, best->tenant);
    }
    pthread_cond_broadcast(&s->cv);
}

static bool hung_up(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP));
}

static struct timespec at_ms(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (ms % 1000) * 1000000;
    ts.tv_sec += (time_t)(ms / 1000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

slot_result slots_acquire(slots *s, size_t tenant, int cancel_fd)
{
    tenant = clamp_tenant(s, tenant);
    pthread_mutex_lock(&s->mu);
    if (s->running < s->max) { /* nobody waits while a slot is free */
        grant(s, tenant);
        pthread_mutex_unlock(&s->mu);
        return SLOT_OK;
    }
    if (s->wait_ms == 0 || s->queued >= s->queue_max) {
        pthread_mutex_unlock(&s->mu);
        return SLOT_BUSY;
    }
    waiter *w = NULL;
    for (int i = 0; i < s->queue_max && !w; i++)
        if (!s->pool[i].waiting)
            w = &s->pool[i];
    if (!w) { /* every entry still held by a waiter granted a moment ago */
        pthread_mutex_unlock(&s->mu);
        return SLOT_BUSY;
    }
    *w = (waiter){.waiting = true, .tenant = tenant, .order = ++s->arrivals};
    s->queued++;
    int64_t deadline = mono_ms() + s->wait_ms;
    slot_result result = SLOT_BUSY;
    for (;;) {
        if (w->granted) {
            result = SLOT_OK;
            break;
        }
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            break;
        if (cancel_fd > 0 && hung_up(cancel_fd)) {
            result = SLOT_CANCELLED;
            break;
        }
        struct timespec until = at_ms(cancel_fd > 0 && left > CANCEL_CHECK_MS ? CANCEL_CHECK_MS : left);
        (void)pthread_cond_timedwait(&s->cv, &s->mu, &until);
    }
    if (!w->granted)
        s->queued--;
    w->waiting = false;
    pthread_mutex_unlock(&s->mu);
    return result;
}

void slots_release(slots *s, size_t tenant)
{
    tenant = clamp_tenant(s, tenant);
    pthread_mutex_lock(&s->mu);
    if (s->running > 0)
        s->running--;
    if (s->per_tenant[tenant] > 0)
        s->per_tenant[tenant]--;
    hand_over(s);
    pthread_mutex_unlock(&s->mu);
}

int slots_max(const slots *s)
{
    return s->max;
}

int slots_running(slots *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->running;
    pthread_mutex_unlock(&s->mu);
    return n;
}
