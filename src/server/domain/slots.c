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

typedef struct waiter {
    struct waiter *prev, *next;
    size_t tenant;
    bool granted; /* a releasing thread handed this waiter its slot */
} waiter;

struct slots {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int max, running, queued, queue_max, wait_ms;
    size_t tenant_cap;
    int *per_tenant;       /* slots held by each tenant */
    uint64_t *served;      /* when each tenant last got a slot (grant count; 0: never) */
    uint64_t grants;
    waiter *first, *last;  /* oldest first */
};

slots *slots_new(int max_running, size_t tenant_cap, int queue_max, int wait_ms)
{
    slots *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->per_tenant = calloc(tenant_cap ? tenant_cap : 1, sizeof *s->per_tenant);
    s->served = calloc(tenant_cap ? tenant_cap : 1, sizeof *s->served);
    pthread_condattr_t ca;
    if (!s->per_tenant || !s->served || pthread_condattr_init(&ca) != 0) {
        free(s->per_tenant);
        free(s->served);
        free(s);
        return NULL;
    }
    (void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    s->max = max_running < 1 ? 1 : max_running;
    s->tenant_cap = tenant_cap ? tenant_cap : 1;
    s->queue_max = queue_max < 0 ? 0 : queue_max;
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
    free(s);
}

static size_t clamp_tenant(const slots *s, size_t tenant)
{
    return tenant < s->tenant_cap ? tenant : s->tenant_cap - 1;
}

static void unlink_waiter(slots *s, waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        s->first = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        s->last = w->prev;
    w->prev = w->next = NULL;
    s->queued--;
}

static void grant(slots *s, size_t tenant)
{
    s->running++;
    s->per_tenant[tenant]++;
    s->served[tenant] = ++s->grants;
}

/* Whether waiter a's tenant goes before b's: fewer slots held, else served longer ago. */
static bool before(const slots *s, const waiter *a, const waiter *b)
{
    if (s->per_tenant[a->tenant] != s->per_tenant[b->tenant])
        return s->per_tenant[a->tenant] < s->per_tenant[b->tenant];
    return s->served[a->tenant] < s->served[b->tenant];
}

/* Free slots go to the queued tenants in turn (see before); oldest first within a tenant. */
static void hand_over(slots *s)
{
    while (s->running < s->max && s->first) {
        waiter *best = s->first;
        for (waiter *w = s->first->next; w; w = w->next)
            if (before(s, w, best))
                best = w;
        unlink_waiter(s, best);
        best->granted = true;
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
    waiter w = {.prev = s->last, .tenant = tenant};
    if (s->last)
        s->last->next = &w;
    else
        s->first = &w;
    s->last = &w;
    s->queued++;
    int64_t deadline = mono_ms() + s->wait_ms;
    slot_result result = SLOT_BUSY;
    for (;;) {
        if (w.granted) {
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
    if (!w.granted)
        unlink_waiter(s, &w);
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
