/* The AIO sandbox API's commands (agent-infra/sandbox's openapi.json):
 *
 *   POST   /v1/shell/exec {command, id?, exec_dir?, no_change_timeout?, hard_timeout?,
 *                          timeout?, async_mode?}           -> ShellCommandResult
 *   POST   /v1/shell/sessions/create {id?, exec_dir?}       -> {session_id, working_dir}
 *   GET    /v1/shell/sessions                               -> {sessions: {id: {...}}}
 *   DELETE /v1/shell/sessions/{session_id}
 *   POST   /v1/shell/view|wait|kill {id?}                  the session's last command
 *   POST   /v1/bash/exec {command, env?, session_id?, exec_dir?, hard_timeout?, ...}
 *                                                           -> BashExecResult
 *
 * A shell session is a persistent shell as far as a command can tell: each command runs in a
 * fresh shell that first restores the session's working directory and exported variables and
 * saves them again when it exits (a state file in the sandbox's /tmp). Without an id, commands
 * share the box's default session, as the AIO sandbox's single persistent shell. The output is
 * stdout and stderr merged, as on the AIO sandbox's terminal.
 *
 * no_change_timeout: the request waits while the command writes; once nothing new arrived for
 * that many seconds (default 120, as the AIO sandbox's) it answers status "no_change_timeout"
 * with the output so far and the command keeps running. hard_timeout kills it ("hard_timeout").
 * bash.exec runs in a fresh session unless session_id names one (whose exec_dir is kept); its
 * env reaches that one command only and never persists; stdout and stderr stay apart. */
#include "aio.h"
#include "ctx.h"
#include "registry.h"
#include "stream.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#define DEFAULT_SESSION "default"
#define DEFAULT_NO_CHANGE_S 120
#define OUTPUT_CAP (10u << 20) /* bytes of output kept per command (sbx's execute_command cap) */
#define BASH_DEFAULT_MAX_OUTPUT 50000

static char *uuid4(void)
{
  char h[33];
  sbx__random_hex(h, 32);
  h[12] = '4';
  h[16] = "89ab"[(h[16] >= 'a' ? h[16] - 'a' + 10 : h[16] - '0') & 3];
  return xasprintf("%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

static char *state_file(const char *sid)
{
  /* session ids are checked (id_ok) before they name a file */
  return xasprintf("/tmp/.sbxd-aio-session-%s", sid);
}

static bool id_ok(const char *s)
{
  size_t n = strlen(s);
  if (n == 0 || n > 36)
    return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '-' || *p == '_'))
      return false;
  return true;
}

static enum MHD_Result not_found(struct req *r, const char *sid)
{
  char msg[96];
  snprintf(msg, sizeof msg, "Session %s not found", sid);
  return sbxd_json(
      r, 404,
      json_pack("{s:b,s:o,s:n}", "success", 0, "message", sbxd_jstr(msg, strlen(msg)), "data"));
}

/* The session sid of r->box, made when missing and create is set; NULL if not found. The cwd
 * is a copy (the caller frees it). */
static bool session_get(struct box *b, const char *sid, bool create, char **cwd)
{
  *cwd = NULL;
  pthread_mutex_lock(&b->lock);
  struct session *s = box_session_find(b, sid);
  if (s && s->cwd)
    *cwd = xstrdup(s->cwd);
  pthread_mutex_unlock(&b->lock);
  if (s || !create)
    return s != NULL;
  s = xzalloc(sizeof *s);
  snprintf(s->id, sizeof s->id, "%s", sid);
  s->env = json_object();
  pthread_mutex_lock(&b->lock);
  bool raced = box_session_find(b, sid) != NULL;
  pthread_mutex_unlock(&b->lock);
  if (raced)
    session_free(s);
  else
    box_session_add(b, s);
  return true;
}

static void session_set_cwd(struct box *b, const char *sid, const char *cwd)
{
  pthread_mutex_lock(&b->lock);
  struct session *s = box_session_find(b, sid);
  if (s) {
    free(s->cwd);
    s->cwd = xstrdup(cwd);
  }
  pthread_mutex_unlock(&b->lock);
}

