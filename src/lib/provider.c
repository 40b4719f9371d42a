/* The provider: DeerFlow's SandboxProvider lifecycle over the shared on-disk pool.
 *
 *   acquire(user, thread): same scope -> same id. Active elsewhere: share it. Warm: health check
 *     (run `true`, health_check_timeout), then reclaim; a failed check destroys it and creates a
 *     fresh one in the same call. Missing or dead: create, first enforcing the replica soft cap
 *     (destroy exactly one warm sandbox, the one idle longest; never an active one).
 *   release(id): record last-used, drop the lease: the sandbox is warm, its processes keep
 *     running.
 *   gc(): dead sandboxes are cleaned up; warm ones idle strictly longer than idle_timeout are
 *     destroyed.
 *
 * "Active" means someone holds a shared flock on the sandbox's lease file; the kernel drops it
 * when that process dies, so a crashed front-end's sandbox simply becomes warm. Every change to
 * one sandbox happens under its exclusive lock (locks/<id>), creation under locks/pool too, so
 * two processes acquiring one scope at once end with one sandbox. See docs/lifecycle.md. */
#include "provider.h"
#include "log.h"
#include "registry.h"
#include "text.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCK_POOL "pool"
#define EVICTION_KEEP_S (7 * 24 * 3600.0) /* evicted/<id> records older than this: gc drops */

const char *sbx_state_name(int state)
{
  switch (state) {
  case SBX_STATE_ACTIVE:
    return "active";
  case SBX_STATE_WARM:
    return "warm";
  case SBX_STATE_CREATING:
    return "creating";
  default:
    return "dead";
  }
}

static bool rootless_spares(const struct sbx_backend_ops *ops, const struct sbx_config *cfg)
{
  return geteuid() != 0 && cfg->spares > 0 && ops && strcmp(ops->name, "linux") == 0;
}

/* A provider over home (created if missing), with its spare pool over home/spare. */
static struct sbx_provider_s *provider_new(const char *home, const struct sbx_config *cfg,
                                           sbx_error_t *err)
{
  struct sbx_provider_s *p = xzalloc(sizeof *p);
  if (cfg == NULL)
    cfg = p->owned_cfg = sbx_config_new_default();
  if (sbx__pool_open(&p->pool, home, cfg, err) < 0) {
    sbx_config_free(p->owned_cfg);
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->lock, NULL);
  if (rootless_spares(p->pool.ops, cfg)) {
    /* adopting a spare enters its namespaces as host root (adopt.c): none to take rootless */
    sbx__log(SBX_LOG_WARNING, "sandbox.spares needs root: rootless sandboxes are launched "
                              "without spares (docs/hosts.md, Rootless)");
    return p;
  }
  p->spares = sbx__spares_new(p->pool.home, cfg, err);
  if (p->spares == NULL) {
    sbx_provider_free(p);
    return NULL;
  }
  return p;
}

sbx_provider_t *sbx_provider_new(const char *home, const struct sbx_config *cfg, sbx_error_t *err)
{
  if (home == NULL || *home == '\0')
    home = getenv("SBX_HOME");
  if (home == NULL || *home == '\0')
    home = sbx__default_home();
  return provider_new(home, cfg, err);
}

const char *sbx_provider_home(const sbx_provider_t *p)
{
  return p->pool.home;
}

const struct sbx_config *sbx_provider_config(const sbx_provider_t *p)
{
  return p->pool.cfg;
}

const char *sbx_sandbox_id(const sbx_sandbox_t *sb)
{
  return sb->in.meta.id;
}

static struct sbx_sandbox_s *held_find(struct sbx_provider_s *p, const char *id)
{
  for (struct sbx_sandbox_s *s = p->held; s; s = s->next)
    if (strcmp(s->in.meta.id, id) == 0)
      return s;
  return NULL;
}

static void held_remove(struct sbx_provider_s *p, struct sbx_sandbox_s *sb)
{
  for (struct sbx_sandbox_s **pp = &p->held; *pp; pp = &(*pp)->next)
    if (*pp == sb) {
      *pp = sb->next;
      return;
    }
}

struct candidate {
  char id[SBX_ID_LEN + 1];
  double last_used;
  char *user, *thread;
};

static int cmp_candidate(const void *a, const void *b)
{
  double x = ((const struct candidate *) a)->last_used;
  double y = ((const struct candidate *) b)->last_used;
  return x < y ? -1 : x > y ? 1 : 0;
}

/* Before a create at or over the cap: destroy exactly one warm sandbox, the one idle longest.
 * Caller holds locks/pool. */
