/* sbx_doctor: what works on this host for this user, and the fix for what does not. Every check
 * looks at the real thing (a system call, a file the kernel exposes, the cgroup sandboxes would
 * go below) the way a create would, without creating anything. */
#include "linux.h"
#include "../../../lib/image/image.h"
#include <sbx/sbx.h>

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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
      tree < 0 ? -1 : sbx__ids_idmap_userns(SBX_RANGE_FIRST, st.st_uid, st.st_gid, true, &h, NULL);
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

static int write_proc_self(const char *file, const char *text)
{
  cleanup_close int fd = open(file, O_WRONLY | O_CLOEXEC);
  return fd >= 0 && write(fd, text, strlen(text)) == (ssize_t) strlen(text) ? 0 : -1;
}

/* The real thing, in a child: a user namespace of our own, its map, then the namespaces and a
 * mount in it, as the launcher makes them. Returns the step that failed ("" = none). */
static const char *probe_userns(int *saved)
{
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) < 0)
    return *saved = errno, "pipe";
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    char step = 0;
    char map[64];
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER) < 0)
      step = 'u';
    else if (snprintf(map, sizeof map, "0 %u 1\n", (unsigned) uid) < 0 ||
             write_proc_self("/proc/self/uid_map", map) < 0)
      step = 'm';
    else if (snprintf(map, sizeof map, "0 %u 1\n", (unsigned) gid) < 0 ||
             write_proc_self("/proc/self/setgroups", "deny") < 0 ||
             write_proc_self("/proc/self/gid_map", map) < 0)
      step = 'g';
    else if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
      step = 'n';
    else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
             mount("sbx-doctor", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64k") < 0)
      step = 't';
    int e = errno;
    if (step)
      (void) !write(pipefd[1], &e, sizeof e);
    _exit(step);
  }
  close(pipefd[1]);
  int status = 0;
  if (pid > 0 && read(pipefd[0], saved, sizeof *saved) != (ssize_t) sizeof *saved)
    *saved = 0;
  close(pipefd[0]);
  if (pid < 0)
    return *saved = errno, "fork";
  TEMP_FAILURE_RETRY(waitpid(pid, &status, 0));
  switch (WIFEXITED(status) ? WEXITSTATUS(status) : 1) {
  case 0:
    return "";
  case 'u':
    return "unshare(CLONE_NEWUSER)";
  case 'm':
    return "write uid_map";
  case 'g':
    return "write gid_map";
  case 'n':
    return "unshare the mount, pid, net, ipc and uts namespaces";
  case 't':
    return "mount a tmpfs";
  default:
    return "the probe died";
  }
}

static bool tool_on_path(const char *name)
{
  const char *path = getenv("PATH");
  cleanup_free char *dirs = xstrdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  char *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    cleanup_free char *p = xasprintf("%s/%s", d, name);
    if (access(p, X_OK) == 0)
      return true;
  }
  return false;
}

static bool subids_of(const char *file, const char *name, uid_t id, uint32_t *first,
                      uint32_t *count)
{
  cleanup_free char *text = NULL;
  return sbx__read_file_at(AT_FDCWD, file, 1 << 20, &text, NULL) == 0 &&
         sbx__subids_find(text, name, (uint32_t) id, SBX_UID_COUNT - 1, first, count);
}

