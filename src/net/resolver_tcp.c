/* The policy resolver over TCP (see resolver_tcp.h). */
#include "error.h"
#include "resolver_tcp.h"
#include "util.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define LISTEN_KEY UINT64_MAX

struct conn {
  int fd;    /* the client; -1: a free slot */
  int up_fd; /* the upstream of the query in flight; -1: none */
  bool up_sending;
  uint16_t up_id;
  uint64_t deadline_ms;
  uint8_t *in, *out, *up; /* framed messages: from the client, to it, to and from upstream */
  size_t in_len, out_len, out_off, up_len, up_off;
  struct sbx_dns_query q; /* the query in flight */
  struct sbx_net_decision decision;
};

struct sbx_resolver_tcp {
  struct sbx_resolver *r;
  int ep, listen_fd;
  struct sbx_hostsock *host; /* the upstream is reached from the host's namespace, as on UDP */
  struct sockaddr_storage up;
  socklen_t up_len;
  struct conn conns[SBX_RESOLVER_TCP_CONNS];
};

static void watch(struct sbx_resolver_tcp *t, int op, int fd, uint32_t events, uint64_t key)
{
  struct epoll_event ev = {.events = events, .data.u64 = key};
  epoll_ctl(t->ep, op, fd, &ev);
}

static uint64_t key_of(struct sbx_resolver_tcp *t, struct conn *c, bool up)
{
  return (uint64_t) (c - t->conns) * 2 + up;
}

static void close_up(struct conn *c)
{
  if (c->up_fd >= 0)
    close(c->up_fd); /* closing drops it from the epoll set */
  c->up_fd = -1;
  c->up_len = c->up_off = 0;
}

static void close_conn(struct conn *c)
{
  close_up(c);
  close(c->fd);
  free(c->in);
  free(c->out);
  free(c->up);
  *c = (struct conn){.fd = -1, .up_fd = -1};
}

/* a whole message, framed, for the client (the out buffer is empty: pump makes sure) */
static void put_out(struct conn *c, const uint8_t *msg, size_t len)
{
  c->out[0] = (uint8_t) (len >> 8);
  c->out[1] = (uint8_t) len;
  memcpy(c->out + 2, msg, len);
  c->out_len = len + 2;
  c->out_off = 0;
}

static void reply_code(struct conn *c, int rcode)
{
  uint8_t id[2] = {(uint8_t) (c->q.id >> 8), (uint8_t) c->q.id}, msg[1024];
  size_t n = sbx__dns_build_reply(id, &c->q, rcode, msg, sizeof msg);
  if (n)
    put_out(c, msg, n);
}

/* the query at the head of c->in: answered at once (denied, garbage) or sent upstream */
static int start_query(struct sbx_resolver_tcp *t, struct conn *c, const uint8_t *msg, size_t len)
{
  if (sbx__dns_parse_query(msg, len, &c->q, NULL) < 0)
    return -1; /* not DNS: the connection goes (there is no reply to garbage) */
  struct sbx_resolver_hooks *h = &t->r->hooks;
  h->decide(h->data, c->q.name, &c->decision);
  if (c->decision.action != SBX_NET_ALLOW) {
    h->denied(h->data, c->q.name, &c->decision);
    reply_code(c, SBX_DNS_RCODE_NXDOMAIN);
    return 0;
  }
  int fd =
      t->up_len ? sbx__hostsock_socket(t->host, t->up.ss_family, SOCK_STREAM | SOCK_NONBLOCK) : -1;
  if (fd < 0 || (connect(fd, (struct sockaddr *) &t->up, t->up_len) < 0 && errno != EINPROGRESS)) {
    if (fd >= 0)
      close(fd);
    reply_code(c, SBX_DNS_RCODE_SERVFAIL);
    return 0;
  }
  /* an id of our own, as on UDP: the upstream never sees a sandbox process's */
  char hex[5];
  sbx__random_hex(hex, 4);
  uint16_t id = (uint16_t) strtoul(hex, NULL, 16);
  c->up[0] = (uint8_t) (len >> 8);
  c->up[1] = (uint8_t) len;
  memcpy(c->up + 2, msg, len);
  c->up[2] = (uint8_t) (id >> 8);
  c->up[3] = (uint8_t) id;
  c->up_len = len + 2;
  c->up_off = 0;
  c->up_sending = true;
  c->up_id = id;
  c->up_fd = fd;
  c->deadline_ms = sbx__now_ms() + SBX_RESOLVER_TIMEOUT_MS;
  watch(t, EPOLL_CTL_ADD, fd, EPOLLOUT, key_of(t, c, true));
  return 0;
}

