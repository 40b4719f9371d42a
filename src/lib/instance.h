/* The instance layer (instance.c): one sandbox of a pool, loaded, created, destroyed and freed,
 * and the passes over a whole pool (reap, destroy all). Below both policies that use it: the
 * provider (scopes, the replica cap) and the spares (sandboxes made ahead of time, themselves a
 * pool of their own). Callers hold locks/<id> around anything that changes one sandbox. */
#ifndef SBX_LIB_INSTANCE_H
#define SBX_LIB_INSTANCE_H

#include "backend.h"

/* A folder of sandboxes ($home/sandboxes, $home/locks) made by one backend. */
struct sbx_pool {
  char *home; /* resolved */
  const struct sbx_config *cfg;
  const struct sbx_backend_ops *ops; /* cfg->use's */
};

/* An acquired sandbox: the instance plus the lease this process holds. */
struct sbx_sandbox_s {
  struct sbx_instance in;
  int lease_fd;
  bool broken; /* a terminal error happened: evict on release */
  struct sbx_sandbox_s *next;
};

/* Makes home (and its sandboxes/ and locks/) if missing, resolves it, and finds cfg's backend. */
int sbx__pool_open(struct sbx_pool *pool, const char *home, const struct sbx_config *cfg,
                   sbx_error_t *err);
void sbx__pool_close(struct sbx_pool *pool);

/* Loads the instance of id (meta + ops) without taking anything. */
int sbx__instance_load(const struct sbx_pool *pool, const char *id, struct sbx_instance *in,
                       sbx_error_t *err);
void sbx__instance_free(struct sbx_instance *in);
/* Removes the sandbox's processes and state; keeps the state of one its backend could not stop
 * (SBX_E_BUSY). */
int sbx__instance_destroy(struct sbx_instance *in, sbx_error_t *err);
/* Destroys whatever is left of id (dead, half-made or live). */
int sbx__instance_destroy_id(const struct sbx_pool *pool, const char *id, sbx_error_t *err);

/* Creating one, in steps a policy can come between (a spare taken, an adopt):
 * handle_new fills in the meta of id (throw-away unless thread is set; managed, with o's limits,
 * env and mounts, if o is set) and touches nothing; register makes its folder (not when it has
 * one already: a spare renamed to it), writes the meta and takes the lease (first: a new sandbox
 * never looks warm); user_data makes the folder for /mnt/user-data; launch has the backend make
 * it and records what it made. On a failure, create_failed undoes it all and frees sb. */
struct sbx_sandbox_s *sbx__handle_new(const struct sbx_pool *pool, const char *id, const char *user,
                                      const char *thread, const struct sbx_create_opts *o);
int sbx__instance_register(struct sbx_sandbox_s *sb, bool have_dir, sbx_error_t *err);
char *sbx__instance_user_data(const struct sbx_instance *in, sbx_error_t *err);
int sbx__instance_launch(struct sbx_instance *in, const char *user_data, sbx_error_t *err);
void sbx__instance_create_failed(struct sbx_sandbox_s *sb, sbx_error_t *err);
/* Drops the lease and frees. */
void sbx__handle_free(struct sbx_sandbox_s *sb);

/* One reaper pass over the pool: half-made and dead sandboxes, and warm ones idle longer than
 * idle_timeout, are destroyed (busy ones skipped); lock files of gone sandboxes dropped.
 * Returns how many it removed. */
int sbx__pool_reap(const struct sbx_pool *pool, sbx_error_t *err);
/* Destroys every sandbox of the pool (waiting for each one's lock). */
int sbx__pool_destroy_all(const struct sbx_pool *pool, sbx_error_t *err);

#endif