static void enforce_cap(struct sbx_provider_s *p, const char *creating)
{
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(p->pool.home, &ids, NULL) < 0)
    return;
  /* fewer folders than the cap: no need to look inside any (a pool far below its cap pays a
   * readdir, not a scan) */
  if (ids.n <= (size_t) p->pool.cfg->replicas) {
    bool mine = false;
    for (size_t i = 0; i < ids.n && !mine; i++)
      mine = strcmp(ids.v[i], creating) == 0;
    if (ids.n - mine < (size_t) p->pool.cfg->replicas) {
      sbx__strv_free(&ids);
      return;
    }
  }
  struct candidate *warm = xreallocarray(NULL, ids.n + 1, sizeof *warm);
  size_t n_warm = 0, count = 0;
  for (size_t i = 0; i < ids.n; i++) {
    if (strcmp(ids.v[i], creating) == 0)
      continue;
    struct sbx_instance in;
    sbx_error_t lerr = NULL;
    if (sbx__instance_load(&p->pool, ids.v[i], &in, &lerr) < 0) {
      sbx_error_release(&lerr);
      continue;
    }
    /* held = active, or being created (its creator takes the lease before launching) */
    bool held = sbx__lease_held(p->pool.home, ids.v[i]);
    if (!in.meta.managed && (held || in.ops->alive(&in))) {
      count++;
      if (!held) {
        snprintf(warm[n_warm].id, sizeof warm[n_warm].id, "%s", ids.v[i]);
        warm[n_warm].user = steal_pointer(&in.meta.user);
        warm[n_warm].thread = steal_pointer(&in.meta.thread);
        warm[n_warm++].last_used = in.meta.last_used;
      }
    }
    sbx__instance_free(&in);
  }
  if (count >= (size_t) p->pool.cfg->replicas) {
    qsort(warm, n_warm, sizeof *warm, cmp_candidate);
    bool evicted = false;
    for (size_t i = 0; i < n_warm && !evicted; i++) {
      /* skip one being reclaimed or destroyed right now */
      int fd = sbx__lock_take(p->pool.home, warm[i].id, true, true, NULL);
      if (fd < 0)
        continue;
      if (!sbx__lease_held(p->pool.home, warm[i].id)) {
        sbx_error_t derr = NULL;
        if (sbx__instance_destroy_id(&p->pool, warm[i].id, &derr) < 0) {
          sbx__log(SBX_LOG_WARNING, "evicting sandbox %s: %s", warm[i].id, derr->msg);
          sbx_error_release(&derr);
        } else {
          /* the CLI user is told: at the scope's next use, and in sbx ps */
          cleanup_free char *why = xasprintf(
              "replica cap: sandbox.replicas is %d and sandbox %s needed a slot; this warm one "
              "was idle longest (%.0f s)",
              p->pool.cfg->replicas, creating, sbx__realtime_sec() - warm[i].last_used);
          sbx__evicted_write(p->pool.home, warm[i].id, warm[i].user, warm[i].thread, why);
          sbx__log(SBX_LOG_INFO, "destroyed warm sandbox %s (replica_enforcement)", warm[i].id);
          sbx__lock_drop(p->pool.home, warm[i].id, steal_fd(&fd));
        }
        evicted = true;
      }
      if (fd >= 0)
        close(fd);
    }
    if (!evicted)
      sbx__log(SBX_LOG_WARNING,
               "All %d replica slots are in active use; creating sandbox %s beyond the soft "
               "limit",
               p->pool.cfg->replicas, creating);
  }
  for (size_t i = 0; i < n_warm; i++) {
    free(warm[i].user);
    free(warm[i].thread);
  }
  free(warm);
  sbx__strv_free(&ids);
}

/* Total RAM in bytes (/proc/meminfo's MemTotal), 0 if unknown. */
static uint64_t mem_total(void)
{
  cleanup_free char *text = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, "/proc/meminfo", 1 << 16, &text, &len) < 0)
    return 0;
  const char *l = strstr(text, "MemTotal:");
  unsigned long long kib = 0;
  return l && sscanf(l, "MemTotal: %llu kB", &kib) == 1 ? (uint64_t) kib << 10 : 0;
}

/* The memory limit a sandbox gets: its own, else the configured one (0: none). A live sandbox
 * counts with the limit it was made with (meta.memory_admitted), when recorded. */
static uint64_t mem_limit(const struct sbx_config *cfg, uint64_t own)
{
  return own ? own : cfg->memory_mib << 20;
}

/* Whom a sandbox counts against for max_sandboxes_per_user: its scope's user; one with no scope
 * (sbx_create: sbxd's lifecycle and provisioner, a throw-away acquire) counts as "default". */
static const char *owner_of(const char *user, const char *thread)
{
  return thread && user ? user : "default";
}

/* The hard limits, before a create (docs/configuration.md, "Limits"): sandbox.max_sandboxes live
 * sandboxes in this home, sandbox.max_sandboxes_per_user of one owner, and the memory limits of
 * the live ones plus the new one within sandbox.memory_overcommit x MemTotal. Live = leased
 * (active, or being created: its creator leases it before launching) or alive. Caller holds
 * locks/pool, which every creator in every process sharing the home takes until its sandbox is
 * registered, so two creators never both take the last place. SBX_E_LIMIT when over. */
