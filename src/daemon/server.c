/* The HTTP side of sbxd: libmicrohttpd's callbacks and the listener.
 *
 * MHD runs a thread per connection, so handlers may block (a sandbox operation, a command's
 * event stream, a proxied port). Every request gets a `struct req` from the URI callback (which
 * sees the raw request target), is routed on its first call (router.c: the route decides the
 * handler and the body cap), receives its body in later calls (buffered up to the cap, or
 * streamed to r->on_body) and is answered by r->done once the body is complete. */
#include "server.h"
#include "ctx.h"
#include "http.h"
#include "pty.h"
#include "registry.h"
#include "router.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static struct MHD_Daemon *mhd;

/* ---- connection limits (docs/sbxd.md, "Limits") ----
 *
 * libmicrohttpd closes a connection past sbxd.max_connections at once. The rest is ours:
 *
 *   - a deadline for a request head (sbxd.head_timeout): MHD's timeout is one of inactivity,
 *     which a client dripping a byte a second never hits (slowloris). A connection waits for a
 *     head from its accept, and again after each answer (keep-alive); once a head is in, the
 *     request (a body, an event stream, a proxied port, a WebSocket after its 101) is no longer
 *     timed here;
 *   - a limit per client address (sbxd.max_connections_per_address). MHD's own
 *     (MHD_OPTION_PER_IP_CONNECTION_LIMIT) refuses the new connection even when the address's
 *     others are idle: on loopback, where every local client is 127.0.0.1, one idle flood would
 *     lock them all out. Here one more connection evicts the address's connection that has
 *     waited longest for a head; only when none is waiting (all are requests: streams, bodies)
 *     is the new one refused. A flood gives way to its own address's whole requests and never
 *     takes another address's places;
 *   - a reserve (sbxd.connections_reserve): connections waiting for a head may hold all but that
 *     many places; one more evicts the one that has waited longest, so idle connections from
 *     any number of addresses leave room for requests that arrive whole (/health, a call with
 *     the key).
 *
 * A connection is cut with shutdown(2) on its socket, under conns_lock: MHD's thread for it then
 * reads end-of-file and closes it. MHD calls NOTIFY_CLOSED (which unlinks it under the same lock)
 * before it closes the descriptor, so the descriptor shut down is never one reused meanwhile. */
struct conn {
  int fd;
  bool pending; /* waiting for a request head since `since` (ms) */
  bool cut;
  uint64_t since;
  unsigned char addr[16]; /* the client's address (4 bytes for IPv4) */
  size_t addr_len;
  struct conn *prev, *next;
};

static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reaper_cv = PTHREAD_COND_INITIALIZER;
static struct conn *conns;
static size_t n_pending;
static bool reaper_stop;
static pthread_t reaper;
static bool reaper_running;

/* Caller holds conns_lock. */
static void conn_cut(struct conn *c, const char *why)
{
  if (c->pending)
    n_pending--;
  c->pending = false;
  c->cut = true;
  shutdown(c->fd, SHUT_RDWR);
  sbxd_log_json(SBXD_DEBUG, "connection cut", json_pack("{s:s}", "reason", why));
}

static bool same_address(const struct conn *a, const struct conn *b)
{
  return a->addr_len == b->addr_len && memcmp(a->addr, b->addr, a->addr_len) == 0;
}

/* The pending connection other than c that has waited longest (of c's address if `mine`), or
 * NULL; *count: the live (not cut) connections of c's address, c included. Caller holds
 * conns_lock. */
static struct conn *oldest_pending(const struct conn *c, bool mine, size_t *count)
{
  struct conn *oldest = NULL;
  size_t n = 0;
  for (struct conn *o = conns; o; o = o->next) {
    if (o->cut || (mine && !same_address(o, c)))
      continue;
    n++;
    if (o->pending && o != c && o->fd >= 0 && (!oldest || o->since < oldest->since))
      oldest = o;
  }
  if (count)
    *count = n;
  return oldest;
}

