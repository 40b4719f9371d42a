/* OpenSandbox's execd API for every sandbox: ping, commands (an event stream per command),
 * interrupt, status, background logs, bash sessions and metrics. Files and directories are in
 * files.c, other ports in proxy.c.
 *
 * A command runs in a worker thread (sbx_execute_command with on_start/on_output callbacks) that
 * turns output into execd's events: one event per line, then execution_complete, or an error
 * event whose evalue is the exit code. The HTTP response only starts once the command has started
 * (so a bad working directory is a plain 400) and then drains the worker's queue. A client that
 * disconnects detaches from the queue; the command itself runs on (execd semantics). */
#include "sbxd.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define SESSION_ENV_VALUE_MAX 8192
#define SCRIPT_ARG_MAX (120u << 10)

struct session {
  char id[37];
  char *cwd;
  json_t *env; /* persisted exports */
  char run_id[65];
  struct session *next;
};

bool sbxd_box_paused(struct box *b)
{
  pthread_mutex_lock(&b->lock);
  bool p = b->paused;
  pthread_mutex_unlock(&b->lock);
  return p;
}

static enum MHD_Result bad_request(struct req *r, const char *prefix, const char *detail)
{
  return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "%s%s", prefix, detail);
}

/* Parses the execd JSON body; answers execd's 400 on malformed JSON or a non-object. */
static json_t *execd_body(struct req *r, bool allow_empty, enum MHD_Result *ret)
{
  if (allow_empty && r->body.len == 0)
    return json_object();
  json_error_t je;
  json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
  if (j == NULL || !json_is_object(j)) {
    json_decref(j);
    *ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                      "error parsing request, MAYBE invalid body format. %s",
                      j == NULL ? je.text : "expected a JSON object");
    return NULL;
  }
  return j;
}

