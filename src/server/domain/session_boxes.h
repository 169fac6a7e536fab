/* Sessions' long-lived sandboxes (ours, SANDBOX_EXEC_MODE=session): one gVisor sandbox per
 * session, whose agent runs each of its commands in a fresh container (sandbox/
 * session_sandbox.h). A session's sandbox boots when the session is made (or at its first
 * command), waits frozen between commands, is released after idle_seconds without one (the
 * next command boots it again) and when the session ends; one that died (memory limit) is
 * replaced by the next command, the workspace untouched (it is the session's disk).
 *
 * Bounded: at most max sandboxes held, all sessions together (a new one evicts the longest
 * idle one when full); at most max_booting boot at once. A command finds its session's
 * sandbox busy (a parallel command of the same session) or none to be had: it runs in a
 * sandbox of its own, as in the per-command mode. One thread boots and releases them: a
 * sandbox dies with the thread that started it. */
#ifndef AIRLOCKD_SESSION_BOXES_H
#define AIRLOCKD_SESSION_BOXES_H

#include "sandbox/sandbox.h"

#include <stdbool.h>

typedef struct session_boxes session_boxes;

typedef struct {
    int max;          /* sandboxes held at most (SANDBOX_WARM_MAX) */
    int idle_seconds; /* SANDBOX_WARM_IDLE_SECONDS */
    int max_booting;  /* boots at once (the CPUs) */
} session_boxes_settings;

/* NULL with a message when the thread cannot start; NULL without one (errbuf "") when max
 * is 0 or the backend cannot host sessions (sandbox_can_host_session). */
session_boxes *session_boxes_new(sandbox_backend *b, const session_boxes_settings *set, char *errbuf,
                                 size_t errlen);

/* Releases every sandbox and stops the thread (no command may be running in one). */
void session_boxes_free(session_boxes *w);

/* Boots key's sandbox (over workspace, for tenant) unless it has one. */
void session_boxes_want(session_boxes *w, const char *key, const char *workspace, const char *tenant);

/* Runs command in key's sandbox (booting it first when it has none; with wait, waiting for a
 * boot under way) with o's per-command options. 0 ran, -1 failed (errbuf), 1 not run there:
 * run it in a sandbox of its own (the session's is busy or still booting, none could be had,
 * or it cannot take this one). Sessions with a network (egress) always get 1. */
int session_boxes_run(session_boxes *w, const char *key, const sandbox_opts *o, const char *command,
                      int timeout_seconds, bool wait, sandbox_result *out, char *errbuf, size_t errlen);

/* Releases key's sandbox, if any, and returns once it is gone (its workspace is then free to
 * unmount); waits for a command running in it. */
void session_boxes_forget(session_boxes *w, const char *key);

/* For a server exiting without cleanup: kills the processes of every sandbox held. */
void session_boxes_abandon(session_boxes *w);

#endif
