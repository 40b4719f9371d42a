/* What a backend is and works on: its operations table and the instance (one sandbox) every
 * operation gets. A backend includes this and log.h, nothing above them (the instance layer,
 * the provider, the contract call into backends, never the other way round). */
#ifndef SBX_LIB_BACKEND_H
#define SBX_LIB_BACKEND_H

#include "state.h"

struct sbx_instance;

/* A backend is a folder behind this table (crun's cgroup-manager pattern). */
struct sbx_backend_ops {
  const char *name;
  unsigned data_owner; /* host uid given the thread's user-data folders */
  /* Makes the sandbox described by in->meta (id, user, thread already set) and fills in the
   * backend's fields of in->meta. user_data is the host folder for /mnt/user-data, or "" for a
   * throw-away sandbox whose files need not reach the host. */
  int (*create)(struct sbx_instance *in, const char *user_data, sbx_error_t *err);
  /* Refuses a create that cannot work here before anything is made (no state, no thread
   * folder). Optional. */
  int (*precheck)(const struct sbx_instance *in, sbx_error_t *err);
  /* Removes everything of the sandbox (processes, cgroups, remote). Must work on a half-made
   * or dead sandbox. */
  int (*destroy)(struct sbx_instance *in, sbx_error_t *err);
  /* false if the sandbox is certainly gone (its init died). */
  bool (*alive)(struct sbx_instance *in);
  int64_t (*memory)(struct sbx_instance *in);
  /* A reaper pass's chance to remove what the backend itself may have left behind. Optional. */
  void (*sweep)(void);
  /* Is the sandbox's init answering (no process started)? Optional. */
  int (*ping)(struct sbx_instance *in, sbx_error_t *err);
  /* The reclaim health check (DeerFlow's: run `true`, timeout_s budget). */
  int (*health)(struct sbx_instance *in, int timeout_s, sbx_error_t *err);
  int (*pause)(struct sbx_instance *in, bool paused, sbx_error_t *err);
  /* Sends signo to every process of the sandbox but its init; returns how many got it.
   * Optional. */
  int (*kill)(struct sbx_instance *in, int signo, sbx_error_t *err);
  /* Called by release before the sandbox is parked, with locks/<id> held (so the next acquire
   * of the scope waits for it): the opensandbox backend copies the outputs home here. user_data
   * is the host thread folder (NULL for a throw-away or managed sandbox). Optional. */
  void (*on_release)(struct sbx_instance *in, const char *user_data);

  /* Makes a spare (a sandbox started ahead of time, src/lib/spares.c), already moved to
   * in->dir with its backend fields in in->meta, into the sandbox in->meta describes: its name,
   * user_data (as for create) and, for a managed sandbox, no idle expiry. Optional: a backend
   * without it gets no spares. */
  int (*adopt)(struct sbx_instance *in, const char *user_data, sbx_error_t *err);

  /* contract */
  int (*exec)(struct sbx_instance *in, const char *command, const struct sbx_exec_opts *opts,
              struct sbx_exec_result *res, sbx_error_t *err);
  int (*signal)(struct sbx_instance *in, const char *cmd_id, int signo, sbx_error_t *err);
  int (*read_text)(struct sbx_instance *in, const char *path, int64_t start, int64_t end,
                   char **text, size_t *len, sbx_error_t *err);
  /* Streams the file into fd; max caps the bytes (EFBIG as SBX_E_TOO_LARGE). */
  int (*read_to_fd)(struct sbx_instance *in, const char *path, uint64_t max, int fd,
                    sbx_error_t *err);
  int (*read_to_buf)(struct sbx_instance *in, const char *path, uint64_t max, void **data,
                     size_t *len, sbx_error_t *err);
  /* Writes data (or, if data is NULL, what can be read from fd) to path. */
  int (*write)(struct sbx_instance *in, const char *path, const void *data, size_t len, int fd,
               bool append, sbx_error_t *err);
  int (*list_dir)(struct sbx_instance *in, const char *path, int depth, sbx_strv_t *out,
                  sbx_error_t *err);
  int (*glob)(struct sbx_instance *in, const char *path, const char *pattern, bool include_dirs,
              size_t max, sbx_strv_t *out, bool *truncated, sbx_error_t *err);
  int (*grep)(struct sbx_instance *in, const char *path, const char *pattern,
              const struct sbx_grep_opts *o, struct sbx_grep_match **m, size_t *n, bool *truncated,
              sbx_error_t *err);

