/* airlockd's signals: SIGTERM and SIGINT reach the main thread through a pipe; SIGPIPE is
 * caught (not ignored), so commands we start get the default back and shell pipelines inside
 * the sandbox behave normally. */
#ifndef AIRLOCKD_RUN_SIGNALS_H
#define AIRLOCKD_RUN_SIGNALS_H

#include <stdbool.h>

/* Installs the handlers; -1 with errno when the pipe cannot be made. */
int signals_catch(void);

/* Blocks until SIGTERM or SIGINT; returns the signal number. */
int signals_wait(void);

/* Waits up to ms for another signal; true when one came. */
bool signals_poll(int ms);

#endif