static char *uuid4(void)
{
  char h[33];
  sbx_random_hex(h, 32);
  h[12] = '4';
  h[16] = "89ab"[(h[16] >= 'a' ? h[16] - 'a' + 10 : h[16] - '0') & 3];
  return xasprintf("%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

static const char *signal_word(int sig)
{
  switch (sig) {
  case SIGKILL:
    return "killed";
  case SIGTERM:
    return "terminated";
  case SIGINT:
    return "interrupt";
  case SIGHUP:
    return "hangup";
  case SIGSEGV:
    return "segmentation fault";
  case SIGABRT:
    return "aborted";
  case SIGPIPE:
    return "broken pipe";
  default:
    return NULL;
  }
}

/* ---- jobs: one command (or session run) feeding one event stream ---- */

struct job {
  struct box *b;
  struct stream *s;
  char *command;
  char *cwd;
  sbx_strv_t env;
  sbx_strv_t argv;
  double timeout;
  bool no_timeout, background, merge;
  struct sbxd_lines out, err;
  bool started;
  char cmd_id[65];
  char session[37]; /* a session run */
  char *state_file;
};

static void job_free(struct job *j)
{
  free(j->command);
  free(j->cwd);
  sbx_strv_free(&j->env);
  sbx_strv_free(&j->argv);
  sbxd_lines_free(&j->out);
  sbxd_lines_free(&j->err);
  free(j->state_file);
  free(j);
}

static void emit_line(struct job *j, const char *type, const char *line, size_t len)
{
  json_t *f = json_object();
  json_object_set_new(f, "text", len ? sbxd_jstr(line, len) : json_string("\n"));
  stream_event(j->s, type, f);
}

static void emit_stdout(void *arg, const char *line, size_t len)
{
  emit_line(arg, "stdout", line, len);
}

static void emit_stderr(void *arg, const char *line, size_t len)
{
  emit_line(arg, "stderr", line, len);
}

static int job_on_start(void *arg, const char *id)
{
  struct job *j = arg;
  snprintf(j->cmd_id, sizeof j->cmd_id, "%s", id);
  j->started = true;
  if (j->session[0]) {
    pthread_mutex_lock(&j->b->lock);
    for (struct session *s = j->b->sessions; s; s = s->next)
      if (strcmp(s->id, j->session) == 0)
        snprintf(s->run_id, sizeof s->run_id, "%s", id);
    pthread_mutex_unlock(&j->b->lock);
  }
  stream_event(j->s, "init", json_pack("{s:s}", "text", j->session[0] ? j->session : id));
  stream_event(j->s, "ping", json_pack("{s:s}", "text", "pong"));
  stream_started(j->s);
  return 0;
}

static int job_on_output(void *arg, int which, const char *data, size_t len)
{
  struct job *j = arg;
  if (stream_detached(j->s))
    return 1; /* nobody is listening: stop delivery, the command runs on */
  if (which == 1)
    sbxd_lines_feed(&j->out, data, len, emit_stdout, j);
  else
    sbxd_lines_feed(&j->err, data, len, emit_stderr, j);
  return 0;
}

static void error_event(struct stream *s, const char *evalue, const char *trace)
{
  json_t *e = json_object();
  json_object_set_new(e, "ename", json_string("CommandExecError"));
  json_object_set_new(e, "evalue", sbxd_jstr(evalue, strlen(evalue)));
  json_t *tb = json_array();
  json_array_append_new(tb, sbxd_jstr(trace, strlen(trace)));
  /* A timeout is a kill like any other in evalue ("-1", what Go's execd reports and the SDKs
   * read as the exit code), and says so in the traceback: the deadline information a client
   * needs before it may report 124 (seed 000). */
  if (strcmp(trace, "signal: killed (timeout)") == 0) {
    json_array_clear(tb);
    json_array_append_new(tb, json_string("signal: killed"));
    json_array_append_new(tb, json_string("context deadline exceeded"));
  }
  json_object_set_new(e, "traceback", tb);
  json_t *f = json_object();
  json_object_set_new(f, "error", e);
  stream_event(s, "error", f);
}

static void terminal_event(struct job *j, const struct sbx_exec_result *res)
{
  char value[32], trace[96];
  if (res->timed_out) {
    error_event(j->s, "-1", j->session[0] ? "timeout" : "signal: killed (timeout)");
  } else if (res->exit_code < 0) {
    const char *w = signal_word(-res->exit_code);
    if (w)
      snprintf(trace, sizeof trace, "signal: %s", w);
    else
      snprintf(trace, sizeof trace, "signal: %d", -res->exit_code);
    error_event(j->s, "-1", trace);
  } else if (res->exit_code > 0) {
    snprintf(value, sizeof value, "%d", res->exit_code);
    if (j->session[0])
      snprintf(trace, sizeof trace, "command exited with code %d", res->exit_code);
    else
      snprintf(trace, sizeof trace, "exit status %d", res->exit_code);
    error_event(j->s, value, trace);
  } else {
    json_t *f = json_object();
    if (res->duration_ms > 0)
      json_object_set_new(f, "execution_time", json_integer((json_int_t) res->duration_ms));
    stream_event(j->s, "execution_complete", f);
  }
}

static void session_update(struct job *j);

static void *job_main(void *arg)
{
  struct job *j = arg;
  struct sbx_exec_opts o = {0};
  o.argv = (const char *const *) j->argv.v;
  o.env = (const char *const *) j->env.v;
  o.n_env = j->env.n;
  o.cwd = j->cwd;
  o.timeout = j->timeout;
  o.no_timeout = j->no_timeout;
  o.background = j->background;
  o.merge_output = j->merge;
  o.discard_output = true;
  o.on_start = job_on_start;
  o.on_output = job_on_output;
  o.arg = j;
  struct sbx_exec_result res;
  sbx_error_t err = NULL;
  int rc = sbx_execute_command(j->b->sb, NULL, &o, &res, &err);
  sbxd_lines_flush(&j->out, emit_stdout, j);
  sbxd_lines_flush(&j->err, emit_stderr, j);
  if (rc == 0 && !j->started)
    stream_started(j->s); /* never leave the handler waiting */
  if (rc < 0) {
    if (!j->started) {
      stream_failed(j->s, &err);
    } else {
      error_event(j->s, err->msg, err->msg);
      sbx_error_release(&err);
    }
  } else if (j->background) {
    stream_event(j->s, "execution_complete", NULL);
  } else {
    if (j->session[0])
      session_update(j);
    terminal_event(j, &res);
  }
  sbx_exec_result_free(&res);
  stream_finish(j->s);
  stream_unref(j->s);
  box_put(j->b);
  job_free(j);
  sbxd_worker_done();
  return NULL;
}

/* Starts the job and answers with its event stream, or with the error that kept the command
 * from starting (a bad working directory is a 400, as in execd). Takes j. */
static enum MHD_Result job_run(struct req *r, struct job *j)
{
  j->s = stream_new();
  j->b = box_ref(r->box);
  j->out.max_line = j->err.max_line = 1u << 20;
  struct stream *s = j->s;
  /* the response's reference first: the worker may finish (and drop its own) at once */
  struct MHD_Response *resp = stream_response(s, true);
  if (resp == NULL) {
    box_put(j->b);
    stream_unref(s);
    job_free(j);
    return MHD_NO;
  }
  sbxd_worker_start();
  if (sbxd_spawn(job_main, j) < 0) {
    sbxd_worker_done();
    box_put(j->b);
    stream_unref(s);
    job_free(j);
    MHD_destroy_response(resp);
    return sbxd_error(r, 500, "RUNTIME_ERROR", "error running commands: cannot start a thread");
  }
  sbx_error_t err = NULL;
  if (stream_wait_start(s, &err) < 0) {
    MHD_destroy_response(resp);
    int kind = err ? err->kind : SBX_E_INTERNAL;
    enum MHD_Result ret;
    if (kind == SBX_E_INVALID || kind == SBX_E_DENIED)
      ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY", "invalid request, validation error %s",
                       err ? err->msg : "");
    else if (kind == SBX_E_BUSY)
      ret = sbxd_error(r, 503, "RUNTIME_ERROR", "error running commands %s", err->msg);
    else
      ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error running commands %s", err ? err->msg : "");
    sbx_error_release(&err);
    return ret;
  }
  return sbxd_respond(r, 200, resp);
}

static char **shell_argv(const char *command, sbx_strv_t *argv)
{
  sbx_strv_push(argv, g.shell);
  sbx_strv_push(argv, "-c");
  sbx_strv_push(argv, command);
  return argv->v;
}

/* envs: {KEY: string} into "KEY=VALUE" strings; -1 on a bad shape. */
static int env_list(json_t *envs, sbx_strv_t *out, const char **bad)
{
  if (envs == NULL || json_is_null(envs))
    return 0;
  if (!json_is_object(envs)) {
    *bad = "envs must be an object of strings";
    return -1;
  }
  const char *k;
  json_t *v;
  json_object_foreach(envs, k, v)
  {
    if (!json_is_string(v)) {
      *bad = "envs values must be strings";
      return -1;
    }
    sbx_strv_push_owned(out, xasprintf("%s=%s", k, json_string_value(v)));
  }
  return 0;
}

/* timeout in ms: absent or 0 = none. */
static int parse_timeout(json_t *t, double *secs, bool *none)
{
  *none = true;
  *secs = 0;
  if (t == NULL || json_is_null(t))
    return 0;
  if (!json_is_integer(t) || json_integer_value(t) < 0)
    return -1;
  json_int_t ms = json_integer_value(t);
  if (ms > 0) {
    *none = false;
    *secs = (double) ms / 1000.0;
  }
  return 0;
}

static enum MHD_Result h_command(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = execd_body(r, false, &ret);
  if (body == NULL)
    return ret;
  const char *command = json_string_value(json_object_get(body, "command"));
  json_t *cwd = json_object_get(body, "cwd"), *bg = json_object_get(body, "background");
  json_t *uid = json_object_get(body, "uid"), *gid = json_object_get(body, "gid");
  const char *bad = NULL;
  struct job *j = xzalloc(sizeof *j);
  if (command == NULL || *command == '\0')
    bad = "command is required";
  else if (cwd && !json_is_null(cwd) && !json_is_string(cwd))
    bad = "cwd must be a string";
  else if (bg && !json_is_null(bg) && !json_is_boolean(bg))
    bad = "background must be a boolean";
  else if (parse_timeout(json_object_get(body, "timeout"), &j->timeout, &j->no_timeout) < 0)
    bad = "timeout must be a non-negative integer (milliseconds)";
  else if (gid && !json_is_null(gid) && (uid == NULL || json_is_null(uid)))
    bad = "uid is required when gid is provided";
  else if (uid && !json_is_null(uid))
    bad = "uid/gid are not supported by sbxd: commands run as the sandbox's root";
  else
    env_list(json_object_get(body, "envs"), &j->env, &bad);
  if (bad) {
    json_decref(body);
    job_free(j);
    return bad_request(r, "invalid request, validation error ", bad);
  }
  j->command = xstrdup(command);
  const char *c = json_string_value(cwd);
  if (c && *c)
    j->cwd = sbxd_path_clean(c);
  j->background = json_is_true(bg);
  shell_argv(j->command, &j->argv);
  json_decref(body);
  return job_run(r, j);
}

/* After an interrupt: SIGKILL whatever is still running 3 s later. */
struct grace {
  struct box *b;
  char id[65];
};

static void *grace_main(void *arg)
{
  struct grace *gr = arg;
  for (int i = 0; i < 30 && !atomic_load(&g.stopping); i++) {
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
    struct sbx_command_status st;
    if (sbx_command_status(gr->b->sb, gr->id, &st, NULL) < 0 || !st.running)
      goto out;
  }
  sbx_command_signal(gr->b->sb, gr->id, SIGKILL, NULL);
out:
  box_put(gr->b);
  free(gr);
  sbxd_worker_done();
  return NULL;
}

static struct session *session_find(struct box *b, const char *id)
{
  for (struct session *s = b->sessions; s; s = s->next)
    if (strcmp(s->id, id) == 0)
      return s;
  return NULL;
}

static enum MHD_Result h_interrupt(struct req *r)
{
  const char *id = sbxd_query(r, "id");
  if (id == NULL || *id == '\0')
    return sbxd_error(r, 400, "MISSING_QUERY", "missing query parameter 'id'");
  char run[65] = "";
  pthread_mutex_lock(&r->box->lock);
  struct session *s = session_find(r->box, id);
  if (s)
    snprintf(run, sizeof run, "%s", s->run_id);
  pthread_mutex_unlock(&r->box->lock);
  if (s && run[0] == '\0')
    return sbxd_empty(r, 200); /* an idle session: nothing to interrupt */
  const char *target = s ? run : id;
  sbx_error_t err = NULL;
  if (sbx_command_signal(r->box->sb, target, SIGTERM, &err) < 0) {
    bool missing = err->kind == SBX_E_NOT_FOUND || err->kind == SBX_E_INVALID;
    if (!missing)
      return sbxd_lib_error(r, &err);
    sbx_error_release(&err);
    if (s)
      return sbxd_empty(r, 200);
    return sbxd_error(r, 500, "RUNTIME_ERROR", "error interruptting code context. no such session");
  }
  struct grace *gr = xzalloc(sizeof *gr);
  gr->b = box_ref(r->box);
  snprintf(gr->id, sizeof gr->id, "%s", target);
  sbxd_worker_start();
  if (sbxd_spawn(grace_main, gr) < 0) {
    sbxd_worker_done();
    box_put(gr->b);
    free(gr);
  }
  return sbxd_empty(r, 200);
}

static enum MHD_Result h_status(struct req *r)
{
  const char *id = r->sub + strlen("/command/status/");
  struct sbx_command_status st;
  sbx_error_t err = NULL;
  if (sbx_command_status(r->box->sb, id, &st, &err) < 0) {
    if (err->kind == SBX_E_NOT_FOUND || err->kind == SBX_E_INVALID) {
      sbx_error_release(&err);
      return sbxd_error(r, 404, "INVALID_REQUEST_BODY", "command not found: %s", id);
    }
    return sbxd_lib_error(r, &err);
  }
  json_t *j = json_object();
  json_object_set_new(j, "id", json_string(st.id));
  json_object_set_new(j, "running", json_boolean(st.running));
  if (!st.running) {
    int code = st.timed_out || st.exit_code < 0 ? -1 : st.exit_code;
    json_object_set_new(j, "exit_code", json_integer(code));
    if (st.timed_out) {
      json_object_set_new(j, "error", json_string("signal: killed"));
    } else if (st.exit_code < 0) {
      const char *w = signal_word(-st.exit_code);
      char buf[64];
      snprintf(buf, sizeof buf, "signal: %s", w ? w : "unknown");
      json_object_set_new(j, "error", json_string(buf));
    } else if (st.exit_code > 0) {
      char buf[64];
      snprintf(buf, sizeof buf, "exit status %d", st.exit_code);
      json_object_set_new(j, "error", json_string(buf));
    }
  }
  json_object_set_new(j, "started_at", sbxd_jtime((int64_t) st.started_ms));
  if (!st.running && st.finished_ms)
    json_object_set_new(j, "finished_at", sbxd_jtime((int64_t) st.finished_ms));
  return sbxd_json(r, 200, j);
}

/* Runs fn into a memfd and returns the bytes (for small results). */
static int read_memfd(int fd, sbx_buf_t *out)
{
  off_t size = lseek(fd, 0, SEEK_END);
  if (size < 0 || lseek(fd, 0, SEEK_SET) < 0)
    return -1;
  sbx_buf_reserve(out, (size_t) size + 1);
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    if (n == 0)
      return 0;
    sbx_buf_append(out, buf, (size_t) n);
  }
}

