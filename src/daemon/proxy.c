/* Requests to a port other than execd's go to that port on the sandbox's own loopback (an app
 * the agent started inside), through a socket from sbx_connect_port: the request is rewritten
 * as HTTP/1.1 with "Connection: close", its body streamed as it arrives (re-chunked if the
 * client sent it chunked), and the response streamed back (its chunked framing decoded; MHD
 * frames it again for the client). Like OpenSandbox's proxy, hop-by-hop headers, Authorization,
 * Cookie, the API key and the access token are not forwarded. WebSocket upgrades are refused
 * (501). */
#include "proxy.h"
#include "ctx.h"
#include "registry.h"
#include "stream.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#define HEAD_MAX (64u << 10)
#define IDLE_MS (300 * 1000) /* an upstream silent this long is given up */

struct proxy {
  int fd;
  struct box *b;
  bool chunked_req;
  bool write_failed;
  /* response */
  struct sbxd_http_head head;
  sbx_buf_t buf; /* bytes received and not yet handed out */
  size_t off, dec_end, raw;
  bool chunked, has_len, done;
  uint64_t remaining;
  struct sbxd_chunked ch;
};

static void proxy_free(struct proxy *p)
{
  if (p->fd >= 0)
    close(p->fd);
  if (p->b)
    box_put(p->b);
  sbxd_http_head_free(&p->head);
  sbx__buf_free(&p->buf);
  free(p);
}

/* Waits up to IDLE_MS for bytes (a second at a time, so shutdown is not held up). */
static ssize_t recv_some(int fd, char *buf, size_t max)
{
  for (int waited = 0; waited < IDLE_MS; waited += 1000) {
    if (atomic_load(&srv.stopping))
      return -1;
    struct pollfd pf = {fd, POLLIN, 0};
    int pr = poll(&pf, 1, 1000);
    if (pr < 0 && errno != EINTR)
      return -1;
    if (pr <= 0)
      continue;
    ssize_t n = recv(fd, buf, max, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    return n;
  }
  errno = ETIMEDOUT;
  return -1;
}

static bool skip_request_header(const char *k)
{
  static const char *const drop[] = {"connection",
                                     "keep-alive",
                                     "proxy-connection",
                                     "proxy-authenticate",
                                     "proxy-authorization",
                                     "te",
                                     "trailer",
                                     "transfer-encoding",
                                     "upgrade",
                                     "host",
                                     "content-length",
                                     "expect",
                                     "authorization",
                                     "cookie",
                                     "open-sandbox-api-key",
                                     "x-execd-access-token",
                                     "x-forwarded-for",
                                     "x-forwarded-host",
                                     "x-forwarded-proto"};
  for (size_t i = 0; i < ARRAY_SIZE(drop); i++)
    if (strcasecmp(k, drop[i]) == 0)
      return true;
  return false;
}

static bool skip_response_header(const char *k)
{
  static const char *const drop[] = {"connection", "keep-alive",     "proxy-connection",
                                     "te",         "trailer",        "transfer-encoding",
                                     "upgrade",    "content-length", "date"};
  for (size_t i = 0; i < ARRAY_SIZE(drop); i++)
    if (strcasecmp(k, drop[i]) == 0)
      return true;
  return false;
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
  sbx_buf_t *b = cls;
  (void) kind;
  if (key == NULL || skip_request_header(key))
    return MHD_YES;
  if (strpbrk(key, "\r\n:") || (value && strpbrk(value, "\r\n")))
    return MHD_YES;
  sbx__buf_printf(b, "%s: %s\r\n", key, value ? value : "");
  return MHD_YES;
}

static char *client_ip(struct req *r)
{
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  char buf[INET6_ADDRSTRLEN] = "unknown";
  if (ci && ci->client_addr) {
    /* copied into aligned storage (clang's -Wcast-align refuses the cast of a sockaddr *) */
    struct sockaddr_storage ss;
    int family = ci->client_addr->sa_family;
    memcpy(&ss, ci->client_addr,
           family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    if (family == AF_INET)
      inet_ntop(AF_INET, &((const struct sockaddr_in *) &ss)->sin_addr, buf, sizeof buf);
    else if (family == AF_INET6)
      inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) &ss)->sin6_addr, buf, sizeof buf);
  }
  return xstrdup(buf);
}

