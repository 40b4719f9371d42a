/* libsbx internals shared across src/lib and the backends. */
#ifndef SBX_INTERNAL_H
#define SBX_INTERNAL_H

#include <pthread.h>
#include <sbx/sbx.h>

#include "error.h"
#include "paths.h"
#include "util.h"

/* ---- log.c ---- */
void sbx_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- state.c: the on-disk pool ----
 *
 *   $home/sandboxes/<id>/meta   JSON: identity, backend, pid, cgroups, times (see state.c)
 *   $home/sandboxes/<id>/lease  flock(LOCK_SH) by every front-end holding it active
 *   $home/sandboxes/<id>/ctl.sock
 *   $home/locks/<id>            flock(LOCK_EX) while a sandbox is created, checked or destroyed
 *   $home/locks/pool            flock(LOCK_EX) around creation (replica cap)
 *   $home/users/<user>/threads/<thread>/user-data/{workspace,uploads,outputs}
 */
struct sbx_meta {
  char id[SBX_ID_LEN + 1];
  char *user;   /* NULL: throw-away */
  char *thread; /* NULL: throw-away */
  char *backend;
  char *image;
  double created;
  double last_used;
  long pid;
  unsigned long long pid_start; /* /proc/<pid>/stat field 22, against pid reuse */
  char *cgroups;                /* linux: "controller=path" lines */
  uint32_t uid_base;            /* linux: first host id of its range (0: not recorded) */
  char *remote_id;              /* opensandbox: the remote sandbox's id */
  char *backend_json;           /* a backend's own data (opensandbox: endpoint, headers) */
  bool paused;
  bool managed;          /* made by sbx_create: outside the replica cap and idle reaping */
  sbx_strv_t env;        /* "KEY=VALUE" for every command (sbx_create) */
  uint64_t memory_bytes; /* per-sandbox limits (sbx_create); 0 = configured */
  double cpus;
  char *extra;     /* JSON object kept for front-ends (sbxd: metadata, expiry...) */
  char *spare_key; /* a spare (spares.c): the configuration it was made for */
};

void sbx_meta_free(struct sbx_meta *m);
char *sbx_state_dir(const char *home, const char *id);
int sbx_meta_read(const char *home, const char *id, struct sbx_meta *m, sbx_error_t *err);
int sbx_meta_write(const char *home, const struct sbx_meta *m, sbx_error_t *err);
/* Ids of every sandbox directory in the pool. */
int sbx_state_list_ids(const char *home, sbx_strv_t *ids, sbx_error_t *err);
/* Opens (creating) and flocks $home/locks/<name>. nonblock: -1 with EWOULDBLOCK if busy. */
int sbx_lock_take(const char *home, const char *name, bool exclusive, bool nonblock,
                  sbx_error_t *err);
/* Removes the lock file (its sandbox is gone) and releases it: for an exclusive lock only. */
void sbx_lock_drop(const char *home, const char *name, int fd);
/* Lease handling on $dir/lease: take a shared lease (returns the fd), and test whether anyone
 * holds one. */
int sbx_lease_take(const char *home, const char *id, sbx_error_t *err);
bool sbx_lease_held(const char *home, const char *id);
/* Records "used now": the lease file's mtime is the sandbox's last-used time. fd: an open
 * lease fd, or -1 to go by path. */
void sbx_lease_touch(const char *home, const char *id, int fd);
/* pids holding a lease on the sandbox (from /proc/locks). */
int sbx_lease_owners(const char *home, const char *id, long **pids, size_t *n);
/* Creates the host thread folder for (user, thread) safely (no symlink is ever followed) and
 * returns the path of its user-data directory. */
char *sbx_thread_dir_ensure(const char *home, const char *user, const char *thread, uid_t owner,
                            sbx_error_t *err);
/* ---- backends ---- */
struct sbx_instance;

