/* The sandboxes booted ahead, as warm.c and warm_session.c (a session's own sandbox) share
 * them: the table's entries and the helpers both use (private to domain/warm*.c). */
#ifndef AIRLOCKD_WARM_INTERNAL_H
#define AIRLOCKD_WARM_INTERNAL_H

#include "domain/warm.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define KEY_MAX 40
/* How long a command waits for its session's sandbox that is still booting (a boot takes
 * ~0.3 s; a cold run would not be faster than waiting). */
#define TAKE_WAIT_MS 20000
/* A boot that has not finished by then is given up. */
#define BOOT_GIVE_UP_MS 60000
/* The thread looks around at least this often (idle releases). */
#define TICK_MS 1000

typedef enum {
    E_FREE,
    E_PENDING,  /* wanted, waiting for a boot slot */
    E_STARTING, /* the thread is starting it (sandbox_prepare, outside the lock) */
    E_BOOTING,  /* runsc started, the waiter has not said "R" yet */
    E_READY,    /* booted, frozen, waiting for its command */
    E_DOOMED,   /* evicted or failed: the thread releases it */
    E_LENT,     /* a session's own sandbox running commands (warm_session.c); never released */
} entry_state;

typedef struct {
    entry_state state;
    char key[KEY_MAX];
    char *workspace;
    char *tenant;
    sandbox *sb;
    int64_t used_ms;    /* wanted, or ready: for the LRU and the idle release */
    int64_t started_ms; /* its boot began */
    bool doomed;        /* forgotten while starting: released once started */
    bool spare;         /* for the tenant's next new session: key and disk made when it starts */
    /* SANDBOX_EXEC_MODE=session (warm_session.c): the session's own long-lived sandbox, whose
     * agent runs each of its commands; lent to commands (several at once) and given back,
     * never taken. */
    bool session;
    int borrowers;      /* E_LENT: the commands it is lent to */
    json_t *egress;     /* its session's egress rules (NULL: none): its sandbox's network */
    double created_at;  /* its session's (for the egress pass) */
    void *net;          /* that network (warm_session_network's handle) while its sandbox lives */
    bool reboot;        /* a session's sandbox that died: once released, its next boots */
    sandbox_size size;  /* its session's (a spare: warm_settings.spare_size) */
} entry;

struct warm_pool {
    sandbox_backend *b;
    warm_settings ws;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* an entry left E_STARTING, E_BOOTING, E_LENT or E_DOOMED */
    entry *e;
    int n;
    int wake[2];
    bool stopping;
    pthread_t thread;
};

int64_t warm_now_ms(void);

/* Wakes the thread (a want, a boot slot freed). */
void warm_wake(warm_pool *w);

/* key's entry of that kind (a session's own sandbox, or one booted ahead for one command),
 * spares aside; NULL when none. Locked. */
entry *warm_find_kind(warm_pool *w, const char *key, bool own_sandbox);

/* A free entry, locked; when full, the longest unused waiting one is doomed and NULL. */
entry *warm_free_entry_locked(warm_pool *w);

/* Fills a free entry as a pending want (key NULL: a spare); false when out of memory. */
bool warm_fill_entry(entry *e, const char *key, const char *workspace, const char *tenant);

/* Frees what e holds (not its sandbox nor its network) and makes it E_FREE. */
void warm_clear_entry(entry *e);

#endif
