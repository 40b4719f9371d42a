/* The policy resolver: the sandbox's only DNS server (its resolv.conf names it). A query for a
 * denied name is answered NXDOMAIN there; an allowed one goes to the host's upstream resolver
 * through a socket opened in the host's network namespace, and the addresses of its answer are
 * pinned (the enforcer's callback) before the answer is passed back. */
#ifndef SBX_NET_RESOLVER_H
#define SBX_NET_RESOLVER_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include <sbx/error.h>

#include "dns.h"

#define SBX_RESOLVER_ADDR "127.0.0.53" /* on the sandbox's loopback */
#define SBX_RESOLVER_PENDING 256       /* queries waiting for upstream at once */
#define SBX_RESOLVER_TIMEOUT_MS 5000

struct sbx_resolver_hooks {
  void *data;
  /* the decision for a name (allow or deny) */
  void (*decide)(void *data, const char *name, struct sbx_net_decision *d);
  /* an answer of an allowed name: pin what may be pinned (may drop some) */
  void (*pin)(void *data, const char *name, const struct sbx_net_decision *d,
              const struct sbx_dns_pin *pins, size_t n);
  /* a denied lookup */
  void (*denied)(void *data, const char *name, const struct sbx_net_decision *d);
};

struct sbx_resolver_pending {
  uint16_t up_id, client_id;
  uint64_t deadline_ms; /* 0: free */
  struct sockaddr_storage client;
  socklen_t client_len;
  char name[SBX_DNS_MAX_NAME + 1];
  struct sbx_net_decision decision;
};

struct sbx_resolver {
  int listen_fd; /* UDP, in the sandbox's namespace */
  int up_fd;     /* UDP, connected to the upstream, in the host's namespace (-1: none) */
  struct sbx_resolver_hooks hooks;
  struct sbx_resolver_pending pending[SBX_RESOLVER_PENDING];
};

/* The first nameserver of a resolv.conf text (IPv4 or IPv6), port 53; -1 if there is none. */
int sbx__resolver_upstream(const char *resolv_conf, struct sockaddr_storage *ss, socklen_t *len);
/* A UDP socket connected to it, in the calling thread's namespace. */
int sbx__resolver_connect(const struct sockaddr_storage *ss, socklen_t len, sbx_error_t *err);
/* The listening socket on SBX_RESOLVER_ADDR:53, in the calling thread's namespace. */
int sbx__resolver_listen(sbx_error_t *err);

/* One datagram from the sandbox / from upstream; expiry of pending queries. */
void sbx__resolver_on_query(struct sbx_resolver *r);
void sbx__resolver_on_answer(struct sbx_resolver *r);
void sbx__resolver_expire(struct sbx_resolver *r, uint64_t now_ms);

#endif