static int admit(struct sbx_provider_s *p, const char *creating, const char *owner, uint64_t memory,
                 sbx_error_t *err)
{
  const struct sbx_config *cfg = p->pool.cfg;
  bool mem_check =
      cfg->memory_overcommit > 0 && memory > 0 && strcmp(p->pool.ops->name, "linux") == 0;
  if (cfg->max_sandboxes <= 0 && cfg->max_sandboxes_per_user <= 0 && !mem_check)
    return 0;
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(p->pool.home, &ids, err) < 0)
    return -1;
  size_t live = 0, mine = 0;
  uint64_t mem_sum = 0;
  for (size_t i = 0; i < ids.n; i++) {
    if (strcmp(ids.v[i], creating) == 0)
      continue;
    struct sbx_instance in;
    sbx_error_t lerr = NULL;
    if (sbx__instance_load(&p->pool, ids.v[i], &in, &lerr) < 0) {
      sbx_error_release(&lerr);
      continue;
    }
    if (sbx__lease_held(p->pool.home, ids.v[i]) || in.ops->alive(&in)) {
      live++;
      mine += strcmp(owner_of(in.meta.user, in.meta.thread), owner) == 0;
      mem_sum +=
          in.meta.memory_admitted ? in.meta.memory_admitted : mem_limit(cfg, in.meta.memory_bytes);
    }
    sbx__instance_free(&in);
  }
  sbx__strv_free(&ids);
  if (cfg->max_sandboxes > 0 && live >= (size_t) cfg->max_sandboxes)
    return sbx__make_error(err, 0, SBX_E_LIMIT,
                           "sandbox limit reached: %zu sandboxes are live, sandbox.max_sandboxes "
                           "is %d",
                           live, cfg->max_sandboxes);
  if (cfg->max_sandboxes_per_user > 0 && mine >= (size_t) cfg->max_sandboxes_per_user)
    return sbx__make_error(err, 0, SBX_E_LIMIT,
                           "sandbox limit reached for user `%s`: %zu of its sandboxes are live, "
                           "sandbox.max_sandboxes_per_user is %d",
                           owner, mine, cfg->max_sandboxes_per_user);
  uint64_t total = mem_check ? mem_total() : 0;
  if (total > 0) {
    double allowed = (double) total * cfg->memory_overcommit;
    if ((double) mem_sum + (double) memory > allowed)
      return sbx__make_error(err, 0, SBX_E_LIMIT,
                             "not enough memory for a sandbox limited to %llu MiB: the live "
                             "sandboxes' limits add up to %llu MiB of the %llu MiB allowed "
                             "(MemTotal %llu MiB x sandbox.memory_overcommit %g)",
                             (unsigned long long) (memory >> 20),
                             (unsigned long long) (mem_sum >> 20),
                             (unsigned long long) (allowed / 1048576.0),
                             (unsigned long long) (total >> 20), cfg->memory_overcommit);
  }
  return 0;
}

static int health_check(struct sbx_instance *in, sbx_error_t *err)
{
  return in->ops->health(in, (int) in->cfg->health_check_timeout, err);
}

/* Forgets the backend's fields of a meta (a spare that could not be adopted was destroyed). */
static void meta_forget_backend(struct sbx_meta *m)
{
  m->pid = 0;
  m->pid_start = 0;
  m->uid_base = 0;
  free(m->cgroups);
  free(m->remote_id);
  free(m->backend_json);
  m->cgroups = m->remote_id = m->backend_json = NULL;
}

/* After a failed create: the thread folder it made, if nothing was put in it (rmdir removes only
 * empty folders, so no file is ever lost), so a failed pull leaves no empty thread behind. */
static void forget_empty_thread_dir(const char *dir)
{
  static const char *const subs[] = {"/user-data/workspace", "/user-data/uploads",
                                     "/user-data/outputs", "/user-data", ""};
  for (size_t i = 0; i < ARRAY_SIZE(subs); i++) {
    cleanup_free char *d = xasprintf("%s%s", dir, subs[i]);
    if (rmdir(d) < 0 && errno != ENOENT)
      return;
  }
}

/* Creates id (a scope's when thread is set, a throw-away or managed one otherwise). Caller holds
 * locks/<id>. The replica cap is decided under locks/pool, which is held only until the new
 * sandbox is registered (its folder and lease exist, so the next creator counts it): launches
 * run in parallel. Managed sandboxes are outside the replica cap (and so are spares, spares.c:
 * they have a cap of their own, `spares`) but not outside the hard limits (admit), which every
 * create checks under locks/pool.
 *
 * A ready spare made for the same configuration is taken instead of launching when there is
 * one: its folder is renamed to id's and the backend adopts it (a name, the user-data folder). */
static struct sbx_sandbox_s *create(struct sbx_provider_s *p, const char *id, const char *user,
                                    const char *thread, const struct sbx_create_opts *o,
                                    sbx_error_t *err)
{
  int pool = -1;
  const struct sbx_config *cfg = p->pool.cfg;
  if (o == NULL || cfg->max_sandboxes > 0 || cfg->max_sandboxes_per_user > 0 ||
      cfg->memory_overcommit > 0) {
    pool = sbx__lock_take(p->pool.home, LOCK_POOL, true, false, err);
    if (pool < 0)
      return NULL;
    if (o == NULL)
      enforce_cap(p, id);
    if (admit(p, id, owner_of(user, thread), mem_limit(cfg, o ? o->memory_bytes : 0), err) < 0) {
      close(pool);
      if (err && *err)
        sbx__error_wrap(err, "create sandbox %s", id);
      return NULL;
    }
  }
  cleanup_free char *user_data = NULL;
  struct sbx_sandbox_s *sb = sbx__handle_new(&p->pool, id, user, thread, o);
  struct sbx_instance *in = &sb->in;
  in->provider = p;
  /* the thread folder this create makes (none yet), to take back if it fails */
  cleanup_free char *new_thread_dir = NULL;
  if (!(o && o->user_data) && in->meta.thread) {
    new_thread_dir = xasprintf("%s/users/%s/threads/%s", in->home, in->meta.user, in->meta.thread);
    if (access(new_thread_dir, F_OK) == 0)
      free(steal_pointer(&new_thread_dir));
  }
  bool adopted = false;
  if (p->spares && p->pool.cfg->spares > 0 && p->pool.ops->adopt) {
    cleanup_free char *key = sbx__spare_key(&p->pool, o);
    adopted = key && sbx__spare_take(p->spares, key, in);
  }
  if ((in->ops->precheck && in->ops->precheck(in, err) < 0) ||
      sbx__instance_register(sb, adopted, err) < 0)
    goto fail;
  if (pool >= 0)
    close(steal_fd(&pool));
  user_data = o && o->user_data ? sbx__user_data_ensure(o->user_data, in->ops->data_owner, err)
                                : sbx__instance_user_data(in, err);
  if (user_data == NULL)
    goto fail;
  if (adopted) {
    sbx_error_t aerr = NULL;
    if (p->pool.ops->adopt(in, user_data, &aerr) == 0)
      return sb; /* its meta was written complete above */
    sbx__log(SBX_LOG_WARNING, "sandbox %s: adopting a spare failed (%s); launching a new one", id,
             aerr->msg);
    sbx_error_release(&aerr);
    p->pool.ops->destroy(in, NULL);
    meta_forget_backend(&in->meta);
  }
  if (sbx__instance_launch(in, user_data, err) < 0)
    goto fail;
  return sb;
fail:
  sbx__instance_create_failed(sb, err);
  if (new_thread_dir)
    forget_empty_thread_dir(new_thread_dir);
  if (pool >= 0)
    close(pool);
  return NULL;
}

