/* The HTTP side of sbxd: libmicrohttpd callbacks, routing, authentication, request ids, body
 * caps and response helpers.
 *
 * MHD runs a thread per connection, so handlers may block (a sandbox operation, a command's
 * event stream, a proxied port). Every request gets a `struct req` from the URI callback (which
 * sees the raw request target), is routed on its first call, receives its body in later calls
 * (buffered up to a per-route cap, or streamed to r->on_body) and is answered by r->done once the
 * body is complete. Errors are always {code, message} with a non-empty body. */
#include "sbxd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

struct sbxd g;

/* ---- logging ---- */

static int log_threshold(void)
{
  static int level = -1;
  if (level < 0) {
    const char *e = getenv("SBXD_LOG_LEVEL");
    level = SBXD_INFO;
    if (e && strcmp(e, "debug") == 0)
      level = SBXD_DEBUG;
    else if (e && strcmp(e, "warning") == 0)
      level = SBXD_WARN;
    else if (e && strcmp(e, "error") == 0)
      level = SBXD_ERROR;
  }
  return level;
}

void sbxd_log_json(int level, const char *msg, json_t *fields)
{
  static const char *const names[] = {"error", "warning", "info", "debug"};
  if (level > log_threshold()) {
    json_decref(fields);
    return;
  }
  char ts[32];
  sbxd_time_format(sbxd_now_ms(), ts);
  json_t *o = json_object();
  json_object_set_new(o, "ts", json_string(ts));
  json_object_set_new(o, "level", json_string(names[level < 0 ? 0 : level > 3 ? 3 : level]));
  json_object_set_new(o, "msg", sbxd_jstr(msg, strlen(msg)));
  if (fields)
    json_object_update(o, fields);
  json_decref(fields);
  char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (s) {
    flockfile(stderr);
    fputs(s, stderr);
    fputc('\n', stderr);
    fflush(stderr);
    funlockfile(stderr);
    free(s);
  }
}

void sbxd_log(int level, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  sbxd_log_json(level, msg, NULL);
}

void sbxd_lib_log(int level, const char *msg, void *arg)
{
  (void) arg;
  int l = level == SBX_LOG_ERROR     ? SBXD_ERROR
          : level == SBX_LOG_WARNING ? SBXD_WARN
          : level == SBX_LOG_INFO    ? SBXD_INFO
                                     : SBXD_DEBUG;
  sbxd_log_json(l, msg, json_pack("{s:s}", "source", "libsbx"));
}

/* ---- json helpers ---- */

int64_t sbxd_now_ms(void)
{
  return (int64_t) sbx_realtime_ms();
}

json_t *sbxd_jstr(const char *s, size_t len)
{
  size_t n;
  cleanup_free char *clean = sbx_utf8_sanitize(s, len, &n);
  json_t *j = json_stringn(clean, n);
  return j ? j : json_string("");
}

json_t *sbxd_jtime(int64_t ms)
{
  char buf[32];
  sbxd_time_format(ms, buf);
  return json_string(buf);
}

/* ---- requests ---- */

const char *sbxd_header(struct req *r, const char *name)
{
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *sbxd_query(struct req *r, const char *name)
{
  return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

struct query_acc {
  const char *name;
  const char **out;
  size_t max, n;
};

static enum MHD_Result query_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
  struct query_acc *a = cls;
  (void) kind;
  if (key && strcmp(key, a->name) == 0 && a->n < a->max)
    a->out[a->n++] = value ? value : "";
  return MHD_YES;
}

size_t sbxd_query_all(struct req *r, const char *name, const char **out, size_t max)
{
  struct query_acc a = {name, out, max, 0};
  MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, query_iter, &a);
  return a.n;
}

bool sbxd_api_key_ok(struct req *r)
{
  if (g.api_key == NULL)
    return false;
  const char *k = sbxd_header(r, SBXD_API_KEY_HEADER);
  return k && sbxd_secret_equal(k, g.api_key);
}

static bool host_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr(".-:[]_", c);
}

char *sbxd_public_host(struct req *r)
{
  const char *h = sbxd_header(r, "Host");
  bool ok = h && *h && strlen(h) <= 255;
  for (const char *p = h; ok && *p; p++)
    ok = host_char(*p);
  if (ok)
    return xstrdup(h);
  return xstrdup(g.listen);
}

/* ---- responses ---- */

