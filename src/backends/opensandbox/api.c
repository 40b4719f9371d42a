/* The OpenSandbox HTTP APIs as this backend uses them (../shared/docs/opensandbox-api.md):
 * lifecycle under {protocol}://{domain}/v1 with OPEN-SANDBOX-API-KEY, and execd at the
 * endpoint the lifecycle API returns, with that endpoint's headers. */
#include "osb.h"
#include "sse.h"
#include "text.h"

#include <string.h>
#include <time.h>

/* {protocol}://{domain}/v1; a domain with a scheme is used as it is. */
static char *lifecycle_base(const struct sbx_config *cfg)
{
  const char *domain = cfg->domain && *cfg->domain ? cfg->domain : "localhost:8080";
  cleanup_free char *d = xstrdup(domain);
  size_t n = strlen(d);
  while (n && d[n - 1] == '/')
    d[--n] = '\0';
  if (n >= 3 && strcmp(d + n - 3, "/v1") == 0)
    d[n - 3] = '\0';
  if (strstr(d, "://"))
    return xasprintf("%s/v1", d);
  return xasprintf("%s://%s/v1", cfg->protocol ? cfg->protocol : "http", d);
}

static void api_headers(const struct sbx_config *cfg, sbx_strv_t *h)
{
  if (cfg->api_key && *cfg->api_key)
    sbx__strv_push_owned(h, xasprintf("OPEN-SANDBOX-API-KEY: %s", cfg->api_key));
  sbx__strv_push(h, "Accept: application/json");
}

void osb_remote_free(struct osb_remote *r)
{
  free(r->id);
  free(r->execd);
  sbx__strv_free(&r->hdrs);
  memset(r, 0, sizeof *r);
}

int osb_remote_load(struct sbx_instance *in, struct osb_remote *r, sbx_error_t *err)
{
  memset(r, 0, sizeof *r);
  r->cfg = in->cfg;
  if (in->meta.remote_id == NULL || in->meta.backend_json == NULL)
    return sbx__make_error(err, 0, SBX_E_BACKEND, "sandbox %s has no remote", in->meta.id);
  json_auto_t *o = json_loads(in->meta.backend_json, 0, NULL);
  const char *execd = json_string_value(json_object_get(o, "execd"));
  if (execd == NULL)
    return sbx__make_error(err, 0, SBX_E_BACKEND, "sandbox %s: no execd endpoint", in->meta.id);
  r->id = xstrdup(in->meta.remote_id);
  r->execd = xstrdup(execd);
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(o, "headers"), k, v)
  {
    if (json_is_string(v))
      sbx__strv_push_owned(&r->hdrs, xasprintf("%s: %s", k, json_string_value(v)));
  }
  api_headers(r->cfg, &r->hdrs);
  return 0;
}

void osb_remote_store(struct sbx_instance *in, const struct osb_remote *r)
{
  json_t *o = json_object();
  json_object_set_new(o, "execd", json_string(r->execd));
  json_t *h = json_object();
  for (size_t i = 0; i < r->hdrs.n; i++) {
    const char *c = strchr(r->hdrs.v[i], ':');
    if (c == NULL || strncasecmp(r->hdrs.v[i], "OPEN-SANDBOX-API-KEY", 20) == 0 ||
        strncasecmp(r->hdrs.v[i], "Accept", 6) == 0)
      continue; /* the API key is never written to disk */
    cleanup_free char *name = xstrndup(r->hdrs.v[i], (size_t) (c - r->hdrs.v[i]));
    json_object_set_new(h, name, json_string(c + 1 + (c[1] == ' ')));
  }
  json_object_set_new(o, "headers", h);
  free(in->meta.backend_json);
  in->meta.backend_json = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(o);
  free(in->meta.remote_id);
  in->meta.remote_id = xstrdup(r->id);
}

/* An error for an HTTP status, with the server's {code, message} when it sent one. terminal:
 * a 404/410 means the sandbox is gone (command and lifecycle paths). */
