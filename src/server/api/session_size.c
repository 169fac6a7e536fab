/* A create's size (ours): memory_mb, cpus, disk_mb and max_processes of POST /v1/sessions,
 * each optional, checked for its type, its floor and the tenant's maximum (SANDBOX_TENANT_LIMITS
 * max_memory_mb, max_cpus, max_disk_mb, max_processes), each problem a 422 item naming the
 * field (and the maximum). */
#include "api/session_size.h"

#include "api/validate.h"

#include <math.h>
#include <stdio.h>

/* The default max_disk_mb: at least this, and never below the server's own quota. */
#define DEFAULT_MAX_DISK_MB 2048
/* Ceilings whatever a tenant's limits say: the agent's process cap, sizes far past any host. */
#define CEIL_MEMORY_MB (1024 * 1024)
#define CEIL_DISK_MB (16 * 1024 * 1024)
#define CEIL_PROCESSES 1000000
#define CEIL_CPU_PERCENT (1024 * 100)

/* One size field's rules. */
typedef struct {
    const char *field;
    const char *limit;  /* its maximum's name in SANDBOX_TENANT_LIMITS */
    const char *unit;   /* for messages: "MB", "" */
    double floor;       /* the least a session may ask for */
    double max;         /* the tenant's maximum (ceiling applied) */
    bool tenths;        /* cpus: a number in steps of 0.1; else a whole number */
} size_rule;

static void fail(json_t *errs, const size_rule *f, const char *type, const char *msg, json_t *input, json_t *ctx)
{
    json_array_append_new(errs, verr(type, loc_of("body", f->field), msg, input, ctx));
}

/* A whole number as a JSON integer, else as a real. */
static json_t *number_json(double v)
{
    return v == floor(v) ? json_integer((json_int_t)v) : json_real(v);
}

static void format_number(char *out, size_t len, double v, bool tenths)
{
    if (tenths && v != floor(v))
        snprintf(out, len, "%.1f", v);
    else
        snprintf(out, len, "%.0f", v);
}

/* The field's value in *out (0 when absent or null); false with an error item in errs. */
static bool read_size(json_t *errs, json_t *body, const size_rule *f, double *out)
{
    json_t *v = json_object_get(body, f->field);
    char msg[200], num[32];
    *out = 0;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_number(v)) { /* jansson keeps true/false apart from numbers */
        snprintf(msg, sizeof msg, "%s should be %s", f->field,
                 f->tenths ? "a number of CPUs (e.g. 2 or 0.5)" : "a whole number");
        fail(errs, f, f->tenths ? "float_type" : "int_type", msg, v, NULL);
        return false;
    }
    double d = json_number_value(v);
    if (!isfinite(d)) {
        snprintf(msg, sizeof msg, "%s should be a finite number", f->field);
        fail(errs, f, "finite_number", msg, v, NULL);
        return false;
    }
    if (!f->tenths && d != floor(d)) {
        snprintf(msg, sizeof msg, "%s should be a whole number, got a number with a fractional part", f->field);
        fail(errs, f, "int_from_float", msg, v, NULL);
        return false;
    }
    if (d < f->floor) {
        format_number(num, sizeof num, f->floor, f->tenths);
        snprintf(msg, sizeof msg, "%s should be at least %s%s%s", f->field, num, f->unit[0] ? " " : "", f->unit);
        fail(errs, f, "greater_than_equal", msg, v, json_pack("{s:o}", "ge", number_json(f->floor)));
        return false;
    }
    if (d > f->max) {
        format_number(num, sizeof num, f->max, f->tenths);
        snprintf(msg, sizeof msg, "%s is over this tenant's maximum of %s%s%s (%s in SANDBOX_TENANT_LIMITS)",
                 f->field, num, f->unit[0] ? " " : "", f->unit, f->limit);
        fail(errs, f, "less_than_equal", msg, v, json_pack("{s:o,s:s}", "le", number_json(f->max), "limit", f->limit));
        return false;
    }
    if (f->tenths && fabs(d * 10 - round(d * 10)) > 1e-6) {
        snprintf(msg, sizeof msg, "%s should be a multiple of 0.1", f->field);
        fail(errs, f, "multiple_of", msg, v, json_pack("{s:f}", "multiple_of", 0.1));
        return false;
    }
    *out = d;
    return true;
}

static double at_most(double v, double ceiling)
{
    return v < ceiling ? v : ceiling;
}

bool session_size_from_body(json_t *errs, json_t *body, const tenant_cfg *t, long long server_quota_bytes,
                            session_spec *spec)
{
    double server_mb = (double)(server_quota_bytes >> 20);
    double max_disk = t->max_disk_mb > 0 ? t->max_disk_mb
                                         : (server_mb > DEFAULT_MAX_DISK_MB ? server_mb : DEFAULT_MAX_DISK_MB);
    const size_rule rules[] = {
        {"memory_mb", "max_memory_mb", "MB", SESSION_MIN_MEMORY_MB, at_most(t->max_memory_mb, CEIL_MEMORY_MB), false},
        {"cpus", "max_cpus", "", 0.1, at_most(t->max_cpu_percent, CEIL_CPU_PERCENT) / 100.0, true},
        {"disk_mb", "max_disk_mb", "MB", SESSION_MIN_DISK_MB, at_most(max_disk, CEIL_DISK_MB), false},
        {"max_processes", "max_processes", "", SESSION_MIN_PROCESSES, at_most(t->max_processes, CEIL_PROCESSES),
         false},
    };
    double v[4];
    bool ok = true;
    for (size_t i = 0; i < 4; i++)
        ok = read_size(errs, body, &rules[i], &v[i]) && ok;
    if (!ok)
        return false;
    spec->size.memory_mb = (unsigned)v[0];
    spec->size.cpu_percent = (unsigned)lround(v[1] * 10) * 10;
    spec->quota_bytes = (long long)v[2] << 20;
    spec->size.max_processes = (unsigned)v[3];
    return true;
}
