/* The splice(2) TCP relay (see tcpproxy.h). One epoll set, level-triggered: a socket is in it
 * only while we want something from it (so a hung-up peer we are not reading from cannot spin
 * the loop), with IN while its direction's pipe has room and OUT while the other direction's
 * pipe holds data for it.
 *
 * Upstream sockets come from the host's namespace (hostsock.h): the relay runs in the
 * sandbox's, where its listeners are. */
#include "tcpproxy.h"

#include "error.h"
#include "util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* linux/netfilter_ipv4.h and ip6_tables.h, whose includes clash with glibc's netinet/in.h */
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80
#endif
#define IP6T_SO_ORIGINAL_DST 80

#define PIPE_SIZE (1 << 18) /* per direction: 4x the default, for throughput; bounded memory */
#define PUMP_ROUNDS 16      /* splices per direction per event: fairness between connections */
#define FDS_PER_CONN 6      /* two sockets, two pipes */

struct conn;

/* what an epoll event points at: a listener (c == NULL) or one side of a connection */
struct ref {
  struct conn *c;
  int side; /* 0 the sandbox's socket, 1 the upstream's; a listener's index */
};

struct dir {
  int r, w;  /* the pipe */
  size_t n;  /* bytes in it */
  bool eof;  /* the source said EOF */
  bool full; /* the pipe took nothing more (or the source was empty) while holding data */
  bool shut; /* EOF passed on: SHUT_WR on the destination */
};

struct conn {
  struct conn *next, *prev;
  int fd[2];       /* 0 the sandbox's (accepted), 1 the upstream's */
  uint32_t ev[2];  /* interest registered; 0 = not in the epoll set */
  struct dir d[2]; /* d[0]: sandbox -> upstream, d[1]: upstream -> sandbox */
  struct ref ref[2];
  bool connecting, dead;
  bool peeking; /* waiting for the first bytes (hooks.peeked): no upstream socket yet */
  uint64_t deadline_ms;
  struct sbx_net_addr dst; /* the original destination */
  uint16_t port;
  struct sockaddr_storage to; /* the same, to connect to */
  socklen_t to_len;
};

struct sbx_tcpproxy {
  int ep;
  struct sbx_hostsock *host;
  int lfd[2];
  struct ref lref[2];
  uint16_t port;
  int reserve; /* a spare fd: with it closed, a connection beyond RLIMIT_NOFILE is refused */
  size_t max, n;
  struct conn *conns;
  struct conn *dead;
  struct sbx_tcpproxy_hooks hooks;
  uint64_t last_full_log, last_sweep;
};

