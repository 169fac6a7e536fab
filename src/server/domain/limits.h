/* Per-tenant runtime limits (contract 2.2): request-rate token bucket and the count of
 * running commands. The session limit lives in the session registry. */
#ifndef AIRLOCKD_TENANT_LIMITS_H
#define AIRLOCKD_TENANT_LIMITS_H

#include "domain/tenants.h"

#include <stdbool.h>

typedef struct limits limits;

/* A fleet's shared counters (fleet/fleet.h). The request rate is leased: lease takes up to
 * `want` tokens of the tenant's fleet-wide bucket (giving back `give_back` unused ones) and
 * answers 0 with *granted, the bucket's tokens left after it and, when none was granted, the
 * seconds until its next token; the node spends them here (docs/fleet.md "The cost of a
 * call"). exec_begin returns 1 granted, 0 refused; -1 from either means unreachable (then
 * this node's own counters decide, as on one machine, until the database answers again). */
typedef struct {
    int (*lease)(void *ctx, const char *tenant, int per_minute, int want, double give_back, int *granted,
                 double *left, double *wait_s);
    int (*exec_begin)(void *ctx, const char *tenant, int max);
    void (*exec_end)(void *ctx, const char *tenant);
    /* how many nodes share the limits (≥ 1): each node's lease is at most the limit divided
     * by 8 times this, and while the database is unreachable this node holds each tenant to
     * its share, the limit divided by this (at least 1) */
    int (*nodes)(void *ctx);
    void *ctx;
} limits_shared;

/* How long a node keeps leased tokens before what is left goes back to the fleet's bucket. */
#define LIMITS_LEASE_S 2.0

/* The most tokens one node leases at once of a tenant allowed per_minute requests in a fleet
 * of `nodes`: max(1, min(per_minute * LIMITS_LEASE_S / 60, per_minute / (8 * nodes))). The
 * fleet admits at most this many times the nodes beyond the limit (docs/fleet.md). */
int limits_lease_max(int per_minute, int nodes);

/* Per-tenant state for every tenant t can hold; static tenants start with full buckets. */
limits *limits_new(const tenants *t);
void limits_free(limits *l);
/* Decides through a fleet's shared counters from now on (set before serving). */
void limits_set_shared(limits *l, const limits_shared *s);

/* Takes one request token. Returns true when granted (then *available = floor of the
 * tokens left), false with the whole seconds to wait in *retry_after (≥ 1). */
bool limits_take_token(limits *l, size_t tenant, long *available, long *retry_after);

/* Reserves an exec slot; false when max_concurrent_exec commands are already running. */
bool limits_exec_begin(limits *l, size_t tenant);
void limits_exec_end(limits *l, size_t tenant);
/* This node's running commands of the tenant (a fleet's are counted in its database). */
int limits_running(limits *l, size_t tenant);

/* Gives the fleet's buckets back the leased tokens this node did not spend: those of leases
 * a lease's time past their end (a tenant still busy gives them back with its next lease), or
 * (all) every one (at shutdown). One statement per such tenant. */
void limits_return_leases(limits *l, bool all);

#endif
