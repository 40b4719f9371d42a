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

/* The linux backend's view of this host for this user (sbx doctor): the kernel and its system
 * calls, privilege, user namespaces, seccomp and cgroups, one line each, with the fix for each
 * problem, judged against cfg. *failures gets the count of problems that stop sandboxes from
 * starting. Creates nothing. Caller frees. */
SBX_PUBLIC char *sbx_doctor(const struct sbx_config *cfg, int *failures);
/* The same, also judging the state directory home (NULL: $SBX_HOME, else the default). */
SBX_PUBLIC char *sbx_doctor_home(const struct sbx_config *cfg, const char *home, int *failures);

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
/* Starts spares (sandboxes made ahead of time, taken by the next create of a sandbox with the
 * same configuration) until the configured number (`spares`) are there. Each costs a sandbox
 * start: call it from a background thread or process. Returns how many it started (0 when
 * another process is filling the same home); -1 on error. */
SBX_PUBLIC int sbx_spares_fill(sbx_provider_t *p, sbx_error_t *err);
/* How many spares there are (ready or being made): one readdir. */
SBX_PUBLIC int sbx_spares_ready(sbx_provider_t *p);

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

/* A scope's sandbox the pool destroyed on its own (the replica cap made room for another, idle
 * longer than idle_timeout, its init died, it failed its health check): kept until the scope's
 * next acquire (which logs it once, as a warning) or sbx_eviction_forget. */
struct sbx_eviction {
  char id[17];
  char *user, *thread;
  double time; /* seconds since the epoch */
  char *reason;
};
SBX_PUBLIC int sbx_evictions(sbx_provider_t *p, struct sbx_eviction **out, size_t *n,
                             sbx_error_t *err);
SBX_PUBLIC void sbx_evictions_free(struct sbx_eviction *v, size_t n);
/* The eviction recorded for id into *ev (its strings freed by sbx_eviction_clear); 0, or -1 if
 * there is none. With forget, the record is removed. */
SBX_PUBLIC int sbx_eviction_take(sbx_provider_t *p, const char *id, struct sbx_eviction *ev,
                                 bool forget);
SBX_PUBLIC void sbx_eviction_clear(struct sbx_eviction *ev);

/* ---- the contract ---- */

