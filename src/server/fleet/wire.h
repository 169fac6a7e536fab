/* Plugs a fleet into the session registry and the limits as their shared store. */
#ifndef AIRLOCKD_FLEET_WIRE_H
#define AIRLOCKD_FLEET_WIRE_H

#include "domain/limits.h"
#include "domain/sessions.h"
#include "domain/snapshots.h"
#include "fleet/fleet.h"

void fleet_wire(fleet *f, registry_shared *rs, limits_shared *ls);
/* The snapshots' list and limits from the fleet's database (those already in the store are
 * added to it first). */
void fleet_wire_snapshots(fleet *f, snapshots *sn);

/* A session's spec from its row's shape and quota (a move, the list): a field missing or out
 * of range stays 0, its default. template_name points into shape. */
session_spec fleet_shape_spec(const json_t *shape, long long quota_bytes);

#endif