static void conn_address(struct MHD_Connection *conn, struct conn *c)
{
  const union MHD_ConnectionInfo *i =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = i ? i->client_addr : NULL;
  if (sa && sa->sa_family == AF_INET) {
    memcpy(c->addr, &((const struct sockaddr_in *) (const void *) sa)->sin_addr, 4);
    c->addr_len = 4;
  } else if (sa && sa->sa_family == AF_INET6) {
    memcpy(c->addr, &((const struct sockaddr_in6 *) (const void *) sa)->sin6_addr, 16);
    c->addr_len = 16;
  }
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
  (void) cls;
  pthread_mutex_lock(&conns_lock);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct conn *c = xzalloc(sizeof *c);
    c->fd = i ? i->connect_fd : -1;
    c->pending = true;
    c->since = sbx__now_ms();
    conn_address(conn, c);
    c->next = conns;
    if (conns)
      conns->prev = c;
    conns = c;
    n_pending++;
    *socket_context = c;
    size_t mine = 0;
    struct conn *evict = oldest_pending(c, true, &mine);
    if (srv.cfg->max_connections_per_address > 0 &&
        (int64_t) mine > srv.cfg->max_connections_per_address) {
      if (evict)
        conn_cut(evict, "max_connections_per_address");
      else if (c->fd >= 0)
        conn_cut(c, "max_connections_per_address"); /* all of its address's are requests */
    }
    int64_t room = srv.cfg->max_connections - srv.cfg->connections_reserve;
    if (srv.cfg->connections_reserve > 0 && (int64_t) n_pending > room &&
        (evict = oldest_pending(c, false, NULL)) != NULL)
      conn_cut(evict, "connections_reserve");
  } else if (*socket_context) {
    struct conn *c = *socket_context;
    *socket_context = NULL;
    if (c->pending)
      n_pending--;
    if (c->prev)
      c->prev->next = c->next;
    else
      conns = c->next;
    if (c->next)
      c->next->prev = c->prev;
    free(c);
  }
  pthread_mutex_unlock(&conns_lock);
}

/* The connection's request head is in (pending false), or it waits for the next one. */
static void conn_pending(struct MHD_Connection *conn, bool pending)
{
  const union MHD_ConnectionInfo *i =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  struct conn *c = i ? i->socket_context : NULL;
  if (c == NULL)
    return;
  pthread_mutex_lock(&conns_lock);
  if (!c->cut && c->pending != pending) {
    c->pending = pending;
    c->since = sbx__now_ms();
    if (pending)
      n_pending++;
    else
      n_pending--;
  }
  pthread_mutex_unlock(&conns_lock);
}

/* Cuts the connections that have waited longer than sbxd.head_timeout for a head. */
static void *reaper_main(void *arg)
{
  (void) arg;
  uint64_t limit = (uint64_t) (srv.cfg->head_timeout * 1000);
  pthread_mutex_lock(&conns_lock);
  while (!reaper_stop) {
    uint64_t now = sbx__now_ms();
    for (struct conn *c = conns; c; c = c->next)
      if (c->pending && c->fd >= 0 && now - c->since > limit)
        conn_cut(c, "head_timeout");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&reaper_cv, &conns_lock, &ts);
  }
  pthread_mutex_unlock(&conns_lock);
  return NULL;
}