/* ---- a shell command with no_change_timeout ---- */

struct run {
  pthread_mutex_t m;
  pthread_cond_t c;
  int refs;
  struct box *b;
  char *script;
  double hard_timeout; /* 0: none */
  sbx_buf_t out;
  uint64_t total;
  uint64_t last_change_ms;
  bool done, timed_out, failed;
  int exit_code;
  char *error;
  char cmd_id[33]; /* for /v1/shell/kill */
  char *command;
};

static uint64_t mono_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

static void run_put(struct run *run)
{
  pthread_mutex_lock(&run->m);
  bool last = --run->refs == 0;
  pthread_mutex_unlock(&run->m);
  if (!last)
    return;
  box_put(run->b);
  free(run->script);
  free(run->error);
  free(run->command);
  sbx__buf_free(&run->out);
  pthread_cond_destroy(&run->c);
  pthread_mutex_destroy(&run->m);
  free(run);
}

static int on_output(void *arg, int stream, const char *data, size_t len)
{
  (void) stream;
  struct run *run = arg;
  pthread_mutex_lock(&run->m);
  size_t room = run->out.len < OUTPUT_CAP ? OUTPUT_CAP - run->out.len : 0;
  sbx__buf_append(&run->out, data, len < room ? len : room);
  run->total += len;
  run->last_change_ms = mono_ms();
  pthread_cond_broadcast(&run->c);
  pthread_mutex_unlock(&run->m);
  return 0;
}

static void *run_main(void *arg)
{
  struct run *run = arg;
  const char *argv[] = {srv.shell, "-c", run->script, NULL};
  struct sbx_exec_opts o = {.argv = argv,
                            .id = run->cmd_id,
                            .merge_output = true,
                            .on_output = on_output,
                            .arg = run,
                            .discard_output = true,
                            .timeout = run->hard_timeout,
                            .no_timeout = run->hard_timeout <= 0};
  struct sbx_exec_result res;
  sbx_error_t err = NULL;
  int rc = sbx_execute_command(run->b->sb, NULL, &o, &res, &err);
  pthread_mutex_lock(&run->m);
  run->done = true;
  if (rc < 0) {
    run->failed = true;
    run->error = xstrdup(err->msg);
    sbx_error_release(&err);
  } else {
    run->exit_code = res.exit_code;
    run->timed_out = res.timed_out;
    sbx_exec_result_free(&res);
  }
  pthread_cond_broadcast(&run->c);
  pthread_mutex_unlock(&run->m);
  run_put(run);
  sbxd_worker_done();
  return NULL;
}

/* The last command of each session, for view, wait and kill: a reference to its run. A box
 * that is gone drops its entries at the next lookup. */
struct last {
  struct box *b; /* compared, not referenced (the run holds the box) */
  char sid[37];
  struct run *run;
  struct last *next;
};
static struct last *lasts;
static pthread_mutex_t lasts_lock = PTHREAD_MUTEX_INITIALIZER;

static struct run *run_ref(struct run *run)
{
  pthread_mutex_lock(&run->m);
  run->refs++;
  pthread_mutex_unlock(&run->m);
  return run;
}

static void lasts_prune(void) /* under lasts_lock */
{
  for (struct last **pp = &lasts; *pp;) {
    struct last *l = *pp;
    pthread_mutex_lock(&l->run->m);
    bool stale = l->run->done && l->run->b->gone;
    pthread_mutex_unlock(&l->run->m);
    if (stale) {
      *pp = l->next;
      run_put(l->run);
      free(l);
    } else {
      pp = &l->next;
    }
  }
}