static enum MHD_Result h_logs(struct req *r)
{
  const char *p = r->sub + strlen("/command/");
  const char *slash = strchr(p, '/');
  cleanup_free char *id = xstrndup(p, slash ? (size_t) (slash - p) : strlen(p));
  const char *cs = sbxd_query(r, "cursor");
  int64_t cursor = 0;
  if (cs && *cs && (!sbxd_parse_i64(cs, &cursor) || cursor < 0))
    return bad_request(r, "invalid cursor: ", cs);
  cleanup_close int fd = memfd_create("sbxd-logs", MFD_CLOEXEC);
  if (fd < 0)
    return sbxd_error(r, 500, "RUNTIME_ERROR", "memfd: %s", strerror(errno));
  uint64_t next = 0;
  sbx_error_t err = NULL;
  if (sbx_command_logs(r->box->sb, id, (uint64_t) cursor, fd, &next, &err) < 0) {
    if (err->kind == SBX_E_NOT_FOUND || err->kind == SBX_E_INVALID) {
      enum MHD_Result ret = bad_request(r, "command not found or not a background command: ", id);
      sbx_error_release(&err);
      return ret;
    }
    return sbxd_lib_error(r, &err);
  }
  sbx_buf_t b = {0};
  if (read_memfd(fd, &b) < 0) {
    sbx_buf_free(&b);
    return sbxd_error(r, 500, "RUNTIME_ERROR", "read logs: %s", strerror(errno));
  }
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(b.len, b.data ? b.data : xstrdup(""), MHD_RESPMEM_MUST_FREE);
  char cur[32];
  snprintf(cur, sizeof cur, "%llu", (unsigned long long) next);
  MHD_add_response_header(resp, "Content-Type", "text/plain; charset=utf-8");
  MHD_add_response_header(resp, "EXECD-COMMANDS-TAIL-CURSOR", cur);
  return sbxd_respond(r, 200, resp);
}

