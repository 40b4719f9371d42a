/* An MCP session over libsbx: protocol state, the scope's sandbox, and the requests in flight.
 *
 * The sandbox is acquired on the first call that needs it and held until the session ends (or
 * release_sandbox / reset_sandbox), then parked warm like any other front-end's. Calls using it
 * hold sb_lock for reading; acquiring, releasing and resetting hold it for writing, so a handle
 * is never released under a running call. A cancelled request's command is killed (SIGKILL to
 * its process group, as a timeout does) and the request gets no response, as the spec asks. */
#include "mcp.h"
#include "../lib/image/image.h"
#include "base64.h"

#include "text.h"
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

#define OUTPUTS_DIR "/mnt/user-data/outputs"
#define MCP_DOWNLOAD_MAX (10u << 20) /* bytes of a file sent inline (base64 in one message) */
#define PROGRESS_INTERVAL_MS 1000

struct call {
  char *key; /* the request id as JSON text */
  bool cancelled;
  char cmd_id[65]; /* the running command, once started */
  sbx_sandbox_t *sb;
  struct call *next;
};

struct mcp_session {
  struct mcp_host host;
  char *user, *thread;
  pthread_mutex_t lock; /* calls, n_calls, initialized, proto */
  pthread_cond_t idle;  /* n_calls reached 0 */
  struct call *calls;
  int n_calls;
  bool initialized;
  char proto[16];
  pthread_rwlock_t sb_lock;
  sbx_sandbox_t *sb;
};

struct ctx {
  struct mcp_session *s;
  struct call *call;
  sbx_sandbox_t *sb;
  json_t *progress_token;
  mcp_send_fn send;
  void *arg;
};

/* ---- sessions ---- */

struct mcp_session *mcp_session_new(const struct mcp_host *host, const char *user,
                                    const char *thread)
{
  struct mcp_session *s = xzalloc(sizeof *s);
  s->host = *host;
  s->user = xstrdup(user ? user : "default");
  if (thread) {
    s->thread = xstrdup(thread);
  } else {
    char hex[13];
    sbx__random_hex(hex, 12);
    hex[12] = '\0';
    s->thread = xasprintf("mcp-%s", hex);
  }
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->idle, NULL);
  pthread_rwlock_init(&s->sb_lock, NULL);
  return s;
}

const char *mcp_session_user(const struct mcp_session *s)
{
  return s->user;
}

const char *mcp_session_thread(const struct mcp_session *s)
{
  return s->thread;
}

bool mcp_session_initialized(const struct mcp_session *s)
{
  return s->initialized;
}

const char *mcp_session_protocol(const struct mcp_session *s)
{
  return s->proto[0] ? s->proto : NULL;
}

static void kill_call_locked(struct call *c)
{
  c->cancelled = true;
  if (c->cmd_id[0] && c->sb)
    sbx_command_signal(c->sb, c->cmd_id, SIGKILL, NULL);
}

void mcp_cancel_all(struct mcp_session *s)
{
  pthread_mutex_lock(&s->lock);
  for (struct call *c = s->calls; c; c = c->next)
    kill_call_locked(c);
  pthread_mutex_unlock(&s->lock);
}

static void drop_sandbox(struct mcp_session *s, bool destroy)
{
  pthread_rwlock_wrlock(&s->sb_lock);
  if (s->sb)
    s->host.release(s->host.ctx, s->sb, destroy);
  s->sb = NULL;
  pthread_rwlock_unlock(&s->sb_lock);
}

void mcp_session_free(struct mcp_session *s)
{
  if (s == NULL)
    return;
  mcp_cancel_all(s);
  pthread_mutex_lock(&s->lock);
  while (s->n_calls > 0)
    pthread_cond_wait(&s->idle, &s->lock);
  pthread_mutex_unlock(&s->lock);
  drop_sandbox(s, false);
  pthread_rwlock_destroy(&s->sb_lock);
  pthread_cond_destroy(&s->idle);
  pthread_mutex_destroy(&s->lock);
  free(s->user);
  free(s->thread);
  free(s);
}

/* The sandbox, with sb_lock held for reading (the caller unlocks); NULL with *err. */
static sbx_sandbox_t *use_sandbox(struct mcp_session *s, sbx_error_t *err)
{
  for (;;) {
    pthread_rwlock_rdlock(&s->sb_lock);
    if (s->sb)
      return s->sb;
    pthread_rwlock_unlock(&s->sb_lock);
    pthread_rwlock_wrlock(&s->sb_lock);
    if (s->sb == NULL)
      s->sb = s->host.acquire(s->host.ctx, s->user, s->thread, err);
    bool ok = s->sb != NULL;
    pthread_rwlock_unlock(&s->sb_lock);
    if (!ok)
      return NULL;
  }
}

/* ---- results ---- */

static json_t *jtext(const char *s, size_t len)
{
  size_t n;
  cleanup_free char *clean = sbx__utf8_sanitize(s, len, &n);
  return json_stringn(clean, n);
}

/* text may hold NUL bytes (a command's output): all len bytes are sent (JSON \u0000) */
static json_t *text_resultn(const char *text, size_t len, bool is_error)
{
  json_t *content = json_array();
  json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", jtext(text, len)));
  return json_pack("{s:o,s:b}", "content", content, "isError", is_error);
}

static json_t *text_result(const char *text, bool is_error)
{
  return text_resultn(text, strlen(text), is_error);
}

static json_t *fail_result(sbx_error_t *err)
{
  cleanup_free char *msg = xasprintf("Error: %s", err && *err ? (*err)->msg : "unknown error");
  sbx_error_release(err);
  return text_result(msg, true);
}