/* Records run as the last command of (b, sid); run NULL forgets it. */
static void last_set(struct box *b, const char *sid, struct run *run)
{
  struct run *old = NULL;
  pthread_mutex_lock(&lasts_lock);
  lasts_prune();
  struct last **pp = &lasts;
  while (*pp && !((*pp)->b == b && strcmp((*pp)->sid, sid) == 0))
    pp = &(*pp)->next;
  if (*pp) {
    old = (*pp)->run;
    if (run) {
      (*pp)->run = run_ref(run);
    } else {
      struct last *l = *pp;
      *pp = l->next;
      free(l);
    }
  } else if (run) {
    struct last *l = xzalloc(sizeof *l);
    l->b = b;
    snprintf(l->sid, sizeof l->sid, "%s", sid);
    l->run = run_ref(run);
    l->next = lasts;
    lasts = l;
  }
  pthread_mutex_unlock(&lasts_lock);
  if (old)
    run_put(old);
}

static struct run *last_get(struct box *b, const char *sid)
{
  struct run *run = NULL;
  pthread_mutex_lock(&lasts_lock);
  for (struct last *l = lasts; l && run == NULL; l = l->next)
    if (l->b == b && strcmp(l->sid, sid) == 0)
      run = run_ref(l->run);
  pthread_mutex_unlock(&lasts_lock);
  return run;
}

/* The AIO status of a run (caller holds run->m). */
static const char *run_status(struct run *run, bool waited_out, bool http_out)
{
  if (run->done)
    return run->failed ? "terminated" : run->timed_out ? "hard_timeout" : "completed";
  if (http_out)
    return "running";
  return waited_out ? "no_change_timeout" : "running";
}

/* The script of one command of session sid: restore, run, save on exit. */
static char *session_script(const char *sid, const char *dir, const char *command)
{
  cleanup_free char *st = state_file(sid);
  cleanup_free char *qst = sbx__shell_quote(st);
  sbx_buf_t b = {0};
  sbx__buf_printf(&b, "[ -f %s ] && . %s\n", qst, qst);
  if (dir) {
    cleanup_free char *q = sbx__shell_quote(dir);
    sbx__buf_printf(&b, "cd -- %s || exit 1\n", q);
  }
  /* the saved state is shell input: a quoted cd, then export -p. bash quotes with its own
   * printf (no process: this runs after every command); sh needs sed for it */
  if (strcmp(srv.shell, "bash") == 0)
    sbx__buf_printf(&b,
                    "__sbxd_aio_save() { { printf 'cd -- %%q\\n' \"$PWD\"; export -p; } > %s "
                    "2>/dev/null; }\n",
                    qst);
  else
    sbx__buf_printf(
        &b,
        "__sbxd_aio_save() { { printf \"cd -- '%%s'\\n\" \"$(pwd | sed \"s/'/'\\\\\\\\''/g\")\"; "
        "export -p; } > %s 2>/dev/null; }\n",
        qst);
  sbx__buf_printf(&b, "trap __sbxd_aio_save EXIT\n%s\n", command);
  return b.data;
}

static bool opt_number(json_t *v, double *out)
{
  if (v == NULL || json_is_null(v))
    return true;
  if (!json_is_number(v) || !(json_number_value(v) >= 0) || !isfinite(json_number_value(v)))
    return false;
  *out = json_number_value(v);
  return true;
}

