/* Confinement applied by sbx-init to itself once the sandbox is built, inherited by every
 * command: Docker's default capability set (all namespaced to the sandbox's user namespace),
 * no_new_privs, non-dumpable (so no process in the sandbox can ptrace PID 1), and a seccomp
 * deny list modelled on Docker's default profile. */
#include "linux.h"

#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <string.h>
#include <sys/prctl.h>
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
      return sbx_make_error(err, errno, SBX_E_INTERNAL, "drop capability %d", cap);
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
    return sbx_make_error(err, errno, SBX_E_INTERNAL, "capset");
  return 0;
}

/* Syscalls no agent needs and that widen the kernel surface or reach outside the sandbox. */
static const char *const denied[] = {
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "get_kernel_syms",
    "init_module",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "name_to_handle_at",
    "open_by_handle_at",
    "nfsservctl",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "query_module",
    "quotactl",
    "quotactl_fd",
    "reboot",
    "request_key",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "sysfs",
    "_sysctl",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "syslog",
    "fanotify_init",
    "lookup_dcookie",
    "vhangup",
    "pidfd_getfd",
};

static int install_seccomp(sbx_error_t *err)
{
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == NULL)
    return sbx_make_error(err, ENOMEM, SBX_E_INTERNAL, "seccomp_init");
  int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  for (size_t i = 0; r == 0 && i < ARRAY_SIZE(denied); i++) {
    int nr = seccomp_syscall_resolve_name(denied[i]);
    if (nr == __NR_SCMP_ERROR)
      continue; /* not on this architecture */
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
  }
  /* clone3 passes its flags in memory where seccomp cannot see them: make libc fall back to
   * clone, whose flags can be checked. New namespaces are refused. */
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  /* one rule per flag: rules on one syscall are OR'ed, so any namespace bit is refused */
  static const uint64_t ns_flags[] = {CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
                                      CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME};
  for (size_t i = 0; r == 0 && i < ARRAY_SIZE(ns_flags); i++)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
  if (r == 0)
    r = seccomp_load(ctx);
  seccomp_release(ctx);
  if (r < 0)
    return sbx_make_error(err, -r, SBX_E_INTERNAL, "install the seccomp filter");
  return 0;
}

int sbx_confine(sbx_error_t *err)
{
  if (drop_caps(err) < 0)
    return -1;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return sbx_make_error(err, errno, SBX_E_INTERNAL, "set no_new_privs");
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    return sbx_make_error(err, errno, SBX_E_INTERNAL, "set non-dumpable");
  return install_seccomp(err);
}
