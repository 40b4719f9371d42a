/* Spares: sandboxes started ahead of time, so that a create is a rename and a few mount calls
 * instead of a launch (configuration key `spares`, docs/lifecycle.md).
 *
 * The spare pool is a pool of its own over $home/spare (same layout: sandboxes/, locks/), held
 * by the provider as p->spares (struct sbx_spares, over the instance layer like the provider). A
 * spare is a throw-away sandbox made for one configuration (meta spare_key: backend, image, pids,
 * network, /tmp and home sizes, mounts). Taking one, under the new sandbox's own lock: lock the
 * spare (skipping busy ones), check it is alive and made for the configuration wanted, rename its
 * folder to the new id's (atomic; RENAME_NOREPLACE), then the backend adopts it (ops->adopt: its
 * name, the user-data folder). Filling runs the instance layer's create in the spare pool under
 * locks/fill, so one filler per home works at a time; front-ends run it in the background (sbxd:
 * a thread; the CLI: a detached process after a verb that took one).
 *
 * `down` (sbx_shutdown) stamps spare/locks/down first: a fill asked for before it (the CLI's
 * detached filler of the verb before) does nothing, one already running is waited for.
 *
 * Spares are outside the replica cap and are idle-reaped like warm sandboxes (gc, and their
 * init's own idle expiry), so an idle host drops back to none; the next fill makes them again. */
#include "spares.h"
#include "log.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct sbx_spares *sbx__spares_new(const char *home, const struct sbx_config *cfg, sbx_error_t *err)
{
  struct sbx_spares *sp = xzalloc(sizeof *sp);
  cleanup_free char *spare_home = xasprintf("%s/spare", home);
  if (sbx__pool_open(&sp->pool, spare_home, cfg, err) < 0) {
    free(sp);
    return NULL;
  }
  sp->since = sbx__realtime_sec();
  return sp;
}

void sbx__spares_free(struct sbx_spares *sp)
{
  if (sp == NULL)
    return;
  sbx__pool_close(&sp->pool);
  free(sp);
}

char *sbx__spare_key(const struct sbx_pool *pool, const struct sbx_create_opts *o)
{
  const struct sbx_config *c = pool->cfg;
  const char *image = c->image ? c->image : "host";
  /* a spare has no extra mounts; memory and CPU limits are set when it is adopted */
  if (o && o->n_mounts)
    return NULL;
  if (o && o->image)
    image = o->image;
  sbx_buf_t b = {0};
  sbx__buf_printf(&b, "%s image=%s pids=%lld network=%s tmp=%llu home=%llu", pool->ops->name, image,
                  (long long) c->pids, c->network ? c->network : "none",
                  (unsigned long long) c->tmp_size_mib, (unsigned long long) c->home_size_mib);
  /* a spare's upper is capped (or not) when it is launched */
  if (c->disk_mib && strcmp(image, "host") != 0)
    sbx__buf_printf(&b, " disk=%llu", (unsigned long long) c->disk_mib);
  for (size_t i = 0; i < c->n_mounts; i++) {
    /* adopting replaces the mount on /mnt/user-data, and everything under it */
    if (strncmp(c->mounts[i].container_path, "/mnt/user-data", 14) == 0) {
      sbx__buf_free(&b);
      return NULL;
    }
    sbx__buf_printf(&b, " mount=%s:%s:%s", c->mounts[i].host_path, c->mounts[i].container_path,
                    c->mounts[i].read_only ? "ro" : "rw");
  }
  return sbx__buf_steal(&b);
}

/* Do two spare keys name the same image? ("BACKEND image=NAME ...") */
static bool same_image(const char *a, const char *b)
{
  const char *ia = strstr(a, " image="), *ib = strstr(b, " image=");
  if (ia == NULL || ib == NULL)
    return ia == ib;
  size_t la = strcspn(ia + 7, " "), lb = strcspn(ib + 7, " ");
  return la == lb && strncmp(ia + 7, ib + 7, la) == 0;
}

/* Is spare `id` of pool sp alive and made for key? Destroys it if it is dead or made for another
 * configuration. Caller holds sp's locks/<id>. */
static bool spare_usable(const struct sbx_pool *sp, const char *id, const char *key,
                         bool keep_other_images, struct sbx_meta *out)
{
  struct sbx_instance in;
  sbx_error_t lerr = NULL;
  if (sbx__instance_load(sp, id, &in, &lerr) < 0) {
    sbx_error_release(&lerr);
    return false; /* half-made: gc's business */
  }
  bool ok = in.meta.spare_key && strcmp(in.meta.spare_key, key) == 0 && in.ops->alive(&in) &&
            !sbx__lease_held(sp->home, id);
  if (!ok && keep_other_images && in.meta.spare_key && !same_image(in.meta.spare_key, key) &&
      in.ops->alive(&in)) {
    /* taking: a spare of another image is not stale, it waits for a create of its own image
     * (`sbx exec --image`); the filler, which knows the configured image, removes it */
    sbx__instance_free(&in);
    return false;
  }
  if (!ok && !sbx__lease_held(sp->home, id)) {
    sbx__log(SBX_LOG_INFO, "removing spare %s (%s)", id,
             in.ops->alive(&in) ? "made for another configuration" : "dead");
    sbx__instance_free(&in);
    sbx__instance_destroy_id(sp, id, NULL);
    return false;
  }
  if (ok && out) {
    *out = in.meta;
    memset(&in.meta, 0, sizeof in.meta);
  }
  sbx__instance_free(&in);
  return ok;
}