static json_t *bad_args(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *bad_args(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *m = xvasprintf(fmt, ap);
  va_end(ap);
  cleanup_free char *msg = xasprintf("Error: invalid arguments: %s", m);
  return text_result(msg, true);
}

/* ---- arguments: checked against the tool's schema by hand (clear errors, no validator) ---- */

/* One argument of a tool: checked here, and its inputSchema is made from the same table. */
struct arg_spec {
  const char *name;
  char type; /* 's' string, 'i' integer, 'n' number, 'b' boolean, 'o' object of strings */
  bool required;
  const char *description;
};

/* NULL when args match spec, else the message (malloc'ed). */
static char *check_args(json_t *args, const struct arg_spec *spec)
{
  const char *k;
  json_t *v;
  json_object_foreach(args, k, v)
  {
    const struct arg_spec *a = spec;
    while (a->name && strcmp(a->name, k) != 0)
      a++;
    if (a->name == NULL)
      return xasprintf("unknown argument '%s'", k);
    if (json_is_null(v) && !a->required)
      continue;
    bool ok = false;
    const char *want = "";
    switch (a->type) {
    case 's':
      ok = json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
      want = "a string (without NUL characters)";
      break;
    case 'i':
      /* 3.0 is an integer too (some clients send every number as a double); the range check
       * comes first, a cast of an out-of-range double being undefined */
      ok = json_is_integer(v) || (json_is_real(v) && fabs(json_real_value(v)) < 9e18 &&
                                  json_real_value(v) == (double) (int64_t) json_real_value(v));
      want = "an integer";
      break;
    case 'n':
      ok = json_is_number(v);
      want = "a number";
      break;
    case 'b':
      ok = json_is_boolean(v);
      want = "a boolean";
      break;
    default: {
      ok = json_is_object(v);
      const char *ek;
      json_t *ev;
      json_object_foreach(v, ek, ev) ok = ok && json_is_string(ev);
      want = "an object whose values are strings";
      break;
    }
    }
    if (!ok)
      return xasprintf("'%s' must be %s", k, want);
  }
  for (const struct arg_spec *a = spec; a->name; a++) {
    json_t *got = json_object_get(args, a->name);
    if (a->required && (got == NULL || json_is_null(got)))
      return xasprintf("'%s' is required", a->name);
  }
  return NULL;
}

static const char *astr(json_t *args, const char *k)
{
  return json_string_value(json_object_get(args, k));
}

static int64_t aint(json_t *args, const char *k, int64_t def)
{
  json_t *v = json_object_get(args, k);
  if (json_is_integer(v))
    return (int64_t) json_integer_value(v);
  if (json_is_real(v))
    return (int64_t) json_real_value(v);
  return def;
}

#define PATH_D "Absolute path inside the sandbox (no '..' segments)"

/* ---- file URIs of resources ---- */

static char *path_to_uri(const char *path)
{
  sbx_buf_t b = {0};
  sbx__buf_puts(&b, "file://");
  for (const unsigned char *p = (const unsigned char *) path; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("-._~/", *p))
      sbx__buf_putc(&b, (char) *p);
    else
      sbx__buf_printf(&b, "%%%02X", *p);
  }
  return sbx__buf_steal(&b);
}

static int hexval(char c)
{
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* The path of a file:// URI under the outputs folder, or NULL. */
static char *uri_to_path(const char *uri)
{
  if (!sbx__str_has_prefix(uri, "file://"))
    return NULL;
  sbx_buf_t b = {0};
  for (const char *p = uri + 7; *p; p++) {
    if (*p == '%') {
      int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
      if (lo < 0 || (hi == 0 && lo == 0)) {
        sbx__buf_free(&b);
        return NULL;
      }
      sbx__buf_putc(&b, (char) (hi * 16 + lo));
      p += 2;
    } else if (*p == '?' || *p == '#') {
      break;
    } else {
      sbx__buf_putc(&b, *p);
    }
  }
  char *path = sbx__buf_steal(&b);
  if (!sbx__str_has_prefix(path, OUTPUTS_DIR "/")) {
    free(path);
    return NULL;
  }
  return path;
}

static const char *mime_of(const char *path)
{
  static const struct {
    const char *ext, *type;
  } types[] = {
      {".txt", "text/plain"},        {".md", "text/markdown"},     {".json", "application/json"},
      {".csv", "text/csv"},          {".html", "text/html"},       {".htm", "text/html"},
      {".py", "text/x-python"},      {".js", "text/javascript"},   {".xml", "application/xml"},
      {".yaml", "application/yaml"}, {".yml", "application/yaml"}, {".log", "text/plain"},
      {".png", "image/png"},         {".jpg", "image/jpeg"},       {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},         {".svg", "image/svg+xml"},    {".webp", "image/webp"},
      {".pdf", "application/pdf"},   {".zip", "application/zip"},  {".gz", "application/gzip"},
  };
  for (size_t i = 0; i < ARRAY_SIZE(types); i++)
    if (sbx__str_has_suffix(path, types[i].ext))
      return types[i].type;
  return NULL;
}

/* {uri, mimeType, text|blob} for bytes read from path */
static json_t *resource_contents(const char *path, const void *data, size_t len)
{
  cleanup_free char *uri = path_to_uri(path);
  const char *mime = mime_of(path);
  bool text = sbx__utf8_valid(data, len) && memchr(data, '\0', len) == NULL &&
              (mime == NULL || sbx__str_has_prefix(mime, "text/") ||
               sbx__str_has_prefix(mime, "application/json") || strstr(mime, "xml") ||
               strstr(mime, "yaml"));
  json_t *j = json_pack("{s:s,s:s}", "uri", uri, "mimeType",
                        mime   ? mime
                        : text ? "text/plain"
                               : "application/octet-stream");
  if (text) {
    json_object_set_new(j, "text", json_stringn(data, len));
  } else {
    char *b = sbx__base64_encode(data, len);
    json_object_set_new(j, "blob", json_string(b));
    free(b);
  }
  return j;
}

/* ---- tools ---- */

static void send_json(struct ctx *c, json_t *j)
{
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (s) {
    c->send(c->arg, s, strlen(s));
    free(s);
  }
}

struct exec_state {
  struct ctx *c;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  uint64_t bytes;
  uint64_t t0;
};

static int on_start(void *arg, const char *id)
{
  struct exec_state *e = arg;
  struct mcp_session *s = e->c->s;
  pthread_mutex_lock(&s->lock);
  snprintf(e->c->call->cmd_id, sizeof e->c->call->cmd_id, "%s", id);
  e->c->call->sb = e->c->sb;
  if (e->c->call->cancelled) /* cancelled before it started */
    kill_call_locked(e->c->call);
  pthread_mutex_unlock(&s->lock);
  return 0;
}

static int on_output(void *arg, int stream, const char *data, size_t len)
{
  (void) stream, (void) data;
  struct exec_state *e = arg;
  pthread_mutex_lock(&e->lock);
  e->bytes += len;
  pthread_mutex_unlock(&e->lock);
  return 0;
}

/* Progress while a command runs: one notification a second (elapsed seconds, output so far). */
static void *progress_thread(void *arg)
{
  struct exec_state *e = arg;
  pthread_mutex_lock(&e->lock);
  for (int64_t n = 1;; n++) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t at = e->t0 + (uint64_t) n * PROGRESS_INTERVAL_MS;
    ts.tv_sec = (time_t) (at / 1000);
    ts.tv_nsec = (long) (at % 1000) * 1000000;
    while (!e->done && pthread_cond_timedwait(&e->cond, &e->lock, &ts) != ETIMEDOUT)
      ;
    if (e->done)
      break;
    uint64_t bytes = e->bytes;
    pthread_mutex_unlock(&e->lock);
    cleanup_free char *msg =
        xasprintf("running for %" PRId64 " s, %" PRIu64 " bytes of output so far", n, bytes);
    send_json(e->c, json_pack("{s:s,s:s,s:{s:O,s:I,s:s}}", "jsonrpc", "2.0", "method",
                              "notifications/progress", "params", "progressToken",
                              e->c->progress_token, "progress", (json_int_t) n, "message", msg));
    pthread_mutex_lock(&e->lock);
  }
  pthread_mutex_unlock(&e->lock);
  return NULL;
}

