/* A session's long-lived gVisor sandbox (ours, SANDBOX_EXEC_MODE=session): booted by
 * sandbox_prepare with sandbox_opts.boot_ahead and .agent, its first process is the agent
 * (src/agent/agent.c), which runs each command handed to it here in a fresh container of its
 * own (new PID, mount, IPC and UTS namespaces; a new overlay root, /tmp, /dev/shm and /proc;
 * uid 1000 without capabilities) and streams its output back. Between commands the sandbox is
 * frozen (sandbox_session_settle). Up to AGENT_SLOTS commands at once (each in its own
 * container, on a channel of its own); results are
 * those of sandbox_run (exit code, timeout, memory, output budget, tap, cancel). */
#ifndef AIRLOCKD_SANDBOX_SESSION_SANDBOX_H
#define AIRLOCKD_SANDBOX_SESSION_SANDBOX_H

#include "sandbox/sandbox.h"

#include <stdbool.h>
#include <stdint.h>

/* Runs `/bin/bash -c command` through s's agent with o's per-command options (output budget,
 * cancel descriptor, tap; the rest of o was fixed at its boot) and a wall clock of
 * timeout_seconds (1..86400). 0 when the command ran (whatever its end), 1 when it did not
 * start there (too long for the agent, every slot taken, or the agent could not make its
 * container: run it in a sandbox of its own), -1 when it failed (message in errbuf). Afterwards sandbox_session_usable says whether s takes another one. */
int sandbox_session_run(sandbox *s, const sandbox_opts *o, const char *command, int timeout_seconds,
                        sandbox_result *out, char *errbuf, size_t errlen);

/* False once s's sandbox died or was killed (memory limit, an agent that stopped answering):
 * release it; the session's next command needs a new one. */
bool sandbox_session_usable(sandbox *s);

/* After a session sandbox's last command, s stays thawed for a second (the session's next
 * command answers faster) and until its agent's next container is ready (at most two), so the
 * freeze never leaves it half made and no result waits for it. Freezes s when that time has
 * come and returns -1; else the descriptor to poll for it, with the deadline (CLOCK_MONOTONIC
 * ms) in until_ms. Also -1 when s is not settling. */
int sandbox_session_settle(sandbox *s, int64_t *until_ms);

#endif
