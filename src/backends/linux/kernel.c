/* What the running kernel offers, probed once per process (the launcher, before it builds a
 * sandbox; sbx doctor). Each system call is called with arguments it must reject (a bad
 * descriptor, bad flags): any error but ENOSYS means the call exists. That also sees what a
 * seccomp filter of the caller's takes away, which a version number would not. docs/hosts.md
 * has the table this encodes. */
#include "linux.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

const struct sbx_kfeature sbx__kfeatures[SBX_KF_MAX] = {
    [SBX_KF_OPEN_TREE] = {"open_tree", "5.2", true,
                          "binds /mnt/user-data and the configured mounts as detached trees"},
    [SBX_KF_MOVE_MOUNT] = {"move_mount", "5.2", true, "attaches those trees in the sandbox"},
    [SBX_KF_PIDFD_OPEN] = {"pidfd_open", "5.3", false,
                           "spares are adopted through their init's pidfd (setns, 5.8)"},
    [SBX_KF_OPENAT2] = {"openat2", "5.6", true,
                        "resolves every path in a sandbox without leaving its root"},
    [SBX_KF_CLOSE_RANGE] = {"close_range", "5.9", true,
                            "commands would otherwise inherit sbx-init's descriptors"},
    [SBX_KF_MOUNT_SETATTR] = {"mount_setattr", "5.12", false,
                              "read_only mounts and spares (a spare's / is made writable)"},
};

static bool present(long r)
{
  return r == 0 || errno != ENOSYS;
}

static bool have[SBX_KF_MAX];

static void probe(void)
{
  int saved = errno;
  have[SBX_KF_OPEN_TREE] = present(syscall(SYS_open_tree, -1, "", 0));
  have[SBX_KF_MOVE_MOUNT] = present(syscall(SYS_move_mount, -1, "", -1, "", 0));
  have[SBX_KF_PIDFD_OPEN] = present(syscall(SYS_pidfd_open, 0, ~0u));
  have[SBX_KF_OPENAT2] = present(syscall(SYS_openat2, -1, "", NULL, 0));
  /* first > last: EINVAL wherever the call exists */
  have[SBX_KF_CLOSE_RANGE] = present(syscall(SYS_close_range, ~0u, 0u, 0u));
  have[SBX_KF_MOUNT_SETATTR] = present(syscall(SYS_mount_setattr, -1, "", 0, NULL, 0));
  errno = saved;
}

bool sbx__kernel_has(int feature)
{
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, probe);
  return feature >= 0 && feature < SBX_KF_MAX && have[feature];
}

char *sbx__kernel_release(void)
{
  struct utsname u;
  return xstrdup(uname(&u) == 0 ? u.release : "unknown");
}

bool sbx__kernel_at_least(int major, int minor)
{
  struct utsname u;
  int ma = 0, mi = 0;
  if (uname(&u) < 0 || sscanf(u.release, "%d.%d", &ma, &mi) != 2)
    return false;
  return ma > major || (ma == major && mi >= minor);
}

int sbx__kernel_check(sbx_error_t *err)
{
  for (int i = 0; i < SBX_KF_MAX; i++) {
    if (!sbx__kfeatures[i].required || sbx__kernel_has(i))
      continue;
    cleanup_free char *rel = sbx__kernel_release();
    return sbx__make_error(err, ENOSYS, SBX_E_UNSUPPORTED,
                           "this kernel (%s) lacks %s (Linux %s), which sbx needs (it %s); sbx "
                           "needs Linux " SBX_KERNEL_FLOOR " or newer: run `sbx doctor`",
                           rel, sbx__kfeatures[i].name, sbx__kfeatures[i].since,
                           sbx__kfeatures[i].why);
  }
  return 0;
}

int sbx__kernel_require(int feature, const char *what, sbx_error_t *err)
{
  if (sbx__kernel_has(feature))
    return 0;
  cleanup_free char *rel = sbx__kernel_release();
  return sbx__make_error(err, ENOSYS, SBX_E_UNSUPPORTED,
                         "%s needs %s (Linux %s), which this kernel (%s) lacks: run `sbx doctor`",
                         what, sbx__kfeatures[feature].name, sbx__kfeatures[feature].since, rel);
}

/* overlayfs takes idmapped lower layers since Linux 5.19 (ovl: "support idmapped layers"); an
 * older one refuses the mount with EINVAL, which names no cause. SBX_TEST_NO_OVL_IDMAP makes
 * this kernel look like one of those (the tests' way to reach the refusal on a new kernel). */
bool sbx__kernel_ovl_idmap(void)
{
  const char *forced = getenv("SBX_TEST_NO_OVL_IDMAP");
  if (forced && *forced && strcmp(forced, "0") != 0)
    return false;
  return sbx__kernel_has(SBX_KF_MOUNT_SETATTR) && sbx__kernel_at_least(5, 19);
}

int sbx__kernel_require_ovl(const char *image, bool rootless, sbx_error_t *err)
{
  if (rootless) {
    /* an ordinary user's overlay: mounted in the sandbox's user namespace (5.11), its lower
     * layers plain bind mounts of the user's store */
    if (sbx__kernel_at_least(5, 11))
      return 0;
    cleanup_free char *rel = sbx__kernel_release();
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                           "image `%s` needs overlayfs in a user namespace (Linux 5.11 or newer) "
                           "as an ordinary user, which this kernel (%s) lacks: use image `host`, "
                           "run sbx as root, or boot a newer kernel (run `sbx doctor`)",
                           image, rel);
  }
  if (sbx__kernel_ovl_idmap())
    return 0;
  cleanup_free char *rel = sbx__kernel_release();
  return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                         "image `%s` needs overlayfs with idmapped lower layers (Linux 5.19 or "
                         "newer), which this kernel (%s) lacks: use image `host`, or boot a newer "
                         "kernel (run `sbx doctor`)",
                         image, rel);
}
