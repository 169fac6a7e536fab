/* The node's last view of the fleet: the nodes table as the last read that reached the
 * database gave it (each heartbeat and each GET /v1/admin/nodes refresh it), so that during a
 * database outage the admin list and /healthz still say what the node knew, and when. */
#include "fleet/internal.h"

#include <string.h>
#include <time.h>

/* A view older than this (three heartbeats missed) is stale even if the pool says the
 * database is reachable. */
#define VIEW_FRESH_S 3.5

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void fleet_view_keep(fleet *f, const json_t *nodes)
{
    json_t *copy = json_deep_copy(nodes);
    if (!copy)
        return;
    pthread_mutex_lock(&f->view_mu);
    json_decref(f->view);
    f->view = copy;
    f->view_at = wall_now();
    pthread_mutex_unlock(&f->view_mu);
}

json_t *fleet_nodes_view(fleet *f, double *as_of)
{
    pthread_mutex_lock(&f->view_mu);
    json_t *copy = f->view ? json_deep_copy(f->view) : NULL;
    *as_of = f->view_at;
    pthread_mutex_unlock(&f->view_mu);
    return copy;
}

bool fleet_view_totals(fleet *f, fleet_totals *t)
{
    *t = (fleet_totals){0};
    pthread_mutex_lock(&f->view_mu);
    bool have = f->view != NULL;
    size_t i;
    json_t *n;
    json_array_foreach(f->view, i, n) {
        const char *state = json_string_value(json_object_get(n, "state"));
        t->nodes++;
        if (state && strcmp(state, "active") == 0)
            t->active++;
        t->sessions += json_integer_value(json_object_get(n, "sessions"));
        t->commands_running += json_integer_value(json_object_get(n, "commands_running"));
    }
    t->as_of = f->view_at;
    pthread_mutex_unlock(&f->view_mu);
    t->stale = !have || wall_now() - t->as_of > VIEW_FRESH_S || !pg_reachable(f->db);
    return have;
}

void fleet_view_free(fleet *f)
{
    json_decref(f->view);
    f->view = NULL;
}