/* ---- MHD callbacks ---- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
  (void) cls;
  struct req *r = xzalloc(sizeof *r);
  r->conn = conn;
  r->raw_uri = xstrdup(uri ? uri : "/");
  r->t0 = sbx__now_ms();
  return r;
}

static void set_request_id(struct req *r)
{
  const char *h = sbxd_header(r, "X-Request-ID");
  bool ok = h && *h && strlen(h) < sizeof r->rid;
  for (const char *p = h; ok && *p; p++)
    ok = *p > ' ' && *p < 127;
  if (ok) {
    snprintf(r->rid, sizeof r->rid, "%s", h);
  } else {
    sbx__random_hex(r->rid, 32);
    r->rid[32] = '\0';
  }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
  (void) cls;
  (void) version;
  struct req *r = *con_cls;
  if (r == NULL) /* no URI callback (cannot happen): be safe */
    *con_cls = r = on_uri(NULL, url, conn);
  if (!r->begun) {
    r->begun = true;
    conn_pending(conn, false);
    r->conn = conn;
    r->method = method;
    r->url = url;
    set_request_id(r);
    r->body_max = SBXD_BODY_LIFECYCLE;
    enum MHD_Result ret = sbxd_route(r);
    if (r->responded || ret == MHD_NO)
      return ret;
    const char *cl = sbxd_header(r, "Content-Length");
    int64_t declared;
    if (cl && sbxd_parse_i64(cl, &declared) && declared > 0 && (uint64_t) declared > r->body_max)
      return sbxd_error(r, 413, "GENERAL::REQUEST_TOO_LARGE",
                        "request body of %lld bytes exceeds the limit of %llu bytes",
                        (long long) declared, (unsigned long long) r->body_max);
    return MHD_YES;
  }
  if (*upload_data_size > 0) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    r->body_seen += n;
    if (r->responded)
      return MHD_YES;
    if (r->body_seen > r->body_max) {
      r->body_too_big = true;
      /* keep draining a moderate excess to answer 413; drop an endless one */
      return r->body_seen > r->body_max + (64u << 20) ? MHD_NO : MHD_YES;
    }
    if (r->on_body) {
      if (r->on_body(r, upload_data, n) < 0)
        r->on_body = NULL; /* the consumer failed; it answers in done() */
    } else if (!r->body_too_big) {
      sbx__buf_append(&r->body, upload_data, n);
    }
    return MHD_YES;
  }
  if (r->responded)
    return MHD_YES;
  if (r->body_too_big)
    return sbxd_error(r, 413, "GENERAL::REQUEST_TOO_LARGE",
                      "request body exceeds the limit of %llu bytes",
                      (unsigned long long) r->body_max);
  if (r->done)
    return r->done(r);
  return sbxd_error(r, 500, "GENERAL::UNKNOWN_ERROR", "no handler for %s %s", method, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
  (void) cls;
  struct req *r = *con_cls;
  if (r == NULL)
    return;
  *con_cls = NULL;
  /* kept alive: the next head is timed again; an upgraded (101) socket is no longer HTTP */
  if (r->begun && r->status != 101 && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
    conn_pending(conn, true);
  if (r->on_close)
    r->on_close(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
  if (r->begun) {
    const char *path = r->url ? r->url : "";
    /* an AIO base URL carries its sandbox's token: never log it */
    cleanup_free char *masked = NULL;
    if (strncmp(path, "/aio/", 5) == 0 && strchr(path + 5, '/')) {
      const char *tok = strchr(path + 5, '/') + 1, *rest = tok + strcspn(tok, "/");
      masked = xasprintf("%.*s***%s", (int) (tok - path), path, rest);
      path = masked;
    }
    json_t *f = json_object();
    json_object_set_new(f, "request_id", json_string(r->rid));
    json_object_set_new(f, "method", json_string(r->method ? r->method : ""));
    json_object_set_new(f, "path", sbxd_jstr(path, strlen(path)));
    json_object_set_new(f, "status", json_integer(r->status));
    json_object_set_new(f, "ms", json_integer((json_int_t) (sbx__now_ms() - r->t0)));
    json_object_set_new(f, "completed", json_boolean(toe == MHD_REQUEST_TERMINATED_COMPLETED_OK));
    sbxd_log_json(SBXD_INFO, "request", f);
  }
  if (r->box)
    box_put(r->box);
  for (size_t i = 0; i < r->n_param; i++)
    free(r->param[i].value);
  sbx__buf_free(&r->body);
  free(r->raw_sub);
  free(r->raw_uri);
  free(r);
}

/* (the format attribute: clang's -Wformat-nonliteral refuses fmt otherwise) */
__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
  (void) cls;
  cleanup_free char *msg = xvasprintf(fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n')
    msg[--n] = '\0';
  sbxd_log_json(SBXD_DEBUG, msg, json_pack("{s:s}", "source", "microhttpd"));
}

/* Parses "host:port" / "[v6]:port" into a socket address; host `localhost` is 127.0.0.1 (the
 * name, not a lookup: what it stands for must not depend on /etc/hosts or DNS). */
static int parse_listen(const char *s, struct sockaddr_storage *ss, bool *v6)
{
  cleanup_free char *copy = xstrdup(s);
  char *host = copy, *port;
  if (*host == '[') {
    char *close = strchr(host, ']');
    if (close == NULL || close[1] != ':')
      return -1;
    *close = '\0';
    host++;
    port = close + 2;
  } else {
    port = strrchr(host, ':');
    if (port == NULL)
      return -1;
    *port++ = '\0';
  }
  int64_t pn;
  if (!sbxd_parse_i64(port, &pn) || pn < 0 || pn > 65535)
    return -1;
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *) ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *) ss;
  if (*host == '\0')
    host = (char *) "0.0.0.0";
  if (strcasecmp(host, "localhost") == 0)
    host = (char *) "127.0.0.1";
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t) pn);
    *v6 = false;
    return 0;
  }
  if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t) pn);
    *v6 = true;
    return 0;
  }
  return -1;
}

