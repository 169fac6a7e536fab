/* Kernels (ours, issue 25): long-lived interpreters in a session's own sandbox, each a process
 * the agent keeps on a slot of its own (FRAME_SPAWN) in a container like a command's, speaking
 * the kernel wire (docs: /airlock/kernel.py reads one JSON request a line on its stdin and
 * writes one JSON event a line on its stdout). The table holds every session's kernels; a
 * kernel borrows its session's sandbox for as long as it lives (warm_session_borrow), runs one
 * cell at a time under a per-cell timeout (SIGINT at the timeout, SIGKILL and a new process
 * under the same id after a grace), keeps each cell's output within a budget, and restarts
 * after its process dies (the memory limit) saying so in that cell and the next. */
#ifndef AIRLOCKD_DOMAIN_KERNELS_H
#define AIRLOCKD_DOMAIN_KERNELS_H

#include "domain/sessions.h"
#include "domain/warm.h"
#include "sandbox/rootfs.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* How long a cell that ignored its interrupt gets before its kernel is killed and restarted. */
#define KERNEL_INTERRUPT_GRACE_MS 2000
/* How long a kernel's process has to say it is ready. */
#define KERNEL_START_MS 30000
/* The program the agent runs for a Python kernel (installed beside the agent, like the
 * bootstrap: sandbox/backend.c), and how. */
#define KERNEL_PYTHON_COMMAND "exec python3 -u " SBX_KERNEL_PYTHON_PATH
#define KERNEL_ID_MAX 24

typedef struct kernels kernels;
typedef struct kernel kernel;

kernels *kernels_new(warm_pool *w);
/* Ends every kernel (their sandboxes given back) and frees the table. */
void kernels_free(kernels *t);

typedef enum {
    KERNEL_OK,
    KERNEL_TOO_MANY,   /* the session has max kernels already */
    KERNEL_NO_SANDBOX, /* no session sandbox to be had (not session mode, none booted) */
    KERNEL_FAILED,     /* the process did not start (errbuf) */
} kernel_start_rc;

/* Starts a kernel of language ("python") in s's own sandbox, for tenant, on root (the
 * session's template root, NULL: the default), at most max per session. Its id in id. */
kernel_start_rc kernels_start(kernels *t, const session *s, const char *tenant, const char *root, int max,
                              int cancel_fd, char id[KERNEL_ID_MAX], char *errbuf, size_t errlen);

/* s's kernels as [{"kernel_id","language","state"}] (new reference). */
json_t *kernels_list(kernels *t, const char *session_id);

/* s's kernels as [{"kernel_id","language","slot","pings"}] (new reference): what a resume
 * after a restart needs (slot -1: none has its process); "pings": its program answers a ping
 * (this build's: a kernel in an image an older one made does not). */
json_t *kernels_describe(kernels *t, const char *session_id);

/* The kernels.json beside the memory image in image_dir (kernels_describe's list, as a pause or
 * memory snapshot kept it): a new reference to a JSON array, or NULL with errbuf saying why. */
json_t *kernels_of_image(const char *image_dir, char *errbuf, size_t errlen);

/* After session_id's sandbox was restored from image_dir: every kernel its kernels.json says
 * answers a ping does, from its own process (what proves that process and its memory came
 * back). How many answered (0: none was to, as in an image an older build made), or -1 with
 * errbuf naming the kernel that did not. */
int kernels_check_restored(kernels *t, const char *session_id, const char *image_dir, char *errbuf, size_t errlen);

/* A kernel id of s whose process runs on slot of sb, restored with its memory (slot -1: none,
 * its next cell starts one); it holds sb, borrowed (warm_session_restore_anew). false when out
 * of memory. */
bool kernels_adopt(kernels *t, const session *s, const char *tenant, const char *root, sandbox *sb, const char *id,
                   int slot);

/* How many kernels session_id has. */
size_t kernels_count(kernels *t, const char *session_id);

/* Session session_id's kernel id, referenced (kernels_put it); NULL when there is none. */
kernel *kernels_get(kernels *t, const char *session_id, const char *id);
void kernels_put(kernels *t, kernel *k);

/* Ends kernel id of session_id: false when there is none. Waits for a cell under way (killed). */
bool kernels_delete(kernels *t, const char *session_id, const char *id);

/* Ends every kernel of session_id (its deletion, expiry), before its sandbox is forgotten. */
void kernels_forget_session(kernels *t, const char *session_id);

/* SIGINT to k's cell under way (nothing when idle). */
void kernel_interrupt(kernels *t, kernel *k);

/* What a cell's events go to as they come (streaming): stdout/stderr text, a result's mime
 * bundle, the error, and a tick at least every second while the cell runs (heartbeats); each
 * may be NULL. */
typedef struct {
    void (*text)(void *ctx, int stream, const char *text, size_t len);
    void (*result)(void *ctx, json_t *data);
    void (*error)(void *ctx, json_t *error);
    void (*tick)(void *ctx);
    void *ctx;
} kernel_events;

/* Runs code as k's next cell within timeout_seconds, keeping output_limit bytes of each of
 * stdout and stderr (head and tail, like a command's) and of results in all. The answer
 * object of POST .../execute (new reference) with its warnings; NULL with errbuf when the
 * kernel could not run it (its session's sandbox gone and none to be had). s: k's session
 * (a sandbox that died is borrowed again for it). */
json_t *kernel_execute(kernels *t, kernel *k, const session *s, const char *code, size_t code_len,
                       int timeout_seconds, size_t output_limit, int cancel_fd, const kernel_events *ev,
                       char *errbuf, size_t errlen);

#endif
