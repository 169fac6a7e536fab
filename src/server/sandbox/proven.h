/* A sandbox backend proven on this host, remembered until the next boot: a start's probe (a
 * whole sandbox running `true`, ~0.15 CPU-s of gVisor) is skipped when a start on the same
 * boot already proved the same isolation program, run by the same airlockd binary, with its
 * state on the same filesystem. The proof is an empty root-owned file under SBX_PROVEN_DIR
 * (tmpfs: gone at reboot) named after the SHA-256 of what it proved (sbx_hashed_name). */
#ifndef AIRLOCK_SANDBOX_PROVEN_H
#define AIRLOCK_SANDBOX_PROVEN_H

#include <stdbool.h>
#include <stddef.h>

#define SBX_PROVEN_DIR "/run/airlockd"
#define SBX_PROVEN_NAME_MAX 64
/* proofs kept at most: one more clears the others (each is a tmpfs inode) */
#define SBX_PROVEN_MAX 64

/* The proof's file name for isolation kind ("gvisor", "bubblewrap") run by program, with the
 * state in state_dir, into out; false when something it names cannot be read (then there is
 * no proof to look for or keep: the probe runs). */
bool sbx_proven_name(const char *kind, const char *program, const char *state_dir, char *out, size_t len);

/* Whether the proof named name exists (a regular file owned by root in SBX_PROVEN_DIR, itself
 * a root-owned directory no one else can write). */
bool sbx_proven(const char *name);

/* Keeps the proof named name; failures are only logged at debug (the next start probes). */
void sbx_proven_keep(const char *name);

#endif
