/* A call for a paused session no node holds (its image in the fleet's shared store, docs/fleet.md
 * "The shared store"): this node takes it from the store, then serves the call as if it had
 * always held it (paused: the call resumes it as on one machine; its memory image, if any, is
 * restored into a sandbox of this node's). */
#include "api/api.h"
#include "api/handlers.h"
#include "fleet/wire.h"

#include <string.h>

/* The template of the session's shape built on this node ("" the default root, or a template
 * deleted since: its commands say so, as after a restart); false while it is being built here
 * (the caller is answered 503 and retries). */
static bool template_here(app *a, const char *tenant, const char *name, char *id)
{
    const char *status = "";
    id[0] = '\0';
    if (!name || !api_template_name_valid(name, strlen(name)))
        return true;
    templates_result tr = templates_resolve(a->templates, tenant, name, id, &status);
    if (tr == TPL_OK)
        templates_unpin(a->templates, id); /* a restored session counts as the template's user */
    else
        id[0] = '\0';
    return tr != TPL_NOT_READY;
}

bool store_take_over(app *a, const char *id, size_t tenant)
{
    if (!a->fleet || !a->pause.store_dir || !session_id_valid(id))
        return false;
    const char *tname = tenants_get(a->tenants, tenant)->name;
    json_t *row = fleet_store_take(a->fleet, id, tname);
    if (!row)
        return false;
    const json_t *stored = json_object_get(row, "stored");
    long long quota = (long long)json_integer_value(json_object_get(row, "quota_mb")) << 20;
    session_spec spec = fleet_shape_spec(json_object_get(row, "shape"), quota);
    session_record rec = {.tenant = (char *)tname, .egress = json_object_get(row, "egress"),
                          .created_at = json_real_value(json_object_get(row, "created_at")),
                          .last_accessed_at = json_real_value(json_object_get(row, "last_used")),
                          .quota_bytes = spec.quota_bytes ? spec.quota_bytes : quota,
                          .memory_mb = spec.size.memory_mb, .cpu_percent = spec.size.cpu_percent,
                          .max_processes = spec.size.max_processes, .on_idle_pause = spec.on_idle_pause,
                          .pause = {.paused = true, .paused_at = json_real_value(json_object_get(row, "paused_at"))}};
    memcpy(rec.id, id, sizeof rec.id);
    if (spec.template_name)
        snprintf(rec.template_name, sizeof rec.template_name, "%s", spec.template_name);
    char src[4200];
    snprintf(src, sizeof src, "%s/%s.img", a->pause.store_dir, id);
    session_result rc = SESSION_ERROR;
    session_pause_state memory = {.paused = false}; /* its memory image, if it was paused with one */
    if (template_here(a, tname, spec.template_name, rec.template_id) && !registry_has(a->reg, id) &&
        pause_image_from_store(&a->pause, id, stored, &memory) == 0) {
        if (memory.image_dir[0]) {
            memory.paused = true;
            memory.paused_at = rec.pause.paused_at;
            rec.pause = memory;
        }
        rc = registry_adopt_paused(a->reg, &rec, src);
        if (rc == SESSION_ERROR)
            pause_image_to_store(&a->pause, id, &memory);
        else if (rc == SESSION_NOT_FOUND) /* its paused TTL had ended: nothing of it is kept */
            pause_forget_image(&a->pause, id);
    }
    if (rc == SESSION_ERROR && fleet_store_put(a->fleet, id, stored) != 0) /* back for any node */
        log_session(LV_ERROR, id, NULL, "session %s: taken from the store but not held: its image stays in %s", id,
                    src);
    if (rc == SESSION_OK)
        log_session(LV_INFO, id, NULL, "session %s taken from the shared store (paused%s)", id,
                    memory.image_dir[0] ? ", with its memory image" : "");
    json_decref(row);
    return rc == SESSION_OK;
}
