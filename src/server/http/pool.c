/* The bounded worker pool: a ring of waiting jobs and a running job per worker, one mutex. */
#include "http/pool.h"

#include <stdio.h>
#include <stdlib.h>

struct worker_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pool_run run;
    void **ring;        /* waiting jobs */
    size_t ring_cap, head, queued;
    void **running;     /* per worker: its job or NULL */
    pthread_t *threads;
    unsigned nthreads, started;
    unsigned reserved;  /* places taken: reserved, queued or running */
    unsigned places;    /* nthreads + the queue */
    bool stopping;
};

typedef struct {
    worker_pool *p;
    unsigned index;
} worker_arg;

static void *worker_main(void *arg)
{
    worker_arg *wa = arg;
    worker_pool *p = wa->p;
    unsigned me = wa->index;
    free(wa);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->queued && !p->stopping)
            pthread_cond_wait(&p->wake, &p->mu);
        if (!p->queued)
            break; /* stopping, and nothing left */
        void *job = p->ring[p->head];
        p->head = (p->head + 1) % p->ring_cap;
        p->queued--;
        p->running[me] = job;
        pthread_mutex_unlock(&p->mu);
        p->run(job);
        pthread_mutex_lock(&p->mu);
        p->running[me] = NULL;
        p->reserved--;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

worker_pool *pool_new(unsigned threads, unsigned queue, pool_run run)
{
    worker_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->run = run;
    p->nthreads = threads ? threads : 1;
    p->places = p->nthreads + queue;
    p->ring_cap = p->places;
    p->ring = calloc(p->ring_cap, sizeof *p->ring);
    p->running = calloc(p->nthreads, sizeof *p->running);
    p->threads = calloc(p->nthreads, sizeof *p->threads);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (!p->ring || !p->running || !p->threads) {
        pool_free(p);
        return NULL;
    }
    for (unsigned i = 0; i < p->nthreads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa)
            *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            pool_free(p);
            return NULL;
        }
        p->started++;
    }
    return p;
}

bool pool_reserve(worker_pool *p)
{
    pthread_mutex_lock(&p->mu);
    bool ok = !p->stopping && p->reserved < p->places;
    if (ok)
        p->reserved++;
    pthread_mutex_unlock(&p->mu);
    return ok;
}

void pool_submit(worker_pool *p, void *job)
{
    pthread_mutex_lock(&p->mu);
    /* reserved places never exceed the ring's size, so there is room */
    p->ring[(p->head + p->queued) % p->ring_cap] = job;
    p->queued++;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

unsigned pool_pending(worker_pool *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned n = p->reserved;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void pool_each_running(worker_pool *p, void (*fn)(void *job, void *ctx), void *ctx)
{
    pthread_mutex_lock(&p->mu);
    for (unsigned i = 0; i < p->nthreads; i++)
        if (p->running[i])
            fn(p->running[i], ctx);
    pthread_mutex_unlock(&p->mu);
}

void pool_free(worker_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->ring);
    free(p->running);
    free(p->threads);
    free(p);
}