enum MHD_Result sbxd_respond(struct req *r, unsigned status, struct MHD_Response *resp)
{
  if (resp == NULL)
    return MHD_NO;
  MHD_add_response_header(resp, "X-Request-ID", r->rid);
  MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
  MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                          "X-Request-ID, EXECD-COMMANDS-TAIL-CURSOR");
  enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
  MHD_destroy_response(resp);
  r->status = status;
  r->responded = true;
  return ret;
}

enum MHD_Result sbxd_text(struct req *r, unsigned status, const char *type, const char *data,
                          size_t len)
{
  void *copy = xmalloc(len + 1);
  memcpy(copy, data, len);
  struct MHD_Response *resp = MHD_create_response_from_buffer(len, copy, MHD_RESPMEM_MUST_FREE);
  if (resp == NULL) {
    free(copy);
    return MHD_NO;
  }
  if (type)
    MHD_add_response_header(resp, "Content-Type", type);
  return sbxd_respond(r, status, resp);
}

enum MHD_Result sbxd_json(struct req *r, unsigned status, json_t *j)
{
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  if (s == NULL)
    return sbxd_error(r, 500, "GENERAL::UNKNOWN_ERROR", "could not encode the response");
  struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
  if (resp == NULL) {
    free(s);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "application/json");
  return sbxd_respond(r, status, resp);
}

enum MHD_Result sbxd_error(struct req *r, unsigned status, const char *code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  json_t *j = json_object();
  json_object_set_new(j, "code", json_string(code));
  json_object_set_new(j, "message", sbxd_jstr(msg, strlen(msg)));
  if (status >= 500) {
    const char *path = r->url ? r->url : "";
    json_t *f = json_object();
    json_object_set_new(f, "request_id", json_string(r->rid));
    json_object_set_new(f, "path", sbxd_jstr(path, strlen(path)));
    json_object_set_new(f, "status", json_integer(status));
    json_object_set_new(f, "code", json_string(code));
    json_object_set_new(f, "error", sbxd_jstr(msg, strlen(msg)));
    sbxd_log_json(SBXD_WARN, "request failed", f);
  }
  return sbxd_json(r, status, j);
}

enum MHD_Result sbxd_empty(struct req *r, unsigned status)
{
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
  return sbxd_respond(r, status, resp);
}

unsigned sbxd_kind_status(int kind)
{
  switch (kind) {
  case SBX_E_INVALID:
  case SBX_E_NOT_DIR:
  case SBX_E_IS_DIR:
  case SBX_E_NOT_TEXT:
  case SBX_E_CONFIG:
    return 400;
  case SBX_E_DENIED:
    return 403;
  case SBX_E_NOT_FOUND:
    return 404;
  case SBX_E_EXISTS:
  case SBX_E_CONFLICT:
    return 409;
  case SBX_E_TOO_LARGE:
    return 413;
  case SBX_E_UNSUPPORTED:
    return 501;
  case SBX_E_BACKEND:
    return 502;
  case SBX_E_SHUTDOWN:
  case SBX_E_BUSY:
    return 503;
  case SBX_E_TIMEOUT:
    return 504;
  default:
    return 500;
  }
}

enum MHD_Result sbxd_lib_error(struct req *r, sbx_error_t *err)
{
  int kind = err && *err ? (*err)->kind : SBX_E_INTERNAL;
  cleanup_free char *msg = xstrdup(err && *err ? (*err)->msg : "unknown error");
  sbx_error_release(err);
  char code[48];
  snprintf(code, sizeof code, "SBX::%s", sbx_error_kind_name(kind));
  for (char *c = code + 5; *c; c++)
    if (*c >= 'a' && *c <= 'z')
      *c = (char) (*c - 'a' + 'A');
  return sbxd_error(r, sbxd_kind_status(kind), code, "%s", msg);
}

json_t *sbxd_body_json(struct req *r, unsigned status, const char *code, enum MHD_Result *ret)
{
  json_error_t je;
  json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
  if (j == NULL) {
    *ret = r->body.len == 0
               ? sbxd_error(r, status, code, "request body must be JSON, got an empty body")
               : sbxd_error(r, status, code, "malformed JSON body: %s (line %d, column %d)",
                            je.text, je.line, je.column);
    return NULL;
  }
  return j;
}

/* ---- routing ---- */

