/* domain/limits.c's leases of a fleet's request tokens, against a fake database bucket (no
 * refill): a node spends a lease locally and asks again only when it is spent, asks for more
 * as it spends more (never past limits_lease_max), refuses locally while the bucket is empty,
 * gives back what it did not spend, and decides alone when the database does not answer.
 * Three nodes sharing one bucket admit no more than it held. Exec slots (docs/fleet.md "Exec
 * slots"): a node keeps a slot for its next command (no statement), never holds more than
 * the fake database granted, gets another node's idle slots once it asked for them, and is
 * refused when they are all running. */
#include "check.h"
#include "domain/limits.h"
#include "domain/tenants.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* tenants.c's links to the settings (runtime tenants never appear here) */
bool config_runtime_tenant(const config *c, const char *name, tenant_cfg *out)
{
    (void)c;
    (void)name;
    (void)out;
    return false;
}

void config_tenant_free(tenant_cfg *t)
{
    (void)t;
}

typedef struct {
    double tokens;   /* the fleet's bucket */
    int statements;  /* lease statements it answered */
    int most_wanted; /* the largest want seen */
    int last_want;
    double given_back;
    bool away;       /* the database does not answer */
    int nodes;
} fake_db;

/* the renewers' threads call the fake database too */
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;

static int fake_lease_locked(fake_db *db, int want, double give_back, int *granted, double *left, double *wait_s);

static int fake_lease(void *ctx, const char *tenant, int per_minute, int want, double give_back, int *granted,
                      double *left, double *wait_s)
{
    (void)tenant;
    (void)per_minute;
    pthread_mutex_lock(&fake_mu);
    int rc = fake_lease_locked(ctx, want, give_back, granted, left, wait_s);
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

static int fake_lease_locked(fake_db *db, int want, double give_back, int *granted, double *left, double *wait_s)
{
    if (db->away)
        return -1;
    db->statements++;
    db->given_back += give_back;
    db->tokens += give_back;
    if (want > db->most_wanted)
        db->most_wanted = want;
    db->last_want = want;
    *granted = want < (int)db->tokens ? want : (int)db->tokens;
    db->tokens -= *granted;
    *left = db->tokens;
    *wait_s = db->tokens >= 1 ? 0 : 30;
    return 0;
}

/* The fleet's exec slots of one tenant: the nodes that hold them (asked by a refusal) */
typedef struct {
    int held;            /* the sum of the nodes' counters */
    int most;            /* the largest sum seen */
    int takes;           /* take statements */
    int given;           /* slots given back */
    limits *nodes[3];    /* asked for their idle slots on a refusal (limits_slots_wanted) */
    fake_db *db;
} fake_slots;

static fake_slots slots;

static void fake_end(void *ctx, const char *tenant)
{
    (void)ctx;
    (void)tenant;
    slots.held--;
    slots.given++;
}

static void fake_return(void *ctx, const char *tenant, int n)
{
    for (int i = 0; i < n; i++)
        fake_end(ctx, tenant);
}

static int fake_begin(void *ctx, const char *tenant, int max)
{
    (void)ctx;
    if (!slots.db)
        return 1;
    slots.takes++;
    if (slots.held < max) {
        slots.held++;
        if (slots.held > slots.most)
            slots.most = slots.held;
        return 1;
    }
    for (int i = 0; i < 3; i++) /* the notice: every node gives back its idle ones */
        if (slots.nodes[i])
            limits_slots_wanted(slots.nodes[i], tenant);
    return 2;
}

static int fake_nodes(void *ctx)
{
    return ((fake_db *)ctx)->nodes;
}

static limits *node_of(const tenants *t, fake_db *db)
{
    limits *l = limits_new(t);
    limits_shared sh = {.lease = fake_lease, .exec_begin = fake_begin, .exec_end = fake_end,
                        .exec_return = fake_return, .nodes = fake_nodes, .ctx = db};
    limits_set_shared(l, &sh);
    return l;
}

/* A database whose statements wait at a gate while it is shut (up to 10 s: then the test
 * fails instead of hanging), to see what the requests do while a lease statement is under
 * way. */
typedef struct {
    fake_db db;
    bool shut;
    int waiting;   /* statements waiting at the gate */
    bool timed_out;
    double last_give_back;
    pthread_cond_t changed;
} gated_db;

static int gated_lease(void *ctx, const char *tenant, int per_minute, int want, double give_back, int *granted,
                       double *left, double *wait_s)
{
    gated_db *g = ctx;
    (void)tenant;
    (void)per_minute;
    pthread_mutex_lock(&fake_mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    g->waiting++;
    pthread_cond_broadcast(&g->changed);
    while (g->shut && !g->timed_out)
        g->timed_out = pthread_cond_timedwait(&g->changed, &fake_mu, &until) != 0;
    g->waiting--;
    g->last_give_back = give_back;
    int rc = fake_lease_locked(&g->db, want, give_back, granted, left, wait_s);
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&fake_mu);
    return rc;
}

static int gated_nodes(void *ctx)
{
    return ((gated_db *)ctx)->db.nodes;
}

/* Waits (up to 10 s) until the gate's statements waiting or answered reach the counts. */
static bool gate_reaches(gated_db *g, int waiting, int statements)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&fake_mu);
    bool ok = true;
    while (ok && (g->waiting != waiting || g->db.statements != statements))
        ok = pthread_cond_timedwait(&g->changed, &fake_mu, &until) == 0;
    pthread_mutex_unlock(&fake_mu);
    return ok;
}

