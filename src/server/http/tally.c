/* The counter table: open addressing with linear probing and backward-shift deletion, so
 * removed entries leave no tombstones and a lookup never scans more than a cluster. */
#include "http/tally.h"

#include <stdlib.h>
#include <string.h>

bool tally_init(tally *t, size_t max_keys)
{
    size_t cap = 16;
    while (cap < 2 * max_keys)
        cap *= 2;
    t->e = calloc(cap, sizeof *t->e);
    t->cap = t->e ? cap : 0;
    t->used = 0;
    return t->e != NULL;
}

void tally_free(tally *t)
{
    free(t->e);
    t->e = NULL;
    t->cap = t->used = 0;
}

static size_t home(const tally *t, const unsigned char key[TALLY_KEY])
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (int i = 0; i < TALLY_KEY; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29)) & (t->cap - 1);
}

/* The slot holding key, or the empty slot ending its probe run. */
static size_t find(const tally *t, const unsigned char key[TALLY_KEY])
{
    size_t i = home(t, key);
    while (t->e[i].count && memcmp(t->e[i].key, key, TALLY_KEY) != 0)
        i = (i + 1) & (t->cap - 1);
    return i;
}

uint64_t tally_get(const tally *t, const unsigned char key[TALLY_KEY])
{
    return t->cap ? t->e[find(t, key)].count : 0;
}

uint64_t tally_add(tally *t, const unsigned char key[TALLY_KEY], uint64_t n, uint64_t limit)
{
    if (!t->cap)
        return 0;
    size_t i = find(t, key);
    tally_entry *e = &t->e[i];
    if (!e->count) {
        /* keep at least half the table empty: probe runs stay short and always end */
        if (t->used >= t->cap / 2 || n > limit)
            return 0;
        memcpy(e->key, key, TALLY_KEY);
        e->count = n;
        t->used++;
        return n;
    }
    if (n > limit || e->count > limit - n)
        return 0;
    e->count += n;
    return e->count;
}

void tally_sub(tally *t, const unsigned char key[TALLY_KEY], uint64_t n)
{
    if (!t->cap)
        return;
    size_t i = find(t, key), mask = t->cap - 1;
    if (!t->e[i].count)
        return;
    t->e[i].count = t->e[i].count > n ? t->e[i].count - n : 0;
    if (t->e[i].count)
        return;
    t->used--;
    /* backward shift: move later entries of the run into the hole when their home allows */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; t->e[j].count; j = (j + 1) & mask) {
        size_t h = home(t, t->e[j].key);
        /* j may move to hole when h is not cyclically within (hole, j] */
        bool stays = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
        if (stays)
            continue;
        t->e[hole] = t->e[j];
        t->e[j].count = 0;
        hole = j;
    }
}
