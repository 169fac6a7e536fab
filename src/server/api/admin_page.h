/* The operator's status page (src/server/admin_page/: HTML, CSS, JavaScript), embedded into
 * airlockd when it is built: the Makefile writes each file's bytes into a generated C file
 * (scripts/embed-files.sh) that defines this table. */
#ifndef AIRLOCKD_API_ADMIN_PAGE_H
#define AIRLOCKD_API_ADMIN_PAGE_H

#include <stddef.h>

typedef struct {
    const char *name;          /* the file's base name: "index.html", "page.js", ... */
    const unsigned char *data; /* its bytes (not NUL-terminated) */
    size_t len;
} admin_page_file;

extern const admin_page_file admin_page_files[];
extern const size_t admin_page_n_files;

#endif