  /* beyond the contract (optional: NULL = unsupported on this backend) */
  int (*stat)(struct sbx_instance *in, const char *path, struct sbx_file_info *info,
              sbx_error_t *err);
  int (*mkdir)(struct sbx_instance *in, const char *path, unsigned mode, bool *created,
               sbx_error_t *err);
  int (*remove)(struct sbx_instance *in, const char *path, int flags, sbx_error_t *err);
  int (*rename)(struct sbx_instance *in, const char *src, const char *dst, sbx_error_t *err);
  int (*chmod)(struct sbx_instance *in, const char *path, unsigned mode, const char *owner,
               const char *group, sbx_error_t *err);
  int (*readdir)(struct sbx_instance *in, const char *path, int depth, bool find,
                 const char *pattern, struct sbx_file_info **v, size_t *n, sbx_error_t *err);
  int (*replace)(struct sbx_instance *in, const char *path, const void *old, size_t old_len,
                 const void *new_, size_t new_len, uint64_t *count, sbx_error_t *err);
  int (*read_range)(struct sbx_instance *in, const char *path, uint64_t offset, uint64_t limit,
                    int fd, int (*on_size)(void *, uint64_t), void *arg, sbx_error_t *err);
  int (*write_mode)(struct sbx_instance *in, const char *path, const void *data, size_t len, int fd,
                    unsigned mode, sbx_error_t *err);
  int (*cmd_status)(struct sbx_instance *in, const char *id, struct sbx_command_status *st,
                    sbx_error_t *err);
  int (*cmd_logs)(struct sbx_instance *in, const char *id, uint64_t cursor, int fd, uint64_t *next,
                  sbx_error_t *err);
  int (*connect_port)(struct sbx_instance *in, int port, sbx_error_t *err);
  int (*metrics)(struct sbx_instance *in, struct sbx_metrics *m, sbx_error_t *err);
  /* an interactive command (include/sbx/sbx.h), the session's functions are the backend's */
  sbx_session_t *(*session_start)(struct sbx_instance *in, const char *command,
                                  const struct sbx_exec_opts *o, const struct sbx_session_opts *so,
                                  sbx_error_t *err);
  /* sbx_commit: the sandbox's writable upper (malloc'ed path) and the host id range its owners
   * are in; SBX_E_UNSUPPORTED when it has none (a `host` image) */
  int (*upper)(struct sbx_instance *in, char **dir, uint32_t *uid_base, uint32_t *uid_count,
               sbx_error_t *err);
};

/* One sandbox as the library sees it. */
struct sbx_instance {
  struct sbx_provider_s *provider; /* the provider holding it (opaque here; NULL for a spare) */
  const char *home;
  const struct sbx_config *cfg;
  const struct sbx_backend_ops *ops;
  struct sbx_meta meta;
  char *dir; /* $home/sandboxes/<id> */
  void *backend_data;
  /* at creation only: extra mounts (sbx_create's volumes), the initial egress policy (JSON,
   * sbx_create's; NULL: the configured one) */
  const struct sbx_mount *extra_mounts;
  size_t n_extra_mounts;
  const char *network_policy;
};

/* backend.c: where sbx-init is: $SBX_INIT, else next to the running executable, else the
 * install dir (the linux backend launches it; the opensandbox one runs its search locally). */
char *sbx__init_path(void);

#endif
