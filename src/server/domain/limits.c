/* Token buckets and running-command counts per tenant, under one mutex; in a fleet, the
 * tokens leased from the fleet's buckets and spent here. */
#include "domain/limits.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* how long a request waits for another thread's lease of the same tenant before it decides
 * alone (the database is then slow or away) */
#define LEASE_WAIT_S 5
/* a tenant's first lease on this node (within the bound L, which caps every lease): most
 * tenants that make one request make more, and a lease statement per doubling from 1 was most
 * of a busy node's lease statements */
#define LEASE_FIRST 8

typedef struct {
    double tokens;
    double last; /* monotonic seconds of the last refill */
    int running;  /* commands counted here (all of them without a fleet's shared counters) */
    int shared;   /* commands counted in the fleet's shared counters */
    bool started; /* a bucket starts full at the tenant's first request */
    /* a fleet's lease */
    double leased;        /* tokens leased and not spent yet */
    double lease_until;   /* monotonic: then what is left goes back */
    int lease_spent;      /* spent of the current (or, once it went back, the last) lease: the
                           * next asks for twice that, so a tenant back from a pause asks for
                           * what it used before in one statement */
    double refused_until; /* monotonic: the fleet's bucket had no token before then */
    double bucket_left;   /* the fleet's bucket after the last lease (requests_available) */
    bool leasing;         /* a thread is asking the database for this tenant now */
} tenant_state;

struct limits {
    const tenants *tenants;
    pthread_mutex_t mu;
    pthread_cond_t leased; /* a lease came back (or failed) */
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
    pthread_cond_init(&l->leased, NULL);
    return l;
}

void limits_free(limits *l)
{
    if (!l)
        return;
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->leased);
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

int limits_lease_max(int per_minute, int nodes)
{
    double by_time = (double)per_minute * LIMITS_LEASE_S / 60.0;
    double by_share = (double)per_minute / (8.0 * (nodes > 0 ? nodes : 1));
    double m = by_time < by_share ? by_time : by_share;
    return m < 1 ? 1 : (int)m;
}

static long whole_seconds_up(double s)
{
    long whole = (long)s;
    if ((double)whole < s) /* ceil without libm */
        whole++;
    return whole < 1 ? 1 : whole;
}

/* The token from the fleet's bucket through this node's lease: 1 granted, 0 refused, -1 the
 * database did not answer (then the caller decides alone). Called with l->mu held; one
 * thread per tenant asks the database, the others wait for its answer. */
static int take_leased(limits *l, size_t tenant, long *available, long *retry_after)
{
    const tenant_cfg *tc = tenants_get(l->tenants, tenant);
    tenant_state *s = &l->t[tenant];
    for (;;) {
        double now = mono_now();
        if (s->leased >= 1 && now < s->lease_until) {
            s->leased -= 1;
            s->lease_spent++;
            *available = (long)(s->bucket_left + s->leased);
            return 1;
        }
        if (now < s->refused_until) { /* the bucket was empty: no need to ask again yet */
            *retry_after = whole_seconds_up(s->refused_until - now);
            return 0;
        }
        if (!s->leasing)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += LEASE_WAIT_S;
        if (pthread_cond_timedwait(&l->leased, &l->mu, &until) == ETIMEDOUT)
            return -1;
    }
    s->leasing = true;
    double give_back = s->leased;
    s->leased = 0;
    int most = limits_lease_max(tc->requests_per_minute, l->sh.nodes ? l->sh.nodes(l->sh.ctx) : 1);
    int want = s->lease_spent > 0 ? 2 * s->lease_spent : LEASE_FIRST;
    want = want > most ? most : want;
    pthread_mutex_unlock(&l->mu);
    int granted = 0;
    double left = 0, wait_s = 0;
    int rc = l->sh.lease(l->sh.ctx, tc->name, tc->requests_per_minute, want, give_back, &granted, &left, &wait_s);
    pthread_mutex_lock(&l->mu);
    s->leasing = false;
    pthread_cond_broadcast(&l->leased);
    double now = mono_now();
    if (rc != 0)
        return -1; /* what it gave back is lost to the bucket: fewer requests, never more */
    s->bucket_left = left > 0 ? left : 0;
    s->lease_spent = 0;
    if (granted < 1) {
        s->refused_until = now + wait_s;
        *retry_after = whole_seconds_up(wait_s);
        return 0;
    }
    s->leased = granted - 1;
    s->lease_spent = 1;
    s->lease_until = now + LIMITS_LEASE_S;
    *available = (long)(s->bucket_left + s->leased);
    return 1;
}

bool limits_take_token(limits *l, size_t tenant, long *available, long *retry_after)
{
    if (l->sh.lease) {
        pthread_mutex_lock(&l->mu);
        int rc = take_leased(l, tenant, available, retry_after);
        pthread_mutex_unlock(&l->mu);
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
        *retry_after = whole_seconds_up((1.0 - s->tokens) / rate);
    }
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void limits_return_leases(limits *l, bool all)
{
    if (!l->sh.lease)
        return;
    size_t n = tenants_capacity(l->tenants);
    for (size_t from = 0; from < n;) {
        /* a batch of tenants with something to give back, taken under one lock */
        size_t idx[64], k = 0;
        double give_back[64];
        pthread_mutex_lock(&l->mu);
        double now = mono_now();
        for (; from < n && k < 64; from++) {
            tenant_state *s = &l->t[from];
            /* a tenant still busy gives it back with its next lease (one statement, not two) */
            if (s->leased > 0 && !s->leasing && (all || now >= s->lease_until + LIMITS_LEASE_S)) {
                idx[k] = from;
                give_back[k++] = s->leased;
                s->leased = 0;
            }
        }
        pthread_mutex_unlock(&l->mu);
        for (size_t i = 0; i < k; i++) {
            const tenant_cfg *tc = tenants_get(l->tenants, idx[i]);
            int granted;
            double left, wait_s;
            (void)l->sh.lease(l->sh.ctx, tc->name, tc->requests_per_minute, 0, give_back[i], &granted, &left, &wait_s);
        }
    }
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
    pthread_mutex_lock(&l->mu);
    int n = l->t[tenant].running + l->t[tenant].shared;
    pthread_mutex_unlock(&l->mu);
    return n;
}