static const struct arg_spec exec_args[] = {
    {"command", 's', true, "The shell command"},
    {"env", 'o', false,
     "Extra environment variables for this command (names match ^[A-Za-z_][A-Za-z0-9_]*$)"},
    {"timeout", 'n', false, "Seconds before the command is killed (exit code 124); default 600"},
    {NULL, 0, false, NULL}};

static json_t *tool_execute(struct ctx *c, json_t *args)
{
  /* the command ends with the server that runs it (killed, or its client gone: then the call
   * is cancelled, mcp_cancel) */
  struct sbx_exec_opts o = {.kill_on_disconnect = true};
  json_t *t = json_object_get(args, "timeout");
  if (json_is_number(t)) {
    o.timeout = json_number_value(t);
    if (!(o.timeout > 0) || o.timeout > 1e9)
      return bad_args("'timeout' must be a positive number of seconds, got %g", o.timeout);
  }
  sbx_strv_t env = {0};
  const char *k;
  json_t *v;
  json_object_foreach(json_object_get(args, "env"), k, v)
      sbx__strv_push_owned(&env, xasprintf("%s=%s", k, json_string_value(v)));
  o.env = (const char *const *) env.v;
  o.n_env = env.n;
  struct exec_state e = {.c = c, .t0 = sbx__now_ms()};
  pthread_mutex_init(&e.lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e.cond, &ca);
  pthread_condattr_destroy(&ca);
  o.on_start = on_start;
  o.on_output = on_output;
  o.arg = &e;
  pthread_t ticker;
  bool ticking = c->progress_token && pthread_create(&ticker, NULL, progress_thread, &e) == 0;
  struct sbx_exec_result r;
  sbx_error_t err = NULL;
  int rc = sbx_execute_command(c->sb, astr(args, "command"), &o, &r, &err);
  pthread_mutex_lock(&e.lock);
  e.done = true;
  pthread_cond_broadcast(&e.cond);
  pthread_mutex_unlock(&e.lock);
  if (ticking)
    pthread_join(ticker, NULL);
  pthread_cond_destroy(&e.cond);
  pthread_mutex_destroy(&e.lock);
  sbx__strv_free(&env);
  pthread_mutex_lock(&c->s->lock);
  c->call->cmd_id[0] = '\0';
  pthread_mutex_unlock(&c->s->lock);
  if (rc < 0)
    return fail_result(&err);
  size_t n;
  cleanup_free char *shown =
      sbx__truncate_middle(r.output, r.output_len, c->s->host.bash_output_max_chars, &n);
  json_t *res = text_resultn(shown, n, r.exit_code != 0 || r.timed_out);
  json_object_set_new(res, "structuredContent",
                      json_pack("{s:i,s:b,s:I}", "exit_code", r.exit_code, "timed_out", r.timed_out,
                                "duration_ms", (json_int_t) r.duration_ms));
  sbx_exec_result_free(&r);
  return res;
}

static const struct arg_spec read_args[] = {
    {"path", 's', true, PATH_D},
    {"start_line", 'i', false, "First line to read (1-based)"},
    {"end_line", 'i', false, "Last line to read (inclusive)"},
    {NULL, 0, false, NULL}};

static json_t *tool_read(struct ctx *c, json_t *args)
{
  int64_t start = aint(args, "start_line", SBX_LINE_NONE);
  int64_t end = aint(args, "end_line", SBX_LINE_NONE);
  cleanup_free char *text = NULL;
  size_t len = 0;
  sbx_error_t err = NULL;
  if (sbx_read_file(c->sb, astr(args, "path"), start, end, &text, &len, &err) < 0)
    return fail_result(&err);
  if (len == 0)
    return text_result(start != SBX_LINE_NONE && start > 1 ? "(start_line exceeds file length)"
                                                           : "(empty)",
                       false);
  size_t n;
  cleanup_free char *out =
      sbx__truncate_head(text, len, c->s->host.read_file_output_max_chars,
                         "Use start_line/end_line to read a specific range", &n);
  return text_resultn(out, n, false);
}

static const struct arg_spec write_args[] = {
    {"path", 's', true, PATH_D},
    {"content", 's', true, "The text to write"},
    {"append", 'b', false, "Append instead of replacing the file (default false)"},
    {NULL, 0, false, NULL}};

static json_t *tool_write(struct ctx *c, json_t *args)
{
  json_t *content = json_object_get(args, "content");
  sbx_error_t err = NULL;
  if (sbx_write_file(c->sb, astr(args, "path"), json_string_value(content),
                     json_string_length(content), json_is_true(json_object_get(args, "append")),
                     &err) < 0)
    return fail_result(&err);
  return text_result("OK", false);
}

static const struct arg_spec update_args[] = {
    {"path", 's', true, PATH_D},
    {"content_base64", 's', true, "The file's bytes, base64-encoded"},
    {NULL, 0, false, NULL}};