/* A backend is a folder behind this table (crun's cgroup-manager pattern). */
struct sbx_backend_ops {
  const char *name;
  unsigned data_owner; /* host uid given the thread's user-data folders */
  /* Makes the sandbox described by in->meta (id, user, thread already set) and fills in the
   * backend's fields of in->meta. user_data is the host folder for /mnt/user-data, or "" for a
   * throw-away sandbox whose files need not reach the host. */
  int (*create)(struct sbx_instance *in, const char *user_data, sbx_error_t *err);
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
};

extern const struct sbx_backend_ops sbx_backend_linux;
extern const struct sbx_backend_ops sbx_backend_opensandbox;
/* Where sbx-init is: $SBX_INIT, else next to the running executable, else the install dir. */
char *sbx__init_path(void);
const struct sbx_backend_ops *sbx_backend_find(const char *name);

/* One sandbox as the library sees it. */
struct sbx_instance {
  struct sbx_provider_s *provider;
  const char *home;
  const struct sbx_config *cfg;
  const struct sbx_backend_ops *ops;
  struct sbx_meta meta;
  char *dir; /* $home/sandboxes/<id> */
  void *backend_data;
  /* at creation only: extra mounts (sbx_create's volumes) */
  const struct sbx_mount *extra_mounts;
  size_t n_extra_mounts;
};

/* An acquired sandbox: the instance plus the lease this process holds. */
struct sbx_sandbox_s {
  struct sbx_instance in;
  int lease_fd;
  bool broken; /* a terminal error happened: evict on release */
  struct sbx_sandbox_s *next;
};

struct sbx_provider_s {
  char *home;
  const struct sbx_config *cfg;
  struct sbx_config *owned_cfg;
  const struct sbx_backend_ops *ops;
  pthread_mutex_t lock;
  struct sbx_sandbox_s *held;
  bool shut_down;
  /* the spare pool: a provider of its own over $home/spare (NULL in the spare pool itself) */
  struct sbx_provider_s *spares;
  bool is_spare_pool;
  double spares_since; /* a `down` after this undoes fills asked for before it (spares.c) */
};

/* Loads the instance of id (meta + ops) without taking anything. */
int sbx__instance_load(struct sbx_provider_s *p, const char *id, struct sbx_instance *in,
                       sbx_error_t *err);
void sbx__instance_free(struct sbx_instance *in);
/* provider.c, for spares.c: creates id in p (caller holds locks/<id>); destroys whatever is left
 * of id (caller holds locks/<id>). */
struct sbx_sandbox_s *sbx__create(struct sbx_provider_s *p, const char *id, const char *user,
                                  const char *thread, const struct sbx_create_opts *o,
                                  sbx_error_t *err);
int sbx__destroy_id(struct sbx_provider_s *p, const char *id, sbx_error_t *err);
void sbx__handle_free(struct sbx_sandbox_s *sb);

/* ---- spares.c ---- */
#define SBX_LOCK_FILL "fill"  /* in the spare pool's locks/: held by the one filler */
#define SBX_DOWN_STAMP "down" /* in the spare pool's locks/: its mtime is the last shutdown */
/* The configuration a spare made now gets, for the sandbox create would make for o (NULL: a
 * scope's or a throw-away one); NULL if such a sandbox cannot come from a spare. */
char *sbx__spare_key(const struct sbx_provider_s *p, const struct sbx_create_opts *o);
/* Moves a live spare made for `key` from p's spare pool to in->dir (which must not exist) and
 * copies its backend fields into in->meta. Caller holds locks/<id>. false: none ready. */
bool sbx__spare_take(struct sbx_provider_s *p, const char *key, struct sbx_instance *in);

/* Called by the contract layer when an operation hit a terminal error. */
void sbx__sandbox_broken(sbx_sandbox_t *sb);

/* ---- agent client (client.c): the contract over sbx-init's protocol, for local backends ---- */
int sbx__agent_connect(const char *dir, sbx_error_t *err);
int sbx__agent_ping(const char *dir, int timeout_ms, sbx_error_t *err);
/* Changes the sandbox's idle expiry (sbx-init's own; 0: never). */
int sbx__agent_set_idle(const char *dir, uint64_t idle_ms, sbx_error_t *err);
int sbx__agent_exec(struct sbx_instance *in, const char *command, const struct sbx_exec_opts *o,
                    struct sbx_exec_result *res, sbx_error_t *err);
