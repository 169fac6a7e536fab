/* A fixed-size table of counters keyed by 16 bytes (a client address, a body-budget owner):
 * an entry exists only while its count is above zero, so the table never holds more
 * entries than the things it counts. No locking: the owner serialises access. */
#ifndef AIRLOCKD_HTTP_TALLY_H
#define AIRLOCKD_HTTP_TALLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TALLY_KEY 16

typedef struct {
    unsigned char key[TALLY_KEY];
    uint64_t count; /* 0 = empty slot */
} tally_entry;

typedef struct {
    tally_entry *e;
    size_t cap;  /* a power of two, at least twice the most keys counted at once */
    size_t used; /* entries with a count */
} tally;

/* Room for at most max_keys keys with a count at once; false when out of memory. */
bool tally_init(tally *t, size_t max_keys);
void tally_free(tally *t);

/* The count of key (0 when absent). */
uint64_t tally_get(const tally *t, const unsigned char key[TALLY_KEY]);

/* Adds n to key's count when the result stays at most limit; returns the new count, or 0
 * when it would exceed limit or the table is full (nothing changes then). n > 0. */
uint64_t tally_add(tally *t, const unsigned char key[TALLY_KEY], uint64_t n, uint64_t limit);

/* Takes n (at most its count) off key's count; the entry goes when it reaches 0. */
void tally_sub(tally *t, const unsigned char key[TALLY_KEY], uint64_t n);

#endif
