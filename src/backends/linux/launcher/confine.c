/* Confinement applied by sbx-init to itself once the sandbox is built, inherited by every
 * command: Docker's default capability set (all namespaced to the sandbox's user namespace),
 * no_new_privs, non-dumpable (so no process in the sandbox can ptrace PID 1), and a seccomp
 * deny list modelled on Docker's default profile. */
#include "linux.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static const int keep_caps[] = {
    CAP_CHOWN,      CAP_DAC_OVERRIDE, CAP_FOWNER,      CAP_FSETID,           CAP_KILL,
    CAP_SETGID,     CAP_SETUID,       CAP_SETPCAP,     CAP_NET_BIND_SERVICE, CAP_NET_RAW,
    CAP_SYS_CHROOT, CAP_MKNOD,        CAP_AUDIT_WRITE, CAP_SETFCAP,
};

static int drop_caps(sbx_error_t *err)
{
  uint64_t keep = 0;
  for (size_t i = 0; i < ARRAY_SIZE(keep_caps); i++)
    keep |= 1ull << keep_caps[i];
  for (int cap = 0; cap <= 63; cap++) {
    if (keep & (1ull << cap))
      continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "drop capability %d", cap);
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  for (int i = 0; i < 2; i++) {
    data[i].effective = (uint32_t) (keep >> (32 * i));
    data[i].permitted = data[i].effective;
    data[i].inheritable = 0;
  }
  if (syscall(SYS_capset, &hdr, data) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "capset");
  return 0;
}

/* The filter is compiled at build time from gen-seccomp.c's deny list. */
#include "seccomp_bpf.h"

static int install_seccomp(sbx_error_t *err)
{
  struct sock_fprog prog = {.len = (unsigned short) ARRAY_SIZE(sbx_seccomp_filter),
                            .filter = (struct sock_filter *) sbx_seccomp_filter};
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "install the seccomp filter");
  return 0;
}

rlim_t sbx__nofile_max(void)
{
  char buf[32] = {0};
  cleanup_close int fd = open("/proc/sys/fs/file-max", O_RDONLY | O_CLOEXEC);
  unsigned long long file_max = 0;
  if (fd < 0 || read(fd, buf, sizeof buf - 1) <= 0 || sscanf(buf, "%llu", &file_max) != 1)
    return SBX_NOFILE_MAX;
  unsigned long long share = file_max / SBX_NOFILE_SHARE;
  return share < SBX_NOFILE_MIN ? SBX_NOFILE_MIN : share > SBX_NOFILE_MAX ? SBX_NOFILE_MAX : share;
}

int sbx__confine_rlimits(sbx_error_t *err)
{
  const rlim_t nofile = sbx__nofile_max();
  const struct {
    int resource;
    const char *name;
    struct rlimit rl;
  } limits[] = {
      {RLIMIT_NOFILE, "RLIMIT_NOFILE", {nofile, nofile}},
      {RLIMIT_CORE, "RLIMIT_CORE", {0, 0}},
      {RLIMIT_STACK, "RLIMIT_STACK", {8u << 20, RLIM_INFINITY}},
      {RLIMIT_MEMLOCK, "RLIMIT_MEMLOCK", {8u << 20, 8u << 20}},
      /* the cgroups bound memory, CPU and processes: a service manager's limits on the
       * front-end (LimitAS=, LimitNPROC=...) must not shrink the sandbox */
      {RLIMIT_AS, "RLIMIT_AS", {RLIM_INFINITY, RLIM_INFINITY}},
      {RLIMIT_DATA, "RLIMIT_DATA", {RLIM_INFINITY, RLIM_INFINITY}},
      {RLIMIT_FSIZE, "RLIMIT_FSIZE", {RLIM_INFINITY, RLIM_INFINITY}},
      {RLIMIT_CPU, "RLIMIT_CPU", {RLIM_INFINITY, RLIM_INFINITY}},
      {RLIMIT_NPROC, "RLIMIT_NPROC", {RLIM_INFINITY, RLIM_INFINITY}},
      {RLIMIT_LOCKS, "RLIMIT_LOCKS", {RLIM_INFINITY, RLIM_INFINITY}},
      {RLIMIT_RTTIME, "RLIMIT_RTTIME", {RLIM_INFINITY, RLIM_INFINITY}},
      /* per-user kernel resources, charged to the namespace's own owner uid */
      {RLIMIT_SIGPENDING, "RLIMIT_SIGPENDING", {SBX_SIGPENDING, SBX_SIGPENDING}},
      {RLIMIT_MSGQUEUE, "RLIMIT_MSGQUEUE", {819200, 819200}},
      {RLIMIT_NICE, "RLIMIT_NICE", {0, 0}},
      {RLIMIT_RTPRIO, "RLIMIT_RTPRIO", {0, 0}},
  };
  for (size_t i = 0; i < ARRAY_SIZE(limits); i++) {
    struct rlimit rl = limits[i].rl;
    if (setrlimit(limits[i].resource, &rl) == 0)
      continue;
    /* A host whose fs.nr_open is lower, or a launcher without CAP_SYS_RESOURCE (nested in a
     * container): keep the hard limit we have, never above the wanted one. */
    struct rlimit cur;
    if (errno != EPERM || getrlimit(limits[i].resource, &cur) < 0)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "set %s", limits[i].name);
    if (rl.rlim_max > cur.rlim_max)
      rl.rlim_max = cur.rlim_max;
    if (rl.rlim_cur > rl.rlim_max)
      rl.rlim_cur = rl.rlim_max;
    if (setrlimit(limits[i].resource, &rl) < 0)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "set %s", limits[i].name);
  }
  return 0;
}

/* Each command's, when a writable folder is idmapped to a host user's ids (rootfs.c): no
 * setuid/setgid modes (gen-seccomp.c's second program) and no CAP_SETFCAP, so no file
 * capabilities either (one written by the sandbox's root into a root-owned volume would be
 * host root's). In the command's child, before exec: system calls only. */
int sbx__confine_setid_guard(void)
{
  if (prctl(PR_CAPBSET_DROP, CAP_SETFCAP, 0, 0, 0) < 0)
    return -1;
  struct sock_fprog prog = {.len = (unsigned short) ARRAY_SIZE(sbx_seccomp_setid_guard),
                            .filter = (struct sock_filter *) sbx_seccomp_setid_guard};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? -1 : 0;
}

/* When host root's files are mapped, as SBX_FOREIGN_ID, in a writable folder (ids.c): the
 * setid guard and the id guard (gen-seccomp.c's third program: the setid guard's rules plus no
 * set*id or chown to SBX_FOREIGN_ID), so no command acts as host root there. */
int sbx__confine_foreign_guard(void)
{
  if (prctl(PR_CAPBSET_DROP, CAP_SETFCAP, 0, 0, 0) < 0)
    return -1;
  struct sock_fprog prog = {.len = (unsigned short) ARRAY_SIZE(sbx_seccomp_foreign_guard),
                            .filter = (struct sock_filter *) sbx_seccomp_foreign_guard};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0 ? -1 : 0;
}

int sbx__confine(sbx_error_t *err)
{
  if (drop_caps(err) < 0)
    return -1;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "set no_new_privs");
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "set non-dumpable");
  return install_seccomp(err);
}
