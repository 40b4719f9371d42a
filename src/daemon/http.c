/* Responses, errors, the JSON body, request accessors and the log (http.h). Every error is
 * {code, message} with a non-empty body; a 5xx is logged with its request id. */
#include "http.h"

#include <stdarg.h>
#include <string.h>

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
  return (int64_t) sbx__realtime_ms();
}

json_t *sbxd_jstr(const char *s, size_t len)
{
  size_t n;
  cleanup_free char *clean = sbx__utf8_sanitize(s, len, &n);
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

const char *sbxd_param(struct req *r, const char *name)
{
  size_t n = strlen(name);
  for (size_t i = 0; i < r->n_param; i++)
    if (r->param[i].name_len == n && memcmp(r->param[i].name, name, n) == 0)
      return r->param[i].value;
  return NULL;
}

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

static bool host_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         strchr(".-:[]_", c);
}

char *sbxd_public_host(struct req *r, const char *fallback)
{
  const char *h = sbxd_header(r, "Host");
  bool ok = h && *h && strlen(h) <= 255;
  for (const char *p = h; ok && *p; p++)
    ok = host_char(*p);
  if (ok)
    return xstrdup(h);
  return xstrdup(fallback);
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
  case SBX_E_LIMIT:
    return 429;
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

json_t *sbxd_body_json(struct req *r, enum sbxd_body_style style, enum sbxd_body_want want,
                       enum MHD_Result *ret)
{
  json_error_t je;
  json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
  bool typed = j && (want == SBXD_WANT_ANY || (want == SBXD_WANT_OBJECT && json_is_object(j)) ||
                     (want == SBXD_WANT_ARRAY && json_is_array(j)));
  if (typed)
    return j;
  const char *expected =
      want == SBXD_WANT_ARRAY ? "expected a JSON array" : "expected a JSON object";
  switch (style) {
  case SBXD_JSON_LIFECYCLE:
    /* (lifecycle handlers check the type themselves: its errors name the field) */
    *ret = r->body.len == 0 ? sbxd_error(r, 422, "SANDBOX::VALIDATION_ERROR",
                                         "request body must be JSON, got an empty body")
                            : sbxd_error(r, 422, "SANDBOX::VALIDATION_ERROR",
                                         "malformed JSON body: %s (line %d, column %d)", je.text,
                                         je.line, je.column);
    break;
  case SBXD_JSON_CONTRACT:
    *ret = j == NULL ? sbxd_error(r, 400, "SBX::INVALID", "malformed JSON body: %s", je.text)
                     : sbxd_error(r, 400, "SBX::INVALID", "the body must be a JSON object");
    break;
  case SBXD_JSON_EXECD:
  default:
    *ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                      "error parsing request, MAYBE invalid body format. %s",
                      j == NULL ? je.text : expected);
    break;
  }
  json_decref(j);
  return NULL;
}
