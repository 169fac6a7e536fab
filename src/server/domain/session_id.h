/* The layout of a session id, said once for airlockd, the router program and (through the
 * constants below) the HAProxy configuration it prints: "sbx_" + 12 lowercase hex digits, and
 * in a fleet the first two of them are the slot of the node that made it (the router's key,
 * so it never asks the database per request). The SQL side is airlock_id_slot() in
 * store/pg_schema.c. */
#ifndef AIRLOCKD_SESSION_ID_H
#define AIRLOCKD_SESSION_ID_H

#include <stdbool.h>

#define SESSION_ID_PREFIX "sbx_"
#define SESSION_ID_PREFIX_LEN 4
#define SESSION_ID_HEX 12
#define SESSION_ID_LEN (SESSION_ID_PREFIX_LEN + SESSION_ID_HEX)
/* the node's slot: two hex digits right after the prefix (slots 1-255) */
#define SESSION_ID_SLOT_AT SESSION_ID_PREFIX_LEN
#define SESSION_ID_SLOT_DIGITS 2
#define SESSION_ID_SLOTS 255

/* True for "sbx_" + 12 lowercase hex digits. */
bool session_id_valid(const char *id);

/* The slot an id names (its first two hex digits), or -1 for a malformed id. */
int session_id_slot(const char *id);

/* A new id into out from 6 random bytes; slot > 0 replaces the first byte (a fleet node's). */
void session_id_format(char out[SESSION_ID_LEN + 1], const unsigned char rnd[6], int slot);

#endif