static int status_error(const char *what, const struct osb_http_resp *resp, bool terminal,
                        sbx_error_t *err)
{
  json_t *o = json_loadb(resp->body.data ? resp->body.data : "", resp->body.len, 0, NULL);
  const char *code = json_string_value(json_object_get(o, "code"));
  const char *msg = json_string_value(json_object_get(o, "message"));
  int kind = SBX_E_IO;
  long s = resp->status;
  if (terminal && (s == 404 || s == 410))
    kind = SBX_E_BACKEND;
  else if (s == 404)
    kind = SBX_E_NOT_FOUND;
  else if (s == 401 || s == 403)
    kind = SBX_E_CONFIG;
  else if (s == 400 || s == 422)
    kind = SBX_E_INVALID;
  else if (s == 409)
    kind = SBX_E_CONFLICT;
  else if (s == 413)
    kind = SBX_E_TOO_LARGE;
  cleanup_free char *body = NULL;
  if (msg == NULL && resp->body.len)
    body = sbx__utf8_sanitize(resp->body.data, resp->body.len > 300 ? 300 : resp->body.len, NULL);
  int r = sbx__make_error(err, 0, kind, "%s: HTTP %ld%s%s%s%s", what, s, code ? " " : "",
                          code ? code : "", msg || body ? ": " : "",
                          msg    ? msg
                          : body ? body
                                 : "");
  json_decref(o);
  return r;
}

static double request_timeout(const struct sbx_config *cfg)
{
  return cfg->request_timeout > 0 ? cfg->request_timeout : 30;
}

static int api_json(const struct sbx_config *cfg, const char *method, const char *path,
                    json_t *body, struct osb_http_resp *resp, sbx_error_t *err)
{
  cleanup_free char *base = lifecycle_base(cfg);
  cleanup_free char *url = xasprintf("%s%s", base, path);
  sbx_strv_t h = {0};
  api_headers(cfg, &h);
  cleanup_free char *data = body ? json_dumps(body, JSON_COMPACT) : NULL;
  struct osb_http_req req = {.method = method,
                             .url = url,
                             .headers = (const char *const *) h.v,
                             .content_type = data ? "application/json" : NULL,
                             .body = data,
                             .body_len = data ? strlen(data) : 0,
                             .timeout_s = request_timeout(cfg),
                             .max_body = 8u << 20};
  int r = osb_http(&req, resp, err);
  sbx__strv_free(&h);
  return r;
}

int osb_create(const struct sbx_config *cfg, const char *user, const char *thread, char **id,
               sbx_error_t *err)
{
  json_t *env = json_object();
  for (size_t i = 0; i < cfg->n_environment; i++)
    json_object_set_new(env, cfg->environment[i].key, json_string(cfg->environment[i].value));
  json_t *meta = json_object();
  json_object_set_new(meta, "sbx_provider", json_string("opensandbox"));
  if (thread) {
    json_object_set_new(meta, "sbx_thread", json_string(thread));
    json_object_set_new(meta, "sbx_user", json_string(user));
  }
  char mem[32], cpu[32];
  snprintf(mem, sizeof mem, "%lluMi",
           (unsigned long long) (cfg->memory_mib ? cfg->memory_mib : 2048));
  snprintf(cpu, sizeof cpu, "%g", cfg->cpus > 0 ? cfg->cpus : 1.0);
  json_t *body = json_pack("{s:{s:s}, s:[s,s,s], s:{s:s,s:s}, s:o, s:o, s:b, s:{}}", "image", "uri",
                           cfg->image ? cfg->image : "python:3.11", "entrypoint", "tail", "-f",
                           "/dev/null", "resourceLimits", "cpu", cpu, "memory", mem, "env", env,
                           "metadata", meta, "secureAccess", 0, "extensions");
  if (cfg->sandbox_timeout > 0)
    json_object_set_new(body, "timeout", json_integer(cfg->sandbox_timeout));
  struct osb_http_resp resp;
  int r = api_json(cfg, "POST", "/sandboxes", body, &resp, err);
  json_decref(body);
  if (r < 0)
    return sbx__error_wrap(err, "create a remote sandbox");
  if (resp.status / 100 != 2) {
    status_error("create a remote sandbox", &resp, false, err);
    osb_http_resp_free(&resp);
    return -1;
  }
  json_t *o = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len, 0, NULL);
  const char *sid = json_string_value(json_object_get(o, "id"));
  if (sid)
    *id = xstrdup(sid);
  json_decref(o);
  osb_http_resp_free(&resp);
  if (sid == NULL)
    return sbx__make_error(err, EPROTO, SBX_E_BACKEND, "create a remote sandbox: no id in reply");
  return 0;
}