struct sbx_exec_opts {
  const char *const *env; /* "KEY=VALUE", over the configured environment; keys must match
                             ^[A-Za-z_][A-Za-z0-9_]*$ */
  size_t n_env;
  double timeout;   /* seconds; 0 = the configured bash_command_timeout; < 0 is an error */
  const char *cwd;  /* default /mnt/user-data/workspace */
  uint64_t out_cap; /* bytes kept per stream; 0 = configured (10 MiB) */
  /* Called with output as it arrives (stream 1 = stdout, 2 = stderr); returning non-zero
   * stops delivery: the command keeps running, unless kill_on_disconnect is set, in which
   * case the call ends there (SBX_E_IO) and the command's process group is killed. */
  int (*on_output)(void *arg, int stream, const char *data, size_t len);
  void *arg;
  bool discard_output;     /* with on_output: keep nothing in the result */
  bool kill_on_disconnect; /* if this process dies mid-command (or on_output refuses more
                              output), kill the command's process group */
  bool background;         /* start and return at once (see sbx_command_status/logs) */
  const char *const *argv; /* run this argv directly instead of `sh -lc command` */
  char *id_out;            /* receives the command id (room for 65 bytes) */
  bool no_timeout;         /* run without a deadline (execd's timeout 0) */
  bool merge_output;       /* stderr into stdout */
  const char *id;          /* use this command id (1-64 characters) */
  /* Called once the command has started, with its id (before any output). */
  int (*on_start)(void *arg, const char *id);
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
  char *output; /* the rendered text an agent reads (contract §1.1), NUL-terminated; it may
                  hold NUL bytes of the command's output: output_len is its length */
  uint64_t duration_ms;
  size_t output_len;
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

/* ---- interactive commands: stdin and terminals ---- */

/* A command that is fed input while it runs: its stdin is a pipe, or (tty) it runs on a new
 * terminal in the sandbox (stdout and stderr are then the terminal's output, stream 1). The
 * caller polls sbx_session_fd for input (then sbx_session_read) and, while
 * sbx_session_pending > 0, for output room (then sbx_session_flush). Nothing here blocks on the
 * sandbox except sbx_session_read of a frame that has begun to arrive. */
typedef struct sbx_session_s sbx_session_t;
#define SBX_TTY_MAX_DIM 4096

struct sbx_session_opts {
  bool tty;            /* run on a terminal (a shell, a REPL, a TUI) */
  unsigned rows, cols; /* its size; 0: 24 x 80; at most SBX_TTY_MAX_DIM */
};

enum sbx_session_event_type { SBX_SESSION_OUTPUT = 1, SBX_SESSION_EXIT = 2 };
struct sbx_session_event {
  int type;         /* enum sbx_session_event_type */
  int stream;       /* OUTPUT: 1 stdout (or the terminal), 2 stderr */
  const char *data; /* OUTPUT: valid until the next sbx_session_read */
  size_t len;
  int exit_code; /* EXIT: as sbx_exec_result's (negative: killed by that signal) */
  bool timed_out, signaled;
};

/* Starts command (or opts->argv) as sbx_execute_command would, with the input of so. opts'
 * env, cwd, timeout (no_timeout), argv, id, kill_on_disconnect and out_cap apply. */
SBX_PUBLIC sbx_session_t *sbx_session_start(sbx_sandbox_t *sb, const char *command,
                                            const struct sbx_exec_opts *opts,
                                            const struct sbx_session_opts *so, sbx_error_t *err);
SBX_PUBLIC const char *sbx_session_id(const sbx_session_t *s);
SBX_PUBLIC int sbx_session_fd(const sbx_session_t *s);
/* Queues input for the command and sends what the connection takes now. At most
 * SBX_SESSION_QUEUE_MAX bytes wait unsent: past that, SBX_E_BUSY (flush first). */
#define SBX_SESSION_QUEUE_MAX (256u << 10)
SBX_PUBLIC int sbx_session_write(sbx_session_t *s, const void *data, size_t len, sbx_error_t *err);
/* EOF on the command's stdin (a terminal gets its EOF character, ^D). */
SBX_PUBLIC int sbx_session_close_stdin(sbx_session_t *s, sbx_error_t *err);
/* The terminal's new size (its foreground processes get SIGWINCH). */
SBX_PUBLIC int sbx_session_resize(sbx_session_t *s, unsigned rows, unsigned cols, sbx_error_t *err);
/* A signal to the command (on a terminal: to its foreground process group). */
SBX_PUBLIC int sbx_session_signal(sbx_session_t *s, int signo, sbx_error_t *err);
/* Bytes queued and not yet sent; sbx_session_flush sends more without blocking. */
SBX_PUBLIC size_t sbx_session_pending(const sbx_session_t *s);
SBX_PUBLIC int sbx_session_flush(sbx_session_t *s, sbx_error_t *err);
/* Reads the next event (blocks until one arrives). Returns 0, or -1 (the channel broke). After
 * the EXIT event the session has ended. */
SBX_PUBLIC int sbx_session_read(sbx_session_t *s, struct sbx_session_event *ev, sbx_error_t *err);
/* Closes the connection (a command still running is killed if kill_on_disconnect was set). */
SBX_PUBLIC void sbx_session_free(sbx_session_t *s);

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
/* Every glob and grep ends by a deadline: one that runs longer than SBX_SEARCH_TIMEOUT seconds
 * (grep: its opts' timeout, at most SBX_SEARCH_TIMEOUT_MAX) answers what it found so far with
 * truncated set, and sbx-init stops its work (a back-reference regex's worker is killed). */
#define SBX_SEARCH_TIMEOUT 30
#define SBX_SEARCH_TIMEOUT_MAX 590
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
  double timeout;     /* seconds; 0 = SBX_SEARCH_TIMEOUT, above SBX_SEARCH_TIMEOUT_MAX = that */
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

/* ---- beyond the contract: what an OpenSandbox execd/lifecycle front-end (sbxd) needs ---- */

/* A sandbox made explicitly (not for a scope): not subject to the replica cap or idle reaping;
 * it lives until sbx_destroy (its front-end enforces any expiry). */
struct sbx_create_opts {
  const char *image;      /* NULL: the configured image */
  const char *const *env; /* "KEY=VALUE" applied to every command in it */
  size_t n_env;
  uint64_t memory_bytes;          /* 0: configured */
  double cpus;                    /* 0: configured */
  const struct sbx_mount *mounts; /* extra bind mounts (host paths already vetted) */
  size_t n_mounts;
  const char *extra; /* a JSON object kept with the sandbox for the front-end */
  /* The initial egress policy, JSON ({defaultAction, egress}: src/net/policy.h), already
   * validated by the front-end; NULL: the configured one. Only for sandbox.network egress. */
  const char *network_policy;
  /* The host folder bound at /mnt/user-data (absolute; it and its workspace, uploads and outputs
   * are created and given to the sandbox's root; it outlives the sandbox). NULL: a folder of
   * the sandbox's own, deleted with it. */
  const char *user_data;
  /* NULL: a new random id; else this one (16 lower-case hex digits, not in use): for a
   * front-end that answered with the id before it could make the sandbox (sbxd's pull) */
  const char *id;
};
SBX_PUBLIC sbx_sandbox_t *sbx_create(sbx_provider_t *p, const struct sbx_create_opts *o,
                                     sbx_error_t *err);
/* Takes hold of an existing sandbox by id (no health check): for front-ends that restart and
 * adopt what is still running. */
SBX_PUBLIC sbx_sandbox_t *sbx_open(sbx_provider_t *p, const char *id, sbx_error_t *err);
/* The front-end's JSON object kept with the sandbox (malloc'ed; "{}" if none). */
SBX_PUBLIC char *sbx_extra_get(sbx_provider_t *p, const char *id, sbx_error_t *err);
SBX_PUBLIC int sbx_extra_set(sbx_provider_t *p, const char *id, const char *json, sbx_error_t *err);
/* Sends signo to every process of the sandbox but its init (its commands, background ones
 * included; the sandbox stays). Returns how many processes got it. */
SBX_PUBLIC int sbx_kill(sbx_provider_t *p, const char *id, int signo, sbx_error_t *err);
/* Freezes (cgroup freezer) or thaws every process of the sandbox; where no freezer can be
 * written (rootless without a delegated cgroup) the linux backend stops them with SIGSTOP and
 * continues exactly those. */
SBX_PUBLIC int sbx_pause(sbx_provider_t *p, const char *id, bool paused, sbx_error_t *err);
SBX_PUBLIC bool sbx_sandbox_managed(const sbx_sandbox_t *sb);
/* Stores the sandbox's writable root as a new image NAME[:TAG] of the store, on top of the image
 * it was made from (docs/images.md, "Snapshots"). A running sandbox is frozen while its upper is
 * read. SBX_E_UNSUPPORTED for a `host` sandbox (nothing to commit); *digest (malloc'ed, may be
 * NULL) receives the new manifest's digest. */
SBX_PUBLIC int sbx_commit(sbx_provider_t *p, const char *id, const char *name, char **digest,
                          sbx_error_t *err);

struct sbx_file_info {
  char *path;
  char type; /* 'f' file, 'd' directory, 'l' symlink, 'o' other */
  uint64_t size;
  unsigned mode; /* permission bits */
  int64_t mtime_ns, ctime_ns;
  unsigned uid, gid;
};
SBX_PUBLIC void sbx_file_infos_free(struct sbx_file_info *v, size_t n);
/* lstat */
SBX_PUBLIC int sbx_stat(sbx_sandbox_t *sb, const char *path, struct sbx_file_info *info,
                        sbx_error_t *err);
/* mkdir -p; *created says whether the last component is new (and got mode). */
SBX_PUBLIC int sbx_mkdir(sbx_sandbox_t *sb, const char *path, unsigned mode, bool *created,
                         sbx_error_t *err);
enum { SBX_RM_DIR = 1, SBX_RM_RECURSIVE = 2 };
SBX_PUBLIC int sbx_remove(sbx_sandbox_t *sb, const char *path, int flags, sbx_error_t *err);
/* Moves src to dst (dst must not exist; its parent is created). */
SBX_PUBLIC int sbx_rename(sbx_sandbox_t *sb, const char *src, const char *dst, sbx_error_t *err);
/* chmod (mode 0 = leave) and chown by user/group name or number (NULL = leave). */
SBX_PUBLIC int sbx_chmod(sbx_sandbox_t *sb, const char *path, unsigned mode, const char *owner,
                         const char *group, sbx_error_t *err);
/* Entries below path to depth, each directory's children after it, sorted, links not followed. */
SBX_PUBLIC int sbx_readdir(sbx_sandbox_t *sb, const char *path, int depth, struct sbx_file_info **v,
                           size_t *n, sbx_error_t *err);
/* Non-directories below path whose name matches pattern (glob with {a,b}). */
SBX_PUBLIC int sbx_find(sbx_sandbox_t *sb, const char *path, const char *pattern,
                        struct sbx_file_info **v, size_t *n, sbx_error_t *err);
/* Replaces every occurrence of old by new in the file (atomically); *count gets how many. */
SBX_PUBLIC int sbx_replace(sbx_sandbox_t *sb, const char *path, const void *old, size_t old_len,
                           const void *new_, size_t new_len, uint64_t *count, sbx_error_t *err);
/* Bytes [offset, offset+limit) of path (limit 0 = to the end) into fd; *size gets the file's
 * size before any byte is written (on_size, if set, is called with it first). */
SBX_PUBLIC int sbx_read_range(sbx_sandbox_t *sb, const char *path, uint64_t offset, uint64_t limit,
                              int fd, int (*on_size)(void *, uint64_t), void *arg,
                              sbx_error_t *err);
/* Writes data (or fd's content when data is NULL) to path, creating parents; mode 0 keeps the
 * existing mode (new files 0644). Atomic replace. */
SBX_PUBLIC int sbx_write_file_mode(sbx_sandbox_t *sb, const char *path, const void *data,
                                   size_t len, int fd, unsigned mode, sbx_error_t *err);

struct sbx_command_status {
  char id[65];
  bool running;
  bool background;
  bool timed_out;
  int exit_code; /* valid when !running */
  long pid;
  uint64_t started_ms, finished_ms; /* since the epoch */
};
SBX_PUBLIC int sbx_command_status(sbx_sandbox_t *sb, const char *id, struct sbx_command_status *st,
                                  sbx_error_t *err);
/* A background command's combined output from byte cursor on, into fd; *next = new cursor. */
SBX_PUBLIC int sbx_command_logs(sbx_sandbox_t *sb, const char *id, uint64_t cursor, int fd,
                                uint64_t *next, sbx_error_t *err);
/* A connected TCP socket to 127.0.0.1:port inside the sandbox's network namespace. */
SBX_PUBLIC int sbx_connect_port(sbx_sandbox_t *sb, int port, sbx_error_t *err);

struct sbx_metrics {
  double cpu_count;   /* CPUs it may use */
  double cpu_usage_s; /* CPU seconds used so far */
  uint64_t mem_limit; /* bytes (host memory if unlimited) */
  uint64_t mem_used;  /* bytes */
};
SBX_PUBLIC int sbx_metrics(sbx_sandbox_t *sb, struct sbx_metrics *m, sbx_error_t *err);
/* The same for a sandbox of the pool by id, without taking hold of it (its idle time goes on). */
SBX_PUBLIC int sbx_metrics_of(sbx_provider_t *p, const char *id, struct sbx_metrics *m,
                              sbx_error_t *err);

#ifdef __cplusplus
}
#endif
#endif
