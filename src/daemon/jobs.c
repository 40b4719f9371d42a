/* One command (or bash session run) feeding one event stream, as execd does: a worker thread
 * runs sbx_execute_command with on_start/on_output callbacks and turns output into execd's
 * events: one event per line, then execution_complete, or an error event whose evalue is the
 * exit code. The HTTP response only starts once the command has started (so a bad working
 * directory is a plain 400) and then drains the worker's queue. A client that disconnects
 * detaches from the queue, and a foreground command's process group is killed (sbxd_watch:
 * the command of a caller that went away is nobody's); a background one runs on. */
#include "jobs.h"
#include "ctx.h"
#include "registry.h"
#include "stream.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

enum MHD_Result execd_bad_request(struct req *r, const char *prefix, const char *detail)
{
  return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "%s%s", prefix, detail);
}

const char *signal_word(int sig)
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

/* ---- jobs ---- */

void job_free(struct job *j)
{
  free(j->command);
  free(j->cwd);
  sbx__strv_free(&j->env);
  sbx__strv_free(&j->argv);
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
  sbxd_watch_command(j->watch, id);
  if (j->session[0]) {
    pthread_mutex_lock(&j->b->lock);
    struct session *s = box_session_find(j->b, j->session);
    if (s)
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
  sbxd_watch_stop(j->watch);
  j->watch = NULL;
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
    if (j->on_exit)
      j->on_exit(j);
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

enum MHD_Result job_run(struct req *r, struct job *j)
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
  if (!j->background)
    j->watch = sbxd_watch_start(r->conn, j->b->sb, NULL, NULL);
  if (sbxd_spawn(job_main, j) < 0) {
    sbxd_worker_done();
    sbxd_watch_stop(j->watch);
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

/* timeout in ms: absent or 0 = none. */
int parse_timeout(json_t *t, double *secs, bool *none)
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

int read_memfd(int fd, sbx_buf_t *out)
{
  off_t size = lseek(fd, 0, SEEK_END);
  if (size < 0 || lseek(fd, 0, SEEK_SET) < 0)
    return -1;
  sbx__buf_reserve(out, (size_t) size + 1);
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    if (n == 0)
      return 0;
    sbx__buf_append(out, buf, (size_t) n);
  }
}