int osb_endpoint(struct osb_remote *r, int port, sbx_error_t *err)
{
  cleanup_free char *eid = osb_url_escape(r->id);
  cleanup_free char *path = xasprintf("/sandboxes/%s/endpoints/%d?use_server_proxy=%s", eid, port,
                                      r->cfg->use_server_proxy ? "true" : "false");
  struct osb_http_resp resp;
  if (api_json(r->cfg, "GET", path, NULL, &resp, err) < 0)
    return -1;
  if (resp.status / 100 != 2) {
    status_error("get the execd endpoint", &resp, true, err);
    osb_http_resp_free(&resp);
    return -1;
  }
  json_auto_t *o = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len, 0, NULL);
  osb_http_resp_free(&resp);
  const char *ep = json_string_value(json_object_get(o, "endpoint"));
  if (ep == NULL)
    return sbx__make_error(err, EPROTO, SBX_E_BACKEND, "execd endpoint reply without endpoint");
  free(r->execd);
  size_t n = strlen(ep);
  while (n && ep[n - 1] == '/')
    n--;
  r->execd =
      strstr(ep, "://")
          ? xstrndup(ep, n)
          : xasprintf("%s://%.*s", r->cfg->protocol ? r->cfg->protocol : "http", (int) n, ep);
  sbx__strv_free(&r->hdrs);
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(o, "headers"), k, v)
  {
    if (json_is_string(v))
      sbx__strv_push_owned(&r->hdrs, xasprintf("%s: %s", k, json_string_value(v)));
  }
  api_headers(r->cfg, &r->hdrs);
  return 0;
}

int osb_delete(const struct sbx_config *cfg, const char *id, sbx_error_t *err)
{
  cleanup_free char *eid = osb_url_escape(id);
  cleanup_free char *path = xasprintf("/sandboxes/%s", eid);
  struct osb_http_resp resp;
  if (api_json(cfg, "DELETE", path, NULL, &resp, err) < 0)
    return -1;
  int r = 0;
  if (resp.status / 100 != 2 && resp.status != 404)
    r = status_error("delete the remote sandbox", &resp, false, err);
  osb_http_resp_free(&resp);
  return r;
}

int osb_renew(const struct osb_remote *r, double seconds, sbx_error_t *err)
{
  if (r->cfg->sandbox_timeout <= 0)
    return 0; /* explicit-cleanup mode: no expiry to move */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  time_t t = ts.tv_sec + (time_t) seconds;
  struct tm tm;
  gmtime_r(&t, &tm);
  char when[64];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
  char full[80];
  snprintf(full, sizeof full, "%s.%03ldZ", when, ts.tv_nsec / 1000000);
  json_t *body = json_pack("{s:s}", "expiresAt", full);
  cleanup_free char *eid = osb_url_escape(r->id);
  cleanup_free char *path = xasprintf("/sandboxes/%s/renew-expiration", eid);
  struct osb_http_resp resp;
  int rc = api_json(r->cfg, "POST", path, body, &resp, err);
  json_decref(body);
  if (rc < 0)
    return -1;
  if (resp.status / 100 != 2 && resp.status != 409)
    rc = status_error("renew the remote sandbox", &resp, true, err);
  osb_http_resp_free(&resp);
  return rc;
}

int osb_pause(const struct osb_remote *r, bool paused, sbx_error_t *err)
{
  cleanup_free char *eid = osb_url_escape(r->id);
  cleanup_free char *path = xasprintf("/sandboxes/%s/%s", eid, paused ? "pause" : "resume");
  struct osb_http_resp resp;
  if (api_json(r->cfg, "POST", path, NULL, &resp, err) < 0)
    return -1;
  int rc = resp.status / 100 == 2 ? 0 : status_error(paused ? "pause" : "resume", &resp, true, err);
  osb_http_resp_free(&resp);
  return rc;
}

