/* The policy resolver over TCP (RFC 7766): what a client retries with when a UDP answer came
 * with TC set, or uses from the start. Same decisions, pinning and logging as the UDP side
 * (resolver.h's hooks); an allowed query goes to the upstream over TCP too, so a large answer
 * arrives whole. One query in flight per client connection (pipelined ones wait their turn).
 * Every socket is in one epoll set, whose fd the enforcer polls. */
#ifndef SBX_NET_RESOLVER_TCP_H
#define SBX_NET_RESOLVER_TCP_H

#include <stdint.h>

#include "hostsock.h"
#include "resolver.h"

#define SBX_RESOLVER_TCP_CONNS 32        /* clients at once; one more is refused (closed) */
#define SBX_RESOLVER_TCP_IDLE_MS 10000   /* a client silent this long is closed */
#define SBX_RESOLVER_TCP_MAX (2 + 65535) /* one framed message */

struct sbx_resolver_tcp;

/* Listens on SBX_RESOLVER_ADDR:53 (TCP) in the calling thread's namespace (the sandbox's).
 * Upstream connections are made from host's sockets, to up (port 53); up_len 0: no upstream
 * (allowed names get SERVFAIL). host and r (for its hooks) must outlive the result. */
struct sbx_resolver_tcp *sbx__resolver_tcp_new(struct sbx_resolver *r,
                                               const struct sockaddr_storage *up, socklen_t up_len,
                                               struct sbx_hostsock *host, sbx_error_t *err);
void sbx__resolver_tcp_free(struct sbx_resolver_tcp *t);
/* The epoll fd: readable when something is to be done. */
int sbx__resolver_tcp_fd(const struct sbx_resolver_tcp *t);
/* Does what is ready, without blocking. */
void sbx__resolver_tcp_on_ready(struct sbx_resolver_tcp *t);
/* Closes idle clients and upstream exchanges past SBX_RESOLVER_TIMEOUT_MS (SERVFAIL). */
void sbx__resolver_tcp_expire(struct sbx_resolver_tcp *t, uint64_t now_ms);

#endif