enum MHD_Result h_aio_shell_exec(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  json_t *cmd = json_object_get(body, "command"), *id = json_object_get(body, "id"),
         *dir = json_object_get(body, "exec_dir"), *am = json_object_get(body, "async_mode");
  if (!json_is_string(cmd))
    return aio_invalid(r, "command", cmd ? "Input should be a valid string" : "Field required");
  if (id && !json_is_null(id) && !json_is_string(id))
    return aio_invalid(r, "id", "Input should be a valid string");
  if (dir && !json_is_null(dir) && (!json_is_string(dir) || json_string_value(dir)[0] != '/'))
    return aio_invalid(r, "exec_dir", "exec_dir must be an absolute path");
  if (am && !json_is_boolean(am))
    return aio_invalid(r, "async_mode", "Input should be a valid boolean");
  double nct = DEFAULT_NO_CHANGE_S, hard = 0, http_timeout = 0;
  json_t *ncv = json_object_get(body, "no_change_timeout");
  if (ncv && !json_is_null(ncv)) {
    if (!json_is_integer(ncv) || json_integer_value(ncv) < 1)
      return aio_invalid(r, "no_change_timeout", "no_change_timeout must be a positive integer");
    nct = (double) json_integer_value(ncv);
  }
  if (!opt_number(json_object_get(body, "hard_timeout"), &hard))
    return aio_invalid(r, "hard_timeout", "hard_timeout must be a non-negative number");
  if (!opt_number(json_object_get(body, "timeout"), &http_timeout))
    return aio_invalid(r, "timeout", "timeout must be a non-negative number");
  const char *sid =
      json_is_string(id) && *json_string_value(id) ? json_string_value(id) : DEFAULT_SESSION;
  if (!id_ok(sid))
    return aio_invalid(r, "id", "a session id is 1-36 letters, digits, '-' or '_'");
  cleanup_free char *cwd = NULL;
  if (!session_get(r->box, sid, strcmp(sid, DEFAULT_SESSION) == 0, &cwd))
    return not_found(r, sid);
  const char *command = json_string_value(cmd);

  struct run *run = xzalloc(sizeof *run);
  pthread_mutex_init(&run->m, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&run->c, &ca);
  pthread_condattr_destroy(&ca);
  run->refs = 2;
  run->b = box_ref(r->box);
  sbx__random_hex(run->cmd_id, 32);
  run->cmd_id[32] = '\0';
  run->command = xstrdup(command);
  last_set(r->box, sid, run);
  run->hard_timeout = hard;
  run->script = session_script(sid, json_string_value(dir) ? json_string_value(dir) : cwd, command);
  run->last_change_ms = mono_ms();
  sbxd_worker_start();
  if (sbxd_spawn(run_main, run) < 0) {
    sbxd_worker_done();
    last_set(r->box, sid, NULL);
    run_put(run); /* the worker's */
    run_put(run);
    return sbxd_error(r, 503, "BUSY", "cannot start a thread for the command");
  }
  uint64_t start = mono_ms();
  pthread_mutex_lock(&run->m);
  while (!run->done && !json_is_true(am)) {
    uint64_t until = run->last_change_ms + (uint64_t) (nct * 1000);
    if (http_timeout > 0 && start + (uint64_t) (http_timeout * 1000) < until)
      until = start + (uint64_t) (http_timeout * 1000);
    if (mono_ms() >= until)
      break;
    struct timespec ts = {.tv_sec = (time_t) (until / 1000),
                          .tv_nsec = (long) (until % 1000) * 1000000L};
    pthread_cond_timedwait(&run->c, &run->m, &ts);
  }
  bool http_out = json_is_true(am) ||
                  (http_timeout > 0 && mono_ms() >= start + (uint64_t) (http_timeout * 1000));
  const char *status = run_status(run, true, http_out);
  json_t *output = run->failed ? json_string(run->error)
                               : sbxd_jstr(run->out.data ? run->out.data : "", run->out.len);
  json_t *data = json_pack("{s:s,s:s,s:s,s:O,s:[{s:s,s:s,s:O}]}", "session_id", sid, "command",
                           command, "status", status, "output", output, "console", "ps1", "$ ",
                           "command", command, "output", output);
  if (run->done && !run->failed)
    json_object_set_new(data, "exit_code", json_integer(run->exit_code));
  else
    json_object_set_new(data, "exit_code", json_null());
  json_decref(output);
  pthread_mutex_unlock(&run->m);
  run_put(run);
  return aio_ok(r, data);
}

