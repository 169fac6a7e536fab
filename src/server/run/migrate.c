/* airlockd --migrate-only: brings the fleet's database to this version's schema and exits,
 * with nothing else started (no keys, no sandbox, no listener). For a fleet's setup before its
 * nodes start, and for the specs that test the schema's functions as SQL. */
#include "run/migrate.h"

#include "log/log.h"
#include "store/pg_schema.h"

int migrate_main(const config *c)
{
    if (!c->database_url) {
        log_error("--migrate-only needs the database: --database, SANDBOX_DATABASE_URL or "
                  "SANDBOX_DATABASE_URL_FILE");
        return 2;
    }
    char err[600];
    pg_pool *db = pg_open(c->database_url, 1, err, sizeof err);
    int rc = db && pg_schema_migrate(db, err, sizeof err) == 0 ? 0 : 1;
    if (rc == 0)
        log_info("the database's schema is current");
    else
        log_error("%s", err); /* pg_open and the schema's messages never hold the password */
    pg_close(db);
    return rc;
}