static int execd_call(const struct osb_remote *r, const char *method, const char *path,
                      const char *content_type, const void *body, size_t len,
                      struct osb_http_resp *resp, double timeout_s, sbx_error_t *err)
{
  cleanup_free char *url = xasprintf("%s%s", r->execd, path);
  struct osb_http_req req = {.method = method,
                             .url = url,
                             .headers = (const char *const *) r->hdrs.v,
                             .content_type = content_type,
                             .body = body,
                             .body_len = len,
                             .timeout_s = timeout_s,
                             .max_body = 16u << 20};
  return osb_http(&req, resp, err);
}

int osb_ping(const struct osb_remote *r, double timeout_s, sbx_error_t *err)
{
  struct osb_http_resp resp;
  if (execd_call(r, "GET", "/ping", NULL, NULL, 0, &resp, timeout_s, err) < 0)
    return -1;
  int rc = resp.status / 100 == 2 ? 0 : status_error("ping execd", &resp, true, err);
  osb_http_resp_free(&resp);
  return rc;
}

void osb_cmd_result_free(struct osb_cmd_result *res)
{
  free(res->id);
  sbx__buf_free(&res->out);
  sbx__buf_free(&res->err);
  free(res->error_text);
  memset(res, 0, sizeof *res);
}

struct cmd_state {
  const struct osb_cmd *c;
  struct osb_cmd_result *res;
  bool complete;
  struct osb_sse sse;
  bool stop_output;
  sbx_buf_t head; /* the first bytes, for an error reply's message */
};

/* execd sends one event per line (its newline stripped; a blank line as "\n"): each becomes
 * a line again, so `echo hi` reads "hi\n" as it does on the linux backend. */
static void add_line(struct cmd_state *st, int stream, const char *text)
{
  size_t n = strlen(text);
  bool blank = n == 1 && text[0] == '\n';
  sbx_buf_t *b = stream == 1 ? &st->res->out : &st->res->err;
  uint64_t *total = stream == 1 ? &st->res->out_total : &st->res->err_total;
  const char *data = blank ? "" : text;
  size_t len = blank ? 0 : n;
  for (int part = 0; part < 2; part++) {
    const char *p = part == 0 ? data : "\n";
    size_t l = part == 0 ? len : 1;
    *total += l;
    uint64_t room = b->len < st->c->cap ? st->c->cap - b->len : 0;
    size_t take = l < room ? l : (size_t) room;
    sbx__buf_append(b, p, take);
    if (st->c->on_output && !st->stop_output && l &&
        st->c->on_output(st->c->arg, stream, p, l) != 0)
      st->stop_output = true;
  }
}

static bool all_digits(const char *s)
{
  if (*s == '-')
    s++;
  if (*s == '\0')
    return false;
  for (; *s; s++)
    if (*s < '0' || *s > '9')
      return false;
  return true;
}

static int on_event(void *arg, json_t *ev)
{
  struct cmd_state *st = arg;
  const char *type = json_string_value(json_object_get(ev, "type"));
  const char *text = json_string_value(json_object_get(ev, "text"));
  if (strcmp(type, "init") == 0 && text) {
    free(st->res->id);
    st->res->id = xstrdup(text);
  } else if ((strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) && text) {
    add_line(st, type[3] == 'o' ? 1 : 2, text);
  } else if (strcmp(type, "execution_complete") == 0) {
    st->complete = true;
  } else if (strcmp(type, "error") == 0) {
    json_t *e = json_object_get(ev, "error");
    const char *name = json_string_value(json_object_get(e, "ename"));
    const char *value = json_string_value(json_object_get(e, "evalue"));
    /* a kill that the server says was its deadline (sbxd puts it in the traceback) */
    bool deadline = false;
    size_t k;
    json_t *line;
    json_array_foreach(json_object_get(e, "traceback"), k, line)
    {
      const char *t = json_string_value(line);
      deadline = deadline || (t && strstr(t, "context deadline exceeded"));
    }
    if (value && all_digits(value) && !(deadline && strcmp(value, "-1") == 0)) {
      st->res->has_code = true;
      st->res->exit_code = atoi(value);
    } else if (value && (deadline || strstr(value, "context deadline exceeded"))) {
      st->res->timed_out = true;
    } else {
      free(st->res->error_text);
      st->res->error_text = xasprintf("%s: %s", name ? name : "Error", value ? value : "");
    }
  }
  return 0;
}