enum MHD_Result h_aio_shell_session_create(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = r->body.len == 0 ? json_object() : aio_body(r, &ret);
  if (body == NULL)
    return ret;
  json_t *id = json_object_get(body, "id"), *dir = json_object_get(body, "exec_dir");
  if (id && !json_is_null(id) && (!json_is_string(id) || !id_ok(json_string_value(id))))
    return aio_invalid(r, "id", "a session id is 1-36 letters, digits, '-' or '_'");
  if (dir && !json_is_null(dir) && (!json_is_string(dir) || json_string_value(dir)[0] != '/'))
    return aio_invalid(r, "exec_dir", "exec_dir must be an absolute path");
  cleanup_free char *gen = json_is_string(id) ? NULL : uuid4();
  const char *sid = gen ? gen : json_string_value(id);
  cleanup_free char *cwd = NULL;
  session_get(r->box, sid, true, &cwd);
  const char *wd = json_string_value(dir);
  if (wd) {
    cleanup_free char *clean = sbxd_path_clean(wd);
    session_set_cwd(r->box, sid, clean);
  }
  return aio_ok(r, json_pack("{s:s,s:s}", "session_id", sid, "working_dir",
                             wd    ? wd
                             : cwd ? cwd
                                   : "/mnt/user-data/workspace"));
}

enum MHD_Result h_aio_shell_sessions(struct req *r)
{
  json_t *all = json_object();
  pthread_mutex_lock(&r->box->lock);
  for (struct session *s = r->box->sessions; s; s = s->next)
    json_object_set_new(all, s->id,
                        json_pack("{s:s,s:s}", "session_id", s->id, "working_dir",
                                  s->cwd ? s->cwd : "/mnt/user-data/workspace"));
  pthread_mutex_unlock(&r->box->lock);
  return aio_ok(r, json_pack("{s:o}", "sessions", all));
}

enum MHD_Result h_aio_shell_session_delete(struct req *r)
{
  const char *sid = sbxd_param(r, "session_id");
  struct session *s = id_ok(sid) ? box_session_take(r->box, sid) : NULL;
  if (s == NULL)
    return not_found(r, sid);
  session_free(s);
  last_set(r->box, sid, NULL);
  cleanup_free char *st = state_file(sid);
  sbx_remove(r->box->sb, st, 0, NULL);
  return aio_ok(r, NULL);
}

/* ---- the last command of a session: view, wait, kill ---- */

/* The session named by the body's id (the default one without), its last run in *run (NULL:
 * none yet); NULL after answering. */
static const char *follow_session(struct req *r, json_t *body, struct run **run,
                                  enum MHD_Result *ret)
{
  json_t *id = json_object_get(body, "id");
  if (id && !json_is_null(id) && (!json_is_string(id) || !id_ok(json_string_value(id)))) {
    *ret = aio_invalid(r, "id", "a session id is 1-36 letters, digits, '-' or '_'");
    return NULL;
  }
  const char *sid = json_is_string(id) ? json_string_value(id) : DEFAULT_SESSION;
  cleanup_free char *cwd = NULL;
  if (!session_get(r->box, sid, strcmp(sid, DEFAULT_SESSION) == 0, &cwd)) {
    *ret = not_found(r, sid);
    return NULL;
  }
  *run = last_get(r->box, sid);
  return sid;
}

static json_t *run_view(struct run *run, const char *sid, bool waited_out)
{
  if (run == NULL)
    return json_pack("{s:s,s:s,s:s,s:[],s:n}", "session_id", sid, "output", "", "status",
                     "completed", "console", "exit_code");
  pthread_mutex_lock(&run->m);
  json_t *out = sbxd_jstr(run->out.data ? run->out.data : "", run->out.len);
  json_t *j = json_pack("{s:s,s:s,s:O,s:s,s:[{s:s,s:s,s:O}]}", "session_id", sid, "command",
                        run->command, "output", out, "status", run_status(run, waited_out, false),
                        "console", "ps1", "$ ", "command", run->command, "output", out);
  json_object_set_new(j, "exit_code",
                      run->done && !run->failed ? json_integer(run->exit_code) : json_null());
  pthread_mutex_unlock(&run->m);
  json_decref(out);
  return j;
}

enum MHD_Result h_aio_shell_view(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  struct run *run;
  const char *sid = follow_session(r, body, &run, &ret);
  if (sid == NULL)
    return ret;
  json_t *data = run_view(run, sid, false);
  if (run)
    run_put(run);
  return aio_ok(r, data);
}

