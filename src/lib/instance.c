/* The instance layer: one sandbox of a pool (load, create, destroy, free) and the passes over a
 * pool (reap, destroy all), for the provider and the spares alike. Knows no policy: which
 * sandbox to make, keep or evict is theirs. */
#include "instance.h"
#include "log.h"
#include "registry.h"
#include "image/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

int sbx__pool_open(struct sbx_pool *pool, const char *home, const struct sbx_config *cfg,
                   sbx_error_t *err)
{
  memset(pool, 0, sizeof *pool);
  if (sbx__mkdir_p(home, 0700) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create state directory `%s`", home);
  char real[PATH_MAX];
  if (realpath(home, real) == NULL)
    return sbx__make_error(err, errno, SBX_E_IO, "resolve state directory `%s`", home);
  cleanup_free char *sandboxes = xasprintf("%s/sandboxes", real);
  cleanup_free char *locks = xasprintf("%s/locks", real);
  if (sbx__mkdir_p(sandboxes, 0700) < 0 || sbx__mkdir_p(locks, 0700) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create state directory `%s`", real);
  pool->ops = sbx__backend_find(cfg->use);
  if (pool->ops == NULL)
    return sbx__make_error(err, 0, SBX_E_CONFIG, "unknown backend '%s'", cfg->use);
  pool->home = xstrdup(real);
  pool->cfg = cfg;
  return 0;
}

void sbx__pool_close(struct sbx_pool *pool)
{
  free(pool->home);
  memset(pool, 0, sizeof *pool);
}

int sbx__instance_load(const struct sbx_pool *pool, const char *id, struct sbx_instance *in,
                       sbx_error_t *err)
{
  memset(in, 0, sizeof *in);
  if (sbx__meta_read(pool->home, id, &in->meta, err) < 0)
    return -1;
  in->home = pool->home;
  in->cfg = pool->cfg;
  in->dir = sbx__state_dir(pool->home, id);
  in->ops = sbx__backend_find(in->meta.backend);
  if (in->ops == NULL) {
    sbx__make_error(err, 0, SBX_E_CONFIG, "sandbox %s uses unknown backend '%s'", id,
                    in->meta.backend);
    sbx__instance_free(in);
    return -1;
  }
  return 0;
}

void sbx__instance_free(struct sbx_instance *in)
{
  sbx__meta_free(&in->meta);
  free(in->dir);
  in->dir = NULL;
}

struct rm_args {
  int dirfd;
  const char *name;
};

static int rm_child(void *arg, sbx_buf_t *out, sbx_error_t *err)
{
  (void) out;
  const struct rm_args *a = arg;
  if (sbx__rm_rf_at(a->dirfd, a->name) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "remove `%s`", a->name);
  return 0;
}

int sbx__instance_destroy(struct sbx_instance *in, sbx_error_t *err)
{
  sbx_error_t derr = NULL;
  int r = in->ops ? in->ops->destroy(in, &derr) : 0;
  /* A backend that could not stop its sandbox says so (SBX_E_BUSY): never forget one that still
   * runs, its state is how a later gc or down finds it. (A remote that cannot be reached is
   * forgotten: its server's own expiry reclaims it.) */
  bool running = r < 0 && derr && derr->kind == SBX_E_BUSY;
  if (r < 0) {
    if (err)
      *err = derr;
    else
      sbx_error_release(&derr);
  }
  if (running)
    return -1;
  cleanup_free char *parent = xasprintf("%s/sandboxes", in->home);
  cleanup_close int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd >= 0 && sbx__rm_rf_at(pfd, in->meta.id) < 0) {
    int saved = errno;
    /* rootless, an image sandbox's upper holds files of the store slice's ids (and overlayfs'
     * mode 0 work folder): its namespace's root removes them */
    struct rm_args a = {pfd, in->meta.id};
    sbx_buf_t out = {0};
    if (geteuid() == 0 || sbx__store_run(rm_child, &a, &out, NULL) < 0) {
      errno = saved;
      if (r == 0)
        r = sbx__make_error(err, errno, SBX_E_IO, "remove `%s`", in->dir);
    }
    sbx__buf_free(&out);
  }
  return r;
}

int sbx__instance_destroy_id(const struct sbx_pool *pool, const char *id, sbx_error_t *err)
{
  struct sbx_instance in;
  sbx_error_t lerr = NULL;
  if (sbx__instance_load(pool, id, &in, &lerr) < 0) {
    sbx_error_release(&lerr);
    /* no readable meta: nothing was launched yet, only the folder is left */
    memset(&in, 0, sizeof in);
    snprintf(in.meta.id, sizeof in.meta.id, "%s", id);
    in.home = pool->home;
    in.dir = sbx__state_dir(pool->home, id);
  }
  int r = sbx__instance_destroy(&in, err);
  sbx__instance_free(&in);
  return r;
}

struct sbx_sandbox_s *sbx__handle_new(const struct sbx_pool *pool, const char *id, const char *user,
                                      const char *thread, const struct sbx_create_opts *o)
{
  struct sbx_sandbox_s *sb = xzalloc(sizeof *sb);
  sb->lease_fd = -1;
  struct sbx_instance *in = &sb->in;
  in->home = pool->home;
  in->cfg = pool->cfg;
  in->ops = pool->ops;
  in->dir = sbx__state_dir(pool->home, id);
  snprintf(in->meta.id, sizeof in->meta.id, "%s", id);
  in->meta.user = thread ? xstrdup(user) : NULL;
  in->meta.thread = thread ? xstrdup(thread) : NULL;
  in->meta.backend = xstrdup(pool->ops->name);
  in->meta.image = xstrdup(o && o->image ? o->image : pool->cfg->image);
  in->meta.created = in->meta.last_used = sbx__realtime_sec();
  in->meta.memory_admitted = o && o->memory_bytes ? o->memory_bytes : pool->cfg->memory_mib << 20;
  if (o) {
    in->meta.managed = true;
    in->meta.memory_bytes = o->memory_bytes;
    in->meta.cpus = o->cpus;
    for (size_t i = 0; i < o->n_env; i++)
      sbx__strv_push(&in->meta.env, o->env[i]);
    in->meta.extra = o->extra ? xstrdup(o->extra) : NULL;
    in->extra_mounts = o->mounts;
    in->n_extra_mounts = o->n_mounts;
    in->network_policy = o->network_policy;
  }
  return sb;
}

int sbx__instance_register(struct sbx_sandbox_s *sb, bool have_dir, sbx_error_t *err)
{
  struct sbx_instance *in = &sb->in;
  if (!have_dir && mkdir(in->dir, 0700) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", in->dir);
  if (sbx__meta_write(in->home, &in->meta, err) < 0)
    return -1;
  /* lease first: the new sandbox must never look warm (and reapable) to anyone */
  sb->lease_fd = sbx__lease_take(in->home, in->meta.id, err);
  if (sb->lease_fd < 0)
    return -1;
  if (have_dir)
    sbx__lease_touch(in->home, in->meta.id, sb->lease_fd); /* the spare's lease file is older */
  return 0;
}

char *sbx__instance_user_data(const struct sbx_instance *in, sbx_error_t *err)
{
  if (in->meta.thread)
    return sbx__thread_dir_ensure(in->home, in->meta.user, in->meta.thread, in->ops->data_owner,
                                  err);
  if (!in->meta.managed)
    return xstrdup(""); /* throw-away: the backend keeps its files inside the sandbox */
  /* a managed sandbox's files live and die with it */
  char *user_data = xasprintf("%s/user-data", in->dir);
  const uid_t owner = geteuid() == 0 ? in->ops->data_owner : geteuid(); /* rootless: the user */
  const char *subs[] = {"", "/workspace", "/uploads", "/outputs"};
  for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
    cleanup_free char *d = xasprintf("%s%s", user_data, subs[i]);
    if (mkdir(d, 0755) < 0 || chown(d, owner, owner) < 0) {
      sbx__make_error(err, errno, SBX_E_IO, "create `%s`", d);
      free(user_data);
      return NULL;
    }
  }
  return user_data;
}

int sbx__instance_launch(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  if (in->ops->create(in, user_data, err) < 0)
    return -1;
  in->extra_mounts = NULL;
  in->n_extra_mounts = 0;
  return sbx__meta_write(in->home, &in->meta, err);
}

void sbx__instance_create_failed(struct sbx_sandbox_s *sb, sbx_error_t *err)
{
  if (err && *err)
    sbx__error_wrap(err, "create sandbox %s", sb->in.meta.id);
  sbx__instance_destroy(&sb->in, NULL);
  sbx__handle_free(sb);
}

void sbx__handle_free(struct sbx_sandbox_s *sb)
{
  if (sb->lease_fd >= 0)
    close(sb->lease_fd);
  sbx__instance_free(&sb->in);
  free(sb);
}

/* Lock files of sandboxes that are gone (left by a process that died, or by versions that never
 * removed them): free ones are dropped, so locks/ does not grow with every sandbox ever made. */
static void prune_locks(const struct sbx_pool *pool)
{
  cleanup_free char *dir = xasprintf("%s/locks", pool->home);
  cleanup_dir DIR *d = opendir(dir);
  if (d == NULL)
    return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!sbx__id_valid(de->d_name))
      continue; /* pool, fill, down, gc-stamp */
    cleanup_free char *sandbox = sbx__state_dir(pool->home, de->d_name);
    if (access(sandbox, F_OK) == 0)
      continue;
    int fd = sbx__lock_take(pool->home, de->d_name, true, true, NULL);
    if (fd < 0)
      continue; /* in use: being created */
    if (access(sandbox, F_OK) < 0 && errno == ENOENT)
      sbx__lock_drop(pool->home, de->d_name, fd);
    else
      close(fd);
  }
}