/* sends what is waiting for the client, then takes the next whole query, until one waits for
 * upstream, for the client to read, or for more bytes */
static void pump(struct sbx_resolver_tcp *t, struct conn *c)
{
  for (;;) {
    while (c->out_off < c->out_len) {
      ssize_t n =
          send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        watch(t, EPOLL_CTL_MOD, c->fd, EPOLLIN | EPOLLOUT, key_of(t, c, false));
        return;
      }
      if (n <= 0) {
        close_conn(c);
        return;
      }
      c->out_off += (size_t) n;
    }
    c->out_len = c->out_off = 0;
    watch(t, EPOLL_CTL_MOD, c->fd, c->in_len < SBX_RESOLVER_TCP_MAX ? EPOLLIN : 0,
          key_of(t, c, false));
    if (c->up_fd >= 0)
      return;
    const uint8_t *msg;
    size_t len;
    int got = sbx__dns_tcp_frame(c->in, c->in_len, &msg, &len);
    if (got == 0)
      return;
    if (got < 0 || start_query(t, c, msg, len) < 0) {
      close_conn(c);
      return;
    }
    memmove(c->in, c->in + 2 + len, c->in_len - 2 - len);
    c->in_len -= 2 + len;
    c->deadline_ms = c->up_fd >= 0 ? c->deadline_ms : sbx__now_ms() + SBX_RESOLVER_TCP_IDLE_MS;
  }
}

static void on_client(struct sbx_resolver_tcp *t, struct conn *c, uint32_t events)
{
  if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) {
    close_conn(c);
    return;
  }
  if ((events & EPOLLIN) && c->in_len < SBX_RESOLVER_TCP_MAX) {
    ssize_t n = recv(c->fd, c->in + c->in_len, SBX_RESOLVER_TCP_MAX - c->in_len, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      close_conn(c);
      return;
    }
    if (n > 0) {
      c->in_len += (size_t) n;
      c->deadline_ms = c->up_fd >= 0 ? c->deadline_ms : sbx__now_ms() + SBX_RESOLVER_TCP_IDLE_MS;
    }
    /* a full buffer without a whole message cannot happen (a frame fits): nothing to read
     * until the head is taken; stop watching input until then */
    if (c->in_len == SBX_RESOLVER_TCP_MAX)
      watch(t, EPOLL_CTL_MOD, c->fd, c->out_len ? EPOLLOUT : 0, key_of(t, c, false));
  }
  pump(t, c);
}

static void up_fail(struct sbx_resolver_tcp *t, struct conn *c)
{
  close_up(c);
  reply_code(c, SBX_DNS_RCODE_SERVFAIL);
  pump(t, c);
}

