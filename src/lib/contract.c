/* The public contract: input checks that hold for every backend (absolute, traversal-free
 * paths; the download prefix; env keys; limits), then the backend's operation. A terminal
 * error (SBX_E_BACKEND) marks the sandbox broken so that it is evicted and the next acquire
 * cold-starts a replacement; the failing call still reports its error, and nothing is retried. */
#include "provider.h"
#include "search.h"
#include "text.h"

#include <string.h>

_Static_assert(SBX_SEARCH_TIMEOUT * 1000 == SBX_SEARCH_DEFAULT_MS &&
                   SBX_SEARCH_TIMEOUT_MAX * 1000 == SBX_SEARCH_TIMEOUT_MAX_MS,
               "sbx.h's search timeouts are sbx-init's");

static int finish(sbx_sandbox_t *sb, int ret, sbx_error_t *err)
{
  if (ret < 0 && err && *err && (*err)->kind == SBX_E_BACKEND)
    sbx__sandbox_broken(sb);
  return ret;
}

static int usable(sbx_sandbox_t *sb, sbx_error_t *err)
{
  if (sb == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "no sandbox");
  if (sb->broken)
    return sbx__make_error(err, 0, SBX_E_BACKEND,
                           "sandbox %s is broken and was evicted; acquire it again",
                           sb->in.meta.id);
  return 0;
}

void sbx_exec_result_free(struct sbx_exec_result *r)
{
  if (r == NULL)
    return;
  free(r->out);
  free(r->err);
  free(r->output);
  memset(r, 0, sizeof *r);
}

/* The text an agent reads, a contract rule and the same whichever backend ran the command: a
 * background command has none yet; a finished one's reports its output (or "(no output)"), the
 * truncation notes and "Exit Code: N" (sbx__exec_render). */
static void render(struct sbx_exec_result *res, const struct sbx_exec_opts *o)
{
  if (o && o->background) {
    res->output = xstrdup("(no output)");
    res->output_len = strlen(res->output);
    return;
  }
  if (o && o->discard_output) /* nothing kept: the text still reports exit and timeout */
    res->out_total = res->err_total = 0;
  sbx_exec_output_t eo = {res->out,     res->out_len,   res->out_total, res->err,
                          res->err_len, res->err_total, res->exit_code, res->timed_out};
  res->output = sbx__exec_render(&eo, &res->output_len);
}

int sbx_execute_command(sbx_sandbox_t *sb, const char *command, const struct sbx_exec_opts *opts,
                        struct sbx_exec_result *res, sbx_error_t *err)
{
  memset(res, 0, sizeof *res);
  if (usable(sb, err) < 0)
    return -1;
  if (opts && opts->n_env && sbx__env_check(opts->env, opts->n_env, err) < 0)
    return -1;
  if (opts && opts->timeout < 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "timeout must be positive, got %g",
                           opts->timeout);
  if (!(opts && opts->argv) && (command == NULL || command[0] == '\0'))
    return sbx__make_error(err, 0, SBX_E_INVALID, "command must be a non-empty string");
  if (opts && opts->cwd && sbx__path_check(opts->cwd, err) < 0)
    return -1;
  if (finish(sb, sb->in.ops->exec(&sb->in, command, opts, res, err), err) < 0)
    return -1;
  render(res, opts);
  return 0;
}

int sbx_command_signal(sbx_sandbox_t *sb, const char *cmd_id, int signo, sbx_error_t *err)
{
  if (usable(sb, err) < 0)
    return -1;
  if (cmd_id == NULL || *cmd_id == '\0' || signo <= 0 || signo > 64)
    return sbx__make_error(err, 0, SBX_E_INVALID, "a command id and a signal are required");
  return finish(sb, sb->in.ops->signal(&sb->in, cmd_id, signo, err), err);
}

int sbx_read_file(sbx_sandbox_t *sb, const char *path, int64_t start, int64_t end, char **text,
                  size_t *len, sbx_error_t *err)
{
  *text = NULL;
  if (usable(sb, err) < 0 || sbx__path_check(path, err) < 0)
    return -1;
  return finish(sb, sb->in.ops->read_text(&sb->in, path, start, end, text, len, err), err);
}

int sbx_write_file(sbx_sandbox_t *sb, const char *path, const char *content, size_t len,
                   bool append, sbx_error_t *err)
{
  if (usable(sb, err) < 0 || sbx__path_check(path, err) < 0)
    return -1;
  return finish(sb, sb->in.ops->write(&sb->in, path, content ? content : "", len, -1, append, err),
                err);
}

