/* The tenants' request rate and running commands, shared by the fleet's nodes in
 * PostgreSQL: request tokens leased a share at a time (one statement a lease); exec slots
 * leased one at a time on the tenant's counter of the node, given back with an audit row that
 * follows (fleet/audit.c), at a heartbeat, or at once when another node asks for them
 * (NOTIFY airlock_slots). */
#include "fleet/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fleet_lease_tokens(fleet *f, const char *tenant, int per_minute, int want, double give_back, int *granted,
                       double *left, double *wait_s)
{
    char rpm[24], w[24], g[40];
    snprintf(rpm, sizeof rpm, "%d", per_minute);
    snprintf(w, sizeof w, "%d", want);
    snprintf(g, sizeof g, "%.6f", give_back);
    const char *p[] = {tenant, rpm, w, g};
    PGresult *res = pg_query(f->db, "SELECT granted, tokens_left, wait_s FROM airlock_lease_tokens($1,"
                                    " $2::double precision, $3::integer, $4::double precision)", 4, p);
    if (!res || PQntuples(res) != 1) {
        PQclear(res);
        return -1;
    }
    *granted = atoi(PQgetvalue(res, 0, 0));
    *left = atof(PQgetvalue(res, 0, 1));
    *wait_s = atof(PQgetvalue(res, 0, 2));
    PQclear(res);
    return 0;
}

int fleet_command_begin(fleet *f, const char *tenant, int max)
{
    int admitted = -1;
    if (pg_reachable(f->db)) { /* with what the other requests queued meanwhile */
        fleet_exec_start st = {.tenant = tenant, .max = max, .admitted = -1};
        (void)fleet_group_commit(f, f->outbox, &st);
        admitted = st.admitted;
    } else { /* alone (it fails at once while the database is known to be away) */
        char m[24];
        snprintf(m, sizeof m, "%d", max);
        const char *p[] = {tenant, f->id, m};
        char *v = pg_value(f->db, "SELECT airlock_exec_take($1, $2, $3::integer)", 3, p);
        if (v)
            admitted = atoi(v);
        free(v);
    }
    return admitted;
}

/* Queues one ended command of tenant (with cmd_mu held); false when out of memory. */
static bool push_ended(fleet *f, const char *tenant)
{
    if (!f->ended && !(f->ended = json_array()))
        return false;
    return json_array_append_new(f->ended, json_string(tenant)) == 0;
}

int fleet_commands_take_off(fleet *f, const char *ended)
{
    const char *p[] = {"[]", f->id, ended};
    PGresult *res = pg_query(f->db, FLEET_AUDIT_WITH_ENDS, 3, p);
    PQclear(res);
    return res ? 0 : -1;
}

void fleet_command_end(fleet *f, const char *tenant)
{
    pthread_mutex_lock(&f->cmd_mu);
    bool queued = push_ended(f, tenant);
    pthread_mutex_unlock(&f->cmd_mu);
    if (!queued) { /* out of memory: this one alone, now */
        json_t *one = json_pack("[s]", tenant);
        char *text = one ? json_dumps(one, JSON_COMPACT) : NULL;
        if (text)
            fleet_commands_take_off(f, text);
        free(text);
        json_decref(one);
    }
}

void fleet_commands_return(fleet *f, const char *tenant, int n)
{
    for (int i = 0; i < n; i++)
        fleet_command_end(f, tenant);
    if (n > 0 && pg_reachable(f->db))
        (void)fleet_group_commit(f, f->outbox, NULL); /* else the heartbeat's */
}

/* "want <node> <tenant>" from another node: its tenant's idle slots are asked for. */
static void slots_notice(void *ctx, const char *payload)
{
    fleet *f = ctx;
    if (!payload || strncmp(payload, "want ", 5) != 0)
        return; /* a notice missed: idle slots go back by their time anyway */
    const char *node = payload + 5, *sp = strchr(node, ' ');
    if (!sp || ((size_t)(sp - node) == strlen(f->id) && strncmp(node, f->id, (size_t)(sp - node)) == 0))
        return; /* its own request */
    f->slots_fn(f->slots_ctx, sp + 1);
}

int fleet_listen_slots(fleet *f, fleet_slots_fn fn, void *ctx)
{
    f->slots_fn = fn;
    f->slots_ctx = ctx;
    f->slots_listener = pg_listen_start(f->db, "airlock_slots", slots_notice, f);
    return f->slots_listener ? 0 : -1;
}

char *fleet_commands_ended(fleet *f)
{
    pthread_mutex_lock(&f->cmd_mu);
    char *text = NULL;
    if (json_array_size(f->ended) > 0 && (text = json_dumps(f->ended, JSON_COMPACT)))
        json_array_clear(f->ended);
    pthread_mutex_unlock(&f->cmd_mu);
    return text;
}

void fleet_commands_unended(fleet *f, const char *ended)
{
    json_t *back = json_loads(ended, 0, NULL);
    pthread_mutex_lock(&f->cmd_mu);
    size_t i;
    json_t *t;
    json_array_foreach(back, i, t) {
        if (!push_ended(f, json_string_value(t)))
            break; /* out of memory: these stay counted until the node starts again */
    }
    pthread_mutex_unlock(&f->cmd_mu);
    json_decref(back);
}

bool fleet_commands_waiting(fleet *f)
{
    pthread_mutex_lock(&f->cmd_mu);
    bool waiting = json_array_size(f->ended) > 0;
    pthread_mutex_unlock(&f->cmd_mu);
    return waiting;
}

void fleet_commands_flush(fleet *f)
{
    pthread_mutex_lock(&f->ship_mu); /* a group commit that finds the queue empty has them shipped */
    char *ended = fleet_commands_ended(f);
    if (ended && fleet_commands_take_off(f, ended) != 0)
        fleet_commands_unended(f, ended);
    pthread_mutex_unlock(&f->ship_mu);
    free(ended);
}

int fleet_tenant_usage(fleet *f, const char *tenant, long *sessions, long *elsewhere)
{
    const char *p[] = {tenant, f->id};
    PGresult *res = pg_query(f->db, "SELECT (SELECT count(*) FROM sessions WHERE tenant = $1 AND state = 'active'),"
                                    " (SELECT coalesce(sum(running), 0) FROM command_counts"
                                    " WHERE tenant = $1 AND node <> $2)", 2, p);
    if (!res || PQntuples(res) != 1) {
        PQclear(res);
        return -1;
    }
    *sessions = atol(PQgetvalue(res, 0, 0));
    *elsewhere = atol(PQgetvalue(res, 0, 1));
    PQclear(res);
    return 0;
}
