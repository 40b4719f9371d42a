/* The on-disk pool (state.c): one sandbox's metadata, the locks and leases every process on
 * the host coordinates by, and the thread folders. Knows no backend. */
#ifndef SBX_LIB_STATE_H
#define SBX_LIB_STATE_H

#include <sbx/sbx.h>
#include <sys/types.h>

#include "error.h"
#include "paths.h"
#include "util.h"

/* The pool's layout:
 *
 *   $home/sandboxes/<id>/meta   JSON: identity, backend, pid, cgroups, times (see state.c)
 *   $home/sandboxes/<id>/lease  flock(LOCK_SH) by every front-end holding it active
 *   $home/sandboxes/<id>/ctl.sock
 *   $home/locks/<id>            flock(LOCK_EX) while a sandbox is created, checked or destroyed
 *   $home/locks/pool            flock(LOCK_EX) around creation (replica cap)
 *   $home/users/<user>/threads/<thread>/user-data/{workspace,uploads,outputs}
 *   $home/evicted/<id>          JSON: a scope's sandbox the pool destroyed (replica cap, idle,
 *                               dead, failed check): user, thread, time, reason; reported once
 *                               by the scope's next acquire, listed by sbx ps
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
  /* the memory limit it was made with, whatever the configuration says later (memory
   * admission, provider.c); 0: none, or not recorded (older sandboxes) */
  uint64_t memory_admitted;
  double cpus;
  char *extra;     /* JSON object kept for front-ends (sbxd: metadata, expiry...) */
  char *spare_key; /* a spare (spares.c): the configuration it was made for */
};

void sbx__meta_free(struct sbx_meta *m);
char *sbx__state_dir(const char *home, const char *id);
/* Evictions (struct sbx_eviction, sbx.h): written when the pool destroys a scope's sandbox
 * (thread NULL: nothing written), read and removed by id. read: 0, or -1 if there is none. */
int sbx__evicted_write(const char *home, const char *id, const char *user, const char *thread,
                       const char *reason);
int sbx__evicted_read(const char *home, const char *id, struct sbx_eviction *ev);
void sbx__evicted_remove(const char *home, const char *id);
int sbx__meta_read(const char *home, const char *id, struct sbx_meta *m, sbx_error_t *err);
int sbx__meta_write(const char *home, const struct sbx_meta *m, sbx_error_t *err);
/* Ids of every sandbox directory in the pool. */
int sbx__state_list_ids(const char *home, sbx_strv_t *ids, sbx_error_t *err);
/* Opens (creating) and flocks $home/locks/<name>. nonblock: -1 with EWOULDBLOCK if busy. */
int sbx__lock_take(const char *home, const char *name, bool exclusive, bool nonblock,
                   sbx_error_t *err);
/* Removes the lock file (its sandbox is gone) and releases it: for an exclusive lock only. */
void sbx__lock_drop(const char *home, const char *name, int fd);
/* Lease handling on $dir/lease: take a shared lease (returns the fd), and test whether anyone
 * holds one. */
int sbx__lease_take(const char *home, const char *id, sbx_error_t *err);
bool sbx__lease_held(const char *home, const char *id);
/* Records "used now": the lease file's mtime is the sandbox's last-used time. fd: an open
 * lease fd, or -1 to go by path. */
void sbx__lease_touch(const char *home, const char *id, int fd);
/* pids holding a lease on the sandbox (from /proc/locks). */
int sbx__lease_owners(const char *home, const char *id, long **pids, size_t *n);
/* Creates the host thread folder for (user, thread) safely (no symlink is ever followed) and
 * returns the path of its user-data directory. */
char *sbx__thread_dir_ensure(const char *home, const char *user, const char *thread, uid_t owner,
                             sbx_error_t *err);
/* The same for a user-data folder at an absolute host path a front-end names (sbx_create_opts's
 * user_data): missing components are created, the folder and its three children are given to
 * owner, no symlink is followed. Returns the path. */
char *sbx__user_data_ensure(const char *path, uid_t owner, sbx_error_t *err);

#endif
