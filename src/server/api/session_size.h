/* A create's size (ours): the optional memory_mb, cpus, disk_mb and max_processes of
 * POST /v1/sessions against the tenant's maxima (docs/server.md "Session sizes"). */
#ifndef AIRLOCKD_API_SESSION_SIZE_H
#define AIRLOCKD_API_SESSION_SIZE_H

#include "config/config.h"
#include "domain/sessions.h"

#include <jansson.h>
#include <stdbool.h>

/* The least a session may ask for: gVisor's own needs, a usable filesystem, a shell and a
 * pipeline. */
#define SESSION_MIN_MEMORY_MB 128
#define SESSION_MIN_DISK_MB 16
#define SESSION_MIN_PROCESSES 8

/* Reads the size fields of body into spec (a field left out stays 0: its default), checked
 * against tenant t's maxima (max_disk_mb unset: the larger of 2048 and the server's quota of
 * server_quota_bytes). false with one 422 item per bad field appended to errs. */
bool session_size_from_body(json_t *errs, json_t *body, const tenant_cfg *t, long long server_quota_bytes,
                            session_spec *spec);

#endif
