/* The memory budget for request bodies (private to http/): server-wide, with a share per
 * owner (a tenant, the admin, or "unauthenticated") so one owner's uploads cannot take
 * it all. Bytes are taken before a body is read and given back when its request ends. */
#ifndef AIRLOCKD_HTTP_BUDGET_H
#define AIRLOCKD_HTTP_BUDGET_H

#include "http/tally.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    pthread_mutex_t mu;
    size_t total; /* bytes all bodies may hold at once */
    size_t share; /* bytes one owner's bodies may hold at once */
    size_t used;
    tally owners;
} body_budget;

/* max_owners: the most owners holding bytes at once (one per request in flight at most). */
bool budget_init(body_budget *b, size_t total, size_t share, size_t max_owners);
void budget_free(body_budget *b);

/* Takes n bytes for owner; false when that would pass the total or the owner's share. */
bool budget_take(body_budget *b, unsigned long owner, size_t n);
void budget_give(body_budget *b, unsigned long owner, size_t n);

#endif
