/* cgroups for the linux backend, the facade over its managers. Hosts come in three shapes: v1,
 * hybrid (v1 controllers plus an empty cgroup2 at /sys/fs/cgroup/unified, as on the machines we
 * test on) and unified v2. Every manager puts sandboxes below the caller's own cgroup, so they
 * stay inside whatever limits the caller runs under: on v1 and hybrid one directory per
 * controller (this file), on v2 one directory (cgroup-v2.c, which also keeps the "no internal
 * processes" rule). Where systemd runs the host and has not delegated our cgroup to us, each
 * sandbox is a transient scope of systemd's instead (cgroup-systemd.c), in a slice of its own.
 * Where no cgroup can be made (a read-only /sys/fs/cgroup, controllers not delegated) a create
 * fails naming why, or, with sandbox.cgroup_required false, the sandbox runs without one and the
 * reason travels in its cgroup record ("none=...") for a warning. */
#include "linux.h"

#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <linux/magic.h>
#include <sbx/sbx.h>
#include <sys/sysinfo.h>

#define CG_ROOT SBX_CG_ROOT

static const char *const v1_names[SBX_CG_MAX] = {"memory", "pids", "cpu", "freezer"};

static int write_str(const char *dir, const char *file, const char *val)
{
  cleanup_free char *p = xasprintf("%s/%s", dir, file);
  cleanup_close int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  return sbx__write_all(fd, val, strlen(val));
}

static bool unified_host(void)
{
  struct statfs st;
  return statfs(CG_ROOT, &st) == 0 && st.f_type == CGROUP2_SUPER_MAGIC;
}

/* The caller's own path in the v1 hierarchy named ctrl ("/" if unknown). */
static char *own_v1_path(const char *ctrl)
{
  cleanup_file FILE *f = fopen("/proc/self/cgroup", "re");
  if (f == NULL)
    return xstrdup("/");
  char *line = NULL;
  size_t cap = 0;
  char *found = NULL;
  while (getline(&line, &cap, f) > 0) {
    char *c1 = strchr(line, ':');
    char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (c2 == NULL)
      continue;
    *c2 = '\0';
    char *path = c2 + 1;
    path[strcspn(path, "\n")] = '\0';
    /* controller lists look like "cpu,cpuacct" */
    for (char *tok = strtok(c1 + 1, ","); tok; tok = strtok(NULL, ","))
      if (strcmp(tok, ctrl) == 0) {
        found = xstrdup(path);
        break;
      }
    if (found)
      break;
  }
  free(line);
  return found ? found : xstrdup("/");
}

/* The mount point of a v1 controller: /sys/fs/cgroup/<ctrl>, or the combined "cpu,cpuacct". */
static char *v1_mount(const char *ctrl)
{
  cleanup_free char *p = xasprintf(CG_ROOT "/%s", ctrl);
  struct statfs st;
  if (statfs(p, &st) == 0 && st.f_type == CGROUP_SUPER_MAGIC)
    return steal_pointer(&p);
  if (strcmp(ctrl, "cpu") == 0) {
    const char *alt = CG_ROOT "/cpu,cpuacct";
    if (statfs(alt, &st) == 0 && st.f_type == CGROUP_SUPER_MAGIC)
      return xstrdup(alt);
  }
  return NULL;
}

/* A failure that says what the host lets us do (read-only, not delegated, controller absent)
 * is SBX_E_UNSUPPORTED: with cgroup_required false the sandbox runs without a cgroup then. */
static int cg_kind(int e)
{
  return e == EROFS || e == EACCES || e == EPERM || e == ENOENT || e == EBUSY ? SBX_E_UNSUPPORTED
                                                                              : SBX_E_INTERNAL;
}

static int mkdir_cg(const char *path, bool fresh, sbx_error_t *err)
{
  if (fresh ? mkdir(path, 0755) < 0 : sbx__mkdir_p(path, 0755) < 0)
    return sbx__make_error(err, errno, cg_kind(errno), "create cgroup `%s`", path);
  return 0;
}