static int feed(void *arg, const char *data, size_t len)
{
  struct cmd_state *st = arg;
  if (st->head.len < 1024)
    sbx__buf_append(&st->head, data, len < 1024 - st->head.len ? len : 1024 - st->head.len);
  osb_sse_feed(&st->sse, data, len);
  return 0;
}

int osb_command(const struct osb_remote *r, const struct osb_cmd *c, struct osb_cmd_result *res,
                sbx_error_t *err)
{
  memset(res, 0, sizeof *res);
  json_t *envs = json_object();
  for (size_t i = 0; i < c->n_env; i++) {
    const char *eq = strchr(c->env[i], '=');
    if (eq == NULL)
      continue;
    cleanup_free char *k = xstrndup(c->env[i], (size_t) (eq - c->env[i]));
    json_object_set_new(envs, k, json_string(eq + 1));
  }
  json_t *body = json_pack("{s:s, s:b, s:o}", "command", c->command, "background", c->background,
                           "envs", envs);
  if (c->cwd)
    json_object_set_new(body, "cwd", json_string(c->cwd));
  if (c->timeout_ms)
    json_object_set_new(body, "timeout", json_integer((json_int_t) c->timeout_ms));
  cleanup_free char *data = json_dumps(body, JSON_COMPACT);
  json_decref(body);
  if (data == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "command or environment is not valid UTF-8");
  sbx_strv_t h = {0};
  for (size_t i = 0; i < r->hdrs.n; i++)
    sbx__strv_push(&h, r->hdrs.v[i]);
  sbx__strv_push(&h, "Accept: text/event-stream");
  cleanup_free char *url = xasprintf("%s/command", r->execd);
  struct cmd_state st = {.c = c, .res = res, .sse = {.on_event = on_event}};
  st.sse.arg = &st;
  struct osb_http_req req = {.method = "POST",
                             .url = url,
                             .headers = (const char *const *) h.v,
                             .content_type = "application/json",
                             .body = data,
                             .body_len = strlen(data),
                             /* the server enforces the command's timeout; a stream silent well
                              * past it is broken */
                             .timeout_s = c->timeout_ms ? (double) c->timeout_ms / 1000 + 60 : 0,
                             .sink = feed,
                             .arg = &st};
  struct osb_http_resp resp;
  int rc = osb_http(&req, &resp, err);
  sbx__strv_free(&h);
  osb_sse_finish(&st.sse);
  osb_sse_free(&st.sse);
  if (rc < 0) {
    sbx__buf_free(&st.head);
    osb_http_resp_free(&resp);
    osb_cmd_result_free(res);
    return sbx__error_wrap(err, "command stream");
  }
  if (resp.status != 200) {
    resp.body = st.head; /* the error reply went to the event reader too */
    st.head = (sbx_buf_t){0};
    rc = status_error("run a command", &resp, true, err);
    osb_http_resp_free(&resp);
    osb_cmd_result_free(res);
    return rc;
  }
  sbx__buf_free(&st.head);
  osb_http_resp_free(&resp);
  if (!res->has_code && st.complete)
    res->has_code = true, res->exit_code = 0;
  return 0;
}

int osb_interrupt(const struct osb_remote *r, const char *cmd_id, sbx_error_t *err)
{
  cleanup_free char *eid = osb_url_escape(cmd_id);
  cleanup_free char *path = xasprintf("/command?id=%s", eid);
  struct osb_http_resp resp;
  if (execd_call(r, "DELETE", path, NULL, NULL, 0, &resp, request_timeout(r->cfg), err) < 0)
    return -1;
  int rc = resp.status / 100 == 2 ? 0 : status_error("interrupt the command", &resp, false, err);
  osb_http_resp_free(&resp);
  return rc;
}

struct upload_src {
  const char *prefix;
  size_t prefix_len, prefix_off;
  int fd;
  bool fd_done;
  const char *suffix;
  size_t suffix_len, suffix_off;
  int read_errno;
};

static ssize_t upload_source(void *arg, char *buf, size_t len)
{
  struct upload_src *u = arg;
  if (u->prefix_off < u->prefix_len) {
    size_t n = u->prefix_len - u->prefix_off < len ? u->prefix_len - u->prefix_off : len;
    memcpy(buf, u->prefix + u->prefix_off, n);
    u->prefix_off += n;
    return (ssize_t) n;
  }
  if (!u->fd_done) {
    ssize_t n;
    do
      n = read(u->fd, buf, len);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
      u->read_errno = errno;
      return -1;
    }
    if (n > 0)
      return n;
    u->fd_done = true;
  }
  size_t n = u->suffix_len - u->suffix_off < len ? u->suffix_len - u->suffix_off : len;
  memcpy(buf, u->suffix + u->suffix_off, n);
  u->suffix_off += n;
  return (ssize_t) n;
}

