/* A bounded worker pool (private to http/): a fixed number of threads and a fixed-size
 * queue, so handlers never make threads or queues grow with the number of clients. A place
 * is reserved before a request is suspended, so handing it over cannot fail afterwards. */
#ifndef AIRLOCKD_HTTP_POOL_H
#define AIRLOCKD_HTTP_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

typedef void (*pool_run)(void *job);

typedef struct worker_pool worker_pool;

/* threads workers and room for queue waiting jobs; NULL when out of memory or threads. */
worker_pool *pool_new(unsigned threads, unsigned queue, pool_run run);

/* A place for one job (a worker or the queue); false when every place is taken. */
bool pool_reserve(worker_pool *p);
/* Hands over a job for a reserved place. */
void pool_submit(worker_pool *p, void *job);

/* Jobs reserved, waiting or running. */
unsigned pool_pending(worker_pool *p);

/* Calls fn(job, ctx) for every running job, under the pool's lock (fn must not block). */
void pool_each_running(worker_pool *p, void (*fn)(void *job, void *ctx), void *ctx);

/* Lets the workers finish what they run and the queue, then joins them and frees p. */
void pool_free(worker_pool *p);

#endif
