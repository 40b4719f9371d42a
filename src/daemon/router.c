/* The route table: one place to read who answers which request.
 *
 * Two scopes. API routes are below "/" and "/v1" (unless ROUTE_NO_V1), matched against the
 * path's non-empty segments joined by '/', and need the API key when one is configured (unless
 * ROUTE_NO_AUTH). EXECD routes are a sandbox's execd API, below its endpoint mounts
 * "/sandboxes/{id}/proxy/44772" and "/direct/{id}/44772" (endpoint() below: those carry the
 * sandbox's access token instead), matched against the path below the mount as sent.
 *
 * A pattern is literal text with parameters: "{name}" is one or more characters other than
 * '/', "{name?}" zero or more, "{name...}" the rest (one or more characters, '/' included); a
 * final "*" matches any rest. The first route whose pattern and method match answers; a
 * pattern that matches with another method is a 405 (API) or a 404 (EXECD, as execd). A route
 * runs its handler once the body is complete (at most body_cap bytes, else 413), or with
 * ROUTE_AT_ONCE when the head arrives (a streaming route sets r->on_body there). Handlers read
 * parameters with sbxd_param(r, "id"). */
#include "router.h"
#include "commands.h"
#include "contract.h"
#include "ctx.h"
#include "egress.h"
#include "files.h"
#include "lifecycle.h"
#include "mcp_http.h"
#include "metrics.h"
#include "proxy.h"
#include "registry.h"
#include "sessions.h"
#include "upload.h"

#include <string.h>

enum { API, EXECD, EGRESS };
enum { ROUTE_NO_AUTH = 1, ROUTE_NO_V1 = 2, ROUTE_AT_ONCE = 4 };

struct route {
  int scope;
  const char *methods; /* space-separated; NULL: any */
  const char *pattern;
  req_fn handler;
  uint64_t body_cap;
  unsigned flags;
};

static enum MHD_Result h_health(struct req *r)
{
  return sbxd_json(r, 200, json_pack("{s:s}", "status", "healthy"));
}

static enum MHD_Result h_health_method(struct req *r)
{
  return sbxd_error(r, 405, "GENERAL::METHOD_NOT_ALLOWED", "Method Not Allowed");
}

static enum MHD_Result h_execd_method(struct req *r)
{
  return sbxd_error(r, 405, "NOT_SUPPORTED", "method not allowed");
}

static enum MHD_Result h_no_code(struct req *r)
{
  return sbxd_error(r, 501, "NOT_SUPPORTED",
                    "%s is not supported by sbxd (no code interpreter or PTY)", r->sub);
}

#define GET_HEAD "GET HEAD" /* execd serves HEAD wherever it serves GET */
#define LC SBXD_BODY_LIFECYCLE
#define CT SBXD_BODY_CONTRACT
#define EX SBXD_BODY_EXECD

