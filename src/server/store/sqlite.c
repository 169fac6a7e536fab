/* Opening the server's SQLite stores (audit log, key store) the same way. */
#include "store/sqlite.h"

#include <stdio.h>

sqlite3 *sqlite_open_store(const char *path, const char *schema, const char *setting, char *err,
                           size_t errlen)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                             NULL);
    char *msg = NULL;
    if (rc == SQLITE_OK) {
        /* request threads share the file: wait for a writer instead of failing at once */
        sqlite3_busy_timeout(db, 5000);
        rc = sqlite3_exec(db, schema, NULL, NULL, &msg);
    }
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "%s: cannot open %s: %s", setting, path,
                 msg ? msg : db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_free(msg);
        sqlite3_close(db);
        return NULL;
    }
    return db;
}