static int proxy_body(struct req *r, const char *d, size_t n)
{
  struct proxy *p = r->ctx;
  if (p->write_failed)
    return 0;
  int rc = 0;
  if (p->chunked_req) {
    char hdr[32];
    snprintf(hdr, sizeof hdr, "%zx\r\n", n);
    rc = sbxd_send_all(p->fd, hdr, strlen(hdr), IDLE_MS);
    if (rc == 0)
      rc = sbxd_send_all(p->fd, d, n, IDLE_MS);
    if (rc == 0)
      rc = sbxd_send_all(p->fd, "\r\n", 2, IDLE_MS);
  } else {
    rc = sbxd_send_all(p->fd, d, n, IDLE_MS);
  }
  if (rc < 0)
    p->write_failed = true; /* the app may still answer (e.g. 413); read it in done() */
  return 0;
}

/* Hands out response body bytes. buf holds [off, dec_end) decoded bytes not yet handed out,
 * then [raw, len) bytes not yet decoded; chunked framing is decoded in place. */
static ssize_t proxy_read(void *cls, uint64_t pos, char *out, size_t max)
{
  struct proxy *p = cls;
  (void) pos;
  for (;;) {
    if (p->dec_end > p->off) {
      size_t give = p->dec_end - p->off < max ? p->dec_end - p->off : max;
      memcpy(out, p->buf.data + p->off, give);
      p->off += give;
      return (ssize_t) give;
    }
    if (p->done)
      return MHD_CONTENT_READER_END_OF_STREAM;
    if (p->raw < p->buf.len) {
      char *d = p->buf.data + p->raw;
      size_t avail = p->buf.len - p->raw;
      if (p->chunked) {
        size_t dec = 0, used = 0;
        int rc = sbxd_chunked_decode(&p->ch, d, avail, &dec, &used);
        if (rc < 0)
          return MHD_CONTENT_READER_END_WITH_ERROR;
        p->off = p->raw;
        p->dec_end = p->raw + dec;
        p->raw += used;
        if (rc == 1)
          p->done = true;
        if (dec > 0 || rc == 1)
          continue;
      } else {
        size_t take = avail;
        if (p->has_len && take > p->remaining)
          take = (size_t) p->remaining;
        p->off = p->raw;
        p->dec_end = p->raw + take;
        p->raw += take;
        if (p->has_len) {
          p->remaining -= take;
          if (p->remaining == 0)
            p->done = true;
        }
        if (take > 0 || p->done)
          continue;
      }
    }
    if (p->has_len && p->remaining == 0) {
      p->done = true;
      continue;
    }
    /* everything decoded was handed out: keep only the undecoded tail, then read more */
    size_t tail = p->buf.len - p->raw;
    if (tail)
      memmove(p->buf.data, p->buf.data + p->raw, tail);
    p->buf.len = tail;
    p->raw = p->off = p->dec_end = 0;
    sbx__buf_reserve(&p->buf, 65536);
    ssize_t n = recv_some(p->fd, p->buf.data + p->buf.len, 65536);
    if (n < 0)
      return MHD_CONTENT_READER_END_WITH_ERROR;
    if (n == 0)
      return p->has_len || p->chunked ? MHD_CONTENT_READER_END_WITH_ERROR
                                      : MHD_CONTENT_READER_END_OF_STREAM;
    p->buf.len += (size_t) n;
  }
}

static void proxy_resp_free(void *cls)
{
  proxy_free(cls);
}

static enum MHD_Result bad_gateway(struct req *r, const char *why)
{
  return sbxd_error(r, 502, "GENERAL::UNKNOWN_ERROR",
                    "Could not connect to the backend sandbox %s on port %d: %s", r->box->id,
                    r->port, why);
}

