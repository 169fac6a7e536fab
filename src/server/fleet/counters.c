/* The tenants' request rate and running commands, shared by the fleet's nodes in
 * PostgreSQL (one database function call per decision). */
#include "fleet/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fleet_take_token(fleet *f, const char *tenant, int per_minute, long *available, long *retry_after)
{
    char rpm[24];
    snprintf(rpm, sizeof rpm, "%d", per_minute);
    const char *p[] = {tenant, rpm};
    char *v = pg_value(f->db, "SELECT airlock_take_token($1, $2::double precision)", 2, p);
    if (!v)
        return -1;
    double t = atof(v);
    free(v);
    if (t >= 0) {
        *available = (long)t;
        return 1;
    }
    long whole = (long)-t;
    if ((double)whole < -t)
        whole++;
    *retry_after = whole < 1 ? 1 : whole;
    return 0;
}

int fleet_command_begin(fleet *f, const char *tenant, int max)
{
    char m[24];
    snprintf(m, sizeof m, "%d", max);
    const char *p[] = {tenant, f->id, m};
    char *v = pg_value(f->db, "SELECT airlock_command_begin($1, $2, $3::integer)", 3, p);
    if (!v)
        return -1;
    int ok = strcmp(v, "t") == 0;
    free(v);
    return ok;
}

void fleet_command_end(fleet *f, const char *tenant)
{
    const char *p[] = {tenant, f->id};
    PQclear(pg_query(f->db, "DELETE FROM commands WHERE id = (SELECT id FROM commands"
                            " WHERE tenant = $1 AND node = $2 LIMIT 1)", 2, p));
}

long fleet_commands_running(fleet *f, const char *tenant)
{
    return fleet_count(f, "SELECT count(*) FROM commands WHERE tenant = $1", tenant);
}
