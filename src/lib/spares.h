/* Spares (spares.c): sandboxes started ahead of time, a pool of their own over $home/spare,
 * taken by the provider's creates. */
#ifndef SBX_LIB_SPARES_H
#define SBX_LIB_SPARES_H

#include "instance.h"

#define SBX_LOCK_FILL "fill"  /* in the spare pool's locks/: held by the one filler */
#define SBX_DOWN_STAMP "down" /* in the spare pool's locks/: its mtime is the last shutdown */

struct sbx_spares {
  struct sbx_pool pool;
  double since; /* a `down` after this undoes fills asked for before it */
};

/* The spare pool of the pool at home (its $home/spare, made if missing). */
struct sbx_spares *sbx__spares_new(const char *home, const struct sbx_config *cfg,
                                   sbx_error_t *err);
void sbx__spares_free(struct sbx_spares *sp);
/* The configuration a spare made now gets, for the sandbox create would make in pool for o
 * (NULL: a scope's or a throw-away one); NULL if such a sandbox cannot come from a spare. */
char *sbx__spare_key(const struct sbx_pool *pool, const struct sbx_create_opts *o);
/* Moves a live spare made for `key` to in->dir (which must not exist) and copies its backend
 * fields into in->meta. Caller holds locks/<id> of in's pool. false: none ready. */
bool sbx__spare_take(struct sbx_spares *sp, const char *key, struct sbx_instance *in);
/* How many spare folders there are (ready or being made). */
int sbx__spares_ready(const struct sbx_spares *sp);
/* Makes spares up to the configured count unless another process is filling or a `down`
 * came since the last call; stops early once *stop is set. Returns how many it made. */
int sbx__spares_fill(struct sbx_spares *sp, const bool *stop, sbx_error_t *err);
/* gc of the spare pool (sbx__pool_reap). */
int sbx__spares_gc(struct sbx_spares *sp);
/* `down`: stamps the pool (fills asked for before now do nothing), waits for a running filler
 * and destroys every spare. */
int sbx__spares_shutdown(struct sbx_spares *sp, sbx_error_t *err);

#endif