static int apply_limits(const struct sbx_cgroup *cg, uint64_t memory_bytes, uint64_t cpu_millis,
                        int64_t pids, bool set_pids, sbx_error_t *err)
{
  char val[64];
  if (cg->unified) {
    const char *dir = cg->path[0];
    /* A controller that is not delegated here has no files: fine while no limit needs it. */
    cleanup_free char *missing = sbx__cgroup_v2_missing(dir);
    const char *absent = memory_bytes && strstr(missing, "memory")                 ? "memory"
                         : set_pids && pids > 0 && strstr(missing, "pids") != NULL ? "pids"
                         : cpu_millis && strstr(missing, "cpu") != NULL            ? "cpu"
                                                                                   : NULL;
    if (absent)
      return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                             "the `%s` controller is not available in `%s` (not enabled or not "
                             "delegated above it) for the sandbox's %s limit",
                             absent, dir, absent);
    snprintf(val, sizeof val, "%llu", (unsigned long long) memory_bytes);
    if (write_str(dir, "memory.max", memory_bytes ? val : "max") < 0 &&
        (memory_bytes || errno != ENOENT))
      return sbx__make_error(err, errno, cg_kind(errno), "set memory.max in `%s`", dir);
    write_str(dir, "memory.swap.max", "0"); /* absent without swap accounting */
    if (set_pids) {
      snprintf(val, sizeof val, "%lld", (long long) pids);
      if (write_str(dir, "pids.max", pids > 0 ? val : "max") < 0 && (pids > 0 || errno != ENOENT))
        return sbx__make_error(err, errno, cg_kind(errno), "set pids.max in `%s`", dir);
    }
    snprintf(val, sizeof val, "%llu 100000", (unsigned long long) cpu_millis * 100);
    if (write_str(dir, "cpu.max", cpu_millis ? val : "max 100000") < 0 && cpu_millis)
      return sbx__make_error(err, errno, cg_kind(errno), "set cpu.max in `%s`", dir);
    return 0;
  }
  /* a limit asked for on a host without its controller must not pass for enforced */
  const char *absent = memory_bytes && !cg->path[SBX_CG_MEMORY]         ? "memory"
                       : set_pids && pids > 0 && !cg->path[SBX_CG_PIDS] ? "pids"
                       : cpu_millis && !cg->path[SBX_CG_CPU]            ? "cpu"
                                                                        : NULL;
  if (absent)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                           "no `%s` cgroup controller is mounted under " CG_ROOT
                           " for the sandbox's %s limit",
                           absent, absent);
  if (cg->path[SBX_CG_MEMORY]) {
    const char *dir = cg->path[SBX_CG_MEMORY];
    snprintf(val, sizeof val, "%lld", memory_bytes ? (long long) memory_bytes : -1LL);
    /* memsw must stay >= limit: lower it after the limit, raise it before */
    cleanup_free char *memsw = xasprintf("%s/memory.memsw.limit_in_bytes", dir);
    bool has_memsw = access(memsw, F_OK) == 0;
    if (has_memsw && !memory_bytes)
      write_str(dir, "memory.memsw.limit_in_bytes", "-1");
    if (write_str(dir, "memory.limit_in_bytes", val) < 0)
      return sbx__make_error(err, errno, cg_kind(errno), "set memory.limit_in_bytes in `%s`", dir);
    if (has_memsw && memory_bytes)
      write_str(dir, "memory.memsw.limit_in_bytes", val);
    /* v1 keeps TCP buffers outside memory.limit_in_bytes, and charges them at all only once
     * this is set: bound them (v2 charges them to memory.max itself) */
    snprintf(val, sizeof val, "%lld",
             memory_bytes ? (long long) sbx_cgroup_tcp_bytes(memory_bytes) : -1LL);
    if (write_str(dir, "memory.kmem.tcp.limit_in_bytes", val) < 0 && errno != ENOENT)
      return sbx__make_error(err, errno, SBX_E_INTERNAL,
                             "set memory.kmem.tcp.limit_in_bytes in `%s`", dir);
  }
  if (set_pids && cg->path[SBX_CG_PIDS]) {
    snprintf(val, sizeof val, "%lld", (long long) pids);
    if (write_str(cg->path[SBX_CG_PIDS], "pids.max", pids > 0 ? val : "max") < 0)
      return sbx__make_error(err, errno, cg_kind(errno), "set pids.max in `%s`",
                             cg->path[SBX_CG_PIDS]);
  }
  if (cg->path[SBX_CG_CPU]) {
    snprintf(val, sizeof val, "%lld", cpu_millis ? (long long) cpu_millis * 100 : -1LL);
    if (write_str(cg->path[SBX_CG_CPU], "cpu.cfs_quota_us", val) < 0 && cpu_millis)
      return sbx__make_error(err, errno, cg_kind(errno), "set cpu.cfs_quota_us in `%s`",
                             cg->path[SBX_CG_CPU]);
  }
  return 0;
}