static enum MHD_Result proxy_done(struct req *r)
{
  struct proxy *p = r->ctx;
  if (p->chunked_req && !p->write_failed && sbxd_send_all(p->fd, "0\r\n\r\n", 5, IDLE_MS) < 0)
    p->write_failed = true;
  /* the response head (skipping interim 1xx heads) */
  for (;;) {
    int rc;
    while ((rc = sbxd_http_head_parse(p->buf.data ? p->buf.data : "", p->buf.len, HEAD_MAX,
                                      &p->head)) == 0) {
      sbx__buf_reserve(&p->buf, 65536);
      ssize_t n = recv_some(p->fd, p->buf.data + p->buf.len, 65536);
      if (n <= 0)
        return bad_gateway(r, n == 0 ? "the connection closed before a response"
                                     : "no response from the application");
      p->buf.len += (size_t) n;
    }
    if (rc < 0)
      return bad_gateway(r, "the application sent a malformed HTTP response");
    if (p->head.status >= 100 && p->head.status < 200 && p->head.status != 101) {
      size_t used = p->head.head_len;
      memmove(p->buf.data, p->buf.data + used, p->buf.len - used);
      p->buf.len -= used;
      sbxd_http_head_free(&p->head);
      continue;
    }
    break;
  }
  p->off = p->dec_end = p->raw = p->head.head_len;
  bool no_body = strcmp(r->method, "HEAD") == 0 || p->head.status == 204 || p->head.status == 304 ||
                 p->head.status < 200;
  p->chunked = p->head.chunked;
  p->has_len = p->head.has_length;
  p->remaining = p->head.length;
  if (p->has_len && p->remaining == 0)
    no_body = true;
  struct MHD_Response *resp;
  if (no_body)
    resp = MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
  else
    resp = MHD_create_response_from_callback(p->has_len ? p->remaining : MHD_SIZE_UNKNOWN,
                                             64 * 1024, proxy_read, p, proxy_resp_free);
  if (resp == NULL)
    return MHD_NO;
  for (size_t i = 0; i < p->head.names.n; i++)
    if (!skip_response_header(p->head.names.v[i]))
      MHD_add_response_header(resp, p->head.names.v[i], p->head.values.v[i]);
  unsigned status = (unsigned) p->head.status;
  if (!no_body)
    r->ctx = NULL; /* the response owns it now */
  return sbxd_respond(r, status, resp);
}

static void proxy_close(struct req *r, bool completed)
{
  (void) completed;
  if (r->ctx)
    proxy_free(r->ctx);
  r->ctx = NULL;
}

enum MHD_Result sbxd_proxy_begin(struct req *r)
{
  const char *upgrade = sbxd_header(r, "Upgrade");
  if (upgrade && *upgrade)
    return sbxd_error(r, 501, "NOT_SUPPORTED",
                      "protocol upgrades (WebSocket) are not proxied by sbxd");
  if (box_paused(r->box))
    return sbxd_error(r, 409, "SANDBOX_PAUSED", "sandbox %s is paused; resume it first",
                      r->box->id);
  sbx_error_t err = NULL;
  int fd = sbx_connect_port(r->box->sb, r->port, &err);
  if (fd < 0) {
    enum MHD_Result ret = bad_gateway(r, err->msg);
    sbx_error_release(&err);
    return ret;
  }
  struct proxy *p = xzalloc(sizeof *p);
  p->fd = fd;
  p->b = box_ref(r->box);
  sbx_buf_t head = {0};
  sbx__buf_printf(&head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", r->method, r->raw_sub,
                  r->port);
  MHD_get_connection_values(r->conn, MHD_HEADER_KIND, add_header, &head);
  cleanup_free char *ip = client_ip(r);
  cleanup_free char *host = sbxd_public_host(r, srv.listen);
  sbx__buf_printf(&head,
                  "X-Forwarded-For: %s\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: %s\r\n", ip,
                  host);
  const char *cl = sbxd_header(r, "Content-Length");
  const char *te = sbxd_header(r, "Transfer-Encoding");
  int64_t len;
  if (cl && sbxd_parse_i64(cl, &len) && len >= 0)
    sbx__buf_printf(&head, "Content-Length: %lld\r\n", (long long) len);
  else if (te && strcasestr(te, "chunked")) {
    sbx__buf_puts(&head, "Transfer-Encoding: chunked\r\n");
    p->chunked_req = true;
  }
  sbx__buf_puts(&head, "Connection: close\r\n\r\n");
  int rc = sbxd_send_all(fd, head.data, head.len, IDLE_MS);
  sbx__buf_free(&head);
  if (rc < 0) {
    proxy_free(p);
    return bad_gateway(r, "cannot send the request");
  }
  r->ctx = p;
  r->on_body = proxy_body;
  r->on_close = proxy_close;
  r->done = proxy_done;
  r->body_max = SBXD_BODY_STREAM;
  return MHD_YES;
}