/* Reclaims id if it exists and is healthy, else (re)creates it. Caller holds locks/<id>. */
static struct sbx_sandbox_s *reclaim_or_create(struct sbx_provider_s *p, const char *id,
                                               const char *user, const char *thread,
                                               sbx_error_t *err)
{
  struct sbx_instance in;
  sbx_error_t lerr = NULL;
  struct sbx_eviction ev;
  if (sbx__evicted_read(p->pool.home, id, &ev) == 0) {
    /* reported once, where the user of the scope looks (the CLI prints warnings on stderr) */
    sbx__log(SBX_LOG_WARNING,
             "thread %s (user %s): its sandbox %s was evicted %.0f s ago (%s); starting a new "
             "one: /mnt/user-data is kept, /tmp and background processes are gone",
             ev.thread, ev.user, id, sbx__realtime_sec() - ev.time, ev.reason);
    sbx_eviction_clear(&ev);
    sbx__evicted_remove(p->pool.home, id);
  }
  if (sbx__instance_load(&p->pool, id, &in, &lerr) < 0) {
    bool missing = lerr->kind == SBX_E_NOT_FOUND;
    sbx_error_release(&lerr);
    if (!missing)
      sbx__instance_destroy_id(&p->pool, id, NULL); /* half-made by a crashed process */
    else {
      cleanup_free char *dir = sbx__state_dir(p->pool.home, id);
      if (access(dir, F_OK) == 0)
        sbx__instance_destroy_id(&p->pool, id, NULL);
    }
    return create(p, id, user, thread, NULL, err);
  }
  if (in.meta.spare_key) {
    /* a spare renamed to this id by a creator that died before writing its own metadata */
    sbx__log(SBX_LOG_INFO, "sandbox %s is a spare its taker left half-made; replacing it", id);
    sbx__instance_destroy(&in, NULL);
    sbx__instance_free(&in);
    return create(p, id, user, thread, NULL, err);
  }
  if (!in.meta.thread || strcmp(in.meta.user ? in.meta.user : "", user) != 0 ||
      strcmp(in.meta.thread, thread) != 0) {
    sbx__make_error(err, 0, SBX_E_CONFLICT,
                    "sandbox id %s collides with a sandbox of another scope; refusing to hand it "
                    "over",
                    id);
    sbx__instance_free(&in);
    return NULL;
  }
  if (!in.ops->alive(&in)) {
    sbx__log(SBX_LOG_WARNING,
             "thread %s (user %s): its sandbox %s had died (its init is gone); starting a new "
             "one: /mnt/user-data is kept, /tmp and background processes are gone",
             thread, user, id);
    sbx__instance_destroy(&in, NULL);
    sbx__instance_free(&in);
    return create(p, id, user, thread, NULL, err);
  }
  bool active = sbx__lease_held(p->pool.home, id);
  if (!active && !in.meta.paused) {
    sbx_error_t herr = NULL;
    /* BoxLite's health_check_skip_seconds: recently used, a ping proves its init answers */
    double idle = sbx__realtime_sec() - in.meta.last_used;
    bool recent = p->pool.cfg->health_check_skip_seconds > 0 &&
                  idle < p->pool.cfg->health_check_skip_seconds && in.ops->ping;
    if (recent ? in.ops->ping(&in, &herr) < 0 : health_check(&in, &herr) < 0) {
      sbx__log(SBX_LOG_WARNING, "sandbox %s failed its health check (%s); replacing it", id,
               herr->msg);
      sbx_error_release(&herr);
      sbx__instance_destroy(&in, NULL);
      sbx__instance_free(&in);
      return create(p, id, user, thread, NULL, err);
    }
  }
  struct sbx_sandbox_s *sb = xzalloc(sizeof *sb);
  sb->in = in;
  sb->in.provider = p; /* the handle's owner, for sbx__sandbox_broken */
  sb->lease_fd = sbx__lease_take(p->pool.home, id, err);
  if (sb->lease_fd < 0) {
    sbx__handle_free(sb);
    return NULL;
  }
  sbx__lease_touch(p->pool.home, id, sb->lease_fd);
  sb->in.meta.last_used = sbx__realtime_sec();
  return sb;
}