bool sbx__cgroup_delegated(const char *dir)
{
  char val[8];
  return getxattr(dir, "trusted.delegate", val, sizeof val) > 0 ||
         getxattr(dir, "user.delegate", val, sizeof val) > 0;
}

int sbx__cgroup_auto_manager(void)
{
  /* systemd owns the tree unless it delegated our cgroup to us (Delegate=yes): then, or with
   * no systemd at all, the tree below our cgroup is ours to manage */
  if (!unified_host() || access("/run/systemd/system", F_OK) < 0)
    return SBX_CGM_CGROUPFS;
  if (geteuid() != 0) {
    /* an ordinary user: its own manager if it runs (user@.service delegates to it), unless our
     * cgroup is delegated to us directly */
    cleanup_free char *sock = sbx__systemd_socket();
    cleanup_free char *own = sbx__cgroup_v2_base(NULL);
    if (own && sbx__cgroup_delegated(own) && access(own, W_OK) == 0)
      return SBX_CGM_CGROUPFS;
    return access(sock, F_OK) == 0 ? SBX_CGM_SYSTEMD : SBX_CGM_CGROUPFS;
  }
  cleanup_free char *base = sbx__cgroup_v2_base(NULL);
  if (base == NULL || strcmp(base, CG_ROOT) == 0 || sbx__cgroup_delegated(base))
    return SBX_CGM_CGROUPFS;
  return SBX_CGM_SYSTEMD;
}

static int create_cgroups(const struct sbx_launch_spec *s, const char *id, pid_t pid,
                          struct sbx_cgroup *cg, sbx_error_t *err)
{
  int mgr = s->cgroup_manager == SBX_CGM_AUTO ? sbx__cgroup_auto_manager() : s->cgroup_manager;
  if (mgr == SBX_CGM_SYSTEMD) {
    if (!unified_host())
      return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                             "cgroup_manager systemd needs a unified (v2) cgroup hierarchy");
    cg->unified = true;
    cleanup_free char *p = NULL;
    if (sbx__cgroup_systemd_scope(s, id, pid, &p, err) < 0)
      return -1;
    for (int i = 0; i < SBX_CG_MAX; i++)
      cg->path[i] = xstrdup(p);
    return 0;
  }
  if (unified_host()) {
    cg->unified = true;
    cleanup_free char *parent = NULL;
    if (sbx__cgroup_v2_prepare(&parent, err) < 0)
      return -1;
    char *p = xasprintf("%s/%s", parent, id);
    for (int i = 0; i < SBX_CG_MAX; i++)
      cg->path[i] = xstrdup(p);
    free(p);
    return mkdir_cg(cg->path[0], true, err);
  }
  struct statfs st;
  if (statfs(CG_ROOT, &st) < 0)
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "no cgroup file system at " CG_ROOT);
  for (int i = 0; i < SBX_CG_MAX; i++) {
    cleanup_free char *mnt = v1_mount(v1_names[i]);
    if (mnt == NULL)
      continue; /* controller not mounted: that limit is unavailable */
    cleanup_free char *own = own_v1_path(v1_names[i]);
    cleanup_free char *parent = xasprintf("%s%s/sbx", mnt, strcmp(own, "/") == 0 ? "" : own);
    cg->path[i] = xasprintf("%s/%s", parent, id);
    if (mkdir_cg(parent, false, err) < 0 || mkdir_cg(cg->path[i], true, err) < 0)
      return -1;
  }
  return 0;
}

/* Replaces *err's message with a longer one that says what to do about it. */
static void explain(sbx_error_t *err, bool required)
{
  if (err == NULL || *err == NULL)
    return;
  struct statvfs vfs;
  bool ro = (*err)->status == EROFS || (statvfs(CG_ROOT, &vfs) == 0 && (vfs.f_flag & ST_RDONLY));
  cleanup_free char *msg = xasprintf(
      "%s (%s%s)", (*err)->msg,
      ro ? CG_ROOT " is mounted read-only, as in a container by default; " : "",
      required ? "sandboxes cannot get memory, process or CPU limits here: run `sbx doctor`; "
                 "sandbox.cgroup_required: false runs them without limits"
               : "run `sbx doctor`");
  int status = (*err)->status, kind = (*err)->kind;
  sbx_error_release(err);
  sbx__error_set(err, status, kind, msg);
}