enum MHD_Result h_aio_shell_wait(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  json_t *secs = json_object_get(body, "seconds"), *max = json_object_get(body, "max_wait_seconds");
  if ((secs && !json_is_null(secs) && (!json_is_integer(secs) || json_integer_value(secs) < 0)) ||
      (max && !json_is_null(max) && (!json_is_integer(max) || json_integer_value(max) < 0)))
    return aio_invalid(r, "seconds", "seconds and max_wait_seconds must be non-negative integers");
  struct run *run;
  const char *sid = follow_session(r, body, &run, &ret);
  if (sid == NULL)
    return ret;
  /* at most `seconds` (else max_wait_seconds, else the no-change default) */
  int64_t limit = json_is_integer(secs)  ? (int64_t) json_integer_value(secs)
                  : json_is_integer(max) ? (int64_t) json_integer_value(max)
                                         : DEFAULT_NO_CHANGE_S;
  const char *status = "completed";
  if (run) {
    uint64_t until = mono_ms() + (uint64_t) limit * 1000u;
    pthread_mutex_lock(&run->m);
    while (!run->done && mono_ms() < until) {
      struct timespec ts = {.tv_sec = (time_t) (until / 1000),
                            .tv_nsec = (long) (until % 1000) * 1000000L};
      pthread_cond_timedwait(&run->c, &run->m, &ts);
    }
    status = run_status(run, false, false);
    pthread_mutex_unlock(&run->m);
    run_put(run);
  }
  return aio_ok(r, json_pack("{s:s}", "status", status));
}

enum MHD_Result h_aio_shell_kill(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  struct run *run;
  const char *sid = follow_session(r, body, &run, &ret);
  if (sid == NULL)
    return ret;
  if (run == NULL)
    return aio_ok(r, json_pack("{s:s,s:n,s:n}", "status", "completed", "exit_code", "returncode"));
  pthread_mutex_lock(&run->m);
  bool done = run->done;
  pthread_mutex_unlock(&run->m);
  if (!done) {
    sbx_error_t err = NULL;
    if (sbx_command_signal(r->box->sb, run->cmd_id, SIGKILL, &err) < 0) {
      sbxd_log(SBXD_DEBUG, "kill %s: %s", run->cmd_id, err->msg); /* it may have just ended */
      sbx_error_release(&err);
    }
    /* the worker sees the command end */
    uint64_t until = mono_ms() + 5000;
    pthread_mutex_lock(&run->m);
    while (!run->done && mono_ms() < until) {
      struct timespec ts = {.tv_sec = (time_t) (until / 1000),
                            .tv_nsec = (long) (until % 1000) * 1000000L};
      pthread_cond_timedwait(&run->c, &run->m, &ts);
    }
    pthread_mutex_unlock(&run->m);
  }
  pthread_mutex_lock(&run->m);
  json_t *data = json_pack("{s:s}", "status", done ? run_status(run, false, false) : "terminated");
  json_t *code = done && !run->failed ? json_integer(run->exit_code) : json_null();
  json_object_set(data, "exit_code", code);
  json_object_set_new(data, "returncode", code);
  pthread_mutex_unlock(&run->m);
  run_put(run);
  return aio_ok(r, data);
}

/* ---- bash.exec ---- */

static json_t *capped(const char *s, size_t len, size_t max)
{
  return sbxd_jstr(s ? s : "", len < max ? len : max);
}

