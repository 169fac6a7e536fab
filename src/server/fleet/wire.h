/* Plugs a fleet into the session registry and the limits as their shared store. */
#ifndef AIRLOCKD_FLEET_WIRE_H
#define AIRLOCKD_FLEET_WIRE_H

#include "domain/limits.h"
#include "domain/sessions.h"
#include "fleet/fleet.h"

void fleet_wire(fleet *f, registry_shared *rs, limits_shared *ls);

#endif