sbx_sandbox_t *sbx_acquire(sbx_provider_t *p, const char *user, const char *thread,
                           sbx_error_t *err)
{
  if (user == NULL)
    user = "default";
  if (p->shut_down)
    return sbx__make_error(err, 0, SBX_E_SHUTDOWN, "the sandbox provider has been shut down"), NULL;
  char id[SBX_ID_LEN + 1];
  if (thread == NULL) {
    if (!sbx__user_id_valid(user))
      return sbx__make_error(err, 0, SBX_E_INVALID, "Invalid user_id: %s", user), NULL;
    sbx__random_hex(id, SBX_ID_LEN);
  } else {
    if (sbx__scope_check(user, thread, err) < 0)
      return NULL;
    sbx__scope_id(user, thread, id);
  }
  pthread_mutex_lock(&p->lock);
  struct sbx_sandbox_s *have = held_find(p, id);
  if (have && !have->broken) {
    pthread_mutex_unlock(&p->lock);
    return have;
  }
  if (have) { /* broken: it was evicted; drop the handle and start over */
    held_remove(p, have);
    sbx__handle_free(have);
  }
  pthread_mutex_unlock(&p->lock);

  int lock = sbx__lock_take(p->pool.home, id, true, false, err);
  if (lock < 0)
    return NULL;
  pthread_mutex_lock(&p->lock);
  have = held_find(p, id); /* another thread of this process got it meanwhile */
  pthread_mutex_unlock(&p->lock);
  struct sbx_sandbox_s *sb = NULL;
  if (have && !have->broken)
    sb = have;
  else if (thread == NULL)
    sb = create(p, id, user, NULL, NULL, err);
  else
    sb = reclaim_or_create(p, id, user, thread, err);
  if (sb && sb != have) {
    pthread_mutex_lock(&p->lock);
    if (p->shut_down) {
      pthread_mutex_unlock(&p->lock);
      sbx__instance_destroy(&sb->in, NULL);
      sbx__handle_free(sb);
      close(lock);
      return sbx__make_error(err, 0, SBX_E_SHUTDOWN,
                             "the sandbox provider was shut down during acquire"),
             NULL;
    }
    sb->next = p->held;
    p->held = sb;
    pthread_mutex_unlock(&p->lock);
  }
  if (sb == NULL && thread == NULL)
    sbx__lock_drop(p->pool.home, id, lock); /* a random id: no lock file per refused create */
  else
    close(lock);
  return sb;
}

sbx_sandbox_t *sbx_get(sbx_provider_t *p, const char *id)
{
  pthread_mutex_lock(&p->lock);
  struct sbx_sandbox_s *sb = id ? held_find(p, id) : NULL;
  pthread_mutex_unlock(&p->lock);
  return sb && !sb->broken ? sb : NULL;
}

/* Parks (or, when broken or shut down, destroys) one held sandbox. A release first lets the
 * backend copy the outputs home, under the sandbox's lock: the scope's next acquire waits. */
static int park(struct sbx_provider_s *p, struct sbx_sandbox_s *sb, bool release, sbx_error_t *err)
{
  int r = 0;
  int lock = sbx__lock_take(p->pool.home, sb->in.meta.id, true, false, err);
  if (lock < 0)
    return -1;
  if (release && !sb->broken && !p->shut_down && sb->in.ops->on_release && sb->in.meta.thread) {
    cleanup_free char *user_data = sbx__thread_dir_ensure(
        p->pool.home, sb->in.meta.user, sb->in.meta.thread, sb->in.ops->data_owner, NULL);
    if (user_data)
      sb->in.ops->on_release(&sb->in, user_data);
  }
  if (sb->broken || p->shut_down) {
    close(sb->lease_fd);
    sb->lease_fd = -1;
    if (!sb->broken) /* a broken one was destroyed already */
      r = sbx__instance_destroy(&sb->in, err);
  } else {
    /* last-used first, then the lease: whoever sees it warm also sees the new time */
    sbx__lease_touch(p->pool.home, sb->in.meta.id, sb->lease_fd);
    close(sb->lease_fd);
    sb->lease_fd = -1;
  }
  close(lock);
  return r;
}

int sbx_release(sbx_provider_t *p, const char *id, sbx_error_t *err)
{
  pthread_mutex_lock(&p->lock);
  struct sbx_sandbox_s *sb = id ? held_find(p, id) : NULL;
  if (sb)
    held_remove(p, sb);
  pthread_mutex_unlock(&p->lock);
  if (sb == NULL)
    return 0; /* unknown id: nothing to do */
  int r = park(p, sb, true, err);
  sbx__handle_free(sb);
  return r;
}

int sbx_park(sbx_provider_t *p, const char *id, sbx_error_t *err)
{
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_INVALID, "invalid sandbox id `%s`", id ? id : "");
  if (sbx_get(p, id))
    return sbx_release(p, id, err);
  int lock = sbx__lock_take(p->pool.home, id, true, false, err);
  if (lock < 0)
    return -1;
  struct sbx_meta m;
  int r = sbx__meta_read(p->pool.home, id, &m, err);
  if (r == 0) {
    sbx__lease_touch(p->pool.home, id, -1);
    sbx__meta_free(&m);
  }
  close(lock);
  return r;
}

