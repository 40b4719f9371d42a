/* execd's commands: POST /command runs one (jobs.c streams its events), DELETE /command
 * interrupts it (SIGTERM, SIGKILL 3 s later), /command/status/{id} and /command/{id}/logs; and
 * /ping. */
#include "commands.h"
#include "ctx.h"
#include "jobs.h"
#include "registry.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static char **shell_argv(const struct box *b, const char *command, sbx_strv_t *argv)
{
  const char *image = json_string_value(json_object_get(b->extra, "image"));
  if (image && strcmp(image, "host") != 0) {
    /* an image: its bash if it has one, else its sh */
    sbx__strv_push(argv, "sh");
    sbx__strv_push(argv, "-c");
    sbx__strv_push(argv,
                   "command -v bash >/dev/null 2>&1 && exec bash -c \"$1\"; exec sh -c \"$1\"");
    sbx__strv_push(argv, "sh");
    sbx__strv_push(argv, command);
    return argv->v;
  }
  sbx__strv_push(argv, srv.shell);
  sbx__strv_push(argv, "-c");
  sbx__strv_push(argv, command);
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
    sbx__strv_push_owned(out, xasprintf("%s=%s", k, json_string_value(v)));
  }
  return 0;
}

enum MHD_Result h_command(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_OBJECT, &ret);
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
    job_free(j);
    return execd_bad_request(r, "invalid request, validation error ", bad);
  }
  j->command = xstrdup(command);
  const char *c = json_string_value(cwd);
  if (c && *c)
    j->cwd = sbxd_path_clean(c);
  j->background = json_is_true(bg);
  shell_argv(r->box, j->command, &j->argv);
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
  for (int i = 0; i < 30 && !atomic_load(&srv.stopping); i++) {
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

enum MHD_Result h_command_interrupt(struct req *r)
{
  const char *id = sbxd_query(r, "id");
  if (id == NULL || *id == '\0')
    return sbxd_error(r, 400, "MISSING_QUERY", "missing query parameter 'id'");
  char run[65] = "";
  pthread_mutex_lock(&r->box->lock);
  struct session *s = box_session_find(r->box, id);
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

enum MHD_Result h_command_status(struct req *r)
{
  const char *id = sbxd_param(r, "id");
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

enum MHD_Result h_command_logs(struct req *r)
{
  const char *id = sbxd_param(r, "id");
  const char *cs = sbxd_query(r, "cursor");
  int64_t cursor = 0;
  if (cs && *cs && (!sbxd_parse_i64(cs, &cursor) || cursor < 0))
    return execd_bad_request(r, "invalid cursor: ", cs);
  cleanup_close int fd = memfd_create("sbxd-logs", MFD_CLOEXEC);
  if (fd < 0)
    return sbxd_error(r, 500, "RUNTIME_ERROR", "memfd: %s", strerror(errno));
  uint64_t next = 0;
  sbx_error_t err = NULL;
  if (sbx_command_logs(r->box->sb, id, (uint64_t) cursor, fd, &next, &err) < 0) {
    if (err->kind == SBX_E_NOT_FOUND || err->kind == SBX_E_INVALID) {
      enum MHD_Result ret =
          execd_bad_request(r, "command not found or not a background command: ", id);
      sbx_error_release(&err);
      return ret;
    }
    return sbxd_lib_error(r, &err);
  }
  sbx_buf_t b = {0};
  if (read_memfd(fd, &b) < 0) {
    sbx__buf_free(&b);
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

enum MHD_Result h_ping(struct req *r)
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
