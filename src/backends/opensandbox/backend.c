/* The opensandbox backend: the contract on a remote OpenSandbox deployment (seed 000).
 *
 * Create returns only after the readiness check (execd /ping within ready_timeout) and the
 * /mnt/user-data bootstrap succeed; a failed bootstrap deletes the new remote. Before each
 * operation the remote's expiry is renewed (commands to cover their own timeout), and the
 * operations on one remote are serialised (a flock on its state directory, so across
 * processes too) so that a short renewal never cuts a long command's horizon. Command-path
 * 404/410 and broken transports are terminal (the provider evicts the remote); a file-path
 * 404 is an ordinary not-found. On release the outputs are copied home (sync.c). */
#include "osb.h"
#include "text.h"

#include <fcntl.h>
#include <string.h>
#include <sys/file.h>

#define BOOTSTRAP "mkdir -p /mnt/user-data/workspace /mnt/user-data/uploads /mnt/user-data/outputs"

/* Holds the remote's operation lock and renews its expiry to cover `seconds`. */
static int begin(struct sbx_instance *in, struct osb_remote *r, double seconds, int *lock,
                 sbx_error_t *err)
{
  *lock = -1;
  if (osb_remote_load(in, r, err) < 0)
    return -1;
  cleanup_free char *path = xasprintf("%s/op.lock", in->dir);
  *lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (*lock >= 0)
    TEMP_FAILURE_RETRY(flock(*lock, LOCK_EX));
  double horizon = (double) in->cfg->sandbox_timeout;
  if (seconds + 30 > horizon)
    horizon = seconds + 30;
  if (osb_renew(r, horizon, err) < 0) {
    osb_remote_free(r);
    if (*lock >= 0)
      close(*lock);
    *lock = -1;
    return -1;
  }
  return 0;
}

static void end(struct osb_remote *r, int lock)
{
  osb_remote_free(r);
  if (lock >= 0)
    close(lock);
}

static double op_seconds(struct sbx_instance *in)
{
  return in->cfg->request_timeout > 0 ? in->cfg->request_timeout : 30;
}

static int osb_backend_create(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  (void) user_data;
  struct osb_remote r = {.cfg = in->cfg};
  if (osb_create(in->cfg, in->meta.user, in->meta.thread, &r.id, err) < 0)
    return -1;
  /* from here on, any failure deletes the new remote */
  int rc = osb_endpoint(&r, 44772, err);
  if (rc == 0) {
    double ready = in->cfg->ready_timeout > 0 ? in->cfg->ready_timeout : 30;
    uint64_t deadline = sbx__now_ms() + (uint64_t) (ready * 1000);
    sbx_error_t perr = NULL;
    while (osb_ping(&r, 5, &perr) < 0) {
      if (sbx__now_ms() >= deadline) {
        rc = sbx__make_error(err, ETIMEDOUT, SBX_E_TIMEOUT,
                             "remote sandbox %s was not ready within %gs (%s)", r.id, ready,
                             perr->msg);
        break;
      }
      sbx_error_release(&perr);
      usleep(200 * 1000);
    }
    sbx_error_release(&perr);
  }
  if (rc == 0) {
    struct osb_cmd c = {.command = BOOTSTRAP, .timeout_ms = 30000, .cap = 64u << 10};
    struct osb_cmd_result res;
    rc = osb_command(&r, &c, &res, err);
    if (rc == 0 && !(res.has_code && res.exit_code == 0)) {
      cleanup_free char *why = res.out.len    ? xstrdup(res.out.data)
                               : res.err.len  ? xstrdup(res.err.data)
                               : res.has_code ? xasprintf("exit code %d", res.exit_code)
                                              : xstrdup("no exit code");
      rc = sbx__make_error(err, 0, SBX_E_BACKEND, "OpenSandbox bootstrap failed: %s", why);
    }
    osb_cmd_result_free(&res);
  }
  if (rc < 0) {
    osb_delete(in->cfg, r.id, NULL);
    osb_remote_free(&r);
    return -1;
  }
  osb_remote_store(in, &r);
  osb_remote_free(&r);
  return 0;
}

