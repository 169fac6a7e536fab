/* A lingering close for an answer sent in the middle of a request body (http/linger.c). */
#ifndef AIRLOCKD_HTTP_LINGER_H
#define AIRLOCKD_HTTP_LINGER_H

/* Keeps the connection behind fd open on a duplicate after its owner closes fd: the writing
 * side is shut (the client reads the answer, then the end) and what the client still sends is
 * read and dropped for a bounded time, so the close never resets the connection before the
 * client has read the answer. */
void http_linger(int fd);

#endif