static void reset_close(int fd)
{
  if (fd < 0)
    return;
  /* linger 0: the peer gets a RST, so it sees a reset rather than an orderly EOF */
  struct linger l = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

static void set_interest(struct sbx_tcpproxy *t, struct conn *c, int side, uint32_t ev)
{
  if (c->ev[side] == ev)
    return;
  int op = ev == 0 ? EPOLL_CTL_DEL : c->ev[side] == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  struct epoll_event e = {.events = ev, .data.ptr = &c->ref[side]};
  if (epoll_ctl(t->ep, op, c->fd[side], &e) == 0)
    c->ev[side] = ev;
}

static void update(struct sbx_tcpproxy *t, struct conn *c)
{
  if (c->connecting) {
    set_interest(t, c, 0, 0);
    set_interest(t, c, 1, EPOLLOUT);
    return;
  }
  for (int s = 0; s < 2; s++) {
    uint32_t ev = 0;
    if (!c->d[s].eof && !c->d[s].full)
      ev |= EPOLLIN;
    if (c->d[!s].n > 0)
      ev |= EPOLLOUT;
    set_interest(t, c, s, ev);
  }
}

/* out of the list and the epoll set now, freed after the current batch of events */
static void conn_end(struct sbx_tcpproxy *t, struct conn *c, bool reset)
{
  if (c->dead)
    return;
  c->dead = true;
  for (int s = 0; s < 2; s++) {
    if (c->ev[s])
      epoll_ctl(t->ep, EPOLL_CTL_DEL, c->fd[s], NULL);
    if (reset)
      reset_close(c->fd[s]);
    else
      close(c->fd[s]);
    c->fd[s] = -1;
    close(c->d[s].r);
    close(c->d[s].w);
  }
  if (c->prev)
    c->prev->next = c->next;
  else
    t->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  c->next = t->dead;
  t->dead = c;
  t->n--;
}

/* Moves what can move from side s to the other; -1 on an error of either socket. */
static int pump(struct conn *c, int s)
{
  struct dir *d = &c->d[s];
  int src = c->fd[s], dst = c->fd[!s];
  for (int round = 0; round < PUMP_ROUNDS; round++) {
    bool moved = false;
    if (!d->eof && !d->full) {
      ssize_t r = splice(src, NULL, d->w, NULL, PIPE_SIZE, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (r > 0) {
        d->n += (size_t) r;
        moved = true;
      } else if (r == 0) {
        d->eof = true;
      } else if (errno == EAGAIN) {
        /* empty source or full pipe: with data in the pipe, wait for the destination */
        d->full = d->n > 0;
      } else if (errno != EINTR) {
        return -1;
      }
    }
    if (d->n > 0) {
      ssize_t w = splice(d->r, NULL, dst, NULL, d->n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (w > 0) {
        d->n -= (size_t) w;
        d->full = false;
        moved = true;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        return -1;
      }
    }
    if (d->eof && d->n == 0 && !d->shut) {
      shutdown(dst, SHUT_WR); /* half-close: the other side reads EOF, can still answer */
      d->shut = true;
    }
    if (!moved)
      break;
  }
  return 0;
}

static void relay(struct sbx_tcpproxy *t, struct conn *c)
{
  if (pump(c, 0) < 0 || pump(c, 1) < 0) {
    conn_end(t, c, true); /* a reset on one side is a reset on the other */
    return;
  }
  if (c->d[0].shut && c->d[1].shut) {
    conn_end(t, c, false);
    return;
  }
  update(t, c);
}

static void connected(struct sbx_tcpproxy *t, struct conn *c)
{
  int soerr = 0;
  socklen_t len = sizeof soerr;
  if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
    soerr = errno;
  if (soerr == EINPROGRESS || soerr == EALREADY)
    return;
  if (soerr != 0) {
    /* refused or unreachable upstream: the sandbox's connection is reset at once */
    conn_end(t, c, true);
    return;
  }
  c->connecting = false;
  relay(t, c);
}

static bool is_loopback(const struct sbx_net_addr *a)
{
  static const uint8_t v6lo[16] = {[15] = 1};
  static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};
  if (a->family == AF_INET)
    return a->a[0] == 127;
  return memcmp(a->a, v6lo, 16) == 0 || (memcmp(a->a, mapped, 12) == 0 && a->a[12] == 127);
}

/* the redirected connection's real destination; false when it has none (not redirected) */
static bool original_dst(int fd, int family, struct sockaddr_storage *ss, socklen_t *len,
                         struct sbx_net_addr *a, uint16_t *port)
{
  *len = sizeof *ss;
  memset(ss, 0, sizeof *ss);
  int r = family == AF_INET ? getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, ss, len)
                            : getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, ss, len);
  if (r < 0 || ss->ss_family != family)
    return false;
  memset(a, 0, sizeof *a);
  a->family = family;
  if (family == AF_INET) {
    const struct sockaddr_in *in = (const struct sockaddr_in *) ss;
    memcpy(a->a, &in->sin_addr, 4);
    *port = ntohs(in->sin_port);
  } else {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *) ss;
    memcpy(a->a, &in6->sin6_addr, 16);
    *port = ntohs(in6->sin6_port);
  }
  return true;
}

static void target_str(const struct sbx_net_addr *a, uint16_t port, char *out, size_t len)
{
  char text[INET6_ADDRSTRLEN];
  sbx__net_addr_str(a, text, sizeof text);
  bool v6 = a->family == AF_INET6;
  snprintf(out, len, "%s%s%s:%u/tcp", v6 ? "[" : "", text, v6 ? "]" : "", port);
}