static json_t *tool_update(struct ctx *c, json_t *args)
{
  json_t *data = json_object_get(args, "content_base64");
  size_t len = 0;
  cleanup_free unsigned char *bytes =
      sbx__base64_decode(json_string_value(data), json_string_length(data), &len);
  if (bytes == NULL)
    return bad_args("'content_base64' is not valid base64");
  sbx_error_t err = NULL;
  if (sbx_update_file(c->sb, astr(args, "path"), bytes, len, &err) < 0)
    return fail_result(&err);
  return text_result("OK", false);
}

static const struct arg_spec download_args[] = {
    {"path", 's', true, "Absolute path under /mnt/user-data"}, {NULL, 0, false, NULL}};

static json_t *tool_download(struct ctx *c, json_t *args)
{
  const char *path = astr(args, "path");
  sbx_error_t err = NULL;
  struct sbx_file_info fi = {0};
  /* the contract's checks first (prefix, traversal), then ours: one message holds the file */
  if (sbx__str_has_prefix(path, "/mnt/user-data/") && sbx_stat(c->sb, path, &fi, NULL) == 0 &&
      fi.size > MCP_DOWNLOAD_MAX) {
    free(fi.path);
    cleanup_free char *m =
        xasprintf("Error: File exceeds the MCP download limit of %u bytes (it has %" PRIu64
                  "); copy it out with `sbx download` or split it with execute_command",
                  MCP_DOWNLOAD_MAX, fi.size);
    return text_result(m, true);
  }
  free(fi.path);
  cleanup_free void *data = NULL;
  size_t len = 0;
  if (sbx_download_file(c->sb, path, &data, &len, &err) < 0)
    return fail_result(&err);
  if (len > MCP_DOWNLOAD_MAX) {
    cleanup_free char *m =
        xasprintf("Error: File exceeds the MCP download limit of %u bytes", MCP_DOWNLOAD_MAX);
    return text_result(m, true);
  }
  json_t *content = json_array();
  cleanup_free char *note = xasprintf("%s (%zu bytes)", path, len);
  json_array_append_new(content,
                        json_pack("{s:s,s:o}", "type", "text", "text", jtext(note, strlen(note))));
  json_array_append_new(content, json_pack("{s:s,s:o}", "type", "resource", "resource",
                                           resource_contents(path, data, len)));
  return json_pack("{s:o,s:b}", "content", content, "isError", false);
}

static const struct arg_spec list_args[] = {
    {"path", 's', true, PATH_D},
    {"max_depth", 'i', false, "Levels to descend, 1 = children only (default 2)"},
    {NULL, 0, false, NULL}};

static json_t *tool_list(struct ctx *c, json_t *args)
{
  int64_t depth = aint(args, "max_depth", 2);
  if (depth < 1 || depth > 64)
    return bad_args("'max_depth' must be from 1 to 64, got %" PRId64, depth);
  char **v = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (sbx_list_dir(c->sb, astr(args, "path"), (int) depth, &v, &n, &err) < 0)
    return fail_result(&err);
  sbx_buf_t b = {0};
  for (size_t i = 0; i < n; i++) {
    if (i)
      sbx__buf_putc(&b, '\n');
    sbx__buf_puts(&b, v[i]);
  }
  sbx_strv_free_array(v, n);
  if (n == 0) {
    sbx__buf_free(&b);
    return text_result("(empty)", false);
  }
  size_t len = b.len, shown_len;
  cleanup_free char *text = sbx__buf_steal(&b);
  cleanup_free char *shown =
      sbx__truncate_head(text, len, c->s->host.ls_output_max_chars,
                         "Use a more specific path to see fewer results", &shown_len);
  return text_resultn(shown, shown_len, false);
}

/* max_results: <= 0 or absent is the default; at most upper (DeerFlow's tool layer) */
static size_t max_results(json_t *args, int64_t def, int64_t upper)
{
  int64_t m = aint(args, "max_results", 0);
  if (m <= 0)
    m = def;
  return (size_t) (m > upper ? upper : m);
}

static const struct arg_spec glob_args[] = {
    {"path", 's', true, "Directory to search (absolute)"},
    {"pattern", 's', true, "Glob pattern, e.g. '*.py' or 'src/**/*.ts'"},
    {"include_dirs", 'b', false, "Also match directories (default false)"},
    {"max_results", 'i', false, "At most this many paths (default 200, at most 1000)"},
    {NULL, 0, false, NULL}};

static json_t *tool_glob(struct ctx *c, json_t *args)
{
  const char *root = astr(args, "path");
  size_t max = max_results(args, 200, 1000);
  char **v = NULL;
  size_t n = 0;
  bool truncated = false;
  sbx_error_t err = NULL;
  if (sbx_glob(c->sb, root, astr(args, "pattern"),
               json_is_true(json_object_get(args, "include_dirs")), max, &v, &n, &truncated,
               &err) < 0)
    return fail_result(&err);
  sbx_buf_t b = {0};
  json_t *matches = json_array();
  if (n == 0) {
    sbx__buf_printf(&b, "No files matched under %s", root);
  } else {
    sbx__buf_printf(&b, "Found %zu paths under %s", n, root);
    if (truncated)
      sbx__buf_printf(&b, " (showing first %zu)", n);
    for (size_t i = 0; i < n; i++) {
      sbx__buf_printf(&b, "\n%zu. %s", i + 1, v[i]);
      json_array_append_new(matches, jtext(v[i], strlen(v[i])));
    }
  }
  if (truncated)
    sbx__buf_puts(&b, "\nResults truncated. Narrow the path or pattern to see fewer matches.");
  sbx_strv_free_array(v, n);
  cleanup_free char *text = sbx__buf_steal(&b);
  json_t *res = text_result(text, false);
  json_object_set_new(res, "structuredContent",
                      json_pack("{s:o,s:b}", "matches", matches, "truncated", truncated));
  return res;
}