static void split_path(const char *url, sbx_strv_t *seg)
{
  /* an empty vector for "/" too: the routers compute seg->v + base (NULL + 0 is undefined) */
  if (seg->v == NULL) {
    seg->cap = 8;
    seg->v = xzalloc(seg->cap * sizeof *seg->v);
  }
  const char *p = url;
  while (*p) {
    while (*p == '/')
      p++;
    const char *e = p;
    while (*e && *e != '/')
      e++;
    if (e > p)
      sbx_strv_push_owned(seg, xstrndup(p, (size_t) (e - p)));
    p = e;
  }
}

/* The raw request target without its first n path segments ("/rest?query", "/" at least). */
static char *raw_strip(const char *raw, size_t n)
{
  const char *p = raw;
  for (size_t i = 0; i < n; i++) {
    while (*p == '/')
      p++;
    while (*p && *p != '/' && *p != '?' && *p != '#')
      p++;
  }
  if (*p == '\0' || *p == '?')
    return xasprintf("/%s", p);
  return xstrdup(p);
}

/* The decoded path below the first n segments of r->url. */
static const char *url_sub(const char *url, size_t n)
{
  const char *p = url;
  for (size_t i = 0; i < n; i++) {
    while (*p == '/')
      p++;
    while (*p && *p != '/')
      p++;
  }
  return *p ? p : "/";
}

static bool port_valid(const char *s, int *port)
{
  int64_t v;
  if (!sbxd_parse_i64(s, &v) || v < 1 || v > 65535)
    return false;
  *port = (int) v;
  return true;
}

static enum MHD_Result missing_key(struct req *r)
{
  const char *k = sbxd_header(r, SBXD_API_KEY_HEADER);
  if (k == NULL || *k == '\0')
    return sbxd_error(r, 401, "MISSING_API_KEY",
                      "Authentication credentials are missing. Provide API key via "
                      "OPEN-SANDBOX-API-KEY header.");
  return sbxd_error(r, 401, "INVALID_API_KEY",
                    "Authentication credentials are invalid. Check your API key and try again.");
}

static enum MHD_Result cors_preflight(struct req *r)
{
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
  MHD_add_response_header(resp, "Access-Control-Allow-Methods",
                          "GET, POST, PUT, PATCH, DELETE, OPTIONS");
  const char *h = sbxd_header(r, "Access-Control-Request-Headers");
  MHD_add_response_header(resp, "Access-Control-Allow-Headers", h ? h : "*");
  MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
  return sbxd_respond(r, 200, resp);
}

static enum MHD_Result route(struct req *r)
{
  sbx_strv_t *seg = &r->seg;
  split_path(r->url, seg);
  if (strcmp(r->method, "OPTIONS") == 0 && sbxd_header(r, "Origin") &&
      sbxd_header(r, "Access-Control-Request-Method"))
    return cors_preflight(r);
  size_t base = seg->n > 0 && strcmp(seg->v[0], "v1") == 0 ? 1 : 0;
  size_t n = seg->n - base;
  char **s = seg->v + base;
  bool traversal = false; /* a ".." segment: never an endpoint route (as OpenSandbox's proxy) */
  for (size_t i = 0; i < seg->n; i++)
    traversal |= strcmp(seg->v[i], "..") == 0;

  /* The endpoints of a sandbox: its execd (port 44772) and its other ports. They carry their
   * own credentials (the sandbox's access token, or the API key). */
  size_t prefix = 0;
  if (n >= 4 && strcmp(s[0], "sandboxes") == 0 && strcmp(s[2], "proxy") == 0)
    prefix = 4;
  else if (base == 0 && n >= 3 && strcmp(s[0], "direct") == 0)
    prefix = 3;
  if (prefix && !traversal) {
    const char *id = s[1], *port_s = s[prefix - 1];
    if (!port_valid(port_s, &r->port))
      return sbxd_error(r, 400, "DOCKER::INVALID_PORT", "Port must be between 1 and 65535.");
    r->box = box_get(id);
    if (r->box == NULL || r->box->kind != BOX_MANAGED)
      return sbxd_error(r, 404, "DOCKER::SANDBOX_NOT_FOUND", "Sandbox %s not found.", id);
    const char *tok = sbxd_header(r, SBXD_TOKEN_HEADER);
    if (!(tok && sbxd_secret_equal(tok, r->box->token)) && !sbxd_api_key_ok(r)) {
      json_t *j = json_pack("{s:s,s:s,s:s}", "code", "UNAUTHORIZED", "message",
                            "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN", "error",
                            "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN");
      return sbxd_json(r, 401, j);
    }
    r->sub = url_sub(r->url, base + prefix);
    r->raw_sub = raw_strip(r->raw_uri, base + prefix);
    return sbxd_execd_begin(r);
  }

