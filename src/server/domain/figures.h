/* Per-session figures kept beside the registry (ours): the commands a session ran and runs
 * now, its last command, and the CPU time and memory peak of its sandboxes already released
 * (a command's own sandbox goes with its command; the live ones are read from their cgroups
 * when asked, sandbox_usage_of). Entries appear with a session's first command and go with
 * the session (figures_forget from the registry's remove hook). Thread-safe; one lock, taken
 * at a command's start and end and when the figures are read, never on other requests. */
#ifndef AIRLOCKD_FIGURES_H
#define AIRLOCKD_FIGURES_H

#include "sandbox/sandbox.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct figures figures;

/* Commands of one session shown while they run, and bytes kept of each command's text. */
#define FIGURES_RUNNING_MAX 16
#define FIGURES_COMMAND_MAX 256

typedef struct {
    char command[FIGURES_COMMAND_MAX]; /* its first bytes (whole UTF-8 characters) */
    double started_at;                 /* epoch seconds */
} figures_running;

/* One session's figures at one moment. */
typedef struct {
    unsigned long long commands_run;   /* commands that ended (any way) */
    int running;                       /* commands under way */
    figures_running run[FIGURES_RUNNING_MAX]; /* the first min(running, MAX) of them */
    bool has_last;
    char last_command[FIGURES_COMMAND_MAX];
    int last_exit_code;                /* -1: timed out or stopped */
    double last_ended_at;
    unsigned long long retired_cpu_ns;      /* of its sandboxes released already */
    unsigned long long retired_peak_bytes;  /* the highest peak of one of them */
} figures_session;

figures *figures_new(void);
void figures_free(figures *f);

/* A command of session_id starts: a token for figures_command_end (never 0). */
unsigned long figures_command_begin(figures *f, const char *session_id, const char *command, size_t len);
/* It ended with exit_code (-1: timed out, stopped, failed). */
void figures_command_end(figures *f, const char *session_id, unsigned long token, int exit_code);

/* The retire hook of the sandbox backend (sandbox_backend_on_retire, ctx = f): a released
 * sandbox named "<session id>-..." adds its CPU time and peak to that session's entry. */
void figures_retire(void *ctx, const char *id, const sandbox_usage *u);

/* The session left the registry: its entry goes. Quick (the registry's remove hook). */
void figures_forget(figures *f, const char *session_id);

/* session_id's figures into *out (zeros when it never ran a command). */
void figures_get(figures *f, const char *session_id, figures_session *out);

#endif
