/* buf.c: the one growable byte buffer of airlock.core (response bodies and header blocks),
 * and a copy of a byte range as a C string. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Appends n bytes; 0, or -1 (buffer unchanged) when memory runs out or the size overflows. */
static int buffer_append(buffer *b, const char *p, size_t n)
{
  size_t need, cap;
  char *nd;
  if (n == 0) return 0;
  if (b->len > SIZE_MAX - n) return -1;
  need = b->len + n;
  if (need > b->cap) {
    cap = b->cap ? b->cap : 4096;
    while (cap < need) {
      if (cap > SIZE_MAX / 2) { cap = need; break; }
      cap *= 2;
    }
    nd = realloc(b->data, cap);
    if (nd == NULL) return -1;
    b->data = nd;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len = need;
  return 0;
}

static void buffer_free(buffer *b)
{
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

/* A NUL-terminated copy of n bytes, or NULL when memory runs out. */
static char *dup_mem(const char *s, size_t n)
{
  char *p = malloc(n + 1);
  if (p == NULL) return NULL;
  if (n) memcpy(p, s, n);
  p[n] = '\0';
  return p;
}
