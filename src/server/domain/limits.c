/* Token buckets and running-command counts per tenant, under one mutex; in a fleet, the
 * tokens leased from the fleet's buckets and spent here. */
#include "domain/limits.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
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
    int running;  /* commands counted here alone (all of them without a fleet's shared counters) */
    /* a fleet's exec slots leased by this node (docs/fleet.md "Exec slots") */
    int held;               /* slots leased (counted in the database): running or idle */
    int busy;               /* of them, running a command */
    int busy_peak;          /* most busy at once since the last idle check */
    double idle_check;      /* monotonic: the next check for slots not used (0: none yet) */
    double contended_until; /* monotonic: another node asked for slots; ends give theirs back */
    double ask_after;       /* monotonic: the next ask for a slot while others hold them all */
    int slot_waiting;       /* threads waiting for a slot */
    int orphans;            /* commands running on slots the database forgot (limits_slots_forgotten) */
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
    bool top_up;          /* running low: the renewer tops the lease up (limits_renew_ahead) */
} tenant_state;

struct limits {
    const tenants *tenants;
    pthread_mutex_t mu;
    pthread_cond_t leased; /* a lease came back (or failed) */
    pthread_cond_t slots;  /* an exec slot may be free on this node (a command ended) */
    tenant_state *t;
    limits_shared sh; /* all NULL on one machine */
    /* the renewer (limits_renew_ahead): tops up the leases running low, off the requests */
    pthread_t renewer;
    pthread_cond_t renew; /* a tenant's lease runs low, or stop */
    bool renewing, renew_stop, renew_due;
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
    pthread_cond_init(&l->slots, NULL);
    pthread_cond_init(&l->renew, NULL);
    return l;
}

void limits_free(limits *l)
{
    if (!l)
        return;
    limits_stop_renewer(l);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->leased);
    pthread_cond_destroy(&l->slots);
    pthread_cond_destroy(&l->renew);
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

/* With the renewer running, a tenant whose requests keep coming seldom waits for the database
 * (only while it spends faster than the top-ups grow). Called with l->mu held, after a token
 * was spent: fewer tokens left than it spent since its lease was taken, topped up or
 * extended, and the renewer tops the lease up by four times that in the background; enough
 * left but the lease in its last quarter, and it is extended here. A node never holds more
 * than limits_lease_max of a tenant either way, so the bound is a lease's (docs/fleet.md
 * "The cost of a call"). */
