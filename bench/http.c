/* A minimal HTTP/1.1 client (see http.h). Good enough for a loopback benchmark: no TLS, no
 * redirects, one request per connection. */
#include "http.h"
#include "tb.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define HEAD_MAX (64 * 1024)

int http_parse_target(const char *url, struct http_target *t)
{
  memset(t, 0, sizeof *t);
  const char *p = url;
  if (strncmp(p, "http://", 7) == 0)
    p += 7;
  else if (strstr(p, "://"))
    return -1;
  const char *slash = strchr(p, '/');
  size_t hostport = slash ? (size_t) (slash - p) : strlen(p);
  char hp[sizeof t->host];
  if (hostport == 0 || hostport >= sizeof hp)
    return -1;
  memcpy(hp, p, hostport);
  hp[hostport] = '\0';
  char *colon = strrchr(hp, ':');
  t->port = 80;
  if (colon) {
    *colon = '\0';
    t->port = atoi(colon + 1);
  }
  snprintf(t->host, sizeof t->host, "%s", hp);
  if (slash) {
    snprintf(t->prefix, sizeof t->prefix, "%s", slash);
    size_t n = strlen(t->prefix);
    while (n > 0 && t->prefix[n - 1] == '/')
      t->prefix[--n] = '\0';
  }
  return t->port > 0 && t->port < 65536 ? 0 : -1;
}

static int connect_to(const struct http_target *t, char **err)
{
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  char port[16];
  snprintf(port, sizeof port, "%d", t->port);
  int r = getaddrinfo(t->host, port, &hints, &res);
  if (r != 0) {
    *err = tb_fmt("resolve %s: %s", t->host, gai_strerror(r));
    return -1;
  }
  int fd = -1;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0)
      continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
      break;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    *err = tb_fmt("connect %s:%d: %s", t->host, t->port, strerror(errno));
    return -1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct timeval tv = {
      .tv_sec = (time_t) tb_run_timeout_s,
      .tv_usec = (suseconds_t) ((tb_run_timeout_s - (double) (time_t) tb_run_timeout_s) * 1e6)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

/* Set when a send or receive of the current request hit the socket timeout. */
static int timed_out;

static int send_all(int fd, const char *p, size_t n)
{
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      timed_out = 1;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t) w;
  }
  return 0;
}

static int send_request(int fd, const struct http_target *t, const char *method, const char *path,
                        const struct http_header *hdrs, size_t nh, const char *body,
                        const char *accept)
{
  size_t blen = body ? strlen(body) : 0;
  char *head = tb_fmt("%s %s%s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nAccept: %s\r\n"
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n",
                      method, t->prefix, path, t->host, t->port, accept, blen);
  size_t len = strlen(head);
  for (size_t i = 0; i < nh; i++) {
    char *line = tb_fmt("%s: %s\r\n", hdrs[i].name, hdrs[i].value);
    size_t l = strlen(line);
    head = realloc(head, len + l + 3);
    if (head == NULL)
      abort();
    memcpy(head + len, line, l + 1);
    len += l;
    free(line);
  }
  head = realloc(head, len + 3);
  if (head == NULL)
    abort();
  memcpy(head + len, "\r\n", 3);
  len += 2;
  int r = send_all(fd, head, len);
  free(head);
  if (r == 0 && blen)
    r = send_all(fd, body, blen);
  return r;
}

/* ---- response reader ---- */

struct reader {
  int fd;
  char *buf;
  size_t len, pos, cap;
};