int sbx__pool_reap(const struct sbx_pool *pool, sbx_error_t *err)
{
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(pool->home, &ids, err) < 0)
    return -1;
  int removed = 0;
  double now = sbx__realtime_sec();
  for (size_t i = 0; i < ids.n; i++) {
    int lock = sbx__lock_take(pool->home, ids.v[i], true, true, NULL);
    if (lock < 0)
      continue; /* busy: being created, reclaimed or destroyed */
    struct sbx_instance in;
    sbx_error_t lerr = NULL;
    const char *why = NULL;
    if (sbx__instance_load(pool, ids.v[i], &in, &lerr) < 0) {
      sbx_error_release(&lerr);
      why = "half-made";
      sbx__instance_destroy_id(pool, ids.v[i], NULL);
    } else {
      if (!in.ops->alive(&in))
        why = "dead";
      else if (pool->cfg->idle_timeout > 0 && !in.meta.managed &&
               !sbx__lease_held(pool->home, ids.v[i]) &&
               now - in.meta.last_used > (double) pool->cfg->idle_timeout)
        why = "idle";
      if (why) {
        /* its init ends itself once idle that long (sbx-init's expiry): dead, but reaped */
        bool idle = pool->cfg->idle_timeout > 0 && !in.meta.managed &&
                    now - in.meta.last_used > (double) pool->cfg->idle_timeout;
        cleanup_free char *reason =
            !idle ? xstrdup("its init had died; the reaper cleaned it up")
                  : xasprintf("idle reaper: unused for %.0f s, longer than "
                              "sandbox.idle_timeout (%lld s)",
                              now - in.meta.last_used, (long long) pool->cfg->idle_timeout);
        sbx__evicted_write(pool->home, ids.v[i], in.meta.user, in.meta.thread, reason);
        sbx__instance_destroy(&in, NULL);
      }
      sbx__instance_free(&in);
    }
    if (why) {
      sbx__log(SBX_LOG_INFO, "reaped sandbox %s (%s)", ids.v[i], why);
      removed++;
      sbx__lock_drop(pool->home, ids.v[i], lock);
    } else {
      close(lock);
    }
  }
  sbx__strv_free(&ids);
  prune_locks(pool);
  return removed;
}

int sbx__pool_destroy_all(const struct sbx_pool *pool, sbx_error_t *err)
{
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(pool->home, &ids, err) < 0)
    return -1;
  int r = 0;
  for (size_t i = 0; i < ids.n; i++) {
    int lock = sbx__lock_take(pool->home, ids.v[i], true, false, NULL);
    sbx_error_t e = NULL;
    if (sbx__instance_destroy_id(pool, ids.v[i], &e) < 0) {
      sbx__log(SBX_LOG_WARNING, "shutdown: %s", e->msg);
      if (err && *err == NULL)
        *err = e;
      else
        sbx_error_release(&e);
      r = -1;
      if (lock >= 0)
        close(lock);
    } else {
      sbx__lock_drop(pool->home, ids.v[i], lock);
    }
  }
  sbx__strv_free(&ids);
  return r;
}
