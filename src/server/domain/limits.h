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
 * call"). Exec slots are leased too (docs/fleet.md "Exec slots"): exec_begin leases one of
 * the tenant's max_concurrent_exec for this node: 1 granted, 0 refused, 2 refused while other
 * nodes hold slots (they were asked for their idle ones); exec_end gives one back with the
 * node's next shipment, exec_return gives n back at once. -1 from lease or exec_begin means
 * unreachable (then this node's own counters decide, as on one machine, until the database
 * answers again). */
typedef struct {
    int (*lease)(void *ctx, const char *tenant, int per_minute, int want, double give_back, int *granted,
                 double *left, double *wait_s);
    int (*exec_begin)(void *ctx, const char *tenant, int max);
    void (*exec_end)(void *ctx, const char *tenant);
    void (*exec_return)(void *ctx, const char *tenant, int n);
    /* how many nodes share the limits (≥ 1): each node's lease is at most the limit divided
     * by 8 times this, and while the database is unreachable this node holds each tenant to
     * its share, the limit divided by this (at least 1) */
    int (*nodes)(void *ctx);
    void *ctx;
} limits_shared;

/* How long a node keeps leased tokens before what is left goes back to the fleet's bucket
 * (a lease still in use is extended or topped up first: limits_renew_ahead). */
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

/* Starts the renewer (in a fleet, after limits_set_shared): a thread that tops up a tenant's
 * lease once the requests spent more of it than is left, so that a tenant whose requests keep
 * coming waits for the database only while it spends faster than the top-ups grow (a lease
 * at least doubles each); a lease that still holds enough is extended
 * by the request that finds it in its last quarter. 0, or -1 without a thread. Without it a
 * lease is taken again only when it is spent or past its time, by the request that finds it
 * so. */
int limits_renew_ahead(limits *l);
/* Stops the renewer (waits for a statement under way); limits_free does it too. */
void limits_stop_renewer(limits *l);

/* How long a request whose tenant's slots are all held waits for another node's idle ones
 * (asked for by a notice) before it is refused (429), and how often it asks again meanwhile. */
#define LIMITS_SLOT_WAIT_S 2.0
#define LIMITS_SLOT_ASK_S 0.25

/* Reserves an exec slot; false when max_concurrent_exec commands are already running. In a
 * fleet the slot is leased for this node and kept after its command for the next one: it
 * goes back once it was not used for a lease's time (LIMITS_LEASE_S, checked at each
 * heartbeat by limits_return_leases), or at once when another node asks for it. */
bool limits_exec_begin(limits *l, size_t tenant);
void limits_exec_end(limits *l, size_t tenant);
/* This node's running commands of the tenant (a fleet's are counted in its database). */
int limits_running(limits *l, size_t tenant);

/* Gives the fleet's buckets back the leased tokens this node did not spend: those of leases
 * a lease's time past their end (a tenant still busy gives them back with its next lease), or
 * (all) every one (at shutdown). One statement per such tenant. The exec slots not used over
 * the last check's window (all: every idle one) are queued to go back with the heartbeat's
 * shipment. */
void limits_return_leases(limits *l, bool all);
/* Another node asks for the tenant's (by name) slots: the idle ones go back at once, and for a
 * lease's time each command's slot goes back at its end instead of being kept. */
void limits_slots_wanted(limits *l, const char *tenant);
/* The fleet's database no longer counts this node's slots (it was declared dead): the idle
 * ones are forgotten, and the commands running on the others end without giving one back. */
void limits_slots_forgotten(limits *l);

#endif
