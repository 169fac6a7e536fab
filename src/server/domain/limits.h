/* Per-tenant runtime limits (contract 2.2): request-rate token bucket and the count of
 * running commands. The session limit lives in the session registry. */
#ifndef AIRLOCKD_TENANT_LIMITS_H
#define AIRLOCKD_TENANT_LIMITS_H

#include "domain/tenants.h"

#include <stdbool.h>

typedef struct limits limits;

/* A fleet's shared counters (fleet/fleet.h), exact across nodes. take_token and exec_begin
 * return 1 granted, 0 refused, -1 unreachable (then this node's own counters decide, as on
 * one machine, until the database answers again). */
typedef struct {
    int (*take_token)(void *ctx, const char *tenant, int per_minute, long *available, long *retry_after);
    int (*exec_begin)(void *ctx, const char *tenant, int max);
    void (*exec_end)(void *ctx, const char *tenant);
    long (*running)(void *ctx, const char *tenant); /* -1 unreachable */
    /* how many nodes share the limits (≥ 1): while the database is unreachable, this node
     * holds each tenant to its share, the limit divided by this (at least 1) */
    int (*nodes)(void *ctx);
    void *ctx;
} limits_shared;

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
int limits_running(limits *l, size_t tenant);

#endif