int sbx__cgroup_create(const struct sbx_launch_spec *s, pid_t pid, struct sbx_cgroup *cg,
                       sbx_error_t *err)
{
  memset(cg, 0, sizeof *cg);
  if (s->cgroup_manager == SBX_CGM_NONE) {
    cg->none = xstrdup("sandbox.cgroup_manager is none");
    return 0;
  }
  /* One scope id can exist in several state dirs at once: every sandbox gets its own cgroup. */
  char suffix[9];
  sbx__random_hex(suffix, 8);
  cleanup_free char *name = xasprintf("%s-%s", s->id, suffix);
  sbx_error_t e = NULL;
  if (create_cgroups(s, name, pid, cg, &e) == 0 &&
      apply_limits(cg, s->memory_bytes, s->cpu_millis, s->pids, true, &e) == 0)
    return 0;
  sbx__cgroup_destroy(cg, 0, NULL);
  sbx__cgroup_free(cg);
  if (e->kind == SBX_E_UNSUPPORTED && !s->cgroup_required) {
    explain(&e, false);
    cg->none = xstrdup(e->msg);
    sbx_error_release(&e);
    return 0;
  }
  if (e->kind == SBX_E_UNSUPPORTED)
    explain(&e, true);
  if (err && *err == NULL)
    *err = steal_pointer(&e);
  sbx_error_release(&e);
  return -1;
}

int sbx__cgroup_set_limits(const struct sbx_cgroup *cg, uint64_t memory_bytes, uint64_t cpu_millis,
                           sbx_error_t *err)
{
  if (apply_limits(cg, memory_bytes, cpu_millis, 0, false, err) < 0)
    return -1;
  /* a systemd scope's (cgroup-systemd.c): its unit properties too, or a daemon-reload puts
   * the spare's back */
  const char *leaf = cg->unified && cg->path[0] ? strrchr(cg->path[0], '/') : NULL;
  if (leaf && sbx__str_has_prefix(leaf + 1, "sbx-") && sbx__str_has_suffix(leaf, ".scope"))
    return sbx__cgroup_systemd_set_limits(leaf + 1, memory_bytes, cpu_millis, err);
  return 0;
}

int sbx__cgroup_enter(const struct sbx_cgroup *cg, pid_t pid, sbx_error_t *err)
{
  char val[32];
  snprintf(val, sizeof val, "%d", (int) pid);
  for (int i = 0; i < SBX_CG_MAX; i++) {
    if (cg->path[i] == NULL || (i > 0 && cg->unified))
      continue;
    if (write_str(cg->path[i], "cgroup.procs", val) < 0)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "join cgroup `%s`", cg->path[i]);
  }
  return 0;
}

int sbx__cgroup_join_self(const struct sbx_cgroup *cg, sbx_error_t *err)
{
  for (int i = 0; i < SBX_CG_MAX; i++) {
    if (cg->path[i] == NULL || (i > 0 && cg->unified))
      continue;
    /* v1: "0" in `tasks` moves only the calling thread and skips the global threadgroup lock
     * that a write to cgroup.procs takes (its RCU wait cost 10-16 ms on an idle host). The
     * caller is single-threaded, so that moves the whole process. v2 has no `tasks`. */
    if (write_str(cg->path[i], cg->unified ? "cgroup.procs" : "tasks", "0") < 0)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "join cgroup `%s`", cg->path[i]);
  }
  return 0;
}

int sbx__cgroup_destroy(const struct sbx_cgroup *cg, int timeout_ms, sbx_error_t *err)
{
  uint64_t deadline = sbx__now_ms() + (uint64_t) (timeout_ms > 0 ? timeout_ms : 0);
  int ret = 0;
  /* A frozen cgroup's tasks cannot die: thaw before waiting for any directory to empty (the
   * freezer comes last in path[], after the controllers whose removal waits for them). */
  if (cg->path[SBX_CG_FREEZER])
    sbx__cgroup_freeze(cg, false, NULL);
  for (int i = 0; i < SBX_CG_MAX; i++) {
    if (cg->path[i] == NULL || (i > 0 && cg->unified))
      continue;
    for (;;) {
      if (rmdir(cg->path[i]) == 0 || errno == ENOENT)
        break;
      if (errno != EBUSY || sbx__now_ms() >= deadline) {
        ret = sbx__make_error(err, errno, SBX_E_INTERNAL, "remove cgroup `%s`", cg->path[i]);
        break;
      }
      usleep(2000);
    }
  }
  return ret;
}