static const struct arg_spec grep_args[] = {
    {"path", 's', true, "Directory or file to search (absolute)"},
    {"pattern", 's', true, "POSIX extended regular expression (a plain string with literal)"},
    {"glob", 's', false, "Only search files matching this glob (as in the glob tool)"},
    {"literal", 'b', false, "Treat pattern as a plain string (default false)"},
    {"case_sensitive", 'b', false, "Match case (default false)"},
    {"max_results", 'i', false, "At most this many matches (default 100, at most 500)"},
    {NULL, 0, false, NULL}};

static json_t *tool_grep(struct ctx *c, json_t *args)
{
  const char *root = astr(args, "path");
  struct sbx_grep_opts o = {.glob = astr(args, "glob"),
                            .literal = json_is_true(json_object_get(args, "literal")),
                            .case_sensitive = json_is_true(json_object_get(args, "case_sensitive")),
                            .max_results = max_results(args, 100, 500)};
  struct sbx_grep_match *m = NULL;
  size_t n = 0;
  bool truncated = false;
  sbx_error_t err = NULL;
  if (sbx_grep(c->sb, root, astr(args, "pattern"), &o, &m, &n, &truncated, &err) < 0)
    return fail_result(&err);
  sbx_buf_t b = {0};
  json_t *matches = json_array();
  if (n == 0 && truncated) {
    sbx__buf_printf(&b,
                    "Results truncated while searching under %s; matches may exist beyond the "
                    "provider scan budget. Narrow the path or add a glob filter.",
                    root);
  } else if (n == 0) {
    sbx__buf_printf(&b, "No matches found under %s", root);
  } else {
    sbx__buf_printf(&b, "Found %zu matches under %s", n, root);
    if (truncated)
      sbx__buf_printf(&b, " (showing first %zu)", n);
    for (size_t i = 0; i < n; i++) {
      sbx__buf_printf(&b, "\n%s:%" PRIu64 ": %s", m[i].path, m[i].line_number, m[i].line);
      json_array_append_new(matches,
                            json_pack("{s:o,s:I,s:o}", "path", jtext(m[i].path, strlen(m[i].path)),
                                      "line_number", (json_int_t) m[i].line_number, "line",
                                      jtext(m[i].line, strlen(m[i].line))));
    }
    if (truncated)
      sbx__buf_puts(&b, "\nResults truncated. Narrow the path or add a glob filter.");
  }
  sbx_grep_matches_free(m, n);
  cleanup_free char *text = sbx__buf_steal(&b);
  json_t *res = text_result(text, false);
  json_object_set_new(res, "structuredContent",
                      json_pack("{s:o,s:b}", "matches", matches, "truncated", truncated));
  return res;
}

static const struct arg_spec no_args[] = {{NULL, 0, false, NULL}};

static json_t *tool_release(struct ctx *c, json_t *args)
{
  (void) args;
  drop_sandbox(c->s, false);
  return text_result("OK: the sandbox was parked warm; its files and background processes are "
                     "kept, and the next call resumes it.",
                     false);
}

static json_t *tool_reset(struct ctx *c, json_t *args)
{
  (void) args;
  sbx_error_t err = NULL;
  /* the scope's sandbox even if this session has not used it yet */
  sbx_sandbox_t *sb = use_sandbox(c->s, &err);
  if (sb == NULL)
    return fail_result(&err);
  pthread_rwlock_unlock(&c->s->sb_lock);
  drop_sandbox(c->s, true);
  return text_result("OK: the sandbox was destroyed (its processes, and files outside "
                     "/mnt/user-data); the next call starts a fresh one.",
                     false);
}

/* The image store, as `sbx images` shows it (the same store function), and the image this
 * session's sandbox is made from when it is created. */
static json_t *tool_list_images(struct ctx *c, json_t *args)
{
  (void) args;
  const struct mcp_host *h = &c->s->host;
  if (h->home == NULL)
    return text_result("Error: this server has no image store", true);
  struct sbx_image_info *v;
  size_t n;
  sbx_error_t err = NULL;
  if (sbx__image_list(h->home, &v, &n, &err) < 0)
    return fail_result(&err);
  const char *image = h->image ? h->image : "host";
  sbx_buf_t b = {0};
  sbx__buf_printf(&b,
                  "New sandboxes of this session are made from: %s\n"
                  "`host` (the host's /usr, read-only) is always available.\n",
                  image);
  if (n == 0)
    sbx__buf_puts(&b, "No images in the store.");
  else
    sbx__buf_printf(&b, "%zu image%s in the store:\n", n, n == 1 ? "" : "s");
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++) {
    sbx__buf_printf(&b, "%zu. %s  %.19s  %.1f MB  created %s  in use by %d\n", i + 1, v[i].name,
                    v[i].digest, (double) v[i].size / 1e6, *v[i].created ? v[i].created : "-",
                    v[i].in_use);
    json_array_append_new(a, json_pack("{s:s,s:s,s:I,s:s,s:f,s:i}", "name", v[i].name, "digest",
                                       v[i].digest, "size", (json_int_t) v[i].size, "created",
                                       v[i].created, "imported", v[i].imported, "in_use",
                                       v[i].in_use));
  }
  sbx__image_info_free(v, n);
  if (b.len && b.data[b.len - 1] == '\n')
    b.data[--b.len] = '\0';
  cleanup_free char *t = sbx__buf_steal(&b);
  json_t *res = text_result(t, false);
  json_object_set_new(res, "structuredContent",
                      json_pack("{s:o,s:s}", "images", a, "sandbox_image", image));
  return res;
}

enum { OUT_NONE, OUT_EXEC, OUT_GLOB, OUT_GREP, OUT_IMAGES };