/* ---- bash sessions: cwd and exported variables carried from one run to the next ---- */

void sbxd_sessions_free(struct box *b)
{
  struct session *s = b->sessions;
  while (s) {
    struct session *next = s->next;
    free(s->cwd);
    json_decref(s->env);
    free(s);
    s = next;
  }
  b->sessions = NULL;
}

static char *state_path(const char *sid)
{
  return xasprintf("/tmp/.sbxd-session-%s", sid);
}

static enum MHD_Result h_session_create(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = execd_body(r, true, &ret);
  if (body == NULL)
    return ret;
  json_t *cwd = json_object_get(body, "cwd");
  if (cwd && !json_is_null(cwd) && !json_is_string(cwd)) {
    json_decref(body);
    return bad_request(r, "invalid request, validation error ", "cwd must be a string");
  }
  const char *c = json_string_value(cwd);
  cleanup_free char *clean = c && *c ? sbxd_path_clean(c) : NULL;
  json_decref(body);
  if (clean) {
    sbx_error_t err = NULL;
    if (sbx_mkdir(r->box->sb, clean, 0755, NULL, &err) < 0) {
      ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error creating session: %s", err->msg);
      sbx_error_release(&err);
      return ret;
    }
  }
  struct session *s = xzalloc(sizeof *s);
  cleanup_free char *id = uuid4();
  snprintf(s->id, sizeof s->id, "%s", id);
  s->cwd = steal_pointer(&clean);
  s->env = json_object();
  pthread_mutex_lock(&r->box->lock);
  s->next = r->box->sessions;
  r->box->sessions = s;
  pthread_mutex_unlock(&r->box->lock);
  return sbxd_json(r, 200, json_pack("{s:s}", "session_id", s->id));
}