static void hold(struct sbx_provider_s *p, struct sbx_sandbox_s *sb)
{
  pthread_mutex_lock(&p->lock);
  sb->next = p->held;
  p->held = sb;
  pthread_mutex_unlock(&p->lock);
}

sbx_sandbox_t *sbx_create(sbx_provider_t *p, const struct sbx_create_opts *o, sbx_error_t *err)
{
  static const struct sbx_create_opts none = {0};
  if (p->shut_down)
    return sbx__make_error(err, 0, SBX_E_SHUTDOWN, "the sandbox provider has been shut down"), NULL;
  if (o && o->n_env && sbx__env_check(o->env, o->n_env, err) < 0)
    return NULL;
  char id[SBX_ID_LEN + 1];
  if (o && o->id && !sbx__id_valid(o->id))
    return sbx__make_error(err, 0, SBX_E_INVALID, "invalid sandbox id `%s`", o->id), NULL;
  if (o && o->id)
    snprintf(id, sizeof id, "%s", o->id);
  else
    sbx__random_hex(id, SBX_ID_LEN);
  int lock = sbx__lock_take(p->pool.home, id, true, false, err);
  if (lock < 0)
    return NULL;
  cleanup_free char *dir = sbx__state_dir(p->pool.home, id);
  if (o && o->id && access(dir, F_OK) == 0) {
    close(lock);
    return sbx__make_error(err, 0, SBX_E_EXISTS, "sandbox %s exists already", id), NULL;
  }
  struct sbx_sandbox_s *sb = create(p, id, "default", NULL, o ? o : &none, err);
  if (sb == NULL && !(o && o->id))
    sbx__lock_drop(p->pool.home, id, lock); /* a random id: no lock file per refused create */
  else
    close(lock);
  if (sb)
    hold(p, sb);
  return sb;
}

sbx_sandbox_t *sbx_open(sbx_provider_t *p, const char *id, sbx_error_t *err)
{
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "no sandbox %s", id ? id : ""), NULL;
  struct sbx_sandbox_s *have = sbx_get(p, id);
  if (have)
    return have;
  int lock = sbx__lock_take(p->pool.home, id, true, false, err);
  if (lock < 0)
    return NULL;
  struct sbx_sandbox_s *sb = xzalloc(sizeof *sb);
  sb->lease_fd = -1;
  sbx_error_t lerr = NULL;
  if (sbx__instance_load(&p->pool, id, &sb->in, &lerr) < 0) {
    bool missing = lerr->kind == SBX_E_NOT_FOUND;
    sbx_error_release(&lerr);
    free(sb);
    close(lock);
    return sbx__make_error(err, 0, missing ? SBX_E_NOT_FOUND : SBX_E_IO, "no sandbox %s", id), NULL;
  }
  sb->in.provider = p;
  if (!sb->in.ops->alive(&sb->in)) {
    sbx__handle_free(sb);
    close(lock);
    return sbx__make_error(err, 0, SBX_E_BACKEND, "sandbox %s is not running", id), NULL;
  }
  sb->lease_fd = sbx__lease_take(p->pool.home, id, err);
  close(lock);
  if (sb->lease_fd < 0) {
    sbx__handle_free(sb);
    return NULL;
  }
  pthread_mutex_lock(&p->lock);
  have = held_find(p, id);
  if (have && !have->broken) { /* another thread opened it meanwhile */
    pthread_mutex_unlock(&p->lock);
    sbx__handle_free(sb);
    return have;
  }
  sb->next = p->held;
  p->held = sb;
  pthread_mutex_unlock(&p->lock);
  return sb;
}

/* Reads, changes and writes id's meta under its lock. */
static int meta_update(struct sbx_provider_s *p, const char *id,
                       int (*fn)(struct sbx_meta *m, void *arg, sbx_error_t *err), void *arg,
                       sbx_error_t *err)
{
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "no sandbox %s", id ? id : "");
  int lock = sbx__lock_take(p->pool.home, id, true, false, err);
  if (lock < 0)
    return -1;
  struct sbx_meta m;
  int r = sbx__meta_read(p->pool.home, id, &m, err);
  if (r == 0) {
    r = fn(&m, arg, err);
    if (r == 0)
      r = sbx__meta_write(p->pool.home, &m, err);
    sbx__meta_free(&m);
  }
  close(lock);
  return r;
}

static int set_extra(struct sbx_meta *m, void *arg, sbx_error_t *err)
{
  (void) err;
  free(m->extra);
  m->extra = xstrdup(arg);
  return 0;
}

int sbx_extra_set(sbx_provider_t *p, const char *id, const char *json, sbx_error_t *err)
{
  int r = meta_update(p, id, set_extra, (void *) json, err);
  pthread_mutex_lock(&p->lock);
  struct sbx_sandbox_s *sb = r == 0 ? held_find(p, id) : NULL;
  if (sb) {
    free(sb->in.meta.extra);
    sb->in.meta.extra = xstrdup(json);
  }
  pthread_mutex_unlock(&p->lock);
  return r;
}

char *sbx_extra_get(sbx_provider_t *p, const char *id, sbx_error_t *err)
{
  struct sbx_meta m;
  if (sbx__meta_read(p->pool.home, id, &m, err) < 0)
    return NULL;
  char *r = xstrdup(m.extra ? m.extra : "{}");
  sbx__meta_free(&m);
  return r;
}

