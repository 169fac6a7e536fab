/* The tenant table at runtime: the configuration's static tenants (same indexes as their
 * keys), then tenants first seen through self-service keys, added on first use. Entries never
 * move or change once added, so a tenant index stays valid and readable without a lock. */
#ifndef AIRLOCKD_TENANTS_H
#define AIRLOCKD_TENANTS_H

#include "config/config.h"

#include <stddef.h>

typedef struct tenants tenants;

/* Room for the static tenants plus, with a key store, RUNTIME tenants. NULL when out of memory.
 * c must outlive the table. */
tenants *tenants_new(const config *c);
void tenants_free(tenants *t);

/* The settings of tenant idx (an index this table handed out). */
const tenant_cfg *tenants_get(const tenants *t, size_t idx);

/* Index of the tenant called name, adding it when new; -1 when the table is full (logged)
 * or out of memory. Thread-safe. */
long tenants_intern(tenants *t, const char *name);

/* How many tenants the table holds now (indexes 0 .. count-1). Thread-safe. */
size_t tenants_count(tenants *t);

/* Most tenants the table can hold (sizes per-tenant state such as domain/limits). */
size_t tenants_capacity(const tenants *t);

#endif
