/* The tenants' request rate and running commands, shared by the fleet's nodes in
 * PostgreSQL: request tokens leased a share at a time (one statement a lease), a command's
 * start one statement, its end deleted with the audit row that follows it (fleet/audit.c). */
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

/* Room for one more running command (with cmd_mu held); false when out of memory. */
static bool room_for_command(fleet *f)
{
    if (f->ncmds < f->cmdcap)
        return true;
    size_t cap = f->cmdcap ? 2 * f->cmdcap : 16;
    fleet_command *v = realloc(f->cmds, cap * sizeof *v);
    if (!v)
        return false;
    f->cmds = v;
    f->cmdcap = cap;
    return true;
}

/* Remembers a running command's row (its tenant's name with it); false when out of memory. */
static bool remember(fleet *f, const char *tenant, long long id)
{
    char *name = strdup(tenant);
    if (!name)
        return false;
    pthread_mutex_lock(&f->cmd_mu);
    bool ok = room_for_command(f);
    if (ok)
        f->cmds[f->ncmds++] = (fleet_command){.tenant = name, .id = id};
    pthread_mutex_unlock(&f->cmd_mu);
    if (!ok)
        free(name);
    return ok;
}

static void delete_one(fleet *f, long long id);

static void delete_commands(fleet *f, const char *ids)
{
    const char *p[] = {ids};
    PQclear(pg_query(f->db, "DELETE FROM commands WHERE id = ANY ($1::bigint[])", 1, p));
}

int fleet_command_begin(fleet *f, const char *tenant, int max)
{
    char m[24];
    snprintf(m, sizeof m, "%d", max);
    const char *p[] = {tenant, f->id, m};
    char *v = pg_value(f->db, "SELECT airlock_command_start($1, $2, $3::integer)", 3, p);
    if (!v)
        return -1;
    long long id = atoll(v);
    if (id > 0 && !remember(f, tenant, id)) {
        delete_one(f, id);
        free(v);
        return -1;
    }
    free(v);
    return id > 0;
}

/* Queues id for deletion with the next shipment; false when out of memory. With cmd_mu held. */
static bool push_ended(fleet *f, long long id)
{
    if (f->nended == f->endcap) {
        size_t cap = f->endcap ? 2 * f->endcap : 16;
        long long *v = realloc(f->ended, cap * sizeof *v);
        if (!v)
            return false;
        f->ended = v;
        f->endcap = cap;
    }
    f->ended[f->nended++] = id;
    return true;
}

/* Deletes one command's row at once (out of memory for the queue). */
static void delete_one(fleet *f, long long id)
{
    char one[48];
    snprintf(one, sizeof one, "{%lld}", id);
    delete_commands(f, one);
}

void fleet_command_end(fleet *f, const char *tenant)
{
    pthread_mutex_lock(&f->cmd_mu);
    long long id = 0;
    for (size_t i = f->ncmds; i-- > 0;) {
        if (strcmp(f->cmds[i].tenant, tenant) == 0) {
            id = f->cmds[i].id;
            free(f->cmds[i].tenant);
            f->cmds[i] = f->cmds[--f->ncmds];
            break;
        }
    }
    bool queued = id > 0 && push_ended(f, id);
    pthread_mutex_unlock(&f->cmd_mu);
    if (id > 0 && !queued)
        delete_one(f, id);
}

char *fleet_commands_ended(fleet *f)
{
    pthread_mutex_lock(&f->cmd_mu);
    char *text = NULL;
    size_t cap = f->nended * 21 + 3;
    if (f->nended > 0 && (text = malloc(cap))) {
        size_t o = 0;
        text[o++] = '{';
        for (size_t i = 0; i < f->nended; i++)
            o += (size_t)snprintf(text + o, cap - o, "%s%lld", i ? "," : "", f->ended[i]);
        snprintf(text + o, cap - o, "}");
        f->nended = 0;
    }
    pthread_mutex_unlock(&f->cmd_mu);
    return text;
}

void fleet_commands_unended(fleet *f, const char *ids)
{
    for (const char *s = ids + 1; *s && *s != '}';) {
        char *end;
        long long id = strtoll(s, &end, 10);
        if (end == s)
            break;
        pthread_mutex_lock(&f->cmd_mu);
        bool queued = push_ended(f, id);
        pthread_mutex_unlock(&f->cmd_mu);
        if (!queued)
            delete_one(f, id);
        s = *end == ',' ? end + 1 : end;
    }
}

void fleet_commands_flush(fleet *f)
{
    char *ids = fleet_commands_ended(f);
    if (!ids)
        return;
    const char *p[] = {ids};
    PGresult *res = pg_query(f->db, "DELETE FROM commands WHERE id = ANY ($1::bigint[])", 1, p);
    if (!res)
        fleet_commands_unended(f, ids);
    PQclear(res);
    free(ids);
}

int fleet_tenant_usage(fleet *f, const char *tenant, long *sessions, long *commands)
{
    const char *p[] = {tenant};
    PGresult *res = pg_query(f->db, "SELECT (SELECT count(*) FROM sessions WHERE tenant = $1 AND state = 'active'),"
                                    " (SELECT count(*) FROM commands WHERE tenant = $1)", 1, p);
    if (!res || PQntuples(res) != 1) {
        PQclear(res);
        return -1;
    }
    *sessions = atol(PQgetvalue(res, 0, 0));
    *commands = atol(PQgetvalue(res, 0, 1));
    PQclear(res);
    return 0;
}