int osb_upload(const struct osb_remote *r, const char *path, const void *data, size_t len, int fd,
               unsigned mode, sbx_error_t *err)
{
  char boundary[40] = "sbx";
  sbx__random_hex(boundary + 3, 24);
  json_t *m = json_pack("{s:s}", "path", path);
  if (mode)
    json_object_set_new(
        m, "mode",
        json_integer((json_int_t) ((mode >> 6 & 7) * 100 + (mode >> 3 & 7) * 10 + (mode & 7))));
  cleanup_free char *meta = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  if (meta == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "path is not valid UTF-8: %s", path);
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  cleanup_free char *ctype = xasprintf("multipart/form-data; boundary=%s", boundary);
  cleanup_free char *url = xasprintf("%s/files/upload", r->execd);
  sbx_buf_t prefix = {0};
  osb_multipart_append(&prefix, boundary, "metadata", "metadata", "application/json", meta,
                       strlen(meta));
  struct osb_http_req req = {.method = "POST",
                             .url = url,
                             .headers = (const char *const *) r->hdrs.v,
                             .content_type = ctype,
                             .timeout_s = 0,
                             .max_body = 1u << 20};
  struct upload_src src = {0};
  sbx_buf_t body = {0};
  cleanup_free char *suffix = xasprintf("\r\n--%s--\r\n", boundary);
  if (data || fd < 0) {
    body = prefix;
    prefix = (sbx_buf_t){0};
    osb_multipart_append(&body, boundary, "file", base, "application/octet-stream",
                         data ? data : "", len);
    osb_multipart_end(&body, boundary);
    req.body = body.data;
    req.body_len = body.len;
    req.timeout_s = request_timeout(r->cfg) + (double) len / (1 << 20);
  } else {
    osb_multipart_head(&prefix, boundary, "file", base, "application/octet-stream");
    src = (struct upload_src){.prefix = prefix.data,
                              .prefix_len = prefix.len,
                              .fd = fd,
                              .suffix = suffix,
                              .suffix_len = strlen(suffix)};
    req.source = upload_source;
    req.source_arg = &src;
  }
  struct osb_http_resp resp;
  int rc = osb_http(&req, &resp, err);
  sbx__buf_free(&body);
  sbx__buf_free(&prefix);
  if (rc < 0) {
    if (src.read_errno) {
      sbx_error_release(err);
      return sbx__make_error(err, src.read_errno, SBX_E_IO, "read the input for %s", path);
    }
    return -1;
  }
  if (resp.status / 100 != 2)
    rc = status_error(path, &resp, false, err);
  osb_http_resp_free(&resp);
  return rc;
}

struct dl {
  int (*sink)(void *, const char *, size_t);
  void *arg;
  uint64_t max, total;
  bool too_large;
  long status_seen;
  sbx_buf_t errbody;
  int (*progress)(void *);
};

static int dl_sink(void *arg, const char *data, size_t len)
{
  struct dl *d = arg;
  d->total += len;
  if (d->max && d->total > d->max) {
    d->too_large = true;
    return 1;
  }
  return d->sink(d->arg, data, len);
}

static int dl_progress(void *arg)
{
  struct dl *d = arg;
  return d->progress ? d->progress(d->arg) : 0;
}