int64_t sbx__cgroup_memory(const struct sbx_cgroup *cg)
{
  const char *dir = cg->path[SBX_CG_MEMORY];
  if (dir == NULL)
    return -1;
  cleanup_free char *p =
      xasprintf("%s/%s", dir, cg->unified ? "memory.current" : "memory.usage_in_bytes");
  cleanup_free char *data = NULL;
  if (sbx__read_file_at(AT_FDCWD, p, 64, &data, NULL) < 0)
    return -1;
  return strtoll(data, NULL, 10);
}

int sbx__cgroup_freeze(const struct sbx_cgroup *cg, bool frozen, sbx_error_t *err)
{
  const char *dir = cg->path[SBX_CG_FREEZER];
  if (dir == NULL)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "no freezer cgroup on this host");
  int r = cg->unified ? write_str(dir, "cgroup.freeze", frozen ? "1" : "0")
                      : write_str(dir, "freezer.state", frozen ? "FROZEN" : "THAWED");
  if (r < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "%s `%s`", frozen ? "freeze" : "thaw", dir);
  if (!frozen || cg->unified)
    return 0;
  /* v1 reports FREEZING until every task has stopped */
  for (int i = 0; i < 500; i++) {
    if (sbx__cgroup_is_frozen(cg))
      return 0;
    usleep(1000);
  }
  return sbx__make_error(err, 0, SBX_E_TIMEOUT, "freeze `%s`: tasks did not stop", dir);
}

bool sbx__cgroup_is_frozen(const struct sbx_cgroup *cg)
{
  const char *dir = cg->path[SBX_CG_FREEZER];
  if (dir == NULL)
    return false;
  cleanup_free char *p = xasprintf("%s/%s", dir, cg->unified ? "cgroup.events" : "freezer.state");
  cleanup_free char *data = NULL;
  if (sbx__read_file_at(AT_FDCWD, p, 4096, &data, NULL) < 0)
    return false;
  if (cg->unified)
    return strstr(data, "frozen 1") != NULL;
  return strncmp(data, "FROZEN", 6) == 0;
}

char *sbx__cgroup_format(const struct sbx_cgroup *cg)
{
  sbx_buf_t b = {0};
  if (cg->none) {
    /* one line: the launcher's pipe message and the state record are line-based */
    cleanup_free char *line = xstrdup(cg->none);
    for (char *c = line; *c; c++)
      if (*c == '\n')
        *c = ' ';
    sbx__buf_printf(&b, "none=%s\n", line);
  } else if (cg->unified)
    sbx__buf_printf(&b, "unified=%s\n", cg->path[0]);
  else
    for (int i = 0; i < SBX_CG_MAX; i++)
      if (cg->path[i])
        sbx__buf_printf(&b, "%s=%s\n", v1_names[i], cg->path[i]);
  return sbx__buf_steal(&b);
}

int sbx__cgroup_parse(const char *s, struct sbx_cgroup *cg)
{
  memset(cg, 0, sizeof *cg);
  while (s && *s) {
    const char *nl = strchr(s, '\n');
    size_t n = nl ? (size_t) (nl - s) : strlen(s);
    cleanup_free char *line = xstrndup(s, n);
    s = nl ? nl + 1 : NULL;
    char *eq = strchr(line, '=');
    if (eq == NULL)
      continue;
    *eq = '\0';
    const char *path = eq + 1;
    /* only ever trust paths under the cgroup mount */
    if (!sbx__str_has_prefix(path, CG_ROOT "/") || strstr(path, "/../") != NULL)
      continue;
    if (strcmp(line, "unified") == 0) {
      cg->unified = true;
      for (int i = 0; i < SBX_CG_MAX; i++) {
        free(cg->path[i]);
        cg->path[i] = xstrdup(path);
      }
      continue;
    }
    for (int i = 0; i < SBX_CG_MAX; i++)
      if (strcmp(line, v1_names[i]) == 0) {
        free(cg->path[i]);
        cg->path[i] = xstrdup(path);
      }
  }
  return 0;
}

void sbx__cgroup_free(struct sbx_cgroup *cg)
{
  free(cg->none);
  cg->none = NULL;
  for (int i = 0; i < SBX_CG_MAX; i++) {
    free(cg->path[i]);
    cg->path[i] = NULL;
  }
}