static void refuse(struct sbx_tcpproxy *t, int fd, const struct sbx_net_addr *a, uint16_t port,
                   const char *why)
{
  reset_close(fd);
  if (a && t->hooks.denied) {
    char target[INET6_ADDRSTRLEN + 16];
    target_str(a, port, target, sizeof target);
    t->hooks.denied(t->hooks.data, target, why);
  }
}

/* the upstream socket and its connect (after the peek, when there is one) */
static void start_upstream(struct sbx_tcpproxy *t, struct conn *c)
{
  int up = sbx__hostsock_socket(t->host, c->dst.family, SOCK_STREAM | SOCK_NONBLOCK);
  if (up < 0) {
    conn_end(t, c, true);
    return;
  }
  int one = 1;
  setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->fd[1] = up;
  c->connecting = true;
  c->deadline_ms = sbx__now_ms() + SBX_TCPPROXY_CONNECT_MS;
  if (connect(up, (struct sockaddr *) &c->to, c->to_len) == 0) {
    c->connecting = false;
    relay(t, c);
  } else if (errno == EINPROGRESS) {
    update(t, c);
  } else {
    conn_end(t, c, true);
  }
}

/* The first bytes of a connection being peeked at (MSG_PEEK: they stay in the socket, and the
 * relay passes them on as they are). final: the deadline passed or the sandbox shut its side,
 * so nothing more is coming: decide on what is there. */
