/* The enforcer's TCP path out (docs/network.md): pasta is too slow for TCP (~0.4 Gbit/s), so
 * the table's nat chain redirects every TCP connection the filter chain accepted to a listener
 * of ours in the sandbox's network namespace (127.0.0.1:P, [::1]:P), and each accepted
 * connection is relayed with splice(2) to its original destination over a socket made in the
 * host's namespace. Non-blocking throughout; the caller polls sbx__tcpproxy_fd. */
#ifndef SBX_NET_TCPPROXY_H
#define SBX_NET_TCPPROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sbx/error.h>

#include "hostsock.h"
#include "peek.h"
#include "policy.h"

#define SBX_TCPPROXY_MAX_CONNS 512    /* relayed connections per sandbox (6 fds each) */
#define SBX_TCPPROXY_CONNECT_MS 30000 /* an upstream connect that takes longer is given up */
#define SBX_TCPPROXY_PEEK_MS 5000     /* the first bytes to look at must come within this */

struct sbx_tcpproxy_hooks {
  void *data;
  /* The second opinion on a destination nft already let through: false refuses it (why says
   * which rule). Never called for loopback or the listener itself (always refused). */
  bool (*allow)(void *data, const struct sbx_net_addr *a, char *why, size_t len);
  /* A refused connection, for the denied log: target is "ADDR:PORT/tcp". */
  void (*denied)(void *data, const char *target, const char *why);
  /* Whether the first bytes the sandbox sends must be looked at before the connection goes on
   * (NULL: never): then nothing is connected upstream until peeked said yes. */
  bool (*wants_peek)(void *data, const struct sbx_net_addr *a, uint16_t port);
  /* The verdict on them (peek.h's result and name): false resets the connection (the hook
   * logs it). target is "ADDR:PORT/tcp". */
  bool (*peeked)(void *data, const struct sbx_net_addr *a, const char *target,
                 enum sbx_peek_result r, const char *name);
};

struct sbx_tcpproxy;

/* Listeners in the calling thread's network namespace, which must be the sandbox's; upstream
 * sockets come from host (kept, not owned). max_conns lowers the default cap (0: the default);
 * the cap is lowered further to what RLIMIT_NOFILE allows. */
struct sbx_tcpproxy *sbx__tcpproxy_new(struct sbx_hostsock *host, size_t max_conns,
                                       struct sbx_tcpproxy_hooks hooks, sbx_error_t *err);
void sbx__tcpproxy_free(struct sbx_tcpproxy *t);

/* The port both listeners have (what the nat chain redirects to). */
uint16_t sbx__tcpproxy_port(const struct sbx_tcpproxy *t);
/* An epoll fd: readable when there is work for sbx__tcpproxy_run. */
int sbx__tcpproxy_fd(const struct sbx_tcpproxy *t);
/* Does what is ready (accepts, connects, relays), bounded, without blocking. */
void sbx__tcpproxy_run(struct sbx_tcpproxy *t);
/* After a policy change: the open connections whose destination still(data = the hooks' data)
 * now denies are reset both ways and reported to the denied hook. The filter alone would only
 * stall them (it drops what the sandbox sends, not what the relay sends it). */
void sbx__tcpproxy_recheck(struct sbx_tcpproxy *t,
                           bool (*still)(void *data, const struct sbx_net_addr *a, char *why,
                                         size_t len));
/* Gives up upstream connects older than SBX_TCPPROXY_CONNECT_MS, and decides on the bytes a
 * connection sent within SBX_TCPPROXY_PEEK_MS (cheap; call it often). */
void sbx__tcpproxy_expire(struct sbx_tcpproxy *t, uint64_t now_ms);
/* Open relayed connections (for tests and logs). */
size_t sbx__tcpproxy_count(const struct sbx_tcpproxy *t);

#endif
