/* airlockd --migrate-only (run/migrate.c). */
#ifndef AIRLOCKD_RUN_MIGRATE_H
#define AIRLOCKD_RUN_MIGRATE_H

#include "config/config.h"

/* Applies the schema's missing migrations to c's database: the exit status (0 done, 1 the
 * database refused or could not be reached, 2 no database given). */
int migrate_main(const config *c);

#endif