static void on_upstream(struct sbx_resolver_tcp *t, struct conn *c, uint32_t events)
{
  if (c->up_sending) {
    if (events & (EPOLLERR | EPOLLHUP))
      return up_fail(t, c);
    ssize_t n =
        send(c->up_fd, c->up + c->up_off, c->up_len - c->up_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      return;
    if (n <= 0)
      return up_fail(t, c);
    if ((c->up_off += (size_t) n) < c->up_len)
      return;
    c->up_sending = false;
    c->up_len = 0;
    watch(t, EPOLL_CTL_MOD, c->up_fd, EPOLLIN, key_of(t, c, true));
    return;
  }
  ssize_t n = recv(c->up_fd, c->up + c->up_len, SBX_RESOLVER_TCP_MAX - c->up_len, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (n <= 0)
    return up_fail(t, c);
  c->up_len += (size_t) n;
  const uint8_t *msg;
  size_t len;
  int got = sbx__dns_tcp_frame(c->up, c->up_len, &msg, &len);
  if (got == 0)
    return;
  struct sbx_dns_response resp;
  memset(&resp, 0, sizeof resp);
  /* the answer to this question, with the id we sent */
  if (got < 0 || sbx__dns_parse_response(msg, len, &resp, NULL) < 0 || resp.id != c->up_id ||
      strcmp(resp.qname, c->q.name) != 0) {
    sbx__dns_response_clear(&resp);
    return up_fail(t, c);
  }
  /* pinned before the client sees the answer, as on UDP */
  if (resp.n_pins)
    t->r->hooks.pin(t->r->hooks.data, c->q.name, &c->decision, resp.pins, resp.n_pins);
  sbx__dns_response_clear(&resp);
  uint8_t *m = (uint8_t *) msg;
  m[0] = (uint8_t) (c->q.id >> 8);
  m[1] = (uint8_t) c->q.id;
  put_out(c, m, len);
  close_up(c);
  c->deadline_ms = sbx__now_ms() + SBX_RESOLVER_TCP_IDLE_MS;
  pump(t, c);
}

static void on_accept(struct sbx_resolver_tcp *t)
{
  for (int i = 0; i < 16; i++) {
    int fd = accept4(t->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0)
      return;
    struct conn *c = NULL;
    for (size_t k = 0; k < SBX_RESOLVER_TCP_CONNS && !c; k++)
      if (t->conns[k].fd < 0)
        c = &t->conns[k];
    if (c == NULL) {
      close(fd); /* full: the client retries or gives up */
      continue;
    }
    *c = (struct conn){.fd = fd,
                       .up_fd = -1,
                       .deadline_ms = sbx__now_ms() + SBX_RESOLVER_TCP_IDLE_MS,
                       .in = xmalloc(SBX_RESOLVER_TCP_MAX),
                       .out = xmalloc(SBX_RESOLVER_TCP_MAX),
                       .up = xmalloc(SBX_RESOLVER_TCP_MAX)};
    watch(t, EPOLL_CTL_ADD, fd, EPOLLIN, key_of(t, c, false));
  }
}

void sbx__resolver_tcp_on_ready(struct sbx_resolver_tcp *t)
{
  struct epoll_event evs[16];
  int n = epoll_wait(t->ep, evs, ARRAY_SIZE(evs), 0);
  for (int i = 0; i < n; i++) {
    uint64_t key = evs[i].data.u64;
    if (key == LISTEN_KEY) {
      on_accept(t);
      continue;
    }
    struct conn *c = &t->conns[key / 2];
    if (c->fd < 0 || ((key & 1) && c->up_fd < 0))
      continue; /* closed by an earlier event of this batch */
    if (key & 1)
      on_upstream(t, c, evs[i].events);
    else
      on_client(t, c, evs[i].events);
  }
}

void sbx__resolver_tcp_expire(struct sbx_resolver_tcp *t, uint64_t now_ms)
{
  for (size_t i = 0; i < SBX_RESOLVER_TCP_CONNS; i++) {
    struct conn *c = &t->conns[i];
    if (c->fd < 0 || c->deadline_ms > now_ms)
      continue;
    if (c->up_fd >= 0)
      up_fail(t, c);
    else
      close_conn(c);
  }
}

int sbx__resolver_tcp_fd(const struct sbx_resolver_tcp *t)
{
  return t->ep;
}

struct sbx_resolver_tcp *sbx__resolver_tcp_new(struct sbx_resolver *r,
                                               const struct sockaddr_storage *up, socklen_t up_len,
                                               struct sbx_hostsock *host, sbx_error_t *err)
{
  cleanup_close int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53)};
  inet_pton(AF_INET, SBX_RESOLVER_ADDR, &sa.sin_addr);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, (struct sockaddr *) &sa, sizeof sa) < 0 || listen(fd, 64) < 0) {
    sbx__make_error(err, errno, SBX_E_BACKEND, "listen on %s:53 (TCP)", SBX_RESOLVER_ADDR);
    return NULL;
  }
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    sbx__make_error(err, errno, SBX_E_BACKEND, "epoll");
    return NULL;
  }
  struct sbx_resolver_tcp *t = xzalloc(sizeof *t);
  t->r = r;
  t->ep = ep;
  t->listen_fd = steal_fd(&fd);
  t->host = host;
  if (up_len) {
    t->up = *up;
    t->up_len = up_len;
  }
  for (size_t i = 0; i < SBX_RESOLVER_TCP_CONNS; i++)
    t->conns[i] = (struct conn){.fd = -1, .up_fd = -1};
  watch(t, EPOLL_CTL_ADD, t->listen_fd, EPOLLIN, LISTEN_KEY);
  return t;
}

void sbx__resolver_tcp_free(struct sbx_resolver_tcp *t)
{
  if (t == NULL)
    return;
  for (size_t i = 0; i < SBX_RESOLVER_TCP_CONNS; i++)
    if (t->conns[i].fd >= 0)
      close_conn(&t->conns[i]);
  close(t->listen_fd);
  close(t->ep);
  free(t);
}
