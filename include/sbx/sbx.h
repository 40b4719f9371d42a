/* libsbx: sandboxes for AI agents.
 *
 * A provider owns the sandboxes of one state directory ($SBX_HOME): one sandbox per
 * (user, thread) scope, parked warm between turns, reclaimed only by its own scope, capped,
 * idle-reaped and evicted when dead. The state lives on disk and is coordinated with file locks,
 * so every process on a host that opens the same home sees one pool.
 *
 * On a sandbox, the contract (DeerFlow's Sandbox): execute_command, read_file, write_file,
 * update_file, download_file, list_dir, glob, grep, with the exact semantics of
 * docs/contract.md. Errors follow <sbx/error.h>; the library never prints or exits (see
 * sbx_set_log_handler). */
#ifndef SBX_SBX_H
#define SBX_SBX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sbx/config.h>
#include <sbx/error.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_LINE_NONE INT64_MIN            /* read_file: bound not given */
#define SBX_DOWNLOAD_MAX 104857600ull      /* download_file cap (100 MiB) */
#define SBX_OUTPUT_CAP_DEFAULT (10u << 20) /* execute_command: kept per stream */

typedef struct sbx_provider_s sbx_provider_t;
typedef struct sbx_sandbox_s sbx_sandbox_t;

/* ---- logging: the library calls this handler (default: none) ---- */
enum sbx_log_level { SBX_LOG_ERROR, SBX_LOG_WARNING, SBX_LOG_INFO, SBX_LOG_DEBUG };
typedef void (*sbx_log_fn)(int level, const char *msg, void *arg);
SBX_PUBLIC void sbx_set_log_handler(sbx_log_fn fn, void *arg);

/* ---- provider ---- */

/* Opens the pool in home (created if missing). cfg is copied by reference and must outlive the
 * provider; NULL means defaults. */
SBX_PUBLIC sbx_provider_t *sbx_provider_new(const char *home, const struct sbx_config *cfg,
                                            sbx_error_t *err);
/* Releases (parks) what this provider still holds and frees it; destroys nothing. */
SBX_PUBLIC void sbx_provider_free(sbx_provider_t *p);
SBX_PUBLIC const char *sbx_provider_home(const sbx_provider_t *p);
SBX_PUBLIC const struct sbx_config *sbx_provider_config(const sbx_provider_t *p);

/* Returns the sandbox of (user, thread), creating it if needed; the same scope always gets the
 * same id (first 16 hex of sha256("user:thread")). A warm sandbox is reclaimed only after a
 * health check; one that fails it is replaced in the same call. thread NULL makes a throw-away
 * sandbox with a random id that no scope can reclaim. user NULL means "default". The handle
 * stays valid until sbx_release/sbx_destroy of its id or sbx_provider_free. */
SBX_PUBLIC sbx_sandbox_t *sbx_acquire(sbx_provider_t *p, const char *user, const char *thread,
                                      sbx_error_t *err);
/* The handle this provider holds for id, or NULL. No I/O. */
SBX_PUBLIC sbx_sandbox_t *sbx_get(sbx_provider_t *p, const char *id);
/* Parks the sandbox warm: its processes keep running; the last-used time is recorded. */
SBX_PUBLIC int sbx_release(sbx_provider_t *p, const char *id, sbx_error_t *err);
/* Parks the sandbox with this id even if this provider does not hold it: its last-used time is
 * now, and once no front-end holds it active it is warm. SBX_E_NOT_FOUND if it does not exist. */
SBX_PUBLIC int sbx_park(sbx_provider_t *p, const char *id, sbx_error_t *err);
/* Destroys the sandbox with this id (whoever holds it). */
SBX_PUBLIC int sbx_destroy(sbx_provider_t *p, const char *id, sbx_error_t *err);
/* Parks everything this provider holds active. */
SBX_PUBLIC int sbx_reset(sbx_provider_t *p, sbx_error_t *err);
/* Destroys every sandbox of the pool (active and warm, all processes). Idempotent. */
SBX_PUBLIC int sbx_shutdown(sbx_provider_t *p, sbx_error_t *err);
/* One reaper pass: dead sandboxes are cleaned up, warm ones idle longer than idle_timeout are
 * destroyed, leases of dead front-ends lapse. Returns how many sandboxes were removed. */
SBX_PUBLIC int sbx_gc(sbx_provider_t *p, sbx_error_t *err);

SBX_PUBLIC const char *sbx_sandbox_id(const sbx_sandbox_t *sb);
/* The id of a scope: first 16 hex of sha256("user:thread"). Checks both ids' formats. */
SBX_PUBLIC int sbx_scope_to_id(const char *user, const char *thread, char out[17],
                               sbx_error_t *err);

enum sbx_state { SBX_STATE_ACTIVE, SBX_STATE_WARM, SBX_STATE_DEAD, SBX_STATE_CREATING };

struct sbx_sandbox_info {
  char id[17];
  char *user;   /* NULL for a throw-away sandbox */
  char *thread; /* NULL for a throw-away sandbox */
  char *backend;
  int state;        /* enum sbx_state */
  long pid;         /* PID 1 of the sandbox on the host, 0 if none */
  double created;   /* seconds since the epoch */
  double last_used; /* seconds since the epoch */
  int64_t memory;   /* bytes charged to the sandbox, -1 if unknown */
  long *owners;     /* pids holding it active */
  size_t n_owners;
  bool paused;
};
SBX_PUBLIC int sbx_list(sbx_provider_t *p, struct sbx_sandbox_info **out, size_t *n,
                        sbx_error_t *err);
