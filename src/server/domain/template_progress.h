/* Ours: a template build's progress read from mmdebstrap's and apt's own output lines (phase,
 * packages to install, fetched and set up, bytes fetched, a percent), for the build's events. */
#ifndef AIRLOCKD_DOMAIN_TEMPLATE_PROGRESS_H
#define AIRLOCKD_DOMAIN_TEMPLATE_PROGRESS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *phase;         /* "queued", "update", "download", "install", "setup", "finish", "ready", "failed" */
    int total_essential;       /* packages apt said it installs in the essential step */
    int total_rest;            /* ... and in the step of the asked-for packages */
    int fetched;               /* package downloads seen */
    int installed;             /* "Setting up" lines seen */
    long long bytes;           /* bytes of the downloads seen */
    int percent;               /* 0..100, never going back */
    bool in_rest;              /* the asked-for packages' step began */
} template_progress;

void template_progress_init(template_progress *p);

/* Takes one output line (without its newline); true when the progress changed. */
bool template_progress_line(template_progress *p, const char *line, size_t len);

/* Sets the phase (and the percent its start means); true when it changed. */
bool template_progress_phase(template_progress *p, const char *phase);

/* The progress as an event object (without its sequence number). */
json_t *template_progress_json(const template_progress *p);

#endif