bool sbxd_listen_valid(const char *listen)
{
  struct sockaddr_storage ss;
  bool v6;
  return parse_listen(listen, &ss, &v6) == 0;
}

bool sbxd_listen_is_loopback(const char *listen)
{
  struct sockaddr_storage ss;
  bool v6;
  if (parse_listen(listen, &ss, &v6) < 0)
    return false;
  if (!v6)
    return (ntohl(((struct sockaddr_in *) &ss)->sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *) &ss)->sin6_addr);
}

/* The address fd is bound to, as HOST:PORT ([V6]:PORT). */
static char *bound_address(int fd)
{
  struct sockaddr_storage got = {0};
  socklen_t len = sizeof got;
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (getsockname(fd, (struct sockaddr *) &got, &len) == 0) {
    if (got.ss_family == AF_INET) {
      inet_ntop(AF_INET, &((struct sockaddr_in *) &got)->sin_addr, host, sizeof host);
      port = ntohs(((struct sockaddr_in *) &got)->sin_port);
    } else {
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &got)->sin6_addr, host, sizeof host);
      port = ntohs(((struct sockaddr_in6 *) &got)->sin6_port);
    }
  }
  return got.ss_family == AF_INET6 ? xasprintf("[%s]:%d", host, port)
                                   : xasprintf("%s:%d", host, port);
}

int sbxd_server_start(void)
{
  struct sockaddr_storage ss;
  bool v6;
  if (srv.cfg->connections_reserve >= srv.cfg->max_connections) {
    sbxd_log(SBXD_ERROR,
             "sbxd.connections_reserve (%lld) must be less than sbxd.max_connections (%lld)",
             (long long) srv.cfg->connections_reserve, (long long) srv.cfg->max_connections);
    return -1;
  }
  if (parse_listen(srv.listen, &ss, &v6) < 0) {
    sbxd_log(SBXD_ERROR,
             "invalid listen address '%s' (expected HOST:PORT or [V6]:PORT, HOST an IP "
             "address or localhost)",
             srv.listen);
    return -1;
  }
  /* bound here, before libmicrohttpd's threads exist: srv.listen (the handlers read it for the
   * endpoints they hand out) is the bound address before the first request can arrive */
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, (struct sockaddr *) &ss,
           v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) < 0 ||
      listen(fd, 1024) < 0) {
    int e = errno;
    if (fd >= 0)
      close(fd);
    sbxd_log(SBXD_ERROR, "cannot listen on %s: %s", srv.listen, strerror(e));
    return -1;
  }
  free(srv.listen);
  srv.listen = bound_address(fd);
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE | (v6 ? MHD_USE_IPv6 : 0);
  mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned) srv.cfg->max_connections,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) 300,
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) 65536,
                         MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                         on_completed, NULL, MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
                         MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
  if (mhd == NULL) {
    int e = errno;
    close(fd);
    sbxd_log(SBXD_ERROR, "cannot serve on %s: %s", srv.listen, strerror(e ? e : EINVAL));
    return -1;
  }
  if (srv.cfg->head_timeout > 0) {
    reaper_stop = false;
    int e = pthread_create(&reaper, NULL, reaper_main, NULL);
    if (e != 0) {
      sbxd_log(SBXD_ERROR, "cannot start the head-timeout thread: %s", strerror(e));
      MHD_stop_daemon(mhd);
      mhd = NULL;
      return -1;
    }
    reaper_running = true;
  }
  return 0;
}

void sbxd_server_stop(void)
{
  if (mhd) {
    sbxd_pty_stop(); /* upgraded connections are ours to close before MHD stops */
    MHD_stop_daemon(mhd);
    mhd = NULL;
  }
  if (reaper_running) {
    pthread_mutex_lock(&conns_lock);
    reaper_stop = true;
    pthread_cond_signal(&reaper_cv);
    pthread_mutex_unlock(&conns_lock);
    pthread_join(reaper, NULL);
    reaper_running = false;
  }
}

unsigned sbxd_server_connections(void)
{
  if (mhd == NULL)
    return 0;
  const union MHD_DaemonInfo *i = MHD_get_daemon_info(mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
  return i ? i->num_connections : 0;
}