/* An ordinary user: what rootless mode needs, one line each with its fix. */
static void check_rootless(struct report *r, const char *home)
{
  uid_t uid = geteuid();
  struct passwd pwd, *pw = NULL;
  char pwbuf[4096];
  const char *name =
      getpwuid_r(uid, &pwd, pwbuf, sizeof pwbuf, &pw) == 0 && pw ? pw->pw_name : NULL;
  line(r, OK, "user", NULL,
       "uid %u (%s): rootless mode, root inside a sandbox is you; refused as needing root: "
       "user_data_size_mib, disk_mib, spares, per-sandbox host ids without /etc/subuid",
       (unsigned) uid, name ? name : "no passwd entry");
  cleanup_free char *max = read_trim("/proc/sys/user/max_user_namespaces");
  long n = max ? strtol(max, NULL, 10) : -1;
  line(r, n > 0 ? OK : FAIL, "user ns", "sysctl -w user.max_user_namespaces=15000 (as root)",
       "user.max_user_namespaces = %s", max ? max : "unknown (no /proc/sys/user)");
  cleanup_free char *unpriv = read_trim("/proc/sys/kernel/unprivileged_userns_clone");
  if (unpriv)
    line(r, strcmp(unpriv, "0") == 0 ? FAIL : OK, "",
         "sysctl -w kernel.unprivileged_userns_clone=1 (as root)",
         "kernel.unprivileged_userns_clone = %s%s", unpriv,
         strcmp(unpriv, "0") == 0 ? ": ordinary users may not create user namespaces" : "");
  cleanup_free char *apparmor = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
  if (apparmor)
    line(r, strcmp(apparmor, "1") == 0 ? FAIL : OK, "apparmor",
         "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (as root), or an AppArmor "
         "profile with `userns,` for sbx-init (docs/hosts.md)",
         "kernel.apparmor_restrict_unprivileged_userns = %s%s", apparmor,
         strcmp(apparmor, "1") == 0
             ? ": AppArmor denies unconfined programs capabilities in a user namespace"
             : "");
  int saved = 0;
  const char *step = probe_userns(&saved);
  line(r, *step ? FAIL : OK, "", "see the lines above; docs/hosts.md, Rootless", "%s%s%s%s",
       *step ? "a user namespace with its own mounts FAILED: " : "",
       *step ? step : "a user namespace with mount, pid, net, ipc and uts namespaces works",
       *step && saved ? ": " : "", *step && saved ? strerror(saved) : "");
  bool tools = tool_on_path("newuidmap") && tool_on_path("newgidmap");
  uint32_t uf = 0, uc = 0, gf = 0, gc = 0;
  bool subuid = subids_of("/etc/subuid", name, uid, &uf, &uc);
  bool subgid = subids_of("/etc/subgid", name, getegid(), &gf, &gc);
  if (tools && subuid && subgid) {
    uint32_t slots = (uc < gc ? uc : gc) / (SBX_UID_COUNT - 1);
    /* the first slot is the image store's when there are more (ids.c) */
    uint32_t own = slots > 1 ? slots - 1 : slots;
    line(r, OK, "subids", NULL,
         "newuidmap and /etc/subuid %u:%u: ids 1-65535 inside map to a range of their own for "
         "%u sandbox%s at once (more share the last range; image sandboxes all share the "
         "first, %u..)",
         uf, uc, own, own == 1 ? "" : "es", uf);
  } else {
    line(r, WARN, "subids",
         !tools ? "apt-get install uidmap (newuidmap, newgidmap)"
                : "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 USER (as "
                  "root; a range no other user has)",
         "%s: only you are mapped (root inside); files of other ids show as nobody and chown to "
         "them fails (apt, useradd inside)",
         !tools ? "no newuidmap/newgidmap" : "no /etc/subuid and /etc/subgid entry of 65535+ ids");
  }
  /* sandbox.network egress: pasta opens the tap device as the user (docs/network.md, Rootless) */
  struct stat tun;
  bool pasta = tool_on_path("pasta"), has_tun = stat("/dev/net/tun", &tun) == 0;
  bool tun_ok = has_tun && access("/dev/net/tun", R_OK | W_OK) == 0;
  if (pasta && tun_ok)
    line(r, OK, "egress", NULL, "sandbox.network egress works (pasta, /dev/net/tun)");
  else
    line(r, WARN, "egress",
         !pasta ? "apt-get install passt (as root)"
                : "chmod 0666 /dev/net/tun (as root; Debian's udev rule makes it so), or run sbx "
                  "as root",
         "%s: sandbox.network egress fails",
         !pasta     ? "no pasta on PATH (Debian's passt)"
         : !has_tun ? "no /dev/net/tun"
                    : "/dev/net/tun is not readable and writable by you");
  const char *h = home && *home ? home : getenv("SBX_HOME");
  if (h == NULL || *h == '\0')
    h = sbx__default_home();
  struct statvfs v;
  /* not made yet (sbx makes it at first use): the file system it would be made on */
  cleanup_free char *at = xstrdup(h);
  int rc;
  while ((rc = statvfs(at, &v)) < 0 && errno == ENOENT && strrchr(at, '/') > at)
    *strrchr(at, '/') = '\0';
  if (rc == 0) {
    bool noexec = v.f_flag & ST_NOEXEC;
    line(r, noexec ? WARN : OK, "state",
         "--home (or $SBX_HOME) on a file system mounted without noexec", "%s%s%s%s", h,
         strcmp(at, h) != 0 ? " (not made yet)" : "",
         noexec ? " is on a noexec mount: programs in /mnt/user-data cannot run" : "",
         v.f_flag & ST_NOSUID ? " (nosuid: fine, sandbox mounts are nosuid anyway)" : "");
  } else {
    line(r, WARN, "state", "create it, or pass --home", "%s: %s", h, strerror(errno));
  }
}

