/* Opening the server's SQLite stores (audit log, key store) the same way. */
#ifndef AIRLOCKD_SQLITE_OPEN_H
#define AIRLOCKD_SQLITE_OPEN_H

#include <sqlite3.h>
#include <stddef.h>

/* Opens (creating, 0600) the database at path, shareable across threads, in WAL mode with
 * synchronous=FULL, and applies schema. NULL on failure, with err saying "<setting>: cannot
 * open <path>: <reason>". */
sqlite3 *sqlite_open_store(const char *path, const char *schema, const char *setting, char *err,
                           size_t errlen);

#endif
