/* What the egress proxy's epoll loop dispatches on (private to egress/): every registered
 * descriptor's data.ptr points at an egress_ev whose kind says what it is. */
#ifndef AIRLOCKD_EGRESS_LOOP_H
#define AIRLOCKD_EGRESS_LOOP_H

typedef enum {
    EV_CONTROL = 1, /* the eventfd of the control queue */
    EV_LISTENER,    /* a sandbox's proxy listener */
    EV_CLIENT,      /* the sandbox side of a connection */
    EV_UPSTREAM,    /* the internet side of a connection */
    EV_DNS,         /* a c-ares socket */
} egress_ev_kind;

typedef struct {
    egress_ev_kind kind;
    int fd; /* for EV_DNS */
} egress_ev;

#endif
