/* The logger's settings: SANDBOX_LOG_LEVEL (error, warn, info, debug; default info) and
 * SANDBOX_LOG_FORMAT (text, json; default text). A value outside these is a configuration
 * error naming the variable. */
#include "config/internal.h"

static const char *const levels[] = {"error", "warn", "info", "debug", NULL}; /* log_level's order */
static const char *const formats[] = {"text", "json", NULL};

int config_load_logging(config *c, const config_src *src)
{
    c->log_level = LV_INFO;
    c->log_json = false;
    const char *level = config_var(src, "SANDBOX_LOG_LEVEL");
    const char *format = config_var(src, "SANDBOX_LOG_FORMAT");
    int i = LV_INFO, f = 0;
    if (format && config_choice(src->err, "SANDBOX_LOG_FORMAT", format, formats, &f))
        return -1;
    c->log_json = f == 1; /* a bad level below is then said in the format asked for */
    if (level && config_choice(src->err, "SANDBOX_LOG_LEVEL", level, levels, &i))
        return -1;
    c->log_level = (log_level)i;
    return 0;
}