bool sbx__spare_take(struct sbx_spares *spares, const char *key, struct sbx_instance *in)
{
  if (spares == NULL)
    return false;
  const struct sbx_pool *sp = &spares->pool;
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(sp->home, &ids, NULL) < 0)
    return false;
  bool taken = false;
  for (size_t i = 0; i < ids.n && !taken; i++) {
    int lock = sbx__lock_take(sp->home, ids.v[i], true, true, NULL);
    if (lock < 0)
      continue; /* being made, taken or reaped by someone else */
    struct sbx_meta m;
    if (spare_usable(sp, ids.v[i], key, true, &m)) {
      cleanup_free char *from = sbx__state_dir(sp->home, ids.v[i]);
      if (renameat2(AT_FDCWD, from, AT_FDCWD, in->dir, RENAME_NOREPLACE) == 0) {
        in->meta.pid = m.pid;
        in->meta.pid_start = m.pid_start;
        in->meta.uid_base = m.uid_base;
        in->meta.cgroups = m.cgroups;
        in->meta.remote_id = m.remote_id;
        in->meta.backend_json = m.backend_json;
        m.cgroups = m.remote_id = m.backend_json = NULL;
        taken = true;
        sbx__log(SBX_LOG_DEBUG, "sandbox %s: took spare %s", in->meta.id, ids.v[i]);
        sbx__lock_drop(sp->home, ids.v[i], steal_fd(&lock));
      } else {
        sbx__log(SBX_LOG_WARNING, "take spare %s as %s: %s", ids.v[i], in->meta.id,
                 strerror(errno));
      }
      sbx__meta_free(&m);
    }
    if (lock >= 0)
      close(lock);
  }
  sbx__strv_free(&ids);
  return taken;
}

/* Spares of sp made for key, alive or being made; dead and stale ones are removed. */
static int spares_count(const struct sbx_pool *sp, const char *key)
{
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(sp->home, &ids, NULL) < 0)
    return 0;
  int n = 0;
  for (size_t i = 0; i < ids.n; i++) {
    int lock = sbx__lock_take(sp->home, ids.v[i], true, true, NULL);
    if (lock < 0) {
      n++; /* busy: being made (or taken, then it is gone next time) */
      continue;
    }
    n += spare_usable(sp, ids.v[i], key, false, NULL);
    close(lock);
  }
  sbx__strv_free(&ids);
  return n;
}

int sbx__spares_ready(const struct sbx_spares *sp)
{
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(sp->pool.home, &ids, NULL) < 0)
    return 0;
  int n = (int) ids.n;
  sbx__strv_free(&ids);
  return n;
}

int sbx__spares_fill(struct sbx_spares *spares, const bool *stop, sbx_error_t *err)
{
  const struct sbx_pool *sp = &spares->pool;
  if (sp->cfg->spares <= 0 || sp->ops->adopt == NULL || *stop)
    return 0;
  int fill = sbx__lock_take(sp->home, SBX_LOCK_FILL, true, true, NULL);
  if (fill < 0)
    return 0; /* another process is filling */
  /* a `down` since this was asked for (since the provider was made, or the last call) wins */
  double since = spares->since;
  spares->since = sbx__realtime_sec();
  cleanup_free char *stamp = xasprintf("%s/locks/" SBX_DOWN_STAMP, sp->home);
  struct stat st;
  if (stat(stamp, &st) == 0 &&
      (double) st.st_mtim.tv_sec + (double) st.st_mtim.tv_nsec / 1e9 >= since) {
    close(fill);
    return 0;
  }
  cleanup_free char *key = sbx__spare_key(sp, NULL);
  int have = spares_count(sp, key), made = 0, r = 0;
  while (have < sp->cfg->spares && !*stop) {
    char id[SBX_ID_LEN + 1];
    sbx__random_hex(id, SBX_ID_LEN);
    int lock = sbx__lock_take(sp->home, id, true, false, err);
    if (lock < 0) {
      r = -1;
      break;
    }
    /* a throw-away sandbox in the spare pool, outside every cap but `spares` */
    struct sbx_sandbox_s *sb = sbx__handle_new(sp, id, "default", NULL, NULL);
    sb->in.meta.spare_key = xstrdup(key);
    if (sbx__instance_register(sb, false, err) < 0 || sbx__instance_launch(&sb->in, "", err) < 0) {
      sbx__instance_create_failed(sb, err);
      close(lock);
      r = -1;
      break;
    }
    close(lock);
    sbx__handle_free(sb); /* drops the lease: a ready spare is an unleased one */
    have++;
    made++;
  }
  close(fill);
  return r < 0 ? -1 : made;
}

int sbx__spares_gc(struct sbx_spares *sp)
{
  return sbx__pool_reap(&sp->pool, NULL);
}

int sbx__spares_shutdown(struct sbx_spares *spares, sbx_error_t *err)
{
  const struct sbx_pool *sp = &spares->pool;
  /* Fillers asked for before now must not start (the stamp), and one at work (another
   * process) finishes its round first (the lock): either would leave spares behind. */
  cleanup_free char *stamp = xasprintf("%s/locks/" SBX_DOWN_STAMP, sp->home);
  cleanup_close int fd = open(stamp, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || futimens(fd, NULL) < 0)
    sbx__log(SBX_LOG_WARNING, "shutdown: stamp `%s`: %s", stamp, strerror(errno));
  cleanup_close int fill = sbx__lock_take(sp->home, SBX_LOCK_FILL, true, false, NULL);
  (void) fill; /* held to the end of the scope (clang's -Wunused-variable) */
  return sbx__pool_destroy_all(sp, err);
}