static int64_t read_int(const char *dir, const char *file)
{
  if (dir == NULL)
    return -1;
  cleanup_free char *p = xasprintf("%s/%s", dir, file);
  cleanup_free char *data = NULL;
  if (sbx__read_file_at(AT_FDCWD, p, 4096, &data, NULL) < 0)
    return -1;
  if (strncmp(data, "max", 3) == 0)
    return INT64_MAX;
  return strtoll(data, NULL, 10);
}

int sbx__cgroup_metrics(const struct sbx_cgroup *cg, struct sbx_metrics *m)
{
  struct sysinfo si;
  sysinfo(&si);
  uint64_t host_mem = (uint64_t) si.totalram * si.mem_unit;
  m->cpu_count = (double) get_nprocs();
  int64_t used = sbx__cgroup_memory(cg);
  if (used < 0)
    return -1;
  m->mem_used = (uint64_t) used;
  if (cg->unified) {
    const char *dir = cg->path[0];
    int64_t lim = read_int(dir, "memory.max");
    m->mem_limit = lim > 0 && (uint64_t) lim < host_mem ? (uint64_t) lim : host_mem;
    cleanup_free char *p = xasprintf("%s/cpu.max", dir);
    cleanup_free char *data = NULL;
    long long quota, period;
    if (sbx__read_file_at(AT_FDCWD, p, 256, &data, NULL) == 0 &&
        sscanf(data, "%lld %lld", &quota, &period) == 2 && period > 0)
      m->cpu_count = (double) quota / (double) period;
    cleanup_free char *stat = xasprintf("%s/cpu.stat", dir);
    cleanup_free char *sd = NULL;
    char *u;
    if (sbx__read_file_at(AT_FDCWD, stat, 4096, &sd, NULL) == 0 &&
        (u = strstr(sd, "usage_usec ")) != NULL)
      m->cpu_usage_s = (double) strtoull(u + 11, NULL, 10) / 1e6;
    return 0;
  }
  int64_t lim = read_int(cg->path[SBX_CG_MEMORY], "memory.limit_in_bytes");
  m->mem_limit = lim > 0 && (uint64_t) lim < host_mem ? (uint64_t) lim : host_mem;
  int64_t quota = read_int(cg->path[SBX_CG_CPU], "cpu.cfs_quota_us");
  int64_t period = read_int(cg->path[SBX_CG_CPU], "cpu.cfs_period_us");
  if (quota > 0 && period > 0)
    m->cpu_count = (double) quota / (double) period;
  /* cpuacct is mounted beside cpu on hybrid hosts: same relative path */
  if (cg->path[SBX_CG_CPU]) {
    cleanup_free char *acct = xstrdup(cg->path[SBX_CG_CPU]);
    char *pos = strstr(acct, "/cpu/");
    if (pos) {
      cleanup_free char *alt = xasprintf("%.*s/cpuacct/%s", (int) (pos - acct), acct, pos + 5);
      int64_t ns = read_int(alt, "cpuacct.usage");
      if (ns < 0)
        ns = read_int(cg->path[SBX_CG_CPU], "cpuacct.usage");
      if (ns >= 0)
        m->cpu_usage_s = (double) ns / 1e9;
    }
  }
  return 0;
}

/* Removes empty sandbox cgroups under our parent "sbx" directories that are older than
 * min_age_s: a live sandbox always has its PID 1 in its cgroup, so an empty one is left over
 * (a crash between mkdir and join, a host reboot of the state dir...). rmdir refuses a busy
 * cgroup, so a race with a sandbox being made is harmless. */
int sbx__cgroup_sweep(int min_age_s)
{
  int removed = 0;
  time_t now = time(NULL);
  for (int i = 0; i < SBX_CG_MAX; i++) {
    cleanup_free char *parent = NULL;
    if (unified_host()) {
      if (i > 0)
        break;
      cleanup_free char *base = sbx__cgroup_v2_base(NULL);
      if (base == NULL)
        break;
      parent = xasprintf("%s/sbx", base);
    } else {
      cleanup_free char *mnt = v1_mount(v1_names[i]);
      if (mnt == NULL)
        continue;
      cleanup_free char *own = own_v1_path(v1_names[i]);
      parent = xasprintf("%s%s/sbx", mnt, strcmp(own, "/") == 0 ? "" : own);
    }
    cleanup_dir DIR *d = opendir(parent);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
      if (de->d_name[0] == '.' || strchr(de->d_name, '-') == NULL)
        continue;
      struct stat st;
      if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
          now - st.st_ctime < min_age_s)
        continue;
      if (unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) == 0)
        removed++;
    }
  }
  return removed;
}
