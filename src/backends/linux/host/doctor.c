/* sbx_doctor: what works on this host for this user, and the fix for what does not. Every check
 * looks at the real thing (a system call, a file the kernel exposes, the cgroup sandboxes would
 * go below) the way a create would, without creating anything. */
#include "linux.h"
#include <sbx/sbx.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <linux/magic.h>

struct report {
  sbx_buf_t b;
  int failed;
  int warned;
};

enum { OK, WARN, FAIL, INFO };

static void line(struct report *r, int level, const char *what, const char *fix, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));

static void line(struct report *r, int level, const char *what, const char *fix, const char *fmt,
                 ...)
{
  static const char *const tag[] = {"ok  ", "warn", "FAIL", "info"};
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *detail = NULL;
  if (vasprintf(&detail, fmt, ap) < 0)
    detail = NULL;
  va_end(ap);
  sbx__buf_printf(&r->b, "[%s] %-14s %s\n", tag[level], what, detail ? detail : "");
  if (fix && level != OK && level != INFO)
    sbx__buf_printf(&r->b, "       %-14s fix: %s\n", "", fix);
  if (level == FAIL)
    r->failed++;
  else if (level == WARN)
    r->warned++;
}

static char *read_trim(const char *path)
{
  char *data = NULL;
  if (sbx__read_file_at(AT_FDCWD, path, 1 << 16, &data, NULL) < 0)
    return NULL;
  data[strcspn(data, "\n")] = '\0';
  return data;
}

/* Whether the state folder's file system takes idmapped mounts, tried the way the launcher
 * does (a detached copy of it, idmapped, then dropped): thread folders live there. */
static void check_idmap(struct report *r)
{
  const char *home = getenv("SBX_HOME");
  struct stat st;
  if (home == NULL || *home == '\0' || stat(home, &st) < 0)
    home = "."; /* not made yet: it would be made here, most likely on this file system */
  const char *fix = "keep $SBX_HOME and volumes on ext4, xfs, btrfs (or tmpfs on Linux 6.3+)";
  if (!sbx__kernel_has(SBX_KF_MOUNT_SETATTR)) {
    line(r, WARN, "idmapped", "Linux 5.12 or newer",
         "no idmapped mounts (Linux 5.12): files sandboxes write in thread folders and volumes "
         "belong to uid %u on the host, not to the folder's owner, and every sandbox with a "
         "folder runs under the shared ids %u..",
         SBX_UID_BASE, SBX_UID_BASE);
    return;
  }
  if (geteuid() != 0 || stat(home, &st) < 0) {
    line(r, INFO, "idmapped", NULL,
         "idmapped mounts available: files sandboxes write in a thread folder or volume belong "
         "to the folder's owner where its file system can idmap (tried as root only)");
    return;
  }
  cleanup_close int tree = sbx__open_tree_nofollow(home, false);
  struct sbx_idmap_helper h = {0};
  cleanup_close int userns =
      tree < 0 ? -1 : sbx__ids_idmap_userns(SBX_RANGE_FIRST, st.st_uid, st.st_gid, &h, NULL);
  int ok = userns >= 0 ? sbx__tree_idmap(tree, userns) : -1;
  int e = errno;
  sbx__ids_idmap_reap(&h);
  if (ok == 0)
    line(r, OK, "idmapped", NULL,
         "idmapped mounts work in `%s`: files sandboxes write in a thread folder or volume "
         "belong to the folder's owner on the host",
         home);
  else
    line(r, WARN, "idmapped", fix,
         "the file system of `%s` cannot idmap (%s): sandboxes with a thread folder there run "
         "under the shared ids %u.. and their files belong to uid %u, not to the folder's owner",
         home, strerror(e), SBX_UID_BASE, SBX_UID_BASE);
}

static void check_kernel(struct report *r)
{
  cleanup_free char *rel = sbx__kernel_release();
  bool floor_ok = true;
  for (int i = 0; i < SBX_KF_MAX; i++)
    if (sbx__kfeatures[i].required && !sbx__kernel_has(i))
      floor_ok = false;
  line(r, floor_ok ? OK : FAIL, "kernel", "boot Linux " SBX_KERNEL_FLOOR " or newer",
       "%s (sbx needs Linux " SBX_KERNEL_FLOOR "; everything works from 5.12)", rel);
  for (int i = 0; i < SBX_KF_MAX; i++) {
    const struct sbx_kfeature *f = &sbx__kfeatures[i];
    bool has = sbx__kernel_has(i);
    line(r,
         has           ? OK
         : f->required ? FAIL
                       : WARN,
         f->name,
         f->required ? "a newer kernel (or a seccomp filter of the caller's denies it)"
                     : "Linux 5.12 or newer; until then these features are refused",
         "%s (Linux %s): %s%s", has ? "present" : "MISSING", f->since, f->why,
         has || f->required ? "" : " are refused");
  }
  line(r, INFO, "clone3", NULL,
       "not used (CLONE_INTO_CGROUP neither: the launcher joins the "
       "sandbox's cgroup itself before it starts anything)");
}