static void gate_set(gated_db *g, bool shut)
{
    pthread_mutex_lock(&fake_mu);
    g->shut = shut;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&fake_mu);
}

int main(void)
{
    CHECK(limits_lease_max(120, 3) == 4);
    CHECK(limits_lease_max(10, 3) == 1);
    CHECK(limits_lease_max(1, 100) == 1);
    CHECK(limits_lease_max(1200000, 100) == 1500);
    CHECK(limits_lease_max(100000000, 3) == 3333333);

    tenant_cfg tc = {.name = "t", .max_sessions = 10, .requests_per_minute = 120, .max_concurrent_exec = 2};
    config c;
    memset(&c, 0, sizeof c);
    c.tenants = &tc;
    c.ntenants = 1;
    tenants *t = tenants_new(&c);

    /* one node: 200 requests against a bucket of 120 */
    fake_db db = {.tokens = 120, .nodes = 3};
    limits *l = node_of(t, &db);
    int admitted = 0, refused = 0;
    long avail = 0, retry = 0;
    for (int i = 0; i < 200; i++) {
        if (limits_take_token(l, 0, &avail, &retry))
            admitted++;
        else
            refused++;
    }
    CHECK(admitted == 120);
    CHECK(refused == 80);
    CHECK(retry == 30);
    CHECK(db.most_wanted == 4);            /* grew to the bound, never past it */
    CHECK(db.statements <= 120 / 4 + 4);   /* a statement per lease, not per request */
    int before = db.statements;
    for (int i = 0; i < 50; i++)
        CHECK(!limits_take_token(l, 0, &avail, &retry)); /* refused by the node alone */
    CHECK(db.statements == before);
    limits_free(l);

    /* three nodes on one bucket, interleaved: never more than it held; what is unspent goes
     * back, and only when asked for all or past the lease's time */
    fake_db shared = {.tokens = 120, .nodes = 3};
    limits *n[3] = {node_of(t, &shared), node_of(t, &shared), node_of(t, &shared)};
    admitted = 0;
    for (int i = 0; i < 300; i++)
        admitted += limits_take_token(n[i % 3], 0, &avail, &retry);
    CHECK(admitted <= 120);
    CHECK(admitted >= 120 - 3 * 4);
    double back = shared.given_back;
    limits_return_leases(n[0], false); /* its lease is younger than LIMITS_LEASE_S */
    CHECK(shared.given_back == back);
    for (int i = 0; i < 3; i++)
        limits_return_leases(n[i], true);
    CHECK((double)admitted + shared.tokens == 120); /* every token spent or back in the bucket */
    for (int i = 0; i < 3; i++)
        limits_free(n[i]);

    /* a busy tenant takes few leases: the first of 8 tokens, each next twice what the last one
     * spent; back from a pause (its lease given back) it asks at once for what it used */
    tenant_cfg busy_tc = {.name = "b", .max_sessions = 10, .requests_per_minute = 1200000, .max_concurrent_exec = 2};
    config bc;
    memset(&bc, 0, sizeof bc);
    bc.tenants = &busy_tc;
    bc.ntenants = 1;
    tenants *bt = tenants_new(&bc);
    fake_db busy = {.tokens = 1200000, .nodes = 3};
    l = node_of(bt, &busy);
    for (int i = 0; i < 100; i++)
        CHECK(limits_take_token(l, 0, &avail, &retry));
    CHECK(busy.statements == 4); /* 8 + 16 + 32 + 64 */
    limits_return_leases(l, true);
    CHECK(limits_take_token(l, 0, &avail, &retry));
    CHECK(busy.statements == 6);   /* the give-back, then one lease */
    CHECK(busy.last_want == 2 * (100 - 8 - 16 - 32));
    limits_free(l);

    /* the renewer: a tenant whose requests keep coming never waits for a lease statement */
    gated_db g = {.db = {.tokens = 1200000, .nodes = 3}};
    pthread_cond_init(&g.changed, NULL);
    l = limits_new(bt);
    limits_shared gsh = {.lease = gated_lease, .nodes = gated_nodes, .ctx = &g};
    limits_set_shared(l, &gsh);
    CHECK(limits_renew_ahead(l) == 0);
    CHECK(limits_take_token(l, 0, &avail, &retry)); /* its first lease (8): the request asks */
    CHECK(g.db.statements == 1 && g.db.last_want == 8);
    gate_set(&g, true);
    for (int i = 0; i < 4; i++) /* 3 left of the 8, 5 spent: the renewer tops it up */
        CHECK(limits_take_token(l, 0, &avail, &retry));
    CHECK(gate_reaches(&g, 1, 1)); /* its statement waits at the gate */
    for (int i = 0; i < 3; i++)    /* meanwhile the requests spend what the node holds */
        CHECK(limits_take_token(l, 0, &avail, &retry));
    gate_set(&g, false);
    CHECK(gate_reaches(&g, 0, 2));
    CHECK(!g.timed_out); /* no request waited for the statement */
    CHECK(g.db.last_want == 4 * 5 && g.last_give_back == 0); /* 4 times what was spent, nothing given back */
    for (int i = 0; i < 2; i++) /* of the 20 topped up: no request asks */
        CHECK(limits_take_token(l, 0, &avail, &retry));
    CHECK(g.db.statements == 2);
    limits_stop_renewer(l);
    limits_return_leases(l, true);
    CHECK(g.db.tokens == 1200000 - 10); /* 10 spent of the 28 leased, the rest back */
    limits_free(l);
    pthread_cond_destroy(&g.changed);
    tenants_free(bt);

    /* three nodes with renewers on one bucket: never more than it held */
    fake_db rshared = {.tokens = 120, .nodes = 3};
    limits *rn[3] = {node_of(t, &rshared), node_of(t, &rshared), node_of(t, &rshared)};
    for (int i = 0; i < 3; i++)
        CHECK(limits_renew_ahead(rn[i]) == 0);
    admitted = 0;
    for (int i = 0; i < 600; i++)
        admitted += limits_take_token(rn[i % 3], 0, &avail, &retry);
    CHECK(admitted <= 120);
    CHECK(admitted >= 120 - 3 * 4);
    for (int i = 0; i < 3; i++) {
        limits_stop_renewer(rn[i]);
        limits_return_leases(rn[i], true);
    }
    CHECK((double)admitted + rshared.tokens == 120);
    for (int i = 0; i < 3; i++)
        limits_free(rn[i]);

    /* exec slots, 2 for the tenant on 3 nodes */
    fake_db sdb = {.tokens = 120, .nodes = 3};
    slots.db = &sdb;
    for (int i = 0; i < 3; i++)
        slots.nodes[i] = node_of(t, &sdb);
    limits **sn = slots.nodes;
    CHECK(limits_exec_begin(sn[0], 0)); /* one statement: the slot taken */
    limits_exec_end(sn[0], 0);          /* kept for its next command */
    for (int i = 0; i < 20; i++) {
        CHECK(limits_exec_begin(sn[0], 0));
        limits_exec_end(sn[0], 0);
    }
    CHECK(slots.takes == 1);
    CHECK(slots.held == 1 && slots.given == 0);
    CHECK(limits_exec_begin(sn[0], 0)); /* two at once: a second slot */
    CHECK(limits_exec_begin(sn[0], 0));
    CHECK(limits_running(sn[0], 0) == 2 && slots.held == 2 && slots.takes == 2);
    limits_exec_end(sn[0], 0);
    limits_exec_end(sn[0], 0);
    /* node 1 holds none: refused, it asks; node 0 gives its 2 idle ones back and node 1 takes
     * one at its next ask (0.25 s), well before its 2 s */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(limits_exec_begin(sn[1], 0));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9 < LIMITS_SLOT_WAIT_S);
    CHECK(slots.given == 2 && slots.held == 1);
    /* asked lately, node 0 gives its slot back at its command's end instead of keeping it */
    CHECK(limits_exec_begin(sn[0], 0));
    limits_exec_end(sn[0], 0);
    CHECK(slots.given == 3 && slots.held == 1);
    /* both slots running (node 1 and node 2): node 0 asks, waits its 2 s, and is refused */
    CHECK(limits_exec_begin(sn[2], 0));
    CHECK(!limits_exec_begin(sn[0], 0));
    CHECK(slots.most == 2); /* never more than the limit held */
    /* node 1 declared dead and registered again: the database forgot its slot (the reap), so
     * its running command ends giving none back */
    int given = slots.given;
    slots.held--;
    limits_slots_forgotten(sn[1]);
    limits_exec_end(sn[1], 0);
    CHECK(slots.given == given && limits_running(sn[1], 0) == 0);
    limits_exec_end(sn[2], 0);
    for (int i = 0; i < 3; i++) /* at shutdown every idle slot goes back */
        limits_return_leases(sn[i], true);
    CHECK(slots.held == 0);
    for (int i = 0; i < 3; i++)
        limits_free(sn[i]);
    slots.db = NULL;

    /* the database away: the node holds the tenant to its share (120 / 3 nodes) */
    fake_db away = {.tokens = 120, .nodes = 3, .away = true};
    l = node_of(t, &away);
    admitted = 0;
    for (int i = 0; i < 100; i++)
        admitted += limits_take_token(l, 0, &avail, &retry);
    CHECK(admitted == 40);
    limits_free(l);
    tenants_free(t);
    return CHECK_SUMMARY();
}
