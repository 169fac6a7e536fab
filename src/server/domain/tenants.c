/* The runtime tenant table: a preallocated array, appended to under a mutex. */
#include "domain/tenants.h"
#include "log/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tenants that can appear at runtime through self-service keys */
#define RUNTIME_TENANTS 10000

struct tenants {
    const config *cfg;
    pthread_mutex_t mu;
    tenant_cfg *t; /* cap entries; [0, nstatic) borrowed from cfg, the rest owned */
    size_t n, nstatic, cap;
};

tenants *tenants_new(const config *c)
{
    tenants *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->cap = c->ntenants + (c->keystore_path || c->database_url ? RUNTIME_TENANTS : 0);
    t->t = calloc(t->cap ? t->cap : 1, sizeof *t->t);
    if (!t->t) {
        free(t);
        return NULL;
    }
    if (c->ntenants)
        memcpy(t->t, c->tenants, c->ntenants * sizeof *t->t);
    t->n = t->nstatic = c->ntenants;
    t->cfg = c;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

void tenants_free(tenants *t)
{
    if (!t)
        return;
    for (size_t i = t->nstatic; i < t->n; i++)
        config_tenant_free(&t->t[i]);
    pthread_mutex_destroy(&t->mu);
    free(t->t);
    free(t);
}

const tenant_cfg *tenants_get(const tenants *t, size_t idx)
{
    return &t->t[idx];
}

size_t tenants_count(tenants *t)
{
    pthread_mutex_lock(&t->mu);
    size_t n = t->n;
    pthread_mutex_unlock(&t->mu);
    return n;
}

size_t tenants_capacity(const tenants *t)
{
    return t->cap;
}

long tenants_intern(tenants *t, const char *name)
{
    if (!name)
        return -1;
    long found = -1;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n && found < 0; i++)
        if (strcmp(t->t[i].name, name) == 0)
            found = (long)i;
    if (found < 0 && t->n < t->cap) {
        if (config_runtime_tenant(t->cfg, name, &t->t[t->n]))
            found = (long)t->n++;
    } else if (found < 0) {
        log_error("tenant table full (%zu tenants); refusing tenant '%s'", t->cap, name);
    }
    pthread_mutex_unlock(&t->mu);
    return found;
}
