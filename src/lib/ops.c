/* Operations beyond DeerFlow's contract, used by front-ends that speak OpenSandbox's execd API
 * (sbxd): file metadata, directories, moves, permissions, ranged reads, command status and
 * logs, port connections and metrics. Same rules as the contract: absolute, traversal-free
 * paths; a terminal error evicts the sandbox. */
#include "provider.h"
#include "text.h"

#include <string.h>

static int op_check(sbx_sandbox_t *sb, const void *fn, const char *what, sbx_error_t *err)
{
  if (sb == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "no sandbox");
  if (sb->broken)
    return sbx__make_error(err, 0, SBX_E_BACKEND, "sandbox %s is broken and was evicted",
                           sb->in.meta.id);
  if (fn == NULL)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "%s is not supported by the %s backend", what,
                           sb->in.ops->name);
  return 0;
}

static int done(sbx_sandbox_t *sb, int ret, sbx_error_t *err)
{
  if (ret < 0 && err && *err && (*err)->kind == SBX_E_BACKEND)
    sbx__sandbox_broken(sb);
  return ret;
}

#define PATH_OP(sb, fn, path, what)                                                                \
  do {                                                                                             \
    if (op_check(sb, (const void *) (sb ? sb->in.ops->fn : NULL), what, err) < 0 ||                \
        sbx__path_check(path, err) < 0)                                                            \
      return -1;                                                                                   \
  } while (0)

int sbx_stat(sbx_sandbox_t *sb, const char *path, struct sbx_file_info *info, sbx_error_t *err)
{
  memset(info, 0, sizeof *info);
  PATH_OP(sb, stat, path, "stat");
  return done(sb, sb->in.ops->stat(&sb->in, path, info, err), err);
}

int sbx_mkdir(sbx_sandbox_t *sb, const char *path, unsigned mode, bool *created, sbx_error_t *err)
{
  PATH_OP(sb, mkdir, path, "mkdir");
  return done(sb, sb->in.ops->mkdir(&sb->in, path, mode & 07777, created, err), err);
}

int sbx_remove(sbx_sandbox_t *sb, const char *path, int flags, sbx_error_t *err)
{
  PATH_OP(sb, remove, path, "remove");
  if (strcmp(path, "/") == 0)
    return sbx__make_error(err, 0, SBX_E_DENIED, "refusing to remove /");
  return done(sb, sb->in.ops->remove(&sb->in, path, flags, err), err);
}

int sbx_rename(sbx_sandbox_t *sb, const char *src, const char *dst, sbx_error_t *err)
{
  PATH_OP(sb, rename, src, "rename");
  if (sbx__path_check(dst, err) < 0)
    return -1;
  return done(sb, sb->in.ops->rename(&sb->in, src, dst, err), err);
}

int sbx_chmod(sbx_sandbox_t *sb, const char *path, unsigned mode, const char *owner,
              const char *group, sbx_error_t *err)
{
  PATH_OP(sb, chmod, path, "chmod");
  return done(sb, sb->in.ops->chmod(&sb->in, path, mode & 07777, owner, group, err), err);
}

int sbx_readdir(sbx_sandbox_t *sb, const char *path, int depth, struct sbx_file_info **v, size_t *n,
                sbx_error_t *err)
{
  *v = NULL;
  *n = 0;
  PATH_OP(sb, readdir, path, "readdir");
  if (depth < 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "depth must be non-negative");
  return done(sb, sb->in.ops->readdir(&sb->in, path, depth, false, NULL, v, n, err), err);
}

int sbx_find(sbx_sandbox_t *sb, const char *path, const char *pattern, struct sbx_file_info **v,
             size_t *n, sbx_error_t *err)
{
  *v = NULL;
  *n = 0;
  PATH_OP(sb, readdir, path, "find");
  return done(sb, sb->in.ops->readdir(&sb->in, path, 0, true, pattern ? pattern : "**", v, n, err),
              err);
}

int sbx_replace(sbx_sandbox_t *sb, const char *path, const void *old, size_t old_len,
                const void *new_, size_t new_len, uint64_t *count, sbx_error_t *err)
{
  *count = 0;
  PATH_OP(sb, replace, path, "replace");
  if (old_len == 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "the string to replace must not be empty");
  return done(sb, sb->in.ops->replace(&sb->in, path, old, old_len, new_, new_len, count, err), err);
}

