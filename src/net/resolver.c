/* The policy resolver (see resolver.h), its UDP side: a truncated upstream answer goes back as
 * it came (TC set), and the client's retry over TCP is resolver_tcp.c's. */
#include "error.h"
#include "resolver.h"
#include "util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int sbx__resolver_upstream(const char *text, struct sockaddr_storage *ss, socklen_t *len)
{
  for (const char *line = text; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    char addr[INET6_ADDRSTRLEN + 1];
    if (sscanf(line, " nameserver %46s", addr) != 1)
      continue;
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in4 = (struct sockaddr_in *) ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) ss;
    if (inet_pton(AF_INET, addr, &in4->sin_addr) == 1) {
      in4->sin_family = AF_INET;
      in4->sin_port = htons(53);
      *len = sizeof *in4;
      return 0;
    }
    if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
      in6->sin6_family = AF_INET6;
      in6->sin6_port = htons(53);
      *len = sizeof *in6;
      return 0;
    }
  }
  return -1;
}

int sbx__resolver_connect(const struct sockaddr_storage *ss, socklen_t len, sbx_error_t *err)
{
  cleanup_close int fd = socket(ss->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (const struct sockaddr *) ss, len) < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "connect to the upstream resolver");
  return steal_fd(&fd);
}

int sbx__resolver_listen(sbx_error_t *err)
{
  cleanup_close int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
  inet_pton(AF_INET, SBX_RESOLVER_ADDR, &sa.sin_addr);
  if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "bind the resolver on %s:53",
                           SBX_RESOLVER_ADDR);
  return steal_fd(&fd);
}

static void reply_code(struct sbx_resolver *r, const uint8_t *pkt, const struct sbx_dns_query *q,
                       int rcode, const struct sockaddr_storage *to, socklen_t to_len)
{
  uint8_t out[1024];
  size_t n = sbx__dns_build_reply(pkt, q, rcode, out, sizeof out);
  if (n)
    (void) !sendto(r->listen_fd, out, n, MSG_DONTWAIT, (const struct sockaddr *) to, to_len);
}

void sbx__resolver_on_query(struct sbx_resolver *r)
{
  uint8_t pkt[4096];
  struct sockaddr_storage from;
  socklen_t from_len = sizeof from;
  ssize_t n =
      recvfrom(r->listen_fd, pkt, sizeof pkt, MSG_DONTWAIT, (struct sockaddr *) &from, &from_len);
  if (n < SBX_DNS_HEADER)
    return;
  struct sbx_dns_query q;
  if (sbx__dns_parse_query(pkt, (size_t) n, &q, NULL) < 0)
    return; /* not a query we answer: silence, as a server does for garbage */
  struct sbx_net_decision d;
  r->hooks.decide(r->hooks.data, q.name, &d);
  if (d.action != SBX_NET_ALLOW) {
    r->hooks.denied(r->hooks.data, q.name, &d);
    reply_code(r, pkt, &q, SBX_DNS_RCODE_NXDOMAIN, &from, from_len);
    return;
  }
  if (r->up_fd < 0) {
    reply_code(r, pkt, &q, SBX_DNS_RCODE_SERVFAIL, &from, from_len);
    return;
  }
  uint64_t now = sbx__now_ms();
  struct sbx_resolver_pending *slot = NULL;
  for (size_t i = 0; i < SBX_RESOLVER_PENDING && !slot; i++)
    if (r->pending[i].deadline_ms <= now)
      slot = &r->pending[i];
  if (slot == NULL) {
    reply_code(r, pkt, &q, SBX_DNS_RCODE_SERVFAIL, &from, from_len);
    return;
  }
  /* a random id of our own (not the client's: one sandbox process must not be able to predict
   * or collide with another's) that no pending query uses */
  uint16_t id;
  for (bool used = true; used;) {
    char hex[5];
    sbx__random_hex(hex, 4);
    id = (uint16_t) strtoul(hex, NULL, 16);
    used = false;
    for (size_t i = 0; i < SBX_RESOLVER_PENDING && !used; i++)
      used = r->pending[i].deadline_ms > now && r->pending[i].up_id == id;
  }
  slot->up_id = id;
  slot->client_id = q.id;
  slot->deadline_ms = now + SBX_RESOLVER_TIMEOUT_MS;
  slot->client = from;
  slot->client_len = from_len;
  snprintf(slot->name, sizeof slot->name, "%s", q.name);
  slot->decision = d;
  pkt[0] = (uint8_t) (id >> 8);
  pkt[1] = (uint8_t) id;
  if (send(r->up_fd, pkt, (size_t) n, MSG_DONTWAIT) < 0) {
    slot->deadline_ms = 0;
    pkt[0] = (uint8_t) (q.id >> 8);
    pkt[1] = (uint8_t) q.id;
    reply_code(r, pkt, &q, SBX_DNS_RCODE_SERVFAIL, &from, from_len);
  }
}

void sbx__resolver_on_answer(struct sbx_resolver *r)
{
  uint8_t pkt[4096];
  ssize_t n = recv(r->up_fd, pkt, sizeof pkt, MSG_DONTWAIT);
  if (n < SBX_DNS_HEADER)
    return;
  uint16_t id = (uint16_t) (pkt[0] << 8 | pkt[1]);
  uint64_t now = sbx__now_ms();
  struct sbx_resolver_pending *slot = NULL;
  for (size_t i = 0; i < SBX_RESOLVER_PENDING && !slot; i++)
    if (r->pending[i].deadline_ms > now && r->pending[i].up_id == id)
      slot = &r->pending[i];
  if (slot == NULL)
    return;
  struct sbx_dns_response resp;
  memset(&resp, 0, sizeof resp);
  if (sbx__dns_parse_response(pkt, (size_t) n, &resp, NULL) < 0 ||
      strcmp(resp.qname, slot->name) != 0) {
    sbx__dns_response_clear(&resp);
    return; /* not the answer to this question: the query times out */
  }
  /* pinned before the client sees the answer, so its connect finds the address allowed */
  if (resp.n_pins)
    r->hooks.pin(r->hooks.data, slot->name, &slot->decision, resp.pins, resp.n_pins);
  sbx__dns_response_clear(&resp);
  pkt[0] = (uint8_t) (slot->client_id >> 8);
  pkt[1] = (uint8_t) slot->client_id;
  (void) !sendto(r->listen_fd, pkt, (size_t) n, MSG_DONTWAIT,
                 (const struct sockaddr *) &slot->client, slot->client_len);
  slot->deadline_ms = 0;
}

void sbx__resolver_expire(struct sbx_resolver *r, uint64_t now_ms)
{
  for (size_t i = 0; i < SBX_RESOLVER_PENDING; i++)
    if (r->pending[i].deadline_ms && r->pending[i].deadline_ms <= now_ms)
      r->pending[i].deadline_ms = 0;
}