/* Runs `true` within timeout_ms in all (connect, spawn, answer): the reclaim health check. */
int sbx__agent_health(const char *dir, int timeout_ms, sbx_error_t *err);
int sbx__agent_signal(struct sbx_instance *in, const char *cmd_id, int signo, sbx_error_t *err);
int sbx__agent_read_text(struct sbx_instance *in, const char *path, int64_t start, int64_t end,
                         char **text, size_t *len, sbx_error_t *err);
int sbx__agent_read_to_fd(struct sbx_instance *in, const char *path, uint64_t max, int fd,
                          sbx_error_t *err);
int sbx__agent_read_to_buf(struct sbx_instance *in, const char *path, uint64_t max, void **data,
                           size_t *len, sbx_error_t *err);
int sbx__agent_write(struct sbx_instance *in, const char *path, const void *data, size_t len,
                     int fd, bool append, sbx_error_t *err);
int sbx__agent_write_ex(struct sbx_instance *in, const char *path, const void *data, size_t len,
                        int fd, bool append, unsigned mode, sbx_error_t *err);
int sbx__agent_list_dir(struct sbx_instance *in, const char *path, int depth, sbx_strv_t *out,
                        sbx_error_t *err);
int sbx__agent_glob(struct sbx_instance *in, const char *path, const char *pattern,
                    bool include_dirs, size_t max, sbx_strv_t *out, bool *truncated,
                    sbx_error_t *err);
int sbx__agent_grep(struct sbx_instance *in, const char *path, const char *pattern,
                    const struct sbx_grep_opts *o, struct sbx_grep_match **m, size_t *n,
                    bool *truncated, sbx_error_t *err);
int sbx__agent_stat(struct sbx_instance *in, const char *path, struct sbx_file_info *info,
                    sbx_error_t *err);
int sbx__agent_mkdir(struct sbx_instance *in, const char *path, unsigned mode, bool *created,
                     sbx_error_t *err);
int sbx__agent_remove(struct sbx_instance *in, const char *path, int flags, sbx_error_t *err);
int sbx__agent_rename(struct sbx_instance *in, const char *src, const char *dst, sbx_error_t *err);
int sbx__agent_chmod(struct sbx_instance *in, const char *path, unsigned mode, const char *owner,
                     const char *group, sbx_error_t *err);
int sbx__agent_readdir(struct sbx_instance *in, const char *path, int depth, bool find,
                       const char *pattern, struct sbx_file_info **v, size_t *n, sbx_error_t *err);
int sbx__agent_replace(struct sbx_instance *in, const char *path, const void *old, size_t old_len,
                       const void *new_, size_t new_len, uint64_t *count, sbx_error_t *err);
int sbx__agent_read_range(struct sbx_instance *in, const char *path, uint64_t offset,
                          uint64_t limit, int fd, int (*on_size)(void *, uint64_t), void *arg,
                          sbx_error_t *err);
int sbx__agent_write_mode(struct sbx_instance *in, const char *path, const void *data, size_t len,
                          int fd, unsigned mode, sbx_error_t *err);
int sbx__agent_cmd_status(struct sbx_instance *in, const char *id, struct sbx_command_status *st,
                          sbx_error_t *err);
int sbx__agent_cmd_logs(struct sbx_instance *in, const char *id, uint64_t cursor, int fd,
                        uint64_t *next, sbx_error_t *err);
int sbx__agent_connect_port(struct sbx_instance *in, int port, sbx_error_t *err);

/* Generic request on a fresh connection; the reply's payload is returned for OK. */
int sbx__agent_simple(const char *dir, uint16_t type, const void *req, size_t len, char **reply,
                      size_t *reply_len, sbx_error_t *err);

#endif