static void peek(struct sbx_tcpproxy *t, struct conn *c, bool final)
{
  uint8_t buf[SBX_PEEK_MAX];
  ssize_t n = recv(c->fd[0], buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  bool eof = n == 0;
  if (n < 0) {
    if (errno != EAGAIN && errno != EINTR) {
      conn_end(t, c, true);
      return;
    }
    n = 0;
  }
  if (eof) {
    /* closed before a byte (a happy-eyeballs loser, a port probe): it asked for nothing */
    conn_end(t, c, false);
    return;
  }
  char name[SBX_PEEK_NAME_MAX + 1];
  enum sbx_peek_result r = sbx__peek_name(buf, (size_t) n, final || (size_t) n >= sizeof buf, name);
  if (r == SBX_PEEK_MORE)
    return; /* edge-triggered: the next bytes wake us */
  char target[INET6_ADDRSTRLEN + 16];
  target_str(&c->dst, c->port, target, sizeof target);
  if (!t->hooks.peeked(t->hooks.data, &c->dst, target, r, name)) {
    conn_end(t, c, true);
    return;
  }
  c->peeking = false;
  set_interest(t, c, 0, 0); /* back to level-triggered, by update() */
  start_upstream(t, c);
}

static void take(struct sbx_tcpproxy *t, int fd, int family)
{
  struct sockaddr_storage dst, self;
  socklen_t dlen, slen = sizeof self;
  struct sbx_net_addr a;
  uint16_t port = 0;
  memset(&self, 0, sizeof self);
  if (!original_dst(fd, family, &dst, &dlen, &a, &port) ||
      getsockname(fd, (struct sockaddr *) &self, &slen) < 0) {
    refuse(t, fd, NULL, 0, NULL);
    return;
  }
  /* a connection straight to the listener (or any loopback address) was not redirected: it
   * must not become one to the host's loopback */
  if (is_loopback(&a) || (dlen == slen && memcmp(&dst, &self, dlen) == 0)) {
    refuse(t, fd, &a, port, "always-denied: loopback (a connection to the TCP relay itself)");
    return;
  }
  char why[96] = "";
  if (t->hooks.allow && !t->hooks.allow(t->hooks.data, &a, why, sizeof why)) {
    refuse(t, fd, &a, port, why);
    return;
  }
  if (t->n >= t->max) {
    uint64_t now = sbx__now_ms();
    if (now - t->last_full_log >= 1000) {
      fprintf(stderr, "sbx-net: %zu TCP connections open: refusing more\n", t->n);
      t->last_full_log = now;
    }
    reset_close(fd);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct conn *c = xzalloc(sizeof *c);
  c->fd[0] = fd;
  c->fd[1] = -1;
  c->dst = a;
  c->port = port;
  c->to = dst;
  c->to_len = dlen;
  int p0[2] = {-1, -1}, p1[2] = {-1, -1};
  if (pipe2(p0, O_NONBLOCK | O_CLOEXEC) < 0 || pipe2(p1, O_NONBLOCK | O_CLOEXEC) < 0) {
    for (int i = 0; i < 2; i++) {
      if (p0[i] >= 0)
        close(p0[i]);
      if (p1[i] >= 0)
        close(p1[i]);
    }
    reset_close(fd);
    free(c);
    return;
  }
  c->d[0] = (struct dir){.r = p0[0], .w = p0[1]};
  c->d[1] = (struct dir){.r = p1[0], .w = p1[1]};
  fcntl(p0[1], F_SETPIPE_SZ, PIPE_SIZE);
  fcntl(p1[1], F_SETPIPE_SZ, PIPE_SIZE);
  c->ref[0] = (struct ref){c, 0};
  c->ref[1] = (struct ref){c, 1};
  c->next = t->conns;
  if (t->conns)
    t->conns->prev = c;
  t->conns = c;
  t->n++;
  if (t->hooks.wants_peek && t->hooks.peeked && t->hooks.wants_peek(t->hooks.data, &a, port)) {
    /* edge-triggered: the bytes stay in the socket (MSG_PEEK), so level would fire on and on */
    c->peeking = true;
    c->deadline_ms = sbx__now_ms() + SBX_TCPPROXY_PEEK_MS;
    set_interest(t, c, 0, EPOLLIN | EPOLLRDHUP | EPOLLET);
    peek(t, c, false);
    return;
  }
  start_upstream(t, c);
}

static void on_listener(struct sbx_tcpproxy *t, int i)
{
  for (int k = 0; k < 64; k++) {
    int fd = accept4(t->lfd[i], NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      take(t, fd, i == 0 ? AF_INET : AF_INET6);
      continue;
    }
    if ((errno == EMFILE || errno == ENFILE) && t->reserve >= 0) {
      /* out of fds: take it off the queue with the spare one and refuse it, or the listener
       * stays readable and the loop spins */
      close(t->reserve);
      reset_close(accept4(t->lfd[i], NULL, NULL, SOCK_CLOEXEC));
      t->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
      continue;
    }
    if (errno == ECONNABORTED || errno == EINTR)
      continue;
    break;
  }
}

void sbx__tcpproxy_run(struct sbx_tcpproxy *t)
{
  struct epoll_event evs[64];
  int n = epoll_wait(t->ep, evs, ARRAY_SIZE(evs), 0);
  for (int i = 0; i < n; i++) {
    struct ref *r = evs[i].data.ptr;
    if (r->c == NULL) {
      on_listener(t, r->side);
      continue;
    }
    struct conn *c = r->c;
    if (c->dead)
      continue;
    if (c->peeking)
      peek(t, c, (evs[i].events & (EPOLLRDHUP | EPOLLHUP)) != 0);
    else if (c->connecting)
      connected(t, c);
    else
      relay(t, c);
  }
  while (t->dead) {
    struct conn *c = t->dead;
    t->dead = c->next;
    free(c);
  }
}

void sbx__tcpproxy_recheck(struct sbx_tcpproxy *t,
                           bool (*still)(void *data, const struct sbx_net_addr *a, char *why,
                                         size_t len))
{
  for (struct conn *c = t->conns, *next; c; c = next) {
    next = c->next;
    char why[96] = "";
    if (still(t->hooks.data, &c->dst, why, sizeof why))
      continue;
    conn_end(t, c, true);
    refuse(t, -1, &c->dst, c->port, why);
  }
  while (t->dead) {
    struct conn *c = t->dead;
    t->dead = c->next;
    free(c);
  }
}

void sbx__tcpproxy_expire(struct sbx_tcpproxy *t, uint64_t now_ms)
{
  if (now_ms - t->last_sweep < 500)
    return;
  t->last_sweep = now_ms;
  for (struct conn *c = t->conns, *next; c; c = next) {
    next = c->next;
    if (c->peeking && now_ms >= c->deadline_ms)
      peek(t, c, true);
    else if (c->connecting && now_ms >= c->deadline_ms)
      conn_end(t, c, true);
  }
  while (t->dead) {
    struct conn *c = t->dead;
    t->dead = c->next;
    free(c);
  }
}

static int listen_on(int family, uint16_t port, uint16_t *got)
{
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_storage ss = {0};
  socklen_t len;
  if (family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *) &ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof *in;
  } else {
    int one = 1;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *) &ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    in6->sin6_addr = in6addr_loopback;
    len = sizeof *in6;
  }
  if (bind(fd, (struct sockaddr *) &ss, len) < 0 || listen(fd, SOMAXCONN) < 0 ||
      getsockname(fd, (struct sockaddr *) &ss, &len) < 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  *got = ntohs(family == AF_INET ? ((struct sockaddr_in *) &ss)->sin_port
                                 : ((struct sockaddr_in6 *) &ss)->sin6_port);
  return fd;
}

struct sbx_tcpproxy *sbx__tcpproxy_new(struct sbx_hostsock *host, size_t max_conns,
                                       struct sbx_tcpproxy_hooks hooks, sbx_error_t *err)
{
  struct sbx_tcpproxy *t = xzalloc(sizeof *t);
  t->host = host;
  t->hooks = hooks;
  t->lfd[0] = t->lfd[1] = -1;
  t->reserve = open("/dev/null", O_RDONLY | O_CLOEXEC);
  t->ep = epoll_create1(EPOLL_CLOEXEC);
  if (t->ep < 0) {
    sbx__make_error(err, errno, SBX_E_BACKEND, "epoll_create1");
    goto fail;
  }
  /* an ephemeral port (nothing the sandbox could have bound first), the same on both
   * families; without IPv6 in the namespace, IPv4 alone (IPv6 TCP is then refused) */
  for (int tries = 0; tries < 16 && t->lfd[1] < 0; tries++) {
    if (t->lfd[0] >= 0)
      close(t->lfd[0]);
    t->lfd[0] = listen_on(AF_INET, 0, &t->port);
    if (t->lfd[0] < 0) {
      sbx__make_error(err, errno, SBX_E_BACKEND, "listen on 127.0.0.1");
      goto fail;
    }
    uint16_t p6 = 0;
    t->lfd[1] = listen_on(AF_INET6, t->port, &p6);
    if (t->lfd[1] < 0 && errno != EADDRINUSE)
      break;
  }
  for (int i = 0; i < 2; i++) {
    if (t->lfd[i] < 0)
      continue;
    t->lref[i] = (struct ref){NULL, i};
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &t->lref[i]};
    if (epoll_ctl(t->ep, EPOLL_CTL_ADD, t->lfd[i], &e) < 0) {
      sbx__make_error(err, errno, SBX_E_BACKEND, "epoll_ctl");
      goto fail;
    }
  }
  /* the cap: what the fd limit leaves after the resolver, nft and nflog (raised to the hard
   * limit first) */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  t->max = max_conns && max_conns < SBX_TCPPROXY_MAX_CONNS ? max_conns : SBX_TCPPROXY_MAX_CONNS;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    size_t room = rl.rlim_cur > 64 ? (size_t) (rl.rlim_cur - 64) / FDS_PER_CONN : 0;
    if (room < t->max)
      t->max = room;
  }
  return t;
fail:
  sbx__tcpproxy_free(t);
  return NULL;
}

void sbx__tcpproxy_free(struct sbx_tcpproxy *t)
{
  if (t == NULL)
    return;
  while (t->conns)
    conn_end(t, t->conns, true);
  while (t->dead) {
    struct conn *c = t->dead;
    t->dead = c->next;
    free(c);
  }
  for (int i = 0; i < 2; i++)
    if (t->lfd[i] >= 0)
      close(t->lfd[i]);
  if (t->ep >= 0)
    close(t->ep);
  if (t->reserve >= 0)
    close(t->reserve);
  free(t);
}

uint16_t sbx__tcpproxy_port(const struct sbx_tcpproxy *t)
{
  return t->port;
}

int sbx__tcpproxy_fd(const struct sbx_tcpproxy *t)
{
  return t->ep;
}

size_t sbx__tcpproxy_count(const struct sbx_tcpproxy *t)
{
  return t->n;
}