static int osb_backend_destroy(struct sbx_instance *in, sbx_error_t *err)
{
  if (in->meta.remote_id == NULL)
    return 0;
  return osb_delete(in->cfg, in->meta.remote_id, err);
}

static bool osb_backend_alive(struct sbx_instance *in)
{
  /* a remote's death is learnt from its failures (terminal errors evict it) */
  return in->meta.remote_id != NULL && in->meta.backend_json != NULL;
}

static int osb_backend_health(struct sbx_instance *in, int timeout_s, sbx_error_t *err)
{
  struct osb_remote r;
  int lock;
  if (begin(in, &r, timeout_s, &lock, err) < 0)
    return -1;
  struct osb_cmd c = {.command = "true", .timeout_ms = (uint64_t) timeout_s * 1000, .cap = 4096};
  struct osb_cmd_result res;
  int rc = osb_command(&r, &c, &res, err);
  if (rc == 0) {
    if (!(res.has_code && res.exit_code == 0))
      rc = sbx__make_error(err, 0, SBX_E_BACKEND, "health check failed");
    osb_cmd_result_free(&res);
  }
  end(&r, lock);
  return rc;
}

static int osb_backend_exec(struct sbx_instance *in, const char *command,
                            const struct sbx_exec_opts *o, struct sbx_exec_result *res,
                            sbx_error_t *err)
{
  memset(res, 0, sizeof *res);
  double timeout = o && o->timeout > 0 ? o->timeout : in->cfg->bash_command_timeout;
  struct osb_remote r;
  int lock;
  if (begin(in, &r, timeout, &lock, err) < 0)
    return -1;
  /* the contract's shell: `sh -lc CMD` in the workspace */
  cleanup_free char *quoted = NULL;
  if (o && o->argv) {
    sbx_buf_t b = {0};
    for (const char *const *a = o->argv; *a; a++) {
      cleanup_free char *q = sbx__shell_quote(*a);
      sbx__buf_printf(&b, "%s%s", b.len ? " " : "", q);
    }
    quoted = sbx__buf_steal(&b);
  } else {
    cleanup_free char *q = sbx__shell_quote(command);
    quoted = xasprintf("sh -lc %s", q);
  }
  sbx_strv_t env = {0};
  for (size_t i = 0; i < in->cfg->n_environment; i++)
    sbx__strv_push_owned(
        &env, xasprintf("%s=%s", in->cfg->environment[i].key, in->cfg->environment[i].value));
  for (size_t i = 0; o && i < o->n_env; i++)
    sbx__strv_push(&env, o->env[i]);
  struct osb_cmd c = {.command = quoted,
                      .cwd = o && o->cwd ? o->cwd : "/mnt/user-data/workspace",
                      .env = (const char *const *) env.v,
                      .n_env = env.n,
                      .timeout_ms = (uint64_t) (timeout * 1000 + 0.5),
                      .background = o && o->background,
                      .on_output = o ? o->on_output : NULL,
                      .arg = o ? o->arg : NULL,
                      .cap = o && o->out_cap ? o->out_cap : in->cfg->output_max_bytes};
  struct osb_cmd_result cr;
  int rc = osb_command(&r, &c, &cr, err);
  sbx__strv_free(&env);
  end(&r, lock);
  if (rc < 0)
    return -1;
  if (o && o->id_out)
    snprintf(o->id_out, 65, "%s", cr.id ? cr.id : "");
  if (o && o->background) {
    res->out = xstrdup("");
    res->err = xstrdup("");
    osb_cmd_result_free(&cr);
    return 0;
  }
  if (!cr.has_code && !cr.timed_out) {
    rc = sbx__make_error(err, 0, SBX_E_IO,
                         "Error: OpenSandbox command completed without an exit code: %s",
                         cr.error_text ? cr.error_text
                         : cr.out.len  ? cr.out.data
                                       : "no completion or error event");
    osb_cmd_result_free(&cr);
    return rc;
  }
  res->timed_out = cr.timed_out;
  res->exit_code = cr.timed_out ? 124 : cr.exit_code;
  res->signaled = !cr.timed_out && cr.exit_code < 0;
  res->out_len = cr.out.len;
  res->err_len = cr.err.len;
  res->out_total = cr.out_total;
  res->err_total = cr.err_total;
  res->out = sbx__buf_steal(&cr.out);
  res->err = sbx__buf_steal(&cr.err);
  osb_cmd_result_free(&cr);
  return 0;
}