static const struct tool {
  const char *name, *title, *description;
  int output; /* structured content (and its outputSchema) */
  bool read_only, destructive, idempotent, sandbox;
  const struct arg_spec *args;
  json_t *(*fn)(struct ctx *c, json_t *args);
} tools[] = {
    {"execute_command", "Run a shell command",
     "Run a shell command (`sh -lc COMMAND`) in the sandbox, in /mnt/user-data/workspace, stdin "
     "empty. Returns stdout, then stderr after a 'Std Error:' line, then 'Exit Code: N' when it "
     "is not 0 ('(no output)' if there is none). Background processes it starts keep running "
     "for later calls. Each stream is kept up to 10 MiB.",
     OUT_EXEC, false, true, false, true, exec_args, tool_execute},
    {"read_file", "Read a text file",
     "Read a UTF-8 text file. With start_line/end_line (1-based, inclusive) only those lines. "
     "Binary files are refused; output over 50000 characters is cut with a note.",
     OUT_NONE, true, false, true, true, read_args, tool_read},
    {"write_file", "Write a text file",
     "Write text to a file, creating parent directories. Replaces the file atomically, or "
     "appends with append=true. Returns 'OK'.",
     OUT_NONE, false, true, false, true, write_args, tool_write},
    {"update_file", "Write a binary file",
     "Replace a file with bytes given in base64 (atomically), creating parent directories. "
     "Returns 'OK'.",
     OUT_NONE, false, true, true, true, update_args, tool_update},
    {"download_file", "Download a file",
     "Fetch a file under /mnt/user-data as an embedded resource (text, or base64 for binary "
     "files), at most 10 MiB.",
     OUT_NONE, true, false, true, true, download_args, tool_download},
    {"list_dir", "List a directory",
     "List the entries below a directory to max_depth levels (default 2), one absolute path a "
     "line, directories ending in '/'. Version-control, dependency and cache folders (.git, "
     "node_modules, __pycache__...) are skipped.",
     OUT_NONE, true, false, true, true, list_args, tool_list},
    {"glob", "Find files by name",
     "Find paths below a directory matching a glob pattern: without '/' it matches the name at "
     "any depth ('*.py'); with '/' it is anchored at the directory, '**' matching any number of "
     "folders ('src/**/*.ts').",
     OUT_GLOB, true, false, true, true, glob_args, tool_glob},
    {"grep", "Search file contents",
     "Search text files below a directory (or one file) for lines matching a POSIX extended "
     "regex, case-insensitive unless case_sensitive. Prints 'path:line: text' per match. Binary "
     "and huge files are skipped.",
     OUT_GREP, true, false, true, true, grep_args, tool_grep},
    {"release_sandbox", "Park the sandbox",
     "Park the sandbox warm: files and background processes are kept and the next call resumes "
     "it. Use it when pausing work for a while.",
     OUT_NONE, false, false, true, false, no_args, tool_release},
    {"reset_sandbox", "Reset the sandbox",
     "Destroy the sandbox: every process, and every file outside /mnt/user-data (the thread's "
     "workspace, uploads and outputs are kept). The next call starts a fresh sandbox.",
     OUT_NONE, false, true, false, false, no_args, tool_reset},
    {"list_images", "List the sandbox images",
     "List the images sandboxes can be made from: each image of the store with its name, "
     "manifest digest, size in bytes (compressed layers), creation time and how many sandboxes "
     "use it, and which image this session's sandbox is made from when it is (re)created. The "
     "image is chosen by whoever configures this server, not by a tool.",
     OUT_IMAGES, true, false, true, false, no_args, tool_list_images},
};

static json_t *input_schema(const struct arg_spec *spec)
{
  json_t *props = json_object(), *required = json_array();
  for (const struct arg_spec *a = spec; a->name; a++) {
    const char *type = a->type == 's'   ? "string"
                       : a->type == 'i' ? "integer"
                       : a->type == 'n' ? "number"
                       : a->type == 'b' ? "boolean"
                                        : "object";
    json_t *p = json_pack("{s:s,s:s}", "type", type, "description", a->description);
    if (a->type == 'o')
      json_object_set_new(p, "additionalProperties", json_pack("{s:s}", "type", "string"));
    if (a->type == 'n')
      json_object_set_new(p, "exclusiveMinimum", json_integer(0));
    json_object_set_new(props, a->name, p);
    if (a->required)
      json_array_append_new(required, json_string(a->name));
  }
  return json_pack("{s:s,s:o,s:o,s:b}", "type", "object", "properties", props, "required", required,
                   "additionalProperties", false);
}

static json_t *output_schema(int kind)
{
  switch (kind) {
  case OUT_EXEC:
    return json_pack("{s:s,s:{s:{s:s},s:{s:s},s:{s:s}},s:[s,s,s]}", "type", "object", "properties",
                     "exit_code", "type", "integer", "timed_out", "type", "boolean", "duration_ms",
                     "type", "integer", "required", "exit_code", "timed_out", "duration_ms");
  case OUT_GLOB:
    return json_pack("{s:s,s:{s:{s:s,s:{s:s}},s:{s:s}},s:[s,s]}", "type", "object", "properties",
                     "matches", "type", "array", "items", "type", "string", "truncated", "type",
                     "boolean", "required", "matches", "truncated");
  case OUT_GREP:
    return json_pack("{s:s,s:{s:{s:s,s:{s:s,s:{s:{s:s},s:{s:s},s:{s:s}},s:[s,s,s]}},s:{s:s}},"
                     "s:[s,s]}",
                     "type", "object", "properties", "matches", "type", "array", "items", "type",
                     "object", "properties", "path", "type", "string", "line_number", "type",
                     "integer", "line", "type", "string", "required", "path", "line_number", "line",
                     "truncated", "type", "boolean", "required", "matches", "truncated");
  case OUT_IMAGES:
    return json_pack("{s:s,s:{s:{s:s,s:{s:s,s:{s:{s:s},s:{s:s},s:{s:s,s:i},s:{s:s},s:{s:s},s:{s:"
                     "s,s:i}},s:[s,s,s,s,s,s]}},s:{s:s}},s:[s,s]}",
                     "type", "object", "properties", "images", "type", "array", "items", "type",
                     "object", "properties", "name", "type", "string", "digest", "type", "string",
                     "size", "type", "integer", "minimum", 0, "created", "type", "string",
                     "imported", "type", "number", "in_use", "type", "integer", "minimum", 0,
                     "required", "name", "digest", "size", "created", "imported", "in_use",
                     "sandbox_image", "type", "string", "required", "images", "sandbox_image");
  default:
    return NULL;
  }
}

static json_t *tools_list(void)
{
  json_t *a = json_array();
  for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
    const struct tool *t = &tools[i];
    json_t *j =
        json_pack("{s:s,s:s,s:s,s:o,s:{s:s,s:b,s:b,s:b,s:b}}", "name", t->name, "title", t->title,
                  "description", t->description, "inputSchema", input_schema(t->args),
                  "annotations", "title", t->title, "readOnlyHint", t->read_only, "destructiveHint",
                  t->destructive, "idempotentHint", t->idempotent, "openWorldHint", false);
    json_t *out = output_schema(t->output);
    if (out)
      json_object_set_new(j, "outputSchema", out);
    json_array_append_new(a, j);
  }
  return json_pack("{s:o}", "tools", a);
}

