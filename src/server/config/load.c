/* config_load: the flags, then each section of the environment, into one settings value. */
#include "config/internal.h"

#include <string.h>

config_status config_load(config *c, int argc, char **argv, char *const *envp, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    config_src src = {.envp = envp, .err = {err, errlen}};
    if (errlen)
        err[0] = '\0';
    config_status status = CONFIG_OK;
    if (config_load_flags(c, argc, argv, src.err, &status))
        return status;
    if (c->migrate_only) /* the database and nothing else: no keys, no sandbox */
        return config_load_logging(c, &src) || config_load_fleet(c, &src) ? CONFIG_INVALID : CONFIG_OK;
    if (config_load_logging(c, &src) || config_load_fleet(c, &src) || config_load_keys(c, &src) ||
        config_load_server(c, &src) || config_load_sandbox(c, &src) || config_load_policies(c, &src) ||
        config_load_egress(&c->egress, &src))
        return CONFIG_INVALID;
    return CONFIG_OK;
}