static int osb_backend_signal(struct sbx_instance *in, const char *cmd_id, int signo,
                              sbx_error_t *err)
{
  (void) signo; /* execd's interrupt is SIGTERM, then SIGKILL after a grace period */
  struct osb_remote r;
  if (osb_remote_load(in, &r, err) < 0)
    return -1;
  int rc = osb_interrupt(&r, cmd_id, err);
  osb_remote_free(&r);
  return rc;
}

static int buf_sink(void *arg, const char *data, size_t len)
{
  sbx__buf_append(arg, data, len);
  return 0;
}

static int fd_sink(void *arg, const char *data, size_t len)
{
  return sbx__write_all(*(int *) arg, data, len) < 0 ? 1 : 0;
}

static int osb_backend_read_to_buf(struct sbx_instance *in, const char *path, uint64_t max,
                                   void **data, size_t *len, sbx_error_t *err)
{
  struct osb_remote r;
  int lock;
  if (begin(in, &r, op_seconds(in), &lock, err) < 0)
    return -1;
  sbx_buf_t b = {0};
  int rc = osb_download(&r, path, max, buf_sink, &b, NULL, 0, err);
  end(&r, lock);
  if (rc < 0) {
    sbx__buf_free(&b);
    return -1;
  }
  *len = b.len;
  *data = sbx__buf_steal(&b);
  return 0;
}

static int osb_backend_read_to_fd(struct sbx_instance *in, const char *path, uint64_t max, int fd,
                                  sbx_error_t *err)
{
  struct osb_remote r;
  int lock;
  if (begin(in, &r, op_seconds(in), &lock, err) < 0)
    return -1;
  int rc = osb_download(&r, path, max, fd_sink, &fd, NULL, 0, err);
  end(&r, lock);
  return rc;
}

static int osb_backend_read_text(struct sbx_instance *in, const char *path, int64_t start,
                                 int64_t end_line, char **text, size_t *len, sbx_error_t *err)
{
  void *data = NULL;
  size_t n = 0;
  if (osb_backend_read_to_buf(in, path, 100u << 20, &data, &n, err) < 0)
    return -1;
  if (!sbx__utf8_valid(data, n)) {
    free(data);
    return sbx__make_error(err, 0, SBX_E_NOT_TEXT,
                           "cannot read '%s' as text \xe2\x80\x94 it appears to be a binary file "
                           "(e.g. .xlsx, .pdf, or an image). read_file only supports UTF-8 text. "
                           "Use bash with a suitable library instead (pandas/openpyxl for "
                           "spreadsheets), or view_image for images.",
                           path);
  }
  *text = sbx__text_line_range(data, n, start, end_line, len);
  free(data);
  return 0;
}

static int osb_backend_write(struct sbx_instance *in, const char *path, const void *data,
                             size_t len, int fd, bool append, sbx_error_t *err)
{
  struct osb_remote r;
  int lock;
  if (begin(in, &r, op_seconds(in), &lock, err) < 0)
    return -1;
  int rc;
  if (append) {
    /* no append primitive in execd: a read-modify-write, serialised by the op lock */
    sbx_buf_t b = {0};
    sbx_error_t derr = NULL;
    if (osb_download(&r, path, 0, buf_sink, &b, NULL, 0, &derr) < 0) {
      if (derr->kind != SBX_E_NOT_FOUND) {
        *err = derr;
        sbx__buf_free(&b);
        end(&r, lock);
        return -1;
      }
      sbx_error_release(&derr); /* missing: an empty prefix */
    }
    if (data)
      sbx__buf_append(&b, data, len);
    else {
      char tmp[65536];
      ssize_t n;
      while ((n = read(fd, tmp, sizeof tmp)) > 0)
        sbx__buf_append(&b, tmp, (size_t) n);
    }
    rc = osb_upload(&r, path, b.data ? b.data : "", b.len, -1, 0644, err);
    sbx__buf_free(&b);
  } else {
    rc = osb_upload(&r, path, data, len, data ? -1 : fd, 0644, err);
  }
  end(&r, lock);
  return rc;
}