static void check_privilege(struct report *r, const char *home)
{
  uid_t uid = geteuid();
  if (uid != 0) {
    check_rootless(r, home);
  } else {
    line(r, OK, "user", NULL, "uid 0");
    cleanup_free char *max = read_trim("/proc/sys/user/max_user_namespaces");
    long n = max ? strtol(max, NULL, 10) : -1;
    line(r, n > 0 ? OK : FAIL, "user ns", "sysctl -w user.max_user_namespaces=65536",
         "user.max_user_namespaces = %s", max ? max : "unknown (no /proc/sys/user)");
  }
  /* the launcher raises RLIMIT_NOFILE and needs these to build sandboxes */
  int seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  cleanup_free char *actions = read_trim("/proc/sys/kernel/seccomp/actions_avail");
  line(r, seccomp >= 0 && actions ? OK : FAIL, "seccomp",
       "a kernel built with CONFIG_SECCOMP_FILTER", "%s%s",
       actions ? "filters available: " : "no seccomp filters", actions ? actions : "");
  if (seccomp > 0)
    line(r, INFO, "", NULL, "this process already runs under a seccomp filter (mode %d)", seccomp);
  check_idmap(r);
  if (geteuid() != 0) {
    /* rootless images: overlayfs in the sandbox's user namespace, no idmapped layers */
    bool userns_ovl = sbx__kernel_at_least(5, 11);
    line(r, userns_ovl ? OK : WARN, "overlayfs", "Linux 5.11 or newer (or use image `host`)",
         "overlayfs in a user namespace %s",
         userns_ovl ? "available (Linux 5.11): sandboxes from OCI images work, from a store of "
                      "your own (its layers extracted with the subids line's first range, which "
                      "every image sandbox of yours shares; without subids other owners become "
                      "root's)"
                    : "unavailable (Linux 5.11): a sandbox from an OCI image is refused; `host` "
                      "works");
    return;
  }
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
    cleanup_free char *sockpath = sbx__systemd_socket();
    bool sock = access(sockpath, W_OK) == 0;
    line(r, sock ? OK : bad, "cgroup", "run systemd, or set sandbox.cgroup_manager: cgroupfs",
         "unified (v2); we are in `%s`, not delegated to us: cgroup_manager %s is systemd%s, "
         "sandboxes are transient scopes in %s (outside our unit: they outlive it)%s%s",
         own, conf, geteuid() ? " (the user's manager, user@.service)" : "", slice,
         sock ? "" : "; not reachable: ", sock ? "" : sockpath);
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
    bool user = !ro && geteuid() != 0 && access(mnt, W_OK) < 0;
    line(r, ro || user ? bad : OK, "",
         user ? "boot with cgroup v2 under systemd (user@.service delegates), or run as root"
              : "mount the cgroup controllers read-write",
         "%s at %s%s", ctrls[i], mnt,
         ro     ? " is read-only: no cgroup for sandboxes"
         : user ? " is not writable by this user: sandboxes run WITHOUT this limit"
                : "");
  }
}

char *sbx_doctor(const struct sbx_config *cfg, int *failures)
{
  return sbx_doctor_home(cfg, NULL, failures);
}

/* The image store's privacy (docs/security.md, "Image store"): its layers keep owners and
 * modes, setuid-root files included, so no other user may reach them. */
static void check_store(struct report *r, const char *home)
{
  const char *h = home && *home ? home : getenv("SBX_HOME");
  if (h == NULL || *h == '\0')
    h = sbx__default_home();
  cleanup_free char *what = NULL;
  int v = sbx__image_store_report(h, &what);
  line(r, v == 0 ? OK : WARN, "image store",
       v == 2 ? "chmod go-w the home (or choose another --home)" : "chmod 0700 the store folder",
       "%s", what);
}

char *sbx_doctor_home(const struct sbx_config *cfg, const char *home, int *failures)
{
  struct report r = {0};
  check_kernel(&r);
  check_privilege(&r, home);
  check_store(&r, home);
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
