/* The request-body memory budget: one mutex, a running total and a tally per owner. */
#include "http/budget.h"

#include <string.h>

static void owner_key(unsigned long owner, unsigned char key[TALLY_KEY])
{
    memset(key, 0, TALLY_KEY);
    memcpy(key, &owner, sizeof owner);
}

bool budget_init(body_budget *b, size_t total, size_t share, size_t max_owners)
{
    memset(b, 0, sizeof *b);
    b->total = total;
    b->share = share < total ? share : total;
    if (!tally_init(&b->owners, max_owners))
        return false;
    pthread_mutex_init(&b->mu, NULL);
    return true;
}

void budget_free(body_budget *b)
{
    if (!b->owners.e)
        return;
    tally_free(&b->owners);
    pthread_mutex_destroy(&b->mu);
}

bool budget_take(body_budget *b, unsigned long owner, size_t n)
{
    if (n == 0)
        return true;
    unsigned char key[TALLY_KEY];
    owner_key(owner, key);
    pthread_mutex_lock(&b->mu);
    bool ok = n <= b->total - b->used && tally_add(&b->owners, key, n, b->share) != 0;
    if (ok)
        b->used += n;
    pthread_mutex_unlock(&b->mu);
    return ok;
}

void budget_give(body_budget *b, unsigned long owner, size_t n)
{
    if (n == 0)
        return;
    unsigned char key[TALLY_KEY];
    owner_key(owner, key);
    pthread_mutex_lock(&b->mu);
    tally_sub(&b->owners, key, n);
    b->used -= n <= b->used ? n : b->used;
    pthread_mutex_unlock(&b->mu);
}