static int osb_backend_list_dir(struct sbx_instance *in, const char *path, int depth,
                                sbx_strv_t *out, sbx_error_t *err)
{
  struct osb_remote r;
  int lock;
  if (begin(in, &r, op_seconds(in), &lock, err) < 0)
    return -1;
  int rc = osb_list_dir(&r, path, depth, out, err);
  end(&r, lock);
  return rc;
}

static int osb_backend_glob(struct sbx_instance *in, const char *path, const char *pattern,
                            bool include_dirs, size_t max, sbx_strv_t *out, bool *truncated,
                            sbx_error_t *err)
{
  struct osb_remote r;
  int lock;
  if (begin(in, &r, op_seconds(in), &lock, err) < 0)
    return -1;
  int rc = osb_glob(&r, path, pattern, include_dirs, max, out, truncated, err);
  end(&r, lock);
  return rc;
}

static int osb_backend_grep(struct sbx_instance *in, const char *path, const char *pattern,
                            const struct sbx_grep_opts *o, struct sbx_grep_match **m, size_t *n,
                            bool *truncated, sbx_error_t *err)
{
  struct osb_remote r;
  int lock;
  if (begin(in, &r, op_seconds(in), &lock, err) < 0)
    return -1;
  int rc = osb_grep(&r, path, pattern, o, m, n, truncated, err);
  end(&r, lock);
  return rc;
}

static int osb_backend_pause(struct sbx_instance *in, bool paused, sbx_error_t *err)
{
  struct osb_remote r;
  if (osb_remote_load(in, &r, err) < 0)
    return -1;
  int rc = osb_pause(&r, paused, err);
  osb_remote_free(&r);
  return rc;
}

static void osb_backend_on_release(struct sbx_instance *in, const char *user_data)
{
  if (user_data == NULL)
    return;
  struct osb_remote r;
  int lock;
  sbx_error_t err = NULL;
  if (begin(in, &r, 120, &lock, &err) < 0) {
    sbx__log(SBX_LOG_WARNING, "output sync of sandbox %s skipped: %s", in->meta.id, err->msg);
    sbx_error_release(&err);
    return;
  }
  struct osb_sync_limits lim = {.max_files = 2000,
                                .max_listing = 512u << 10,
                                .max_total = 512ull << 20,
                                .max_file = 100ull << 20,
                                .deadline_s = 120};
  /* the deadline can be shortened (tests; a front-end that must answer sooner) */
  const char *d = getenv("SBX_OUTPUT_SYNC_DEADLINE");
  if (d && atof(d) > 0 && atof(d) < lim.deadline_s)
    lim.deadline_s = atof(d);
  struct osb_sync_report rep;
  if (osb_sync_outputs(&r, user_data, &lim, &rep, &err) < 0) {
    sbx__log(SBX_LOG_WARNING, "output sync of sandbox %s failed: %s", in->meta.id, err->msg);
    sbx_error_release(&err);
  }
  osb_sync_report_free(&rep);
  end(&r, lock);
}

const struct sbx_backend_ops sbx__backend_opensandbox = {
    .name = "opensandbox",
    .data_owner = 0,
    .create = osb_backend_create,
    .destroy = osb_backend_destroy,
    .alive = osb_backend_alive,
    .health = osb_backend_health,
    .pause = osb_backend_pause,
    .on_release = osb_backend_on_release,
    .exec = osb_backend_exec,
    .signal = osb_backend_signal,
    .read_text = osb_backend_read_text,
    .read_to_fd = osb_backend_read_to_fd,
    .read_to_buf = osb_backend_read_to_buf,
    .write = osb_backend_write,
    .list_dir = osb_backend_list_dir,
    .glob = osb_backend_glob,
    .grep = osb_backend_grep,
};
