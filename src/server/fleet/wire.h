/* Plugs a fleet into the session registry and the limits as their shared store. */
#ifndef AIRLOCKD_FLEET_WIRE_H
#define AIRLOCKD_FLEET_WIRE_H

#include "domain/limits.h"
#include "domain/sessions.h"
#include "fleet/fleet.h"

void fleet_wire(fleet *f, registry_shared *rs, limits_shared *ls);

/* A session's spec from its row's shape and quota (a move, the list): a field missing or out
 * of range stays 0, its default. template_name points into shape. */
session_spec fleet_shape_spec(const json_t *shape, long long quota_bytes);

#endif