int sbx_update_file(sbx_sandbox_t *sb, const char *path, const void *data, size_t len,
                    sbx_error_t *err)
{
  if (usable(sb, err) < 0 || sbx__path_check(path, err) < 0)
    return -1;
  return finish(sb, sb->in.ops->write(&sb->in, path, data ? data : "", len, -1, false, err), err);
}

int sbx_write_from_fd(sbx_sandbox_t *sb, const char *path, int fd, bool append, sbx_error_t *err)
{
  if (usable(sb, err) < 0 || sbx__path_check(path, err) < 0)
    return -1;
  return finish(sb, sb->in.ops->write(&sb->in, path, NULL, 0, fd, append, err), err);
}

int sbx_download_file(sbx_sandbox_t *sb, const char *path, void **data, size_t *len,
                      sbx_error_t *err)
{
  *data = NULL;
  *len = 0;
  if (usable(sb, err) < 0 || sbx__download_path_check(path, err) < 0)
    return -1;
  return finish(sb, sb->in.ops->read_to_buf(&sb->in, path, SBX_DOWNLOAD_MAX, data, len, err), err);
}

int sbx_download_to_fd(sbx_sandbox_t *sb, const char *path, int fd, sbx_error_t *err)
{
  if (usable(sb, err) < 0 || sbx__download_path_check(path, err) < 0)
    return -1;
  return finish(sb, sb->in.ops->read_to_fd(&sb->in, path, SBX_DOWNLOAD_MAX, fd, err), err);
}

static void strv_out(sbx_strv_t *s, char ***out, size_t *n)
{
  if (s->v == NULL) /* always hand back a NULL-terminated array */
    s->v = xzalloc(sizeof(char *));
  *out = s->v;
  *n = s->n;
}

void sbx_strv_free_array(char **v, size_t n)
{
  sbx_strv_t s = {.v = v, .n = n, .cap = n};
  sbx__strv_free(&s);
}

int sbx_list_dir(sbx_sandbox_t *sb, const char *path, int max_depth, char ***entries, size_t *n,
                 sbx_error_t *err)
{
  *entries = NULL;
  *n = 0;
  if (usable(sb, err) < 0 || sbx__path_check(path, err) < 0)
    return -1;
  if (max_depth < 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "max_depth must be non-negative");
  sbx_strv_t s = {0};
  if (finish(sb, sb->in.ops->list_dir(&sb->in, path, max_depth, &s, err), err) < 0) {
    sbx__strv_free(&s);
    return -1;
  }
  strv_out(&s, entries, n);
  return 0;
}

int sbx_glob(sbx_sandbox_t *sb, const char *path, const char *pattern, bool include_dirs,
             size_t max_results, char ***matches, size_t *n, bool *truncated, sbx_error_t *err)
{
  *matches = NULL;
  *n = 0;
  *truncated = false;
  if (usable(sb, err) < 0 || sbx__path_check(path, err) < 0)
    return -1;
  if (pattern == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "pattern must be a string");
  sbx_strv_t s = {0};
  if (finish(
          sb,
          sb->in.ops->glob(&sb->in, path, pattern, include_dirs, max_results, &s, truncated, err),
          err) < 0) {
    sbx__strv_free(&s);
    return -1;
  }
  strv_out(&s, matches, n);
  return 0;
}

int sbx_grep(sbx_sandbox_t *sb, const char *path, const char *pattern,
             const struct sbx_grep_opts *opts, struct sbx_grep_match **matches, size_t *n,
             bool *truncated, sbx_error_t *err)
{
  *matches = NULL;
  *n = 0;
  *truncated = false;
  if (usable(sb, err) < 0 || sbx__path_check(path, err) < 0)
    return -1;
  if (pattern == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "pattern must be a string");
  struct sbx_grep_opts o = opts ? *opts : (struct sbx_grep_opts){.max_results = 100};
  if (o.timeout < 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "timeout must be positive, got %g", o.timeout);
  if (!(o.timeout > 0)) /* 0, NaN */
    o.timeout = SBX_SEARCH_TIMEOUT;
  if (o.timeout > SBX_SEARCH_TIMEOUT_MAX)
    o.timeout = SBX_SEARCH_TIMEOUT_MAX;
  return finish(sb, sb->in.ops->grep(&sb->in, path, pattern, &o, matches, n, truncated, err), err);
}
