/* The host-wide cap on commands running at once (exec and import's unpacking, every
 * tenant together; SANDBOX_MAX_RUNNING). A command over the cap waits in a bounded queue for
 * a bounded time; a freed slot goes to the waiting tenant with the fewest commands running,
 * among equals the one served longest ago (oldest command first within a tenant), so one
 * tenant's burst cannot starve the others. */
#ifndef AIRLOCKD_SLOTS_H
#define AIRLOCKD_SLOTS_H

#include <stddef.h>

typedef struct slots slots;

typedef enum {
    SLOT_OK,        /* a slot is held: call slots_release when the command ends */
    SLOT_BUSY,      /* the queue is full, or no slot freed within the wait */
    SLOT_CANCELLED, /* cancel_fd hung up while waiting */
} slot_result;

/* max_running >= 1 slots for tenants 0..tenant_cap-1; at most queue_max waiters, each for at
 * most wait_ms (0: never wait). NULL when out of memory. */
slots *slots_new(int max_running, size_t tenant_cap, int queue_max, int wait_ms);
void slots_free(slots *s);

/* Takes a slot for tenant, waiting as configured; a hang-up (POLLHUP, POLLERR, POLLRDHUP) on
 * cancel_fd (> 0) ends the wait. */
slot_result slots_acquire(slots *s, size_t tenant, int cancel_fd);
void slots_release(slots *s, size_t tenant);

int slots_max(const slots *s);
int slots_running(slots *s);

#endif
