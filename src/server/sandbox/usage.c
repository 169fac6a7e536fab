/* What sandboxes use (sandbox.h's sandbox_usage_of and retire hook): their host cgroups'
 * figures, named by the sandbox names they were made with. */
#include "sandbox/internal.h"

#include <string.h>

static void from_cgroup(const sbx_cg_usage *u, sandbox_usage *out)
{
    out->cpu_ns = u->cpu_ns;
    out->memory_bytes = u->memory_bytes;
    out->memory_peak_bytes = u->memory_peak_bytes;
    out->tasks = u->tasks;
    out->sandboxes = u->groups;
}

bool sandbox_usage_of(const sandbox_backend *b, const char *tenant, const char *name_prefix, sandbox_usage *out)
{
    memset(out, 0, sizeof *out);
    if (!b || !b->have_cgroups)
        return false;
    char group[SBX_CG_NAME_MAX];
    sbx_cg_group_name(tenant, group);
    sbx_cg_usage u;
    memset(&u, 0, sizeof u);
    (void)sbx_cg_usage_of(&b->cgroups, group, name_prefix, &u); /* no tenant group yet: none ran */
    from_cgroup(&u, out);
    return true;
}

typedef struct {
    sandbox_usage_fn fn;
    void *ctx;
} each_ctx;

static void each_one(void *ctx, const char *id, const sbx_cg_usage *u)
{
    const each_ctx *e = ctx;
    sandbox_usage out;
    from_cgroup(u, &out);
    e->fn(e->ctx, id, &out);
}

bool sandbox_usage_each(const sandbox_backend *b, sandbox_usage_fn fn, void *ctx)
{
    if (!b || !b->have_cgroups)
        return false;
    each_ctx e = {fn, ctx};
    return sbx_cg_usage_each(&b->cgroups, each_one, &e) == 0;
}

bool sandbox_total_usage(const sandbox_backend *b, sandbox_usage *out)
{
    memset(out, 0, sizeof *out);
    if (!b || !b->have_cgroups)
        return false;
    sbx_cg_usage u;
    sbx_cg_total_usage(&b->cgroups, &u);
    from_cgroup(&u, out);
    return true;
}

static void retired(void *ctx, const char *id, const sbx_cg_usage *u)
{
    const sandbox_backend *b = ctx;
    sandbox_usage out;
    from_cgroup(u, &out);
    b->on_retire(b->retire_ctx, id, &out);
}

void sandbox_backend_on_retire(sandbox_backend *b, sandbox_retire_hook hook, void *ctx)
{
    if (!b || !b->have_cgroups)
        return;
    b->on_retire = hook;
    b->retire_ctx = ctx;
    b->cgroups.retire_ctx = b;
    b->cgroups.on_retire = hook ? retired : NULL;
}