static bool persisted_key(const char *k)
{
  static const char *const skip[] = {"PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "_", "SHLVL"};
  for (size_t i = 0; i < ARRAY_SIZE(skip); i++)
    if (strcmp(k, skip[i]) == 0)
      return false;
  return sbx_env_key_valid(k, strlen(k));
}

/* Reads the state the run's EXIT trap left: the cwd, then NUL-separated KEY=VALUE. */
static void session_update(struct job *j)
{
  cleanup_close int fd = memfd_create("sbxd-session", MFD_CLOEXEC);
  if (fd < 0 || sbx_read_range(j->b->sb, j->state_file, 0, 1u << 20, fd, NULL, NULL, NULL) < 0)
    return;
  sbx_buf_t b = {0};
  if (read_memfd(fd, &b) < 0 || b.len == 0 || memchr(b.data, '\0', b.len) == NULL) {
    sbx_buf_free(&b);
    return;
  }
  json_t *env = json_object();
  const char *cwd = b.data;
  size_t off = strlen(cwd) + 1;
  while (off < b.len) {
    const char *kv = b.data + off;
    size_t len = strnlen(kv, b.len - off);
    off += len + 1;
    const char *eq = memchr(kv, '=', len);
    if (eq == NULL)
      continue;
    cleanup_free char *k = xstrndup(kv, (size_t) (eq - kv));
    size_t vlen = len - (size_t) (eq - kv) - 1;
    if (!persisted_key(k) || vlen > SESSION_ENV_VALUE_MAX)
      continue;
    json_object_set_new(env, k, sbxd_jstr(eq + 1, vlen));
  }
  pthread_mutex_lock(&j->b->lock);
  struct session *s = session_find(j->b, j->session);
  if (s) {
    if (*cwd == '/') {
      free(s->cwd);
      s->cwd = xstrdup(cwd);
    }
    json_decref(s->env);
    s->env = json_incref(env);
    s->run_id[0] = '\0';
  }
  pthread_mutex_unlock(&j->b->lock);
  json_decref(env);
  sbx_buf_free(&b);
}

static enum MHD_Result h_session_run(struct req *r)
{
  const char *p = r->sub + strlen("/session/");
  cleanup_free char *sid = xstrndup(p, strcspn(p, "/"));
  enum MHD_Result ret;
  json_t *body = execd_body(r, false, &ret);
  if (body == NULL)
    return ret;
  const char *command = json_string_value(json_object_get(body, "command"));
  json_t *cwd = json_object_get(body, "cwd");
  struct job *j = xzalloc(sizeof *j);
  const char *bad = NULL;
  if (command == NULL || *command == '\0')
    bad = "command is required";
  else if (cwd && !json_is_null(cwd) && !json_is_string(cwd))
    bad = "cwd must be a string";
  else if (parse_timeout(json_object_get(body, "timeout"), &j->timeout, &j->no_timeout) < 0)
    bad = "timeout must be a non-negative integer (milliseconds)";
  if (bad) {
    json_decref(body);
    job_free(j);
    return bad_request(r, "invalid request, validation error ", bad);
  }
  const char *c = json_string_value(cwd);
  cleanup_free char *run_cwd = c && *c ? sbxd_path_clean(c) : NULL;
  sbx_buf_t script = {0};
  pthread_mutex_lock(&r->box->lock);
  struct session *s = session_find(r->box, sid);
  if (s) {
    size_t n = json_object_size(s->env), k = 0;
    const char **keys = xzalloc((n + 1) * sizeof *keys);
    const char *key;
    json_t *v;
    json_object_foreach(s->env, key, v) keys[k++] = key;
    qsort(keys, k, sizeof *keys, sbx_strcmp_p);
    for (size_t i = 0; i < k; i++) {
      cleanup_free char *q = sbx_shell_quote(json_string_value(json_object_get(s->env, keys[i])));
      sbx_buf_printf(&script, "export %s=%s\n", keys[i], q);
    }
    free(keys);
    const char *dir = run_cwd ? run_cwd : s->cwd;
    if (dir) {
      cleanup_free char *q = sbx_shell_quote(dir);
      sbx_buf_printf(&script, "cd %s\n", q);
    }
  }
  pthread_mutex_unlock(&r->box->lock);
  if (s == NULL) {
    sbx_buf_free(&script);
    json_decref(body);
    job_free(j);
    return sbxd_error(r, 404, "CONTEXT_NOT_FOUND", "session %s not found", sid);
  }
  j->state_file = state_path(sid);
  cleanup_free char *qstate = sbx_shell_quote(j->state_file);
  sbx_buf_printf(&script,
                 "__sbxd_save() { { printf '%%s\\0' \"$PWD\"; /usr/bin/env -0; } > %s 2>/dev/null; "
                 "}\ntrap __sbxd_save EXIT\n%s\n",
                 qstate, command);
  json_decref(body);
  snprintf(j->session, sizeof j->session, "%s", sid);
  j->merge = true;
  sbx_strv_push(&j->argv, "bash");
  sbx_strv_push(&j->argv, "--noprofile");
  sbx_strv_push(&j->argv, "--norc");
  if (script.len < SCRIPT_ARG_MAX) {
    sbx_strv_push(&j->argv, "-c");
    sbx_strv_push(&j->argv, script.data);
  } else {
    /* too long for one argument: hand bash a script file */
    cleanup_free char *path = xasprintf("%s.sh", j->state_file);
    sbx_error_t err = NULL;
    if (sbx_write_file_mode(r->box->sb, path, script.data, script.len, -1, 0600, &err) < 0) {
      sbx_buf_free(&script);
      job_free(j);
      return sbxd_lib_error(r, &err);
    }
    sbx_strv_push(&j->argv, path);
  }
  sbx_buf_free(&script);
  return job_run(r, j);
}

static enum MHD_Result h_session_delete(struct req *r)
{
  const char *sid = r->sub + strlen("/session/");
  pthread_mutex_lock(&r->box->lock);
  struct session *found = NULL;
  for (struct session **pp = &r->box->sessions; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->id, sid) == 0) {
      found = *pp;
      *pp = found->next;
      break;
    }
  pthread_mutex_unlock(&r->box->lock);
  if (found == NULL)
    return sbxd_error(r, 404, "CONTEXT_NOT_FOUND", "session %s not found", sid);
  if (found->run_id[0])
    sbx_command_signal(r->box->sb, found->run_id, SIGKILL, NULL);
  cleanup_free char *state = state_path(found->id);
  sbx_remove(r->box->sb, state, 0, NULL);
  free(found->cwd);
  json_decref(found->env);
  free(found);
  return sbxd_empty(r, 200);
}