SBX_PUBLIC void sbx_sandbox_info_free(struct sbx_sandbox_info *infos, size_t n);
SBX_PUBLIC const char *sbx_state_name(int state);

/* ---- the contract ---- */

struct sbx_exec_opts {
  const char *const *env; /* "KEY=VALUE", over the configured environment; keys must match
                             ^[A-Za-z_][A-Za-z0-9_]*$ */
  size_t n_env;
  double timeout;   /* seconds; 0 = the configured bash_command_timeout; < 0 is an error */
  const char *cwd;  /* default /mnt/user-data/workspace */
  uint64_t out_cap; /* bytes kept per stream; 0 = configured (10 MiB) */
  /* Called with output as it arrives (stream 1 = stdout, 2 = stderr); returning non-zero
   * stops delivery (the command keeps running). */
  int (*on_output)(void *arg, int stream, const char *data, size_t len);
  void *arg;
  bool discard_output;     /* with on_output: keep nothing in the result */
  bool kill_on_disconnect; /* if this process dies mid-command, kill the command */
  bool background;         /* start and return at once (see sbx_command_status/logs) */
  const char *const *argv; /* run this argv directly instead of `sh -lc command` */
  char *id_out;            /* background: receives the command id (room for 65 bytes) */
};

struct sbx_exec_result {
  char *out; /* what was kept (at most out_cap bytes), NUL-terminated */
  size_t out_len;
  uint64_t out_total; /* bytes the command wrote */
  char *err;
  size_t err_len;
  uint64_t err_total;
  int exit_code; /* 124 on timeout; negative = killed by that signal */
  bool timed_out;
  bool signaled;
  char *output; /* the rendered text an agent reads (contract §1.1) */
  uint64_t duration_ms;
};
SBX_PUBLIC void sbx_exec_result_free(struct sbx_exec_result *r);

/* Runs `sh -lc command` in the sandbox. Returns 0 whenever the command ran (whatever its exit
 * code); < 0 only for bad input (env key), a broken sandbox (evicted) and the like. */
SBX_PUBLIC int sbx_execute_command(sbx_sandbox_t *sb, const char *command,
                                   const struct sbx_exec_opts *opts, struct sbx_exec_result *res,
                                   sbx_error_t *err);
/* Sends a signal to a running command's process group (by the id of a background command). */
SBX_PUBLIC int sbx_command_signal(sbx_sandbox_t *sb, const char *cmd_id, int signo,
                                  sbx_error_t *err);

/* read_file: 1-based inclusive lines; SBX_LINE_NONE for an absent bound. */
SBX_PUBLIC int sbx_read_file(sbx_sandbox_t *sb, const char *path, int64_t start, int64_t end,
                             char **text, size_t *len, sbx_error_t *err);
/* write_file: creates parent directories; append appends, otherwise replaces atomically. */
SBX_PUBLIC int sbx_write_file(sbx_sandbox_t *sb, const char *path, const char *content, size_t len,
                              bool append, sbx_error_t *err);
/* update_file: replaces the file with bytes (atomically), creating parents. */
SBX_PUBLIC int sbx_update_file(sbx_sandbox_t *sb, const char *path, const void *data, size_t len,
                               sbx_error_t *err);
/* download_file: only under /mnt/user-data, at most SBX_DOWNLOAD_MAX bytes. */
SBX_PUBLIC int sbx_download_file(sbx_sandbox_t *sb, const char *path, void **data, size_t *len,
                                 sbx_error_t *err);
/* list_dir: entries below path to max_depth, directories ending in '/'; missing = not found. */
SBX_PUBLIC int sbx_list_dir(sbx_sandbox_t *sb, const char *path, int max_depth, char ***entries,
                            size_t *n, sbx_error_t *err);
SBX_PUBLIC int sbx_glob(sbx_sandbox_t *sb, const char *path, const char *pattern, bool include_dirs,
                        size_t max_results, char ***matches, size_t *n, bool *truncated,
                        sbx_error_t *err);

struct sbx_grep_match {
  char *path;
  uint64_t line_number;
  char *line;
};
struct sbx_grep_opts {
  const char *glob; /* NULL = every file */
  bool literal;
  bool case_sensitive;
  size_t max_results; /* DeerFlow's default is 100; 0 returns no match, and truncated if
                         anything matched (NULL opts means 100) */
};
SBX_PUBLIC int sbx_grep(sbx_sandbox_t *sb, const char *path, const char *pattern,
                        const struct sbx_grep_opts *opts, struct sbx_grep_match **matches,
                        size_t *n, bool *truncated, sbx_error_t *err);
SBX_PUBLIC void sbx_grep_matches_free(struct sbx_grep_match *m, size_t n);
SBX_PUBLIC void sbx_strv_free_array(char **v, size_t n);

/* Streaming forms used by front-ends: bytes from fd into path (write_file or update_file
 * semantics), and a download into fd. */
SBX_PUBLIC int sbx_write_from_fd(sbx_sandbox_t *sb, const char *path, int fd, bool append,
                                 sbx_error_t *err);
SBX_PUBLIC int sbx_download_to_fd(sbx_sandbox_t *sb, const char *path, int fd, sbx_error_t *err);

#ifdef __cplusplus
}
#endif
#endif
