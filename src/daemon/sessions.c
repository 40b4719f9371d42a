/* execd's bash sessions: the cwd and the exported variables carried from one run to the next
 * (kept with the box, registry.h). A run is a job (jobs.c) whose script restores them first and
 * saves them on exit (an EXIT trap writing a state file the job reads back). */
#include "sessions.h"
#include "jobs.h"
#include "registry.h"

#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#define SESSION_ENV_VALUE_MAX 8192
#define SCRIPT_ARG_MAX (120u << 10)

static char *uuid4(void)
{
  char h[33];
  sbx__random_hex(h, 32);
  h[12] = '4';
  h[16] = "89ab"[(h[16] >= 'a' ? h[16] - 'a' + 10 : h[16] - '0') & 3];
  return xasprintf("%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

static char *state_path(const char *sid)
{
  return xasprintf("/tmp/.sbxd-session-%s", sid);
}

enum MHD_Result h_session_create(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body =
      r->body.len == 0 ? json_object() : sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_OBJECT, &ret);
  if (body == NULL)
    return ret;
  json_t *cwd = json_object_get(body, "cwd");
  if (cwd && !json_is_null(cwd) && !json_is_string(cwd))
    return execd_bad_request(r, "invalid request, validation error ", "cwd must be a string");
  const char *c = json_string_value(cwd);
  cleanup_free char *clean = c && *c ? sbxd_path_clean(c) : NULL;
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
  box_session_add(r->box, s);
  return sbxd_json(r, 200, json_pack("{s:s}", "session_id", s->id));
}

static bool persisted_key(const char *k)
{
  static const char *const skip[] = {"PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND", "_", "SHLVL"};
  for (size_t i = 0; i < ARRAY_SIZE(skip); i++)
    if (strcmp(k, skip[i]) == 0)
      return false;
  return sbx__env_key_valid(k, strlen(k));
}

/* Reads the state the run's EXIT trap left: the cwd, then NUL-separated KEY=VALUE. */
static void session_update(struct job *j)
{
  cleanup_close int fd = memfd_create("sbxd-session", MFD_CLOEXEC);
  if (fd < 0 || sbx_read_range(j->b->sb, j->state_file, 0, 1u << 20, fd, NULL, NULL, NULL) < 0)
    return;
  sbx_buf_t b = {0};
  if (read_memfd(fd, &b) < 0 || b.len == 0 || memchr(b.data, '\0', b.len) == NULL) {
    sbx__buf_free(&b);
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
  struct session *s = box_session_find(j->b, j->session);
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
  sbx__buf_free(&b);
}

enum MHD_Result h_session_run(struct req *r)
{
  const char *sid = sbxd_param(r, "sid");
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_OBJECT, &ret);
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
    job_free(j);
    return execd_bad_request(r, "invalid request, validation error ", bad);
  }
  const char *c = json_string_value(cwd);
  cleanup_free char *run_cwd = c && *c ? sbxd_path_clean(c) : NULL;
  sbx_buf_t script = {0};
  pthread_mutex_lock(&r->box->lock);
  /* an image may have no bash, and no /usr/bin/env: its sh and the env on its PATH then */
  const char *image = json_string_value(json_object_get(r->box->extra, "image"));
  bool img = image && strcmp(image, "host") != 0;
  struct session *s = box_session_find(r->box, sid);
  if (s) {
    size_t n = json_object_size(s->env), k = 0;
    const char **keys = xzalloc((n + 1) * sizeof *keys);
    const char *key;
    json_t *v;
    json_object_foreach(s->env, key, v) keys[k++] = key;
    qsort(keys, k, sizeof *keys, sbx__strcmp_p);
    for (size_t i = 0; i < k; i++) {
      cleanup_free char *q = sbx__shell_quote(json_string_value(json_object_get(s->env, keys[i])));
      sbx__buf_printf(&script, "export %s=%s\n", keys[i], q);
    }
    free(keys);
    const char *dir = run_cwd ? run_cwd : s->cwd;
    if (dir) {
      cleanup_free char *q = sbx__shell_quote(dir);
      sbx__buf_printf(&script, "cd %s\n", q);
    }
  }
  pthread_mutex_unlock(&r->box->lock);
  if (s == NULL) {
    sbx__buf_free(&script);
    job_free(j);
    return sbxd_error(r, 404, "CONTEXT_NOT_FOUND", "session %s not found", sid);
  }
  j->state_file = state_path(sid);
  cleanup_free char *qstate = sbx__shell_quote(j->state_file);
  sbx__buf_printf(&script,
                  "__sbxd_save() { { printf '%%s\\0' \"$PWD\"; %s -0; } > %s 2>/dev/null; "
                  "}\ntrap __sbxd_save EXIT\n%s\n",
                  img ? "env" : "/usr/bin/env", qstate, command);
  snprintf(j->session, sizeof j->session, "%s", sid);
  j->merge = true;
  j->on_exit = session_update;
  if (img) {
    sbx__strv_push(&j->argv, "sh");
    sbx__strv_push(&j->argv, "-c");
    sbx__strv_push(&j->argv, script.len < SCRIPT_ARG_MAX
                                 ? "command -v bash >/dev/null 2>&1 && exec bash --noprofile "
                                   "--norc -c \"$1\"; exec sh -c \"$1\""
                                 : "command -v bash >/dev/null 2>&1 && exec bash --noprofile "
                                   "--norc \"$1\"; exec sh \"$1\"");
    sbx__strv_push(&j->argv, "sh");
  } else {
    sbx__strv_push(&j->argv, "bash");
    sbx__strv_push(&j->argv, "--noprofile");
    sbx__strv_push(&j->argv, "--norc");
  }
  if (script.len < SCRIPT_ARG_MAX) {
    if (!img)
      sbx__strv_push(&j->argv, "-c");
    sbx__strv_push(&j->argv, script.data);
  } else {
    /* too long for one argument: hand bash a script file */
    cleanup_free char *path = xasprintf("%s.sh", j->state_file);
    sbx_error_t err = NULL;
    if (sbx_write_file_mode(r->box->sb, path, script.data, script.len, -1, 0600, &err) < 0) {
      sbx__buf_free(&script);
      job_free(j);
      return sbxd_lib_error(r, &err);
    }
    sbx__strv_push(&j->argv, path);
  }
  sbx__buf_free(&script);
  return job_run(r, j);
}

enum MHD_Result h_session_delete(struct req *r)
{
  const char *sid = sbxd_param(r, "sid");
  struct session *found = box_session_take(r->box, sid);
  if (found == NULL)
    return sbxd_error(r, 404, "CONTEXT_NOT_FOUND", "session %s not found", sid);
  if (found->run_id[0])
    sbx_command_signal(r->box->sb, found->run_id, SIGKILL, NULL);
  cleanup_free char *state = state_path(found->id);
  sbx_remove(r->box->sb, state, 0, NULL);
  session_free(found);
  return sbxd_empty(r, 200);
}