static void keep_ahead(limits *l, tenant_state *s, double now)
{
    if (s->leased < s->lease_spent) {
        if (!s->top_up && !s->leasing && now >= s->refused_until) {
            s->top_up = true;
            l->renew_due = true;
            pthread_cond_signal(&l->renew);
        }
    } else if (now >= s->lease_until - LIMITS_LEASE_S / 4) {
        s->lease_until = now + LIMITS_LEASE_S;
        s->lease_spent = 0;
    }
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
            if (l->renewing)
                keep_ahead(l, s, now);
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

/* Tops up one tenant's lease (l->mu held, released during the statement) by four times what
 * the requests spent since it was taken, topped up or extended (more than is left: so what
 * it holds at least doubles while they spend it that fast, as a lease asked for by a request
 * does; with twice, a tenant ramping up took more statements than without the renewer),
 * within the bound; nothing is given back, the requests spend what it holds meanwhile. */
#define TOP_UP_FACTOR 4.0

static void top_up(limits *l, size_t tenant)
{
    const tenant_cfg *tc = tenants_get(l->tenants, tenant);
    tenant_state *s = &l->t[tenant];
    s->top_up = false;
    if (s->leasing || s->leased < 1) /* a request asks now, or it ran out: the request path asks */
        return;
    int most = limits_lease_max(tc->requests_per_minute, l->sh.nodes ? l->sh.nodes(l->sh.ctx) : 1);
    double want = TOP_UP_FACTOR * s->lease_spent, room = most - s->leased;
    want = want < room ? want : room;
    if (want < 1) { /* it holds the bound's worth: counted again from here */
        s->lease_spent = 0;
        return;
    }
    s->leasing = true;
    s->lease_spent = 0; /* what is spent from now on sizes the next one */
    pthread_mutex_unlock(&l->mu);
    int granted = 0;
    double left = 0, wait_s = 0;
    int rc = l->sh.lease(l->sh.ctx, tc->name, tc->requests_per_minute, (int)want, 0, &granted, &left, &wait_s);
    pthread_mutex_lock(&l->mu);
    s->leasing = false;
    pthread_cond_broadcast(&l->leased);
    if (rc != 0)
        return; /* asked again once more is spent than left, and by the request that finds it all spent */
    double now = mono_now();
    s->bucket_left = left > 0 ? left : 0;
    if (granted < 1) {
        s->refused_until = now + wait_s; /* what is held is spent, then refused locally */
        return;
    }
    s->leased += granted;
    s->lease_until = now + LIMITS_LEASE_S;
}

static void *renewer_main(void *arg)
{
    limits *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->renew_stop) {
        if (!l->renew_due) {
            pthread_cond_wait(&l->renew, &l->mu);
            continue;
        }
        l->renew_due = false;
        size_t n = tenants_capacity(l->tenants);
        for (size_t i = 0; i < n && !l->renew_stop; i++)
            if (l->t[i].top_up)
                top_up(l, i);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int limits_renew_ahead(limits *l)
{
    if (!l->sh.lease || l->renewing)
        return 0;
    l->renew_stop = false;
    if (pthread_create(&l->renewer, NULL, renewer_main, l) != 0)
        return -1;
    pthread_mutex_lock(&l->mu);
    l->renewing = true;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

void limits_stop_renewer(limits *l)
{
    pthread_mutex_lock(&l->mu);
    bool running = l->renewing;
    l->renewing = false;
    l->renew_stop = true;
    pthread_cond_signal(&l->renew);
    pthread_mutex_unlock(&l->mu);
    if (running)
        pthread_join(l->renewer, NULL);
}

/* The tenant's slots to give back now (l->mu held): every idle one (all), else those not used
 * at all since the last check, a lease's time ago. */
static int slots_to_return(tenant_state *s, double now, bool all)
{
    int n = 0;
    if (all) {
        n = s->held - s->busy;
    } else if (s->held > s->busy && s->slot_waiting == 0) {
        if (s->idle_check == 0) {
            s->idle_check = now + LIMITS_LEASE_S;
            s->busy_peak = s->busy;
            return 0;
        }
        if (now < s->idle_check)
            return 0;
        n = s->held - (s->busy_peak > s->busy ? s->busy_peak : s->busy);
    }
    if (!all && now >= s->idle_check) { /* the next window */
        s->idle_check = now + LIMITS_LEASE_S;
        s->busy_peak = s->busy;
    }
    n = n > 0 ? n : 0;
    s->held -= n;
    return n;
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
        int slots[64];
        pthread_mutex_lock(&l->mu);
        double now = mono_now();
        for (; from < n && k < 64; from++) {
            tenant_state *s = &l->t[from];
            /* a tenant still busy gives it back with its next lease (one statement, not two) */
            bool tokens = s->leased > 0 && !s->leasing && (all || now >= s->lease_until + LIMITS_LEASE_S);
            int idle = l->sh.exec_return ? slots_to_return(s, now, all) : 0;
            if (tokens || idle > 0) {
                idx[k] = from;
                give_back[k] = tokens ? s->leased : 0;
                slots[k++] = idle;
                if (tokens)
                    s->leased = 0;
            }
        }
        pthread_mutex_unlock(&l->mu);
        for (size_t i = 0; i < k; i++) {
            const tenant_cfg *tc = tenants_get(l->tenants, idx[i]);
            int granted;
            double left, wait_s;
            if (give_back[i] > 0)
                (void)l->sh.lease(l->sh.ctx, tc->name, tc->requests_per_minute, 0, give_back[i], &granted, &left,
                                  &wait_s);
            for (int j = 0; j < slots[i]; j++) /* they go with the heartbeat's shipment */
                l->sh.exec_end(l->sh.ctx, tc->name);
        }
    }
}

static void wait_until(pthread_cond_t *c, pthread_mutex_t *mu, double mono_deadline)
{
    double in = mono_deadline - mono_now();
    if (in <= 0)
        return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = (long long)until.tv_nsec + (long long)(in * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    (void)pthread_cond_timedwait(c, mu, &until);
}

static void slot_taken(tenant_state *s)
{
    s->busy++;
    if (s->busy > s->busy_peak)
        s->busy_peak = s->busy;
}

/* A slot of the fleet's for this node (docs/fleet.md "Exec slots"): an idle one it holds, else
 * one leased (a statement, merged with the node's other starts by the group commit). While
 * other nodes hold them all, they are asked for their idle ones and this waits up to
 * LIMITS_SLOT_WAIT_S, asking again every LIMITS_SLOT_ASK_S (a command ending here wakes it
 * too). 1 taken, 0 refused, -1 the database did not answer. Called with l->mu held. */
static int take_slot(limits *l, size_t tenant)
{
    const tenant_cfg *tc = tenants_get(l->tenants, tenant);
    tenant_state *s = &l->t[tenant];
    double deadline = 0;
    int rc = 0;
    s->slot_waiting++;
    for (;;) {
        if (s->busy < s->held) {
            slot_taken(s);
            rc = 1;
            break;
        }
        double now = mono_now();
        if (deadline > 0 && now >= deadline)
            break;
        if (deadline > 0 && now < s->ask_after) { /* another thread asked just now */
            wait_until(&l->slots, &l->mu, s->ask_after < deadline ? s->ask_after : deadline);
            continue;
        }
        s->ask_after = now + LIMITS_SLOT_ASK_S;
        pthread_mutex_unlock(&l->mu);
        int got = l->sh.exec_begin(l->sh.ctx, tc->name, tc->max_concurrent_exec);
        pthread_mutex_lock(&l->mu);
        if (got == 1) {
            s->held++;
            slot_taken(s);
            rc = 1;
            break;
        }
        if (got != 2) { /* refused with every slot running here, or unreachable */
            rc = got;
            break;
        }
        if (deadline == 0)
            deadline = now + LIMITS_SLOT_WAIT_S;
        wait_until(&l->slots, &l->mu, s->ask_after < deadline ? s->ask_after : deadline);
    }
    s->slot_waiting--;
    return rc;
}

bool limits_exec_begin(limits *l, size_t tenant)
{
    if (l->sh.exec_begin) {
        pthread_mutex_lock(&l->mu);
        int rc = take_slot(l, tenant);
        pthread_mutex_unlock(&l->mu);
        if (rc >= 0)
            return rc == 1;
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
    tenant_state *s = &l->t[tenant];
    bool give_back = false;
    if (s->running > 0) { /* decided alone (the database was away) */
        s->running--;
    } else if (s->orphans > 0) { /* its slot is counted nowhere: nothing to give back */
        s->orphans--;
    } else if (s->busy > 0) {
        s->busy--;
        /* kept for the next command here, unless another node asked for the tenant's slots
         * lately and no thread here waits for one */
        if (s->slot_waiting > 0) {
            pthread_cond_broadcast(&l->slots);
        } else if (mono_now() < s->contended_until) {
            give_back = true;
            s->held--;
        }
    }
    pthread_mutex_unlock(&l->mu);
    if (give_back)
        l->sh.exec_end(l->sh.ctx, tenants_get(l->tenants, tenant)->name);
}

void limits_slots_wanted(limits *l, const char *tenant)
{
    if (!l->sh.exec_return)
        return;
    size_t n = tenants_count((tenants *)l->tenants), idx = n;
    for (size_t i = 0; i < n; i++)
        if (strcmp(tenants_get(l->tenants, i)->name, tenant) == 0) {
            idx = i;
            break;
        }
    if (idx == n)
        return; /* none of its slots here */
    pthread_mutex_lock(&l->mu);
    tenant_state *s = &l->t[idx];
    s->contended_until = mono_now() + LIMITS_LEASE_S;
    int idle = s->slot_waiting > 0 ? 0 : s->held - s->busy;
    idle = idle > 0 ? idle : 0;
    s->held -= idle;
    pthread_mutex_unlock(&l->mu);
    if (idle > 0)
        l->sh.exec_return(l->sh.ctx, tenants_get(l->tenants, idx)->name, idle);
}

void limits_slots_forgotten(limits *l)
{
    size_t n = tenants_capacity(l->tenants);
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < n; i++) { /* the running ones end without a slot to give back */
        l->t[i].orphans += l->t[i].busy;
        l->t[i].held = l->t[i].busy = 0;
    }
    pthread_mutex_unlock(&l->mu);
}

int limits_running(limits *l, size_t tenant)
{
    pthread_mutex_lock(&l->mu);
    int n = l->t[tenant].running + l->t[tenant].busy + l->t[tenant].orphans;
    pthread_mutex_unlock(&l->mu);
    return n;
}
