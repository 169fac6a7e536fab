/* The session id's layout (domain/session_id.h). */
#include "domain/session_id.h"

#include <stdio.h>
#include <string.h>

bool session_id_valid(const char *id)
{
    if (strncmp(id, SESSION_ID_PREFIX, SESSION_ID_PREFIX_LEN) != 0 || strlen(id) != SESSION_ID_LEN)
        return false;
    for (const char *p = id + SESSION_ID_PREFIX_LEN; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c - 'a' + 10;
}

int session_id_slot(const char *id)
{
    if (!session_id_valid(id))
        return -1;
    return hex_digit(id[SESSION_ID_SLOT_AT]) * 16 + hex_digit(id[SESSION_ID_SLOT_AT + 1]);
}

void session_id_format(char out[SESSION_ID_LEN + 1], const unsigned char rnd[6], int slot)
{
    unsigned first = slot > 0 ? (unsigned)slot & 0xffu : rnd[0];
    snprintf(out, SESSION_ID_LEN + 1, SESSION_ID_PREFIX "%02x%02x%02x%02x%02x%02x", first, rnd[1], rnd[2], rnd[3],
             rnd[4], rnd[5]);
}