static void check_privilege(struct report *r)
{
  uid_t uid = geteuid();
  line(r, uid == 0 ? OK : FAIL, "user", "run sbx and sbxd as root (sudo, or a system service)",
       "uid %u%s", (unsigned) uid,
       uid == 0 ? "" : ": sbx needs root today (rootless sandboxes are not supported yet)");
  cleanup_free char *max = read_trim("/proc/sys/user/max_user_namespaces");
  long n = max ? strtol(max, NULL, 10) : -1;
  line(r, n > 0 ? OK : FAIL, "user ns", "sysctl -w user.max_user_namespaces=65536",
       "user.max_user_namespaces = %s", max ? max : "unknown (no /proc/sys/user)");
  cleanup_free char *unpriv = read_trim("/proc/sys/kernel/unprivileged_userns_clone");
  if (unpriv)
    line(r, INFO, "", NULL, "kernel.unprivileged_userns_clone = %s (only rootless needs it)",
         unpriv);
  cleanup_free char *apparmor = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  if (apparmor)
    line(r, INFO, "", NULL, "kernel.apparmor_restrict_unprivileged_userns = %s", apparmor);
  /* the launcher raises RLIMIT_NOFILE and needs these to build sandboxes */
  int seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  cleanup_free char *actions = read_trim("/proc/sys/kernel/seccomp/actions_avail");
  line(r, seccomp >= 0 && actions ? OK : FAIL, "seccomp",
       "a kernel built with CONFIG_SECCOMP_FILTER", "%s%s",
       actions ? "filters available: " : "no seccomp filters", actions ? actions : "");
  if (seccomp > 0)
    line(r, INFO, "", NULL, "this process already runs under a seccomp filter (mode %d)", seccomp);
  check_idmap(r);
  line(r, INFO, "overlayfs", NULL, "overlayfs in a user namespace %s (not used yet)",
       sbx__kernel_at_least(5, 11) ? "available (Linux 5.11)" : "unavailable before Linux 5.11");
}

static bool readonly_mount(const char *path)
{
  struct statvfs v;
  return statvfs(path, &v) == 0 && (v.f_flag & ST_RDONLY);
}

static void check_cgroups_v2(struct report *r, const struct sbx_config *cfg, int bad)
{
  sbx_error_t e = NULL;
  cleanup_free char *base = sbx__cgroup_v2_base(&e);
  if (base == NULL) {
    line(r, bad, "cgroup", "mount cgroup2 from this cgroup namespace", "%s", e->msg);
    sbx_error_release(&e);
    return;
  }
  cleanup_free char *own = sbx__cgroup_v2_own();
  const char *conf = cfg->cgroup_manager ? cfg->cgroup_manager : "auto";
  bool systemd = strcmp(conf, "systemd") == 0 ||
                 (strcmp(conf, "auto") == 0 && sbx__cgroup_auto_manager() == SBX_CGM_SYSTEMD);
  if (systemd) {
    const char *slice = cfg->cgroup_slice ? cfg->cgroup_slice : "sbx.slice";
    bool sock = access("/run/systemd/private", W_OK) == 0;
    line(r, sock ? OK : bad, "cgroup", "run systemd, or set sandbox.cgroup_manager: cgroupfs",
         "unified (v2); we are in `%s`, not delegated to us: cgroup_manager %s is systemd, "
         "sandboxes are transient scopes in %s (outside our unit: they outlive it)%s",
         own, conf, slice, sock ? "" : "; /run/systemd/private is not reachable");
    line(r, INFO, "", NULL,
         "to bound sandboxes by the front-end's unit instead, give the unit "
         "Delegate=yes (docs/hosts.md)");
    return;
  }
  line(r, OK, "cgroup", NULL,
       "unified (v2); cgroup_manager %s is cgroupfs; we are in `%s`; sandboxes go below `%s/sbx`",
       conf, own, base);
  if (readonly_mount(SBX_CG_ROOT) || access(base, W_OK) < 0) {
    line(r, bad, "",
         cfg->cgroup_required ? "mount /sys/fs/cgroup read-write (docker run --cgroupns=private "
                                "--privileged, or a delegated cgroup), or sandbox.cgroup_required: "
                                "false to run sandboxes without limits"
                              : "mount /sys/fs/cgroup read-write",
         "`%s` is not writable (%s): no cgroup for sandboxes%s", base,
         readonly_mount(SBX_CG_ROOT) ? "read-only mount" : "permission denied",
         cfg->cgroup_required ? ", so they cannot start" : "; they run WITHOUT limits");
    return;
  }
  cleanup_free char *missing = sbx__cgroup_v2_missing(base);
  bool need_mem = cfg->memory_mib > 0, need_pids = cfg->pids > 0, need_cpu = cfg->cpus > 0;
  bool blocked = (need_mem && strstr(missing, "memory")) ||
                 (need_pids && strstr(missing, "pids")) || (need_cpu && strstr(missing, "cpu"));
  if (*missing)
    line(r, blocked ? bad : WARN, "",
         "enable them in the parent's cgroup.subtree_control (systemd: Delegate=yes on the "
         "unit, or Delegate=memory pids cpu)",
         "controllers not available in `%s`: %s%s", base, missing,
         blocked ? " (the configured limits need them)" : "");
  else
    line(r, OK, "", NULL, "memory, pids and cpu available in `%s`", base);
  cleanup_free char *procs_path = xasprintf("%s/cgroup.procs", base);
  cleanup_free char *procs = NULL;
  cleanup_free char *type_path = xasprintf("%s/cgroup.type", base);
  bool root = access(type_path, F_OK) < 0;
  if (!root && sbx__read_file_at(AT_FDCWD, procs_path, 1 << 16, &procs, NULL) == 0 && *procs)
    line(r, INFO, "", NULL,
         "`%s` has processes: the first create moves them to `%s/" SBX_CG_LEAF
         "` (the no-internal-processes rule)",
         base, base);
  if (access("/run/systemd/system", F_OK) == 0) {
    bool delegated = sbx__cgroup_delegated(base);
    line(r, delegated || root ? OK : WARN, "systemd",
         "run the front-end in a unit with Delegate=yes (docs/hosts.md)",
         "systemd manages this host's cgroups; `%s` is %s", base,
         root        ? "the root"
         : delegated ? "delegated to us"
                     : "NOT delegated to us");
  }
}