  if (base == 0 && n == 1 && strcmp(s[0], "health") == 0) {
    if (strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0)
      return sbxd_error(r, 405, "GENERAL::METHOD_NOT_ALLOWED", "Method Not Allowed");
    return sbxd_json(r, 200, json_pack("{s:s}", "status", "healthy"));
  }
  if (base == 0 && n == 1 && strcmp(s[0], "mcp") == 0)
    return sbxd_mcp(r); /* checks the API key itself (it also takes a bearer token) */
  if (g.api_key && !sbxd_api_key_ok(r))
    return missing_key(r);
  if (n >= 1 && strcmp(s[0], "contract") == 0)
    return sbxd_contract(r, seg);
  if (n >= 3 && strcmp(s[0], "sandboxes") == 0 && strcmp(s[2], "contract") == 0)
    return sbxd_contract(r, seg);
  return sbxd_lifecycle(r, seg);
}

/* ---- MHD callbacks ---- */

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
  (void) cls;
  struct req *r = xzalloc(sizeof *r);
  r->conn = conn;
  r->raw_uri = xstrdup(uri ? uri : "/");
  r->t0 = sbx_now_ms();
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
    sbx_random_hex(r->rid, 32);
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
    r->conn = conn;
    r->method = method;
    r->url = url;
    set_request_id(r);
    r->body_max = SBXD_BODY_LIFECYCLE;
    enum MHD_Result ret = route(r);
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
      sbx_buf_append(&r->body, upload_data, n);
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
  (void) conn;
  struct req *r = *con_cls;
  if (r == NULL)
    return;
  *con_cls = NULL;
  if (r->on_close)
    r->on_close(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
  if (r->begun) {
    const char *path = r->url ? r->url : "";
    json_t *f = json_object();
    json_object_set_new(f, "request_id", json_string(r->rid));
    json_object_set_new(f, "method", json_string(r->method ? r->method : ""));
    json_object_set_new(f, "path", sbxd_jstr(path, strlen(path)));
    json_object_set_new(f, "status", json_integer(r->status));
    json_object_set_new(f, "ms", json_integer((json_int_t) (sbx_now_ms() - r->t0)));
    json_object_set_new(f, "completed", json_boolean(toe == MHD_REQUEST_TERMINATED_COMPLETED_OK));
    sbxd_log_json(SBXD_INFO, "request", f);
  }
  if (r->box)
    box_put(r->box);
  sbx_strv_free(&r->seg);
  sbx_buf_free(&r->body);
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

/* Parses "host:port" / "[v6]:port" into a socket address. */
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

int sbxd_server_start(char **bound)
{
  struct sockaddr_storage ss;
  bool v6;
  if (parse_listen(g.listen, &ss, &v6) < 0) {
    sbxd_log(SBXD_ERROR, "invalid listen address '%s' (expected HOST:PORT or [V6]:PORT)", g.listen);
    return -1;
  }
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                   MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
  g.mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
                           (struct sockaddr *) &ss, MHD_OPTION_CONNECTION_LIMIT,
                           (unsigned) SBXD_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                           (unsigned) 300, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) 65536,
                           MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL, MHD_OPTION_NOTIFY_COMPLETED,
                           on_completed, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                           MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned) 1024, MHD_OPTION_END);
  if (g.mhd == NULL) {
    sbxd_log(SBXD_ERROR, "cannot listen on %s: %s", g.listen, strerror(errno ? errno : EADDRINUSE));
    return -1;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(g.mhd, MHD_DAEMON_INFO_LISTEN_FD);
  struct sockaddr_storage got;
  socklen_t len = sizeof got;
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (info && getsockname(info->listen_fd, (struct sockaddr *) &got, &len) == 0) {
    if (got.ss_family == AF_INET) {
      inet_ntop(AF_INET, &((struct sockaddr_in *) &got)->sin_addr, host, sizeof host);
      port = ntohs(((struct sockaddr_in *) &got)->sin_port);
    } else {
      inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &got)->sin6_addr, host, sizeof host);
      port = ntohs(((struct sockaddr_in6 *) &got)->sin6_port);
    }
  }
  *bound =
      got.ss_family == AF_INET6 ? xasprintf("[%s]:%d", host, port) : xasprintf("%s:%d", host, port);
  return 0;
}

void sbxd_server_stop(void)
{
  if (g.mhd) {
    MHD_stop_daemon(g.mhd);
    g.mhd = NULL;
  }
}