static ssize_t fill(struct reader *r)
{
  if (r->pos > 0 && r->pos == r->len)
    r->pos = r->len = 0;
  if (r->len == r->cap) {
    if (r->pos > 0) {
      memmove(r->buf, r->buf + r->pos, r->len - r->pos);
      r->len -= r->pos;
      r->pos = 0;
    } else {
      r->cap = r->cap ? r->cap * 2 : 16384;
      r->buf = realloc(r->buf, r->cap);
      if (r->buf == NULL)
        abort();
    }
  }
  ssize_t n;
  do
    n = recv(r->fd, r->buf + r->len, r->cap - r->len, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    timed_out = 1;
  if (n > 0)
    r->len += (size_t) n;
  return n;
}

/* Delivers body bytes; returns 1 to stop reading. */
typedef int (*body_cb)(void *arg, const char *data, size_t n);

struct resp_head {
  int status;
  bool chunked;
  long long content_length; /* -1 = until EOF */
};

static int read_head(struct reader *r, struct resp_head *h, char **err)
{
  for (;;) {
    char *end = r->len > r->pos ? memmem(r->buf + r->pos, r->len - r->pos, "\r\n\r\n", 4) : NULL;
    if (end) {
      *end = '\0';
      char *head = r->buf + r->pos;
      r->pos = (size_t) (end + 4 - r->buf);
      h->status = 0;
      h->chunked = false;
      h->content_length = -1;
      if (sscanf(head, "HTTP/%*d.%*d %d", &h->status) != 1) {
        *err = tb_fmt("bad status line");
        return -1;
      }
      for (char *line = strstr(head, "\r\n"); line; line = strstr(line, "\r\n")) {
        line += 2;
        if (strncasecmp(line, "content-length:", 15) == 0)
          h->content_length = atoll(line + 15);
        else if (strncasecmp(line, "transfer-encoding:", 18) == 0 && strstr(line, "chunked"))
          h->chunked = true;
      }
      return 0;
    }
    if (r->len - r->pos > HEAD_MAX) {
      *err = tb_fmt("response head too large");
      return -1;
    }
    ssize_t n = fill(r);
    if (n <= 0) {
      *err = tb_fmt("connection closed before the response head");
      return -1;
    }
  }
}

/* Reads the body, delivering it to cb. Returns 0 (complete or stopped), -1 on error. */
static int read_body(struct reader *r, const struct resp_head *h, body_cb cb, void *arg, char **err)
{
  if (!h->chunked) {
    long long left = h->content_length;
    for (;;) {
      size_t avail = r->len - r->pos;
      if (left >= 0 && (long long) avail > left)
        avail = (size_t) left;
      if (avail) {
        int stop = cb(arg, r->buf + r->pos, avail);
        r->pos += avail;
        if (left >= 0)
          left -= (long long) avail;
        if (stop)
          return 0;
      }
      if (left == 0)
        return 0;
      ssize_t n = fill(r);
      if (n == 0 && left < 0)
        return 0;
      if (n <= 0) {
        *err = tb_fmt("connection closed in the body");
        return -1;
      }
    }
  }
  for (;;) {
    char *nl;
    while ((nl = memmem(r->buf + r->pos, r->len - r->pos, "\r\n", 2)) == NULL)
      if (fill(r) <= 0) {
        *err = tb_fmt("connection closed in a chunk header");
        return -1;
      }
    unsigned long long size = strtoull(r->buf + r->pos, NULL, 16);
    r->pos = (size_t) (nl + 2 - r->buf);
    if (size == 0)
      return 0;
    while (size > 0) {
      if (r->len == r->pos && fill(r) <= 0) {
        *err = tb_fmt("connection closed in a chunk");
        return -1;
      }
      size_t avail = r->len - r->pos;
      if (avail > size)
        avail = (size_t) size;
      int stop = cb(arg, r->buf + r->pos, avail);
      r->pos += avail;
      size -= avail;
      if (stop)
        return 0;
    }
    while (r->len - r->pos < 2)
      if (fill(r) <= 0) {
        *err = tb_fmt("connection closed after a chunk");
        return -1;
      }
    r->pos += 2;
  }
}

struct collect {
  char *data;
  size_t len;
};

static int collect_cb(void *arg, const char *data, size_t n)
{
  struct collect *c = arg;
  c->data = realloc(c->data, c->len + n + 1);
  if (c->data == NULL)
    abort();
  memcpy(c->data + c->len, data, n);
  c->len += n;
  c->data[c->len] = '\0';
  return 0;
}

int http_request(const struct http_target *t, const char *method, const char *path,
                 const struct http_header *hdrs, size_t nh, const char *body, int *status,
                 char **resp, size_t *resp_len, char **err)
{
  timed_out = 0;
  int fd = connect_to(t, err);
  if (fd < 0)
    return -1;
  struct reader r = {.fd = fd};
  struct resp_head h;
  struct collect c = {0};
  int ret = -1;
  if (send_request(fd, t, method, path, hdrs, nh, body, "application/json") < 0) {
    *err = tb_fmt("send: %s", strerror(errno));
  } else if (read_head(&r, &h, err) == 0 && read_body(&r, &h, collect_cb, &c, err) == 0) {
    *status = h.status;
    ret = 0;
  }
  close(fd);
  free(r.buf);
  if (ret == 0) {
    if (c.data == NULL)
      c.data = calloc(1, 1);
    *resp = c.data;
    if (resp_len)
      *resp_len = c.len;
  } else {
    free(c.data);
  }
  return ret < 0 && timed_out ? HTTP_TIMEOUT : ret;
}

/* ---- the SSE command stream ---- */

struct sse {
  struct collect line;
  int done;
  int exit_code;
};

static void sse_line(struct sse *s, char *line)
{
  while (*line && isspace((unsigned char) *line))
    line++;
  if (*line == '\0' || *line == ':' || strncmp(line, "event:", 6) == 0 ||
      strncmp(line, "id:", 3) == 0 || strncmp(line, "retry:", 6) == 0)
    return;
  if (strncmp(line, "data:", 5) == 0)
    line += 5;
  json_t *j = json_loads(line, 0, NULL);
  if (j == NULL)
    return;
  const char *type = json_string_value(json_object_get(j, "type"));
  if (type && strcmp(type, "execution_complete") == 0) {
    s->done = 1;
    s->exit_code = 0;
  } else if (type && strcmp(type, "error") == 0) {
    const char *ev = json_string_value(json_object_get(json_object_get(j, "error"), "evalue"));
    s->done = 1;
    s->exit_code = ev ? atoi(ev) : -1;
    if (s->exit_code == 0)
      s->exit_code = -1;
  }
  json_decref(j);
}

static int sse_cb(void *arg, const char *data, size_t n)
{
  struct sse *s = arg;
  for (size_t i = 0; i < n && !s->done; i++) {
    if (data[i] == '\n') {
      collect_cb(&s->line, "", 0);
      sse_line(s, s->line.data);
      s->line.len = 0;
    } else {
      collect_cb(&s->line, data + i, 1);
    }
  }
  return s->done;
}

int http_command(const struct http_target *t, const struct http_header *hdrs, size_t nh,
                 const char *body, int *exit_code, char **err)
{
  timed_out = 0;
  int fd = connect_to(t, err);
  if (fd < 0)
    return -1;
  struct reader r = {.fd = fd};
  struct resp_head h;
  struct sse s = {.exit_code = -1};
  int ret = -1;
  if (send_request(fd, t, "POST", "/command", hdrs, nh, body, "text/event-stream") < 0) {
    *err = tb_fmt("send: %s", strerror(errno));
  } else if (read_head(&r, &h, err) == 0) {
    if (h.status != 200) {
      *err = tb_fmt("POST /command: HTTP %d", h.status);
    } else if (read_body(&r, &h, sse_cb, &s, err) == 0) {
      if (!s.done && s.line.len) {
        collect_cb(&s.line, "", 0);
        sse_line(&s, s.line.data);
      }
      if (s.done) {
        *exit_code = s.exit_code;
        ret = 0;
      } else {
        *err = tb_fmt("stream ended without a terminal event");
      }
    }
  }
  close(fd);
  free(r.buf);
  free(s.line.data);
  return ret < 0 && timed_out ? HTTP_TIMEOUT : ret;
}
