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
#include "../../agent/protocol.h"

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

/* Whether s's agent answers (FRAME_PING, on a free slot, within timeout_ms): it answers itself,
 * with no command and no container, so a restored sandbox's check costs neither. 0, or -1 with
 * a message (then s is killed: sandbox_session_usable is false). An agent older than the ping
 * would end on it: only an image marked as made with one that answers
 * (sandbox_image_agent_pings) is checked so. */
int sandbox_session_ping(sandbox *s, int timeout_ms, char *errbuf, size_t errlen);

/* After a session sandbox's last command, s stays thawed for a second (the session's next
 * command answers faster) and until its agent's next container is ready (at most two), so the
 * freeze never leaves it half made and no result waits for it. Freezes s when that time has
 * come and returns -1; else the descriptor to poll for it, with the deadline (CLOCK_MONOTONIC
 * ms) in until_ms. Also -1 when s is not settling. */
int sandbox_session_settle(sandbox *s, int64_t *until_ms);

/* Long-lived processes (kernels) on a slot of s's agent (FRAME_SPAWN, src/agent/protocol.h):
 * no timeout of the agent's, stdin fed by FRAME_STDIN, signals by FRAME_SIGNAL; its frames
 * (FRAME_STDOUT/STDERR, then FRAME_EXIT or FRAME_FAIL) are read by sandbox_session_proc_read
 * (one reader per slot). s is thawed only during a process's turns: spawn begins
 * one (the caller ends it with sandbox_session_proc_end once the process is ready), as does
 * sandbox_session_proc_begin (a cell); between turns s may be frozen with the process in it.
 *
 * Starts `/bin/bash -c command` (use exec) in a container of its own: its slot, the first turn
 * begun; -1 with a message when it cannot (every slot busy, the sandbox dead). */
int sandbox_session_spawn(sandbox *s, const char *command, char *errbuf, size_t errlen);
/* Waits up to wait_ms for slot's next frame (its payload into payload, cap bytes): 1 with the
 * frame in *h, 0 when none came (or cancel_fd hung up: *cancelled set; cancel_fd <= 0: none),
 * -1 when the agent is gone or broke the protocol. One reader per slot. */
int sandbox_session_proc_read(sandbox *s, int slot, int wait_ms, int cancel_fd, bool *cancelled, frame_head *h,
                              void *payload, size_t cap);
/* A frame for slot's process: FRAME_STDIN (any length: sent in frames the agent takes; 0 bytes
 * close its stdin) or FRAME_SIGNAL / FRAME_KILL. 0, or -1 (the agent is gone). */
int sandbox_session_proc_send(sandbox *s, int slot, int type, const void *data, size_t len);
int sandbox_session_proc_signal(sandbox *s, int slot, int sig);
/* A turn begins (s thawed) / ends (the last one out lets s settle and freeze); end says the
 * memory's verdict like a command's: true when the host OOM killer took the sandbox down (then
 * killed: sandbox_session_usable is false), *limit_hit when the memory limit was hit. gone:
 * the agent broke the protocol (s is killed). */
int sandbox_session_proc_begin(sandbox *s, char *errbuf, size_t errlen);
bool sandbox_session_proc_end(sandbox *s, bool gone, bool *limit_hit);
/* The slot is free again (after the process's FRAME_EXIT or FRAME_FAIL, or with s dead). */
void sandbox_session_proc_release(sandbox *s, int slot);

#endif
