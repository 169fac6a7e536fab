/* Token buckets and running-command counts per tenant, under one mutex. */
#include "domain/limits.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    double tokens;
    double last; /* monotonic seconds of the last refill */
    int running;
    bool started; /* a bucket starts full at the tenant's first request */
} tenant_state;

struct limits {
    const tenants *tenants;
    pthread_mutex_t mu;
    tenant_state *t;
};

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

limits *limits_new(const tenants *t)
{
    limits *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    size_t cap = tenants_capacity(t);
    l->t = calloc(cap ? cap : 1, sizeof *l->t);
    if (!l->t) {
        free(l);
        return NULL;
    }
    l->tenants = t;
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void limits_free(limits *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->mu);
    free(l->t);
    free(l);
}

bool limits_take_token(limits *l, size_t tenant, long *available, long *retry_after)
{
    double cap = tenants_get(l->tenants, tenant)->requests_per_minute, rate = cap / 60.0;
    pthread_mutex_lock(&l->mu);
    tenant_state *s = &l->t[tenant];
    double now = mono_now();
    if (!s->started) {
        s->tokens = cap;
        s->last = now;
        s->started = true;
    }
    double t = s->tokens + (now - s->last) * rate;
    s->tokens = t < cap ? t : cap;
    s->last = now;
    bool ok = s->tokens >= 1.0;
    if (ok) {
        s->tokens -= 1.0;
        *available = (long)s->tokens; /* tokens ≥ 0: truncation is floor */
    } else {
        double wait = (1.0 - s->tokens) / rate;
        long whole = (long)wait;
        if ((double)whole < wait) /* ceil without libm */
            whole++;
        *retry_after = whole < 1 ? 1 : whole;
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

bool limits_exec_begin(limits *l, size_t tenant)
{
    pthread_mutex_lock(&l->mu);
    bool ok = l->t[tenant].running < tenants_get(l->tenants, tenant)->max_concurrent_exec;
    if (ok)
        l->t[tenant].running++;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void limits_exec_end(limits *l, size_t tenant)
{
    pthread_mutex_lock(&l->mu);
    if (l->t[tenant].running > 0)
        l->t[tenant].running--;
    pthread_mutex_unlock(&l->mu);
}

int limits_running(limits *l, size_t tenant)
{
    pthread_mutex_lock(&l->mu);
    int n = l->t[tenant].running;
    pthread_mutex_unlock(&l->mu);
    return n;
}