/* ---- metrics ---- */

static json_t *metrics_json(struct box *b, sbx_error_t *err)
{
  struct sbx_metrics m;
  if (sbx_metrics(b->sb, &m, err) < 0)
    return NULL;
  uint64_t now = sbx_now_ms();
  pthread_mutex_lock(&b->lock);
  double prev = b->cpu_prev_s;
  uint64_t prev_at = b->cpu_prev_at;
  pthread_mutex_unlock(&b->lock);
  if (prev_at == 0 || now - prev_at < 200 || now - prev_at > 10000) {
    /* no recent sample: take one over 250 ms (execd samples for a second) */
    prev = m.cpu_usage_s;
    prev_at = now;
    struct timespec ts = {0, 250 * 1000000};
    nanosleep(&ts, NULL);
    if (sbx_metrics(b->sb, &m, err) < 0)
      return NULL;
    now = sbx_now_ms();
  }
  double elapsed = (double) (now - prev_at) / 1000.0;
  double pct =
      elapsed > 0 && m.cpu_count > 0 ? (m.cpu_usage_s - prev) / (elapsed * m.cpu_count) * 100.0 : 0;
  if (pct < 0)
    pct = 0;
  if (pct > 100)
    pct = 100;
  pthread_mutex_lock(&b->lock);
  b->cpu_prev_s = m.cpu_usage_s;
  b->cpu_prev_at = now;
  pthread_mutex_unlock(&b->lock);
  double total = (double) m.mem_limit / 1048576.0, used = (double) m.mem_used / 1048576.0;
  if (used > total)
    used = total;
  return json_pack("{s:f,s:f,s:f,s:f,s:I}", "cpu_count", m.cpu_count, "cpu_used_pct", pct,
                   "mem_total_mib", total, "mem_used_mib", used, "timestamp",
                   (json_int_t) sbxd_now_ms());
}