int osb_download(const struct osb_remote *r, const char *path, uint64_t max,
                 int (*sink)(void *, const char *, size_t), void *arg, int (*progress)(void *),
                 double timeout_s, sbx_error_t *err)
{
  /* A HEAD-like probe is not in the API: ask for the info first so a 404 or a directory comes
   * back as a small JSON error and not as a body fed to the sink. */
  cleanup_free char *epath = osb_url_escape(path);
  cleanup_free char *info = xasprintf("/files/info?path=%s", epath);
  struct osb_http_resp ir;
  if (execd_call(r, "GET", info, NULL, NULL, 0, &ir, request_timeout(r->cfg), err) < 0)
    return -1;
  if (ir.status / 100 != 2) {
    int rc = ir.status == 404
                 ? sbx__make_error(err, ENOENT, SBX_E_NOT_FOUND, "File not found: %s", path)
                 : status_error(path, &ir, false, err);
    osb_http_resp_free(&ir);
    return rc;
  }
  json_t *o = json_loadb(ir.body.data ? ir.body.data : "", ir.body.len, 0, NULL);
  osb_http_resp_free(&ir);
  json_t *fi = json_object_get(o, path);
  if (fi == NULL && json_object_size(o) == 1)
    fi = json_object_iter_value(json_object_iter(o));
  const char *type = json_string_value(json_object_get(fi, "type"));
  json_int_t size = json_integer_value(json_object_get(fi, "size"));
  bool is_dir = type && strcmp(type, "directory") == 0;
  bool not_file = type && strcmp(type, "file") != 0;
  json_decref(o);
  if (is_dir)
    return sbx__make_error(err, EISDIR, SBX_E_IS_DIR, "Path is a directory, not a file: %s", path);
  if (not_file)
    return sbx__make_error(err, 0, SBX_E_INVALID, "not a regular file: %s", path);
  if (max && size > 0 && (uint64_t) size > max)
    return sbx__make_error(err, EFBIG, SBX_E_TOO_LARGE,
                           "File exceeds maximum download size of %llu bytes: %s",
                           (unsigned long long) max, path);
  cleanup_free char *url = xasprintf("%s/files/download?path=%s", r->execd, epath);
  struct dl d = {.sink = sink, .arg = arg, .max = max, .progress = progress};
  struct osb_http_req req = {.method = "GET",
                             .url = url,
                             .headers = (const char *const *) r->hdrs.v,
                             .timeout_s = timeout_s,
                             .sink = dl_sink,
                             .arg = &d,
                             .progress = progress ? dl_progress : NULL};
  struct osb_http_resp resp;
  int rc = osb_http(&req, &resp, err);
  osb_http_resp_free(&resp);
  if (d.too_large) {
    sbx_error_release(err);
    return sbx__make_error(err, EFBIG, SBX_E_TOO_LARGE,
                           "File exceeds maximum download size of %llu bytes: %s",
                           (unsigned long long) max, path);
  }
  if (rc < 0)
    return -1;
  if (resp.status == 404)
    return sbx__make_error(err, ENOENT, SBX_E_NOT_FOUND, "File not found: %s", path);
  if (resp.status / 100 != 2)
    return sbx__make_error(err, 0, SBX_E_IO, "download %s: HTTP %ld", path, resp.status);
  return 0;
}

int osb_list(const struct osb_remote *r, const char *path, int depth, size_t max_body,
             json_t **infos, sbx_error_t *err)
{
  *infos = NULL;
  cleanup_free char *epath = osb_url_escape(path);
  cleanup_free char *url =
      xasprintf("%s/directories/list?path=%s&depth=%d", r->execd, epath, depth);
  struct osb_http_req req = {.method = "GET",
                             .url = url,
                             .headers = (const char *const *) r->hdrs.v,
                             .timeout_s = request_timeout(r->cfg) * 4,
                             .max_body = max_body};
  struct osb_http_resp resp;
  if (osb_http(&req, &resp, err) < 0) {
    osb_http_resp_free(&resp);
    return -1;
  }
  int rc = 0;
  if (resp.status == 404)
    rc = sbx__make_error(err, ENOENT, SBX_E_NOT_FOUND, "Directory not found: %s", path);
  else if (resp.status == 400)
    rc = sbx__make_error(err, ENOTDIR, SBX_E_NOT_DIR, "Not a directory: %s", path);
  else if (resp.status / 100 != 2)
    rc = status_error(path, &resp, false, err);
  else {
    *infos = json_loadb(resp.body.data ? resp.body.data : "[]", resp.body.len ? resp.body.len : 2,
                        0, NULL);
    if (!json_is_array(*infos)) {
      json_decref(*infos);
      *infos = NULL;
      rc = sbx__make_error(err, EPROTO, SBX_E_IO, "list %s: malformed reply", path);
    }
  }
  osb_http_resp_free(&resp);
  return rc;
}
