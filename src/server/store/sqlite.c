/* Opening the server's SQLite stores (audit log, key store) the same way: private files,
 * WAL, every commit durable, and errors that say whether the disk refused a write. */
#include "store/sqlite.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The database and its -wal / -shm are 0600 whatever the umask, and older files made
 * readable by an earlier server are made private (SQLite gives the -wal and -shm the
 * database file's mode when it creates them). */
static int make_private(const char *path, char *why, size_t whylen)
{
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    static const char *const SIDE[] = {"-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof SIDE / sizeof SIDE[0]; i++) {
        char *side = NULL;
        if (asprintf(&side, "%s%s", path, SIDE[i]) < 0) {
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        int rc = chmod(side, 0600) != 0 && errno != ENOENT ? -1 : 0;
        if (rc != 0)
            snprintf(why, whylen, "%s: %s", side, strerror(errno));
        free(side);
        if (rc != 0)
            return -1;
    }
    return 0;
}

sqlite3 *sqlite_open_store(const char *path, const char *schema, const char *setting, char *err,
                           size_t errlen)
{
    char why[300];
    if (make_private(path, why, sizeof why) != 0) {
        snprintf(err, errlen, "%s: cannot open %s: %s", setting, path, why);
        return NULL;
    }
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                             NULL);
    char *msg = NULL;
    if (rc == SQLITE_OK) {
        /* request threads share the file: wait for a writer instead of failing at once */
        sqlite3_busy_timeout(db, 5000);
        /* WAL with synchronous=FULL: the WAL is synced at every commit, so what a request
         * acknowledged (a key, a revocation, an audit row) survives a power loss too; NORMAL
         * would only survive a crash of airlockd and could lose the last commits. */
        rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", NULL, NULL, &msg);
        if (rc == SQLITE_OK)
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
