/* Per-tenant runtime limits (contract 2.2): request-rate token bucket and the count of
 * running commands. The session limit lives in the session registry. */
#ifndef AIRLOCKD_TENANT_LIMITS_H
#define AIRLOCKD_TENANT_LIMITS_H

#include "domain/tenants.h"

#include <stdbool.h>

typedef struct limits limits;

/* Per-tenant state for every tenant t can hold; static tenants start with full buckets. */
limits *limits_new(const tenants *t);
void limits_free(limits *l);

/* Takes one request token. Returns true when granted (then *available = floor of the
 * tokens left), false with the whole seconds to wait in *retry_after (≥ 1). */
bool limits_take_token(limits *l, size_t tenant, long *available, long *retry_after);

/* Reserves an exec slot; false when max_concurrent_exec commands are already running. */
bool limits_exec_begin(limits *l, size_t tenant);
void limits_exec_end(limits *l, size_t tenant);
int limits_running(limits *l, size_t tenant);

#endif
