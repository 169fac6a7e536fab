/* POST /v1/sessions {"from_snapshot": id} (api/sessions.c asks here): the snapshot a new
 * session starts from, checked against the tenant and the body's other fields. */
#ifndef AIRLOCKD_API_SNAPSHOTS_H
#define AIRLOCKD_API_SNAPSHOTS_H

#include "api/api.h"
#include "store/snapshots.h"

/* What a session made from a snapshot copies (the spec's fill). */
typedef struct {
    snapshot_record rec;
    char *image;      /* the snapshot's workspace image (malloc'd) */
    char *memory_dir; /* a memory snapshot's image directory (malloc'd; NULL: files only) */
    json_t *egress;   /* a memory snapshot's egress rules, expanded (its sessions get them) */
    bool gone;        /* the copy found it deleted meanwhile */
} snapshot_source;

/* With "from_snapshot" in body: the tenant's snapshot into *src (false with the answer sent:
 * 422 for a bad id, a "template" or "disk_mb" other than the snapshot's; 404 when the tenant
 * has no such snapshot; with memory, 409 when another runsc made it, 422 for egress rules or a
 * size other than its) and spec's disk made a copy of its workspace (spec->template_name is the
 * snapshot's; with memory, spec->size its size too, src->memory_dir its image and src->egress
 * its rules). Without it, true and *src empty. Release with snapshot_source_free. */
bool snapshot_source_from_body(app *a, http_request *r, json_t *body, const char *tenant, snapshot_source *src,
                               session_spec *spec);
void snapshot_source_free(snapshot_source *src);

#endif
