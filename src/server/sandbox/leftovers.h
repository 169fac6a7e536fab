/* Processes of runsc containers that a killed predecessor on the same state dir left
 * (private to the sandbox backend): recognised by runsc's --root, which is this server's own
 * directory, so no other server's containers ever match. */
#ifndef AIRLOCKD_SANDBOX_LEFTOVERS_H
#define AIRLOCKD_SANDBOX_LEFTOVERS_H

/* SIGKILLs every process whose command line has "--root=<runsc_root>" or "--root"
 * "<runsc_root>" (runsc itself, its gofer, sandbox and stubs), in bounded rounds until none
 * is left. Returns how many it found (the most in one round). */
int sbx_kill_runsc_leftovers(const char *runsc_root);

#endif