static enum MHD_Result h_metrics(struct req *r)
{
  sbx_error_t err = NULL;
  json_t *j = metrics_json(r->box, &err);
  if (j == NULL) {
    enum MHD_Result ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error reading metrics: %s",
                                     err ? err->msg : "unknown");
    sbx_error_release(&err);
    return ret;
  }
  return sbxd_json(r, 200, j);
}

struct watch {
  struct box *b;
  struct stream *s;
};

static void *watch_main(void *arg)
{
  struct watch *w = arg;
  while (!stream_detached(w->s) && !atomic_load(&g.stopping)) {
    sbx_error_t err = NULL;
    json_t *j = metrics_json(w->b, &err);
    sbx_error_release(&err);
    if (j == NULL)
      break;
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (text) {
      stream_raw(w->s, text, strlen(text));
      stream_raw(w->s, "\n", 1);
      free(text);
    }
    for (int i = 0; i < 10 && !stream_detached(w->s) && !atomic_load(&g.stopping); i++) {
      struct timespec ts = {0, 100 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  stream_finish(w->s);
  stream_unref(w->s);
  box_put(w->b);
  free(w);
  sbxd_worker_done();
  return NULL;
}

static enum MHD_Result h_metrics_watch(struct req *r)
{
  struct watch *w = xzalloc(sizeof *w);
  w->b = box_ref(r->box);
  w->s = stream_new();
  struct MHD_Response *resp = stream_response(w->s, false);
  sbxd_worker_start();
  if (sbxd_spawn(watch_main, w) < 0) {
    sbxd_worker_done();
    MHD_destroy_response(resp);
    stream_unref(w->s);
    box_put(w->b);
    free(w);
    return sbxd_error(r, 500, "RUNTIME_ERROR", "cannot start a thread");
  }
  return sbxd_respond(r, 200, resp);
}

static enum MHD_Result h_ping(struct req *r)
{
  struct sbx_file_info fi;
  sbx_error_t err = NULL;
  if (sbx_stat(r->box->sb, "/", &fi, &err) < 0) {
    enum MHD_Result ret =
        sbxd_error(r, 503, "RUNTIME_ERROR", "sandbox is not answering: %s", err->msg);
    sbx_error_release(&err);
    return ret;
  }
  free(fi.path);
  return sbxd_empty(r, 200);
}

/* ---- dispatch ---- */

static enum MHD_Result later(struct req *r, req_fn fn, uint64_t cap)
{
  r->done = fn;
  r->body_max = cap;
  return MHD_YES;
}

static bool starts(const char *s, const char *prefix)
{
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

enum MHD_Result sbxd_execd_begin(struct req *r)
{
  if (r->port != SBXD_EXECD_PORT)
    return sbxd_proxy_begin(r);
  const char *sub = r->sub, *m = r->method;
  bool get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0, post = strcmp(m, "POST") == 0,
       del = strcmp(m, "DELETE") == 0;
  /* execd's own port proxy: /proxy/{port}/... */
  if (starts(sub, "/proxy/")) {
    const char *ps = sub + 7;
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
  if (sbxd_box_paused(r->box))
    return sbxd_error(r, 409, "SANDBOX_PAUSED",
                      "sandbox %s is paused; resume it before using its execd API", r->box->id);
  if (strcmp(sub, "/ping") == 0)
    return get ? later(r, h_ping, 0) : sbxd_error(r, 405, "NOT_SUPPORTED", "method not allowed");
  if (strcmp(sub, "/command") == 0) {
    if (post)
      return later(r, h_command, SBXD_BODY_EXECD);
    if (del)
      return later(r, h_interrupt, 0);
  }
  if (starts(sub, "/command/status/") && get && strlen(sub) > 16)
    return later(r, h_status, 0);
  if (starts(sub, "/command/") && get && sbx_str_has_suffix(sub, "/logs") &&
      strchr(sub + 9, '/') == sub + strlen(sub) - 5)
    return later(r, h_logs, 0);
  if (strcmp(sub, "/session") == 0 && post)
    return later(r, h_session_create, SBXD_BODY_EXECD);
  if (starts(sub, "/session/")) {
    const char *rest = sub + 9;
    const char *slash = strchr(rest, '/');
    if (slash && strcmp(slash, "/run") == 0 && post && slash > rest)
      return later(r, h_session_run, SBXD_BODY_EXECD);
    if (slash == NULL && *rest && del)
      return later(r, h_session_delete, 0);
  }
  if (strcmp(sub, "/metrics") == 0 && get)
    return later(r, h_metrics, 0);
  if (strcmp(sub, "/metrics/watch") == 0 && get)
    return later(r, h_metrics_watch, 0);
  if (starts(sub, "/files") || starts(sub, "/directories"))
    return sbxd_files_begin(r, sub);
  if (starts(sub, "/code") || starts(sub, "/pty"))
    return sbxd_error(r, 501, "NOT_SUPPORTED",
                      "%s is not supported by sbxd (no code interpreter or PTY)", sub);
  return sbxd_error(r, 404, "NOT_FOUND", "no execd route for %s %s", m, sub);
}