static int set_paused(struct sbx_meta *m, void *arg, sbx_error_t *err)
{
  struct sbx_provider_s *p = ((void **) arg)[0];
  bool paused = *(bool *) ((void **) arg)[1];
  struct sbx_instance in = {.provider = p, .home = p->pool.home, .cfg = p->pool.cfg, .meta = *m};
  in.ops = sbx__backend_find(m->backend);
  if (in.ops == NULL || in.ops->pause == NULL)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "pause is not supported here");
  in.dir = sbx__state_dir(p->pool.home, m->id);
  int r = in.ops->pause(&in, paused, err);
  free(in.dir);
  if (r < 0)
    return -1;
  m->paused = paused;
  return 0;
}

int sbx_pause(sbx_provider_t *p, const char *id, bool paused, sbx_error_t *err)
{
  void *arg[2] = {p, &paused};
  int r = meta_update(p, id, set_paused, arg, err);
  pthread_mutex_lock(&p->lock);
  struct sbx_sandbox_s *sb = r == 0 ? held_find(p, id) : NULL;
  if (sb)
    sb->in.meta.paused = paused;
  pthread_mutex_unlock(&p->lock);
  return r;
}

int sbx_kill(sbx_provider_t *p, const char *id, int signo, sbx_error_t *err)
{
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "no sandbox %s", id ? id : "");
  int lock = sbx__lock_take(p->pool.home, id, true, false, err);
  if (lock < 0)
    return -1;
  struct sbx_instance in;
  int r = sbx__instance_load(&p->pool, id, &in, err);
  if (r == 0) {
    r = in.ops->kill
            ? in.ops->kill(&in, signo, err)
            : sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                              "signals are not supported by the %s backend", in.meta.backend);
    sbx__instance_free(&in);
  }
  close(lock);
  return r;
}

int sbx_metrics_of(sbx_provider_t *p, const char *id, struct sbx_metrics *m, sbx_error_t *err)
{
  memset(m, 0, sizeof *m);
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "no sandbox %s", id ? id : "");
  struct sbx_instance in;
  if (sbx__instance_load(&p->pool, id, &in, err) < 0)
    return -1;
  int r;
  if (in.ops->metrics == NULL)
    r = sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "metrics are not supported by the %s backend",
                        in.meta.backend);
  else if (in.ops->alive && !in.ops->alive(&in))
    r = sbx__make_error(err, ESRCH, SBX_E_BACKEND, "sandbox %s: its init is gone", id);
  else
    r = in.ops->metrics(&in, m, err);
  sbx__instance_free(&in);
  return r;
}

int sbx_scope_to_id(const char *user, const char *thread, char out[17], sbx_error_t *err)
{
  if (sbx__scope_check(user ? user : "default", thread, err) < 0)
    return -1;
  sbx__scope_id(user ? user : "default", thread, out);
  return 0;
}

void sbx__sandbox_broken(sbx_sandbox_t *sb)
{
  struct sbx_provider_s *p = sb->in.provider;
  if (sb->broken)
    return;
  sb->broken = true;
  sbx__log(SBX_LOG_WARNING, "sandbox %s is broken; evicting it", sb->in.meta.id);
  close(sb->lease_fd);
  sb->lease_fd = -1;
  int lock = sbx__lock_take(p->pool.home, sb->in.meta.id, true, false, NULL);
  sbx__instance_destroy(&sb->in, NULL);
  if (lock >= 0)
    close(lock);
}

int sbx_destroy(sbx_provider_t *p, const char *id, sbx_error_t *err)
{
  if (!sbx__id_valid(id))
    return sbx__make_error(err, 0, SBX_E_INVALID, "invalid sandbox id `%s`", id ? id : "");
  pthread_mutex_lock(&p->lock);
  struct sbx_sandbox_s *sb = held_find(p, id);
  if (sb)
    held_remove(p, sb);
  pthread_mutex_unlock(&p->lock);
  if (sb)
    sbx__handle_free(sb);
  cleanup_free char *dir = sbx__state_dir(p->pool.home, id);
  if (access(dir, F_OK) < 0)
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "no sandbox %s", id);
  int lock = sbx__lock_take(p->pool.home, id, true, false, err);
  if (lock < 0)
    return -1;
  int r = sbx__instance_destroy_id(&p->pool, id, err);
  if (r == 0)
    sbx__lock_drop(p->pool.home, id, lock);
  else
    close(lock);
  return r;
}

int sbx_reset(sbx_provider_t *p, sbx_error_t *err)
{
  int r = 0;
  for (;;) {
    pthread_mutex_lock(&p->lock);
    struct sbx_sandbox_s *sb = p->held;
    if (sb)
      held_remove(p, sb);
    pthread_mutex_unlock(&p->lock);
    if (sb == NULL)
      break;
    sbx_error_t e = NULL;
    if (park(p, sb, false, &e) < 0) {
      if (err && *err == NULL)
        *err = e;
      else
        sbx_error_release(&e);
      r = -1;
    }
    sbx__handle_free(sb);
  }
  return r;
}

int sbx_shutdown(sbx_provider_t *p, sbx_error_t *err)
{
  pthread_mutex_lock(&p->lock);
  p->shut_down = true;
  struct sbx_sandbox_s *sb = p->held;
  p->held = NULL;
  pthread_mutex_unlock(&p->lock);
  while (sb) {
    struct sbx_sandbox_s *next = sb->next;
    sbx__handle_free(sb);
    sb = next;
  }
  int r = 0;
  if (p->spares && sbx__spares_shutdown(p->spares, err) < 0)
    r = -1;
  if (sbx__pool_destroy_all(&p->pool, err) < 0)
    r = -1;
  return r;
}