int sbx_read_range(sbx_sandbox_t *sb, const char *path, uint64_t offset, uint64_t limit, int fd,
                   int (*on_size)(void *, uint64_t), void *arg, sbx_error_t *err)
{
  PATH_OP(sb, read_range, path, "read");
  return done(sb, sb->in.ops->read_range(&sb->in, path, offset, limit, fd, on_size, arg, err), err);
}

int sbx_write_file_mode(sbx_sandbox_t *sb, const char *path, const void *data, size_t len, int fd,
                        unsigned mode, sbx_error_t *err)
{
  PATH_OP(sb, write_mode, path, "write");
  return done(sb, sb->in.ops->write_mode(&sb->in, path, data, len, fd, mode & 07777, err), err);
}

int sbx_command_status(sbx_sandbox_t *sb, const char *id, struct sbx_command_status *st,
                       sbx_error_t *err)
{
  memset(st, 0, sizeof *st);
  if (op_check(sb, (const void *) (sb ? sb->in.ops->cmd_status : NULL), "command status", err) < 0)
    return -1;
  return done(sb, sb->in.ops->cmd_status(&sb->in, id, st, err), err);
}

int sbx_command_logs(sbx_sandbox_t *sb, const char *id, uint64_t cursor, int fd, uint64_t *next,
                     sbx_error_t *err)
{
  if (op_check(sb, (const void *) (sb ? sb->in.ops->cmd_logs : NULL), "command logs", err) < 0)
    return -1;
  return done(sb, sb->in.ops->cmd_logs(&sb->in, id, cursor, fd, next, err), err);
}

int sbx_connect_port(sbx_sandbox_t *sb, int port, sbx_error_t *err)
{
  if (op_check(sb, (const void *) (sb ? sb->in.ops->connect_port : NULL), "port connection", err) <
      0)
    return -1;
  if (port < 1 || port > 65535)
    return sbx__make_error(err, 0, SBX_E_INVALID, "port must be 1-65535, got %d", port);
  return done(sb, sb->in.ops->connect_port(&sb->in, port, err), err);
}

int sbx_metrics(sbx_sandbox_t *sb, struct sbx_metrics *m, sbx_error_t *err)
{
  memset(m, 0, sizeof *m);
  if (op_check(sb, (const void *) (sb ? sb->in.ops->metrics : NULL), "metrics", err) < 0)
    return -1;
  /* the cgroup outlives a dead init until the sandbox is destroyed: its figures would look
   * like a live sandbox's */
  if (sb->in.ops->alive && !sb->in.ops->alive(&sb->in))
    return done(
        sb,
        sbx__make_error(err, ESRCH, SBX_E_BACKEND, "sandbox %s: its init is gone", sb->in.meta.id),
        err);
  return sb->in.ops->metrics(&sb->in, m, err);
}

bool sbx_sandbox_managed(const sbx_sandbox_t *sb)
{
  return sb && sb->in.meta.managed;
}

sbx_session_t *sbx_session_start(sbx_sandbox_t *sb, const char *command,
                                 const struct sbx_exec_opts *opts,
                                 const struct sbx_session_opts *so, sbx_error_t *err)
{
  if (op_check(sb, (const void *) (sb ? sb->in.ops->session_start : NULL), "interactive command",
               err) < 0)
    return NULL;
  if ((opts == NULL || opts->argv == NULL) && (command == NULL || command[0] == '\0')) {
    sbx__make_error(err, 0, SBX_E_INVALID, "command must be a non-empty string");
    return NULL;
  }
  if (opts && opts->background) {
    sbx__make_error(err, 0, SBX_E_INVALID, "an interactive command cannot run in the background");
    return NULL;
  }
  if (opts && opts->timeout < 0) {
    sbx__make_error(err, 0, SBX_E_INVALID, "timeout must not be negative");
    return NULL;
  }
  for (size_t i = 0; opts && i < opts->n_env; i++) {
    const char *eq = strchr(opts->env[i], '=');
    if (eq == NULL || !sbx__env_key_valid(opts->env[i], (size_t) (eq - opts->env[i]))) {
      sbx__make_error(err, 0, SBX_E_INVALID, "environment entries must be KEY=VALUE: %s",
                      opts->env[i]);
      return NULL;
    }
  }
  if (so && so->tty && (so->rows > SBX_TTY_MAX_DIM || so->cols > SBX_TTY_MAX_DIM)) {
    sbx__make_error(err, 0, SBX_E_INVALID, "terminal size must be at most %d rows and columns",
                    SBX_TTY_MAX_DIM);
    return NULL;
  }
  sbx_session_t *s = sb->in.ops->session_start(&sb->in, command, opts, so, err);
  if (s == NULL)
    done(sb, -1, err);
  return s;
}