/* ---- requests ---- */

static void reply(mcp_send_fn send, void *arg, char *text)
{
  send(arg, text, strlen(text));
  free(text);
}

static void reply_error(mcp_send_fn send, void *arg, json_t *id, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void reply_error(mcp_send_fn send, void *arg, json_t *id, int code, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *msg = xvasprintf(fmt, ap);
  va_end(ap);
  reply(send, arg, mcp_error_text(id, code, msg));
}

static char *id_key(json_t *id)
{
  char *k = json_dumps(id, JSON_COMPACT | JSON_ENCODE_ANY);
  return k ? k : xstrdup("?");
}

/* Registers a request in flight; NULL if its id already is. */
static struct call *call_begin(struct mcp_session *s, json_t *id)
{
  char *key = id_key(id);
  pthread_mutex_lock(&s->lock);
  for (struct call *c = s->calls; c; c = c->next)
    if (strcmp(c->key, key) == 0) {
      pthread_mutex_unlock(&s->lock);
      free(key);
      return NULL;
    }
  struct call *c = xzalloc(sizeof *c);
  c->key = key;
  c->next = s->calls;
  s->calls = c;
  s->n_calls++;
  pthread_mutex_unlock(&s->lock);
  return c;
}

/* Unregisters; true if it was cancelled (then nothing is sent). */
static bool call_end(struct mcp_session *s, struct call *c)
{
  pthread_mutex_lock(&s->lock);
  for (struct call **p = &s->calls; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  bool cancelled = c->cancelled;
  if (--s->n_calls == 0)
    pthread_cond_broadcast(&s->idle);
  pthread_mutex_unlock(&s->lock);
  free(c->key);
  free(c);
  return cancelled;
}

static json_t *initialize(struct mcp_session *s, json_t *params, char **err)
{
  const char *want = json_string_value(json_object_get(params, "protocolVersion"));
  if (want == NULL) {
    *err = xstrdup("Invalid params: initialize needs \"protocolVersion\" (a string)");
    return NULL;
  }
  pthread_mutex_lock(&s->lock);
  if (s->proto[0]) {
    pthread_mutex_unlock(&s->lock);
    *err = xstrdup("Invalid Request: the session is already initialized");
    return NULL;
  }
  /* the client's revision if we speak it, else our newest (the client decides then) */
  snprintf(s->proto, sizeof s->proto, "%s",
           mcp_protocol_supported(want) ? want : mcp_protocol_versions[0]);
  pthread_mutex_unlock(&s->lock);
  cleanup_free char *instructions = xasprintf(
      "Tools run in a Linux sandbox of its own (scope user '%s', thread '%s'): the shell's "
      "working folder is /mnt/user-data/workspace; put results for the user in "
      "/mnt/user-data/outputs (listed as resources). Paths are absolute. Files and background "
      "processes persist between calls.",
      s->user, s->thread);
  return json_pack("{s:s,s:{s:{s:b},s:{s:b,s:b}},s:{s:s,s:s,s:s},s:s}", "protocolVersion", s->proto,
                   "capabilities", "tools", "listChanged", false, "resources", "listChanged", false,
                   "subscribe", false, "serverInfo", "name", "sbx", "title", "sbx sandbox",
                   "version", SBX_VERSION, "instructions", instructions);
}

static void call_tool(struct mcp_session *s, struct mcp_msg *m, mcp_send_fn send, void *arg)
{
  const char *name = json_string_value(json_object_get(m->params, "name"));
  json_t *args = json_object_get(m->params, "arguments");
  if (name == NULL)
    return reply_error(send, arg, m->id, MCP_INVALID_PARAMS,
                       "Invalid params: tools/call needs \"name\" (a string)");
  if (args != NULL && !json_is_object(args))
    return reply_error(send, arg, m->id, MCP_INVALID_PARAMS,
                       "Invalid params: \"arguments\" must be an object");
  const struct tool *t = NULL;
  for (size_t i = 0; i < ARRAY_SIZE(tools) && t == NULL; i++)
    if (strcmp(tools[i].name, name) == 0)
      t = &tools[i];
  if (t == NULL)
    return reply_error(send, arg, m->id, MCP_INVALID_PARAMS,
                       "Unknown tool: %.100s (tools/list names them)", name);
  json_t *empty = json_object();
  if (args == NULL)
    args = empty;
  struct call *c = call_begin(s, m->id);
  if (c == NULL) {
    json_decref(empty);
    return reply_error(send, arg, m->id, MCP_INVALID_REQUEST,
                       "Invalid Request: a request with this id is already in flight");
  }
  json_t *token = json_object_get(json_object_get(m->params, "_meta"), "progressToken");
  struct ctx cx = {.s = s,
                   .call = c,
                   .progress_token = json_is_string(token) || json_is_integer(token) ? token : NULL,
                   .send = send,
                   .arg = arg};
  json_t *result;
  cleanup_free char *bad = check_args(args, t->args);
  if (bad) {
    result = bad_args("%s", bad);
  } else if (t->sandbox) {
    sbx_error_t err = NULL;
    cx.sb = use_sandbox(s, &err);
    if (cx.sb == NULL) {
      result = fail_result(&err);
    } else {
      result = t->fn(&cx, args);
      pthread_rwlock_unlock(&s->sb_lock);
    }
  } else {
    result = t->fn(&cx, args);
  }
  json_decref(empty);
  if (call_end(s, c)) {
    json_decref(result);
    return;
  }
  reply(send, arg, mcp_result_text(m->id, result));
}

static void list_resources(struct mcp_session *s, struct mcp_msg *m, mcp_send_fn send, void *arg)
{
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = use_sandbox(s, &err);
  if (sb == NULL) {
    reply_error(send, arg, m->id, MCP_INTERNAL_ERROR, "%s", err ? err->msg : "no sandbox");
    sbx_error_release(&err);
    return;
  }
  char **v = NULL;
  size_t n = 0;
  json_t *a = json_array();
  if (sbx_list_dir(sb, OUTPUTS_DIR, 16, &v, &n, &err) == 0) {
    for (size_t i = 0; i < n; i++) {
      if (sbx__str_has_suffix(v[i], "/"))
        continue;
      cleanup_free char *uri = path_to_uri(v[i]);
      const char *rel = v[i] + strlen(OUTPUTS_DIR "/");
      json_t *r = json_pack("{s:s,s:o}", "uri", uri, "name", jtext(rel, strlen(rel)));
      const char *mime = mime_of(v[i]);
      if (mime)
        json_object_set_new(r, "mimeType", json_string(mime));
      struct sbx_file_info fi = {0};
      if (sbx_stat(sb, v[i], &fi, NULL) == 0)
        json_object_set_new(r, "size", json_integer((json_int_t) fi.size));
      free(fi.path);
      json_array_append_new(a, r);
    }
    sbx_strv_free_array(v, n);
  }
  sbx_error_release(&err); /* no outputs folder yet: no resources */
  pthread_rwlock_unlock(&s->sb_lock);
  reply(send, arg, mcp_result_text(m->id, json_pack("{s:o}", "resources", a)));
}

static void read_resource(struct mcp_session *s, struct mcp_msg *m, mcp_send_fn send, void *arg)
{
  const char *uri = json_string_value(json_object_get(m->params, "uri"));
  if (uri == NULL)
    return reply_error(send, arg, m->id, MCP_INVALID_PARAMS,
                       "Invalid params: resources/read needs \"uri\" (a string)");
  cleanup_free char *path = uri_to_path(uri);
  if (path == NULL)
    return reply_error(send, arg, m->id, MCP_RESOURCE_NOT_FOUND,
                       "Resource not found: %.200s (resources are file:// URIs under %s)", uri,
                       OUTPUTS_DIR);
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = use_sandbox(s, &err);
  if (sb == NULL) {
    reply_error(send, arg, m->id, MCP_INTERNAL_ERROR, "%s", err ? err->msg : "no sandbox");
    sbx_error_release(&err);
    return;
  }
  struct sbx_file_info fi = {0};
  bool big = sbx_stat(sb, path, &fi, NULL) == 0 && fi.size > MCP_DOWNLOAD_MAX;
  free(fi.path);
  void *data = NULL;
  size_t len = 0;
  if (big || sbx_download_file(sb, path, &data, &len, &err) < 0) {
    pthread_rwlock_unlock(&s->sb_lock);
    bool missing = err && err->kind == SBX_E_NOT_FOUND;
    if (big)
      reply_error(send, arg, m->id, MCP_INVALID_PARAMS,
                  "%.200s exceeds the MCP download limit of %u bytes", path, MCP_DOWNLOAD_MAX);
    else
      reply_error(send, arg, m->id, missing ? MCP_RESOURCE_NOT_FOUND : MCP_INTERNAL_ERROR, "%s",
                  err ? err->msg : "download failed");
    sbx_error_release(&err);
    return;
  }
  pthread_rwlock_unlock(&s->sb_lock);
  json_t *contents = json_array();
  json_array_append_new(contents, resource_contents(path, data, len));
  free(data);
  reply(send, arg, mcp_result_text(m->id, json_pack("{s:o}", "contents", contents)));
}

void mcp_cancel(struct mcp_session *s, json_t *rid)
{
  if (!json_is_string(rid) && !json_is_integer(rid))
    return;
  cleanup_free char *key = id_key(rid);
  pthread_mutex_lock(&s->lock);
  for (struct call *c = s->calls; c; c = c->next)
    if (strcmp(c->key, key) == 0)
      kill_call_locked(c);
  pthread_mutex_unlock(&s->lock);
}

static void notification(struct mcp_session *s, struct mcp_msg *m)
{
  if (strcmp(m->method, "notifications/initialized") == 0) {
    pthread_mutex_lock(&s->lock);
    s->initialized = true;
    pthread_mutex_unlock(&s->lock);
  } else if (strcmp(m->method, "notifications/cancelled") == 0) {
    mcp_cancel(s, json_object_get(m->params, "requestId"));
  }
  /* any other notification is ignored, as JSON-RPC asks */
}

void mcp_handle(struct mcp_session *s, struct mcp_msg *m, mcp_send_fn send, void *arg)
{
  switch (m->kind) {
  default: /* MCP_MSG_INVALID */
    reply_error(send, arg, m->id, m->err_code, "%s", m->err_msg);
    break;
  case MCP_MSG_RESPONSE:
    break; /* we send no requests */
  case MCP_MSG_NOTIFICATION:
    notification(s, m);
    break;
  case MCP_MSG_REQUEST: {
    const char *me = m->method;
    if (strcmp(me, "initialize") == 0) {
      cleanup_free char *err = NULL;
      json_t *r = initialize(s, m->params, &err);
      if (r)
        reply(send, arg, mcp_result_text(m->id, r));
      else
        reply_error(send, arg, m->id,
                    strstr(err, "already") ? MCP_INVALID_REQUEST : MCP_INVALID_PARAMS, "%s", err);
    } else if (strcmp(me, "ping") == 0) {
      reply(send, arg, mcp_result_text(m->id, json_object()));
    } else if (s->proto[0] == '\0') {
      reply_error(send, arg, m->id, MCP_INVALID_REQUEST,
                  "Invalid Request: the session is not initialized (send initialize first)");
    } else if (strcmp(me, "tools/list") == 0) {
      reply(send, arg, mcp_result_text(m->id, tools_list()));
    } else if (strcmp(me, "tools/call") == 0) {
      call_tool(s, m, send, arg);
    } else if (strcmp(me, "resources/list") == 0) {
      list_resources(s, m, send, arg);
    } else if (strcmp(me, "resources/read") == 0) {
      read_resource(s, m, send, arg);
    } else if (strcmp(me, "resources/templates/list") == 0) {
      reply(send, arg, mcp_result_text(m->id, json_pack("{s:[]}", "resourceTemplates")));
    } else {
      reply_error(send, arg, m->id, MCP_METHOD_NOT_FOUND, "Method not found: %.100s", me);
    }
    break;
  }
  }
  mcp_msg_free(m);
}