int sbx_gc(sbx_provider_t *p, sbx_error_t *err)
{
  int removed = sbx__pool_reap(&p->pool, err);
  if (removed < 0)
    return -1;
  if (p->spares) {
    int r = sbx__spares_gc(p->spares);
    removed += r > 0 ? r : 0;
  }
  if (p->pool.ops->sweep)
    p->pool.ops->sweep();
  /* an eviction nobody came back for in a week is not news any more */
  struct sbx_eviction *ev;
  size_t n_ev;
  if (sbx_evictions(p, &ev, &n_ev, NULL) == 0) {
    double now = sbx__realtime_sec();
    for (size_t i = 0; i < n_ev; i++)
      if (now - ev[i].time > EVICTION_KEEP_S)
        sbx__evicted_remove(p->pool.home, ev[i].id);
    sbx_evictions_free(ev, n_ev);
  }
  return removed;
}

int sbx_list(sbx_provider_t *p, struct sbx_sandbox_info **out, size_t *n, sbx_error_t *err)
{
  *out = NULL;
  *n = 0;
  sbx_strv_t ids = {0};
  if (sbx__state_list_ids(p->pool.home, &ids, err) < 0)
    return -1;
  struct sbx_sandbox_info *v = xzalloc((ids.n + 1) * sizeof *v);
  size_t k = 0;
  for (size_t i = 0; i < ids.n; i++) {
    struct sbx_instance in;
    sbx_error_t lerr = NULL;
    struct sbx_sandbox_info *info = &v[k];
    if (sbx__instance_load(&p->pool, ids.v[i], &in, &lerr) < 0) {
      sbx_error_release(&lerr);
      continue; /* being created */
    }
    snprintf(info->id, sizeof info->id, "%s", ids.v[i]);
    info->user = in.meta.user ? xstrdup(in.meta.user) : NULL;
    info->thread = in.meta.thread ? xstrdup(in.meta.thread) : NULL;
    info->backend = xstrdup(in.meta.backend);
    info->pid = in.meta.pid;
    info->created = in.meta.created;
    info->last_used = in.meta.last_used;
    info->paused = in.meta.paused;
    bool alive = in.ops->alive(&in);
    info->state = !alive                                    ? SBX_STATE_DEAD
                  : sbx__lease_held(p->pool.home, ids.v[i]) ? SBX_STATE_ACTIVE
                                                            : SBX_STATE_WARM;
    info->memory = alive && in.ops->memory ? in.ops->memory(&in) : -1;
    sbx__lease_owners(p->pool.home, ids.v[i], &info->owners, &info->n_owners);
    sbx__instance_free(&in);
    k++;
  }
  sbx__strv_free(&ids);
  *out = v;
  *n = k;
  return 0;
}

int sbx_evictions(sbx_provider_t *p, struct sbx_eviction **out, size_t *n, sbx_error_t *err)
{
  *out = NULL;
  *n = 0;
  cleanup_free char *dir = xasprintf("%s/evicted", p->pool.home);
  cleanup_dir DIR *d = opendir(dir);
  if (d == NULL)
    return errno == ENOENT ? 0 : sbx__make_error(err, errno, SBX_E_IO, "list `%s`", dir);
  struct sbx_eviction *v = NULL;
  size_t k = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    struct sbx_eviction ev;
    if (!sbx__id_valid(de->d_name) || sbx__evicted_read(p->pool.home, de->d_name, &ev) < 0)
      continue;
    if (k == cap)
      v = xreallocarray(v, cap = cap ? 2 * cap : 8, sizeof *v);
    v[k++] = ev;
  }
  *out = v;
  *n = k;
  return 0;
}

void sbx_eviction_clear(struct sbx_eviction *ev)
{
  free(ev->user);
  free(ev->thread);
  free(ev->reason);
  memset(ev, 0, sizeof *ev);
}

void sbx_evictions_free(struct sbx_eviction *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    sbx_eviction_clear(&v[i]);
  free(v);
}

int sbx_eviction_take(sbx_provider_t *p, const char *id, struct sbx_eviction *ev, bool forget)
{
  if (sbx__evicted_read(p->pool.home, id, ev) < 0)
    return -1;
  if (forget)
    sbx__evicted_remove(p->pool.home, id);
  return 0;
}

void sbx_sandbox_info_free(struct sbx_sandbox_info *infos, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    free(infos[i].user);
    free(infos[i].thread);
    free(infos[i].backend);
    free(infos[i].owners);
  }
  free(infos);
}

int sbx_spares_ready(sbx_provider_t *p)
{
  return p->spares ? sbx__spares_ready(p->spares) : 0;
}

int sbx_spares_fill(sbx_provider_t *p, sbx_error_t *err)
{
  if (p->spares == NULL || p->shut_down)
    return 0;
  return sbx__spares_fill(p->spares, &p->shut_down, err);
}

void sbx_provider_free(sbx_provider_t *p)
{
  if (p == NULL)
    return;
  sbx_reset(p, NULL);
  sbx__spares_free(p->spares);
  pthread_mutex_destroy(&p->lock);
  sbx_config_free(p->owned_cfg);
  sbx__pool_close(&p->pool);
  free(p);
}
