/* Formats the exec response's `output` the way the reference's format_result does. */
#include "text/exec_format.h"

#include "util/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parts are joined with "\n"; this adds the separator before every part but the first.
 * A failed append is remembered in b->err and checked once at the end. */
static void sb_part(buffer *b, const char *prefix, const char *s, size_t n)
{
    if (b->len)
        buf_append(b, "\n", 1);
    buf_puts(b, prefix);
    buf_append(b, s, n);
}

char *exec_format_output(const char *out, size_t out_len, const char *err, size_t err_len,
                         const char *const *warnings, size_t nwarnings, int exit_code,
                         bool timed_out, size_t *len)
{
    buffer b = {0};
    char code[32];
    snprintf(code, sizeof code, "%d", exit_code);
    if (timed_out) {
        sb_part(&b, "[TIMEOUT]: ", nwarnings ? warnings[0] : "", nwarnings ? strlen(warnings[0]) : 0);
        sb_part(&b, "[EXIT CODE]: ", code, strlen(code));
    } else {
        size_t a, e;
        py_strip(out, out_len, &a, &e);
        if (e > a)
            sb_part(&b, "[STDOUT]:\n", out + a, e - a);
        py_strip(err, err_len, &a, &e);
        if (e > a)
            sb_part(&b, "[STDERR]:\n", err + a, e - a);
        for (size_t i = 0; i < nwarnings; i++)
            sb_part(&b, "[WARNING]: ", warnings[i], strlen(warnings[i]));
        sb_part(&b, "[EXIT CODE]: ", code, strlen(code));
    }
    return buf_take(&b, len);
}