static const struct route routes[] = {
    /* health (no key: load balancers probe it) */
    {API, GET_HEAD, "/health", h_health, 0, ROUTE_NO_AUTH | ROUTE_NO_V1 | ROUTE_AT_ONCE},
    {API, NULL, "/health", h_health_method, 0, ROUTE_NO_AUTH | ROUTE_NO_V1 | ROUTE_AT_ONCE},
    /* OpenSandbox's lifecycle API (lifecycle.c) */
    /* MCP (streamable HTTP): sbxd_mcp checks the key itself (it also takes a bearer token) */
    {API, NULL, "/mcp", sbxd_mcp, 0, ROUTE_NO_AUTH | ROUTE_NO_V1 | ROUTE_AT_ONCE},
    {API, "GET", "/sandboxes", h_sandbox_list, LC, 0},
    {API, "POST", "/sandboxes", h_sandbox_create, LC, 0},
    {API, "POST", "/metrics/events", h_metrics_events, LC, 0},
    {API, GET_HEAD, "/metrics", h_net_metrics, 0, 0},
    {API, "GET", "/sandboxes/{id}", h_sandbox_get, LC, 0},
    {API, "DELETE", "/sandboxes/{id}", h_sandbox_delete, LC, 0},
    {API, "PATCH", "/sandboxes/{id}/metadata", h_sandbox_metadata, LC, 0},
    {API, "POST", "/sandboxes/{id}/pause", h_sandbox_pause, LC, 0},
    {API, "POST", "/sandboxes/{id}/resume", h_sandbox_resume, LC, 0},
    {API, "POST", "/sandboxes/{id}/renew-expiration", h_sandbox_renew, LC, 0},
    {API, NULL, "/sandboxes/{id}/snapshots", h_snapshots, LC, 0},
    {API, "GET", "/sandboxes/{id}/endpoints/{port}", h_sandbox_endpoint, LC, 0},
    {API, NULL, "/snapshots", h_snapshots, LC, 0},
    {API, NULL, "/snapshots/*", h_snapshots, LC, 0},
    /* DeerFlow's contract as JSON (contract.c) */
    {API, "POST", "/contract/acquire", h_contract_acquire, CT, 0},
    {API, "POST", "/contract/release", h_contract_release, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/execute_command", h_contract_execute, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/read_file", h_contract_read, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/write_file", h_contract_write, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/update_file", h_contract_update, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/download_file", h_contract_download, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/list_dir", h_contract_list_dir, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/glob", h_contract_glob, CT, 0},
    {API, "POST", "/sandboxes/{id}/contract/grep", h_contract_grep, CT, 0},

    /* a sandbox's execd API (below its endpoint mount; the box is r->box) */
    {EXECD, GET_HEAD, "/ping", h_ping, 0, 0},
    {EXECD, NULL, "/ping", h_execd_method, 0, ROUTE_AT_ONCE},
    /* commands (commands.c), sessions (sessions.c), metrics (metrics.c) */
    {EXECD, "POST", "/command", h_command, EX, 0},
    {EXECD, "DELETE", "/command", h_command_interrupt, 0, 0},
    {EXECD, GET_HEAD, "/command/status/{id...}", h_command_status, 0, 0},
    {EXECD, GET_HEAD, "/command/{id?}/logs", h_command_logs, 0, 0},
    {EXECD, "POST", "/session", h_session_create, EX, 0},
    {EXECD, "POST", "/session/{sid}/run", h_session_run, EX, 0},
    {EXECD, "DELETE", "/session/{sid}", h_session_delete, 0, 0},
    {EXECD, GET_HEAD, "/metrics", h_metrics, 0, 0},
    {EXECD, GET_HEAD, "/metrics/watch", h_metrics_watch, 0, 0},
    /* files and directories (files.c, upload.c) */
    {EXECD, "DELETE", "/files", h_files_delete, 0, 0},
    {EXECD, GET_HEAD, "/files/info", h_files_info, 0, 0},
    {EXECD, "POST", "/files/mv", h_files_mv, EX, 0},
    {EXECD, "POST", "/files/permissions", h_files_permissions, EX, 0},
    {EXECD, GET_HEAD, "/files/search", h_files_search, 0, 0},
    {EXECD, "POST", "/files/replace", h_files_replace, EX, 0},
    {EXECD, "POST", "/files/upload", h_files_upload, SBXD_BODY_STREAM, ROUTE_AT_ONCE},
    {EXECD, GET_HEAD, "/files/download", h_files_download, 0, 0},
    {EXECD, GET_HEAD, "/directories/list", h_dir_list, 0, 0},
    {EXECD, "POST", "/directories", h_dir_make, EX, 0},
    {EXECD, "DELETE", "/directories", h_dir_remove, 0, 0},
    {EXECD, NULL, "/code*", h_no_code, 0, ROUTE_AT_ONCE},
    {EXECD, NULL, "/pty*", h_no_code, 0, ROUTE_AT_ONCE},

    /* a sandbox's egress API (egress.c), below its endpoint for port 18080 */
    {EGRESS, "GET", "/policy", h_egress_get, 0, 0},
    {EGRESS, "PATCH", "/policy", h_egress_patch, SBXD_BODY_EGRESS, 0},
    {EGRESS, "DELETE", "/policy", h_egress_delete, SBXD_BODY_EGRESS, 0},
};

#undef GET_HEAD
#undef LC
#undef CT
#undef EX

/* ---- matching ---- */

static bool method_ok(const char *methods, const char *m)
{
  if (methods == NULL)
    return true;
  size_t n = strlen(m);
  for (const char *p = methods; *p;) {
    size_t len = strcspn(p, " ");
    if (len == n && strncmp(p, m, n) == 0)
      return true;
    p += len;
    p += strspn(p, " ");
  }
  return false;
}

/* Matches path against pattern; with r (after a match), records the parameters. */
static bool match(const char *pat, const char *path, struct req *r)
{
  const char *p = pat, *s = path;
  while (*p) {
    if (p[0] == '*' && p[1] == '\0')
      return true;
    if (*p == '{') {
      const char *name = p + 1, *close = strchr(p, '}');
      size_t len = (size_t) (close - name);
      bool rest = len > 3 && strncmp(close - 3, "...", 3) == 0;
      bool maybe = len > 1 && close[-1] == '?';
      len -= rest ? 3 : maybe ? 1 : 0;
      const char *e = rest ? s + strlen(s) : s + strcspn(s, "/");
      if (e == s && !maybe)
        return false;
      if (r && r->n_param < SBXD_MAX_PARAMS) {
        r->param[r->n_param].name = name;
        r->param[r->n_param].name_len = len;
        r->param[r->n_param].value = xstrndup(s, (size_t) (e - s));
        r->n_param++;
      }
      s = e;
      p = close + 1;
      continue;
    }
    if (*p != *s)
      return false;
    p++;
    s++;
  }
  return *s == '\0';
}

/* The route answering method + path in a scope; *path_known when some route has the path. */
static const struct route *find(int scope, bool v1, const char *method, const char *path,
                                bool *path_known)
{
  *path_known = false;
  for (size_t i = 0; i < ARRAY_SIZE(routes); i++) {
    const struct route *rt = &routes[i];
    if (rt->scope != scope || (v1 && (rt->flags & ROUTE_NO_V1)) || !match(rt->pattern, path, NULL))
      continue;
    *path_known = true;
    if (method_ok(rt->methods, method))
      return rt;
  }
  return NULL;
}

static enum MHD_Result dispatch(struct req *r, const struct route *rt, const char *path)
{
  match(rt->pattern, path, r);
  r->body_max = rt->body_cap;
  if (rt->flags & ROUTE_AT_ONCE)
    return rt->handler(r);
  r->done = rt->handler;
  return MHD_YES;
}

/* ---- paths ---- */

static void split_path(const char *url, sbx_strv_t *seg)
{
  /* an empty vector for "/" too: callers compute seg->v + base (NULL + 0 is undefined) */
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
      sbx__strv_push_owned(seg, xstrndup(p, (size_t) (e - p)));
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

/* ---- credentials, CORS ---- */

static bool api_key_ok(struct req *r)
{
  if (srv.api_key == NULL)
    return false;
  const char *k = sbxd_header(r, SBXD_API_KEY_HEADER);
  return k && sbxd_secret_equal(k, srv.api_key);
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

/* ---- the endpoint mounts ---- */

/* execd's own port proxy: /proxy/{port}/... below the execd mount. */
static enum MHD_Result execd_port_proxy(struct req *r)
{
  const char *ps = r->sub + 7;
  cleanup_free char *port_s = xstrndup(ps, strcspn(ps, "/"));
  int64_t port;
  if (!sbxd_parse_i64(port_s, &port) || port < 1 || port > 65535)
    return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "invalid port '%s'", port_s);
  r->port = (int) port;
  /* strip "/proxy/N" from the raw target as well */
  const char *rs = r->raw_sub;
  int slashes = 0;
  while (*rs && slashes < 3) {
    if (*rs == '/')
      slashes++;
    if (slashes < 3)
      rs++;
  }
  char *rest = *rs ? xstrdup(rs) : xstrdup("/");
  if (rest[0] == '?') {
    char *t = xasprintf("/%s", rest);
    free(rest);
    rest = t;
  }
  free(r->raw_sub);
  r->raw_sub = rest;
  return sbxd_proxy_begin(r);
}

/* A request below a sandbox's endpoint mount: prefix segments (after base) are the mount. */
static enum MHD_Result endpoint(struct req *r, char **s, size_t base, size_t prefix)
{
  const char *id = s[1], *port_s = s[prefix - 1];
  if (!port_valid(port_s, &r->port))
    return sbxd_error(r, 400, "DOCKER::INVALID_PORT", "Port must be between 1 and 65535.");
  r->box = box_get(id);
  if (r->box == NULL || r->box->kind != BOX_MANAGED)
    return sbxd_error(r, 404, "DOCKER::SANDBOX_NOT_FOUND", "Sandbox %s not found.", id);
  const char *tok = sbxd_header(r, SBXD_TOKEN_HEADER);
  if (r->port == SBXD_EGRESS_PORT && tok == NULL)
    tok = sbxd_header(r, SBXD_EGRESS_AUTH_HEADER); /* the egress sidecar's own header */
  if (!(tok && sbxd_secret_equal(tok, r->box->token)) && !api_key_ok(r)) {
    if (r->port == SBXD_EGRESS_PORT)
      return sbxd_text(r, 401, "text/plain; charset=utf-8", "unauthorized\n", 13);
    json_t *j = json_pack("{s:s,s:s,s:s}", "code", "UNAUTHORIZED", "message",
                          "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN", "error",
                          "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN");
    return sbxd_json(r, 401, j);
  }
  r->sub = url_sub(r->url, base + prefix);
  r->raw_sub = raw_strip(r->raw_uri, base + prefix);
  if (r->port == SBXD_EGRESS_PORT) {
    /* the egress sidecar's port is sbxd's own: the policy is not the sandbox's to serve */
    bool known;
    const struct route *rt = find(EGRESS, false, r->method, r->sub, &known);
    if (rt == NULL)
      return known ? h_egress_method(r) : h_egress_not_found(r);
    return dispatch(r, rt, r->sub);
  }
  if (r->port != SBXD_EXECD_PORT)
    return sbxd_proxy_begin(r);
  if (strncmp(r->sub, "/proxy/", 7) == 0)
    return execd_port_proxy(r);
  if (box_paused(r->box))
    return sbxd_error(r, 409, "SANDBOX_PAUSED",
                      "sandbox %s is paused; resume it before using its execd API", r->box->id);
  bool known;
  const struct route *rt = find(EXECD, false, r->method, r->sub, &known);
  if (rt == NULL)
    return sbxd_error(r, 404, "NOT_FOUND", "no execd route for %s %s", r->method, r->sub);
  return dispatch(r, rt, r->sub);
}

/* ---- the entry ---- */

enum MHD_Result sbxd_route(struct req *r)
{
  if (strcmp(r->method, "OPTIONS") == 0 && sbxd_header(r, "Origin") &&
      sbxd_header(r, "Access-Control-Request-Method"))
    return cors_preflight(r);
  sbx_strv_t seg = {0};
  split_path(r->url, &seg);
  size_t base = seg.n > 0 && strcmp(seg.v[0], "v1") == 0 ? 1 : 0;
  size_t n = seg.n - base;
  char **s = seg.v + base;
  bool traversal = false; /* a ".." segment: never an endpoint (as OpenSandbox's proxy) */
  for (size_t i = 0; i < seg.n; i++)
    traversal |= strcmp(seg.v[i], "..") == 0;

  /* The endpoints of a sandbox: its execd (port 44772) and its other ports. They carry their
   * own credentials (the sandbox's access token, or the API key). */
  size_t prefix = 0;
  if (n >= 4 && strcmp(s[0], "sandboxes") == 0 && strcmp(s[2], "proxy") == 0)
    prefix = 4;
  else if (base == 0 && n >= 3 && strcmp(s[0], "direct") == 0)
    prefix = 3;
  enum MHD_Result ret;
  if (prefix && !traversal) {
    ret = endpoint(r, s, base, prefix);
    sbx__strv_free(&seg);
    return ret;
  }

  sbx_buf_t path = {0};
  for (size_t i = 0; i < n; i++)
    sbx__buf_printf(&path, "/%s", s[i]);
  if (n == 0)
    sbx__buf_puts(&path, "/");
  sbx__strv_free(&seg);
  bool known;
  const struct route *rt = find(API, base == 1, r->method, path.data, &known);
  if (!(rt && (rt->flags & ROUTE_NO_AUTH)) && srv.api_key && !api_key_ok(r))
    ret = missing_key(r);
  else if (rt)
    ret = dispatch(r, rt, path.data);
  else if (known)
    ret = sbxd_error(r, 405, "GENERAL::METHOD_NOT_ALLOWED", "Method Not Allowed: %s %s", r->method,
                     r->url);
  else
    ret = sbxd_error(r, 404, "GENERAL::NOT_FOUND", "Not Found: %s %s", r->method, r->url);
  sbx__buf_free(&path);
  return ret;
}
