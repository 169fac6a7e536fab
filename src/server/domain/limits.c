/* Token buckets and running-command counts per tenant, under one mutex. */
#include "domain/limits.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    double tokens;
    double last; /* monotonic seconds of the last refill */
    int running;  /* commands counted here (all of them without a fleet's shared counters) */
    int shared;   /* commands counted in the fleet's shared counters */
    bool started; /* a bucket starts full at the tenant's first request */
} tenant_state;

struct limits {
    const tenants *tenants;
    pthread_mutex_t mu;
    tenant_state *t;
    limits_shared sh; /* all NULL on one machine */
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

void limits_set_shared(limits *l, const limits_shared *s)
{
    l->sh = *s;
}

/* A tenant's limit as this node holds it alone: all of it on one machine, its share of a
 * fleet's while the fleet's database cannot be reached. */
static double local_share(const limits *l, int limit)
{
    int n = l->sh.nodes ? l->sh.nodes(l->sh.ctx) : 1;
    double share = n > 1 ? (double)limit / n : limit;
    return share < 1 ? 1 : share;
}

bool limits_take_token(limits *l, size_t tenant, long *available, long *retry_after)
{
    if (l->sh.take_token) {
        const tenant_cfg *tc = tenants_get(l->tenants, tenant);
        int rc = l->sh.take_token(l->sh.ctx, tc->name, tc->requests_per_minute, available, retry_after);
        if (rc >= 0)
            return rc == 1;
    }
    double cap = local_share(l, tenants_get(l->tenants, tenant)->requests_per_minute), rate = cap / 60.0;
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
    if (l->sh.exec_begin) {
        const tenant_cfg *tc = tenants_get(l->tenants, tenant);
        int rc = l->sh.exec_begin(l->sh.ctx, tc->name, tc->max_concurrent_exec);
        if (rc >= 0) {
            pthread_mutex_lock(&l->mu);
            l->t[tenant].shared += rc;
            pthread_mutex_unlock(&l->mu);
            return rc == 1;
        }
    }
    pthread_mutex_lock(&l->mu);
    bool ok = l->t[tenant].running < (int)local_share(l, tenants_get(l->tenants, tenant)->max_concurrent_exec);
    if (ok)
        l->t[tenant].running++;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void limits_exec_end(limits *l, size_t tenant)
{
    pthread_mutex_lock(&l->mu);
    bool shared = l->t[tenant].running == 0 && l->t[tenant].shared > 0;
    if (shared)
        l->t[tenant].shared--;
    else if (l->t[tenant].running > 0)
        l->t[tenant].running--;
    pthread_mutex_unlock(&l->mu);
    if (shared)
        l->sh.exec_end(l->sh.ctx, tenants_get(l->tenants, tenant)->name);
}

int limits_running(limits *l, size_t tenant)
{
    long all = l->sh.running ? l->sh.running(l->sh.ctx, tenants_get(l->tenants, tenant)->name) : -1;
    if (all >= 0)
        return (int)all;
    pthread_mutex_lock(&l->mu);
    int n = l->t[tenant].running;
    pthread_mutex_unlock(&l->mu);
    return n;
}
