/* sbx_doctor: what works on this host for this user, and the fix for what does not. Every check
 * looks at the real thing (a system call, a file the kernel exposes, the cgroup sandboxes would
 * go below) the way a create would, without creating anything. */
#include "linux.h"
#include <sbx/sbx.h>

#include <fcntl.h>
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
  bool idmap = sbx__kernel_has(SBX_KF_MOUNT_SETATTR);
  line(r, idmap ? OK : WARN, "idmapped", "Linux 5.12 or newer",
       "idmapped mounts %s (the thread folder and volumes keep owner 100000 on disk)",
       idmap ? "available" : "unavailable (Linux 5.12): sandboxes share one id range");
  bool ovl = sbx__kernel_ovl_idmap();
  line(r, ovl ? OK : WARN, "overlayfs", "Linux 5.19 or newer (or use image `host`)",
       "overlayfs with idmapped lower layers %s",
       ovl ? "available (Linux 5.19): sandboxes from OCI images work"
           : "unavailable (Linux 5.19): a sandbox from an OCI image is refused; `host` works");
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