enum MHD_Result h_aio_bash_exec(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  json_t *cmd = json_object_get(body, "command"), *sidv = json_object_get(body, "session_id"),
         *dir = json_object_get(body, "exec_dir"), *env = json_object_get(body, "env"),
         *mol = json_object_get(body, "max_output_length");
  if (!json_is_string(cmd))
    return aio_invalid(r, "command", cmd ? "Input should be a valid string" : "Field required");
  if (sidv && !json_is_null(sidv) &&
      (!json_is_string(sidv) || (json_string_length(sidv) && !id_ok(json_string_value(sidv)))))
    return aio_invalid(r, "session_id", "a session id is 1-36 letters, digits, '-' or '_'");
  if (dir && !json_is_null(dir) && (!json_is_string(dir) || json_string_value(dir)[0] != '/'))
    return aio_invalid(r, "exec_dir", "exec_dir must be an absolute path");
  if (env && !json_is_null(env) && !json_is_object(env))
    return aio_invalid(r, "env", "Input should be a valid dictionary");
  if (mol && (!json_is_integer(mol) || json_integer_value(mol) < 1))
    return aio_invalid(r, "max_output_length", "max_output_length must be a positive integer");
  double hard = 0;
  if (!opt_number(json_object_get(body, "hard_timeout"), &hard))
    return aio_invalid(r, "hard_timeout", "hard_timeout must be a non-negative number");
  size_t max_out = mol ? (size_t) json_integer_value(mol) : BASH_DEFAULT_MAX_OUTPUT;
  sbx_strv_t envv = {0};
  const char *k;
  json_t *v;
  if (json_is_object(env))
    json_object_foreach(env, k, v)
    {
      if (json_is_null(v)) /* the SDK's Dict[str, Optional[str]]: a null sets nothing */
        continue;
      if (!json_is_string(v)) {
        sbx__strv_free(&envv);
        return aio_invalid(r, "env", "env values must be strings");
      }
      sbx__strv_push_owned(&envv, xasprintf("%s=%s", k, json_string_value(v)));
    }
  /* a named session keeps its exec_dir; without one each call is a fresh session */
  const char *named = json_string_length(sidv) ? json_string_value(sidv) : NULL;
  cleanup_free char *gen = named ? NULL : uuid4();
  const char *sid = named ? named : gen;
  cleanup_free char *cwd = NULL;
  if (named)
    session_get(r->box, sid, true, &cwd);
  cleanup_free char *clean = json_is_string(dir) ? sbxd_path_clean(json_string_value(dir)) : NULL;
  if (clean && named)
    session_set_cwd(r->box, sid, clean);
  char cmd_id[65] = "";
  struct sbx_exec_opts o = {.env = (const char *const *) envv.v,
                            .n_env = envv.n,
                            .cwd = clean ? clean : cwd,
                            .timeout = hard,
                            .no_timeout = hard <= 0,
                            .id_out = cmd_id};
  /* a client that goes away takes its command with it */
  struct sbxd_watch *w = sbxd_watch_start(r->conn, r->box->sb, NULL, NULL);
  o.on_start = sbxd_watch_command;
  o.arg = w;
  struct sbx_exec_result res;
  sbx_error_t err = NULL;
  int rc = sbx_execute_command(r->box->sb, json_string_value(cmd), &o, &res, &err);
  sbxd_watch_stop(w);
  sbx__strv_free(&envv);
  if (rc < 0) {
    int kind = err->kind;
    json_t *j = json_pack("{s:b,s:o,s:n}", "success", 0, "message",
                          sbxd_jstr(err->msg, strlen(err->msg)), "data");
    sbx_error_release(&err);
    return sbxd_json(r, sbxd_kind_status(kind), j);
  }
  json_t *data = json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:I,s:I}", "session_id", sid, "command_id",
                           cmd_id[0] ? cmd_id
                           : gen     ? gen
                                     : sid,
                           "command", json_string_value(cmd), "status",
                           res.timed_out  ? "timed_out"
                           : res.signaled ? "killed"
                                          : "completed",
                           "stdout", capped(res.out, res.out_len, max_out), "stderr",
                           capped(res.err, res.err_len, max_out), "offset",
                           (json_int_t) res.out_total, "stderr_offset", (json_int_t) res.err_total);
  if (!res.timed_out)
    json_object_set_new(data, "exit_code", json_integer(res.exit_code));
  else
    json_object_set_new(data, "exit_code", json_null());
  sbx_exec_result_free(&res);
  return aio_ok(r, data);
}