static void check_cgroups_v1(struct report *r, const struct sbx_config *cfg, int bad)
{
  static const char *const ctrls[] = {"memory", "pids", "cpu", "freezer"};
  line(r, OK, "cgroup", NULL, "v1%s",
       access(SBX_CG_ROOT "/unified", F_OK) == 0 ? " (hybrid: controllers on v1, an empty cgroup2)"
                                                 : "");
  for (size_t i = 0; i < sizeof ctrls / sizeof ctrls[0]; i++) {
    cleanup_free char *mnt = xasprintf(SBX_CG_ROOT "/%s", ctrls[i]);
    struct statfs st;
    if (statfs(mnt, &st) < 0 || st.f_type != CGROUP_SUPER_MAGIC) {
      free(mnt);
      mnt = xstrdup(SBX_CG_ROOT "/cpu,cpuacct");
      if (i != 2 || statfs(mnt, &st) < 0 || st.f_type != CGROUP_SUPER_MAGIC) {
        bool needed = (i == 0 && cfg->memory_mib) || (i == 1 && cfg->pids) || (i == 2 && cfg->cpus);
        line(r, needed ? bad : WARN, "", "mount the controller, or boot with cgroup v2",
             "no `%s` controller mounted%s", ctrls[i],
             i == 3   ? " (pause is unavailable)"
             : needed ? " (the configured limit needs it)"
                      : "");
        continue;
      }
    }
    bool ro = readonly_mount(mnt);
    line(r, ro ? bad : OK, "", "mount the cgroup controllers read-write", "%s at %s%s", ctrls[i],
         mnt, ro ? " is read-only: no cgroup for sandboxes" : "");
  }
}

char *sbx_doctor(const struct sbx_config *cfg, int *failures)
{
  struct report r = {0};
  check_kernel(&r);
  check_privilege(&r);
  struct statfs st;
  bool none = cfg->cgroup_manager && strcmp(cfg->cgroup_manager, "none") == 0;
  int bad = cfg->cgroup_required && !none ? FAIL : WARN;
  if (none)
    line(&r, WARN, "cgroup", "remove sandbox.cgroup_manager: none",
         "sandbox.cgroup_manager is none: sandboxes run WITHOUT memory, process or CPU limits");
  else if (statfs(SBX_CG_ROOT, &st) < 0)
    line(&r, bad, "cgroup", "mount cgroup2 at " SBX_CG_ROOT, "nothing mounted at " SBX_CG_ROOT);
  else if (st.f_type == CGROUP2_SUPER_MAGIC)
    check_cgroups_v2(&r, cfg, bad);
  else
    check_cgroups_v1(&r, cfg, bad);
  sbx__buf_printf(&r.b, "%s: %d failed, %d warnings\n",
                  r.failed ? "sandboxes cannot start here" : "sandboxes can start here", r.failed,
                  r.warned);
  if (failures)
    *failures = r.failed;
  return sbx__buf_steal(&r.b);
}
