/* Build-time generator of sbx-init's seccomp filter: compiles the deny list below with
 * libseccomp and writes the BPF program as a C array, so that a sandbox start loads a ready
 * program instead of building one (and sbx-init does not link libseccomp at all).
 *
 * The list is modelled on Docker's default profile: syscalls no agent needs and that widen the
 * kernel surface or reach outside the sandbox; socket families are an allowlist. */
#include <errno.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

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
    "vhangup",
    "pidfd_getfd",
};

/* Linux AIO: fs.aio-max-nr is one host-wide budget that any process can take whole
 * (io_setup(65536) made host root's io_setup(1) fail); nothing bounds a sandbox's share.
 * ENOSYS, as a kernel without it: libaio users and glibc's POSIX AIO (threads) fall back. */
static const char *const unimplemented[] = {
    "io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
};

/* Address families that socket() and socketpair() accept; anything else is EAFNOSUPPORT, as
 * from a kernel built without it, so that rare families neither autoload a module nor reach
 * what a network namespace does not isolate (AF_VSOCK: the VM host's port space). AF_PACKET is
 * left out too: packet sockets need CAP_NET_RAW over the network namespace, which the sandbox
 * never holds. */
static const int allowed_families[] = {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK};
/* Netlink protocols a sandbox may open: routing (ip, getaddrinfo, ifaddrs) and socket
 * diagnostics (ss). Others (generic netlink's many families, netfilter, xfrm, audit, uevents)
 * are EPROTONOSUPPORT. */
static const int allowed_netlink[] = {NETLINK_ROUTE, NETLINK_SOCK_DIAG};

static bool in(const int *set, size_t n, int v)
{
  for (size_t i = 0; i < n; i++)
    if (set[i] == v)
      return true;
  return false;
}

/* Refuses arg `arg` of syscall nr for every value in [0, max] not in set, and every value above
 * max (the kernel takes an int: a value with high bits set is refused too, never let through). */
static int allowlist(scmp_filter_ctx ctx, int nr, unsigned arg, const int *set, size_t n, int max,
                     int err, struct scmp_arg_cmp *also)
{
  int r = 0;
  for (int v = 0; r == 0 && v <= max; v++) {
    if (in(set, n, v))
      continue;
    struct scmp_arg_cmp c = {arg, SCMP_CMP_EQ, (scmp_datum_t) v, 0};
    r = also ? seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 2, *also, c)
             : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 1, c);
  }
  struct scmp_arg_cmp c = {arg, SCMP_CMP_GT, (scmp_datum_t) max, 0};
  if (r == 0)
    r = also ? seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 2, *also, c)
             : seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 1, c);
  return r;
}

int main(int argc, char **argv)
{
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT.h\n", argv[0]);
    return 2;
  }
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == NULL)
    return 1;
  int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  for (size_t i = 0; r == 0 && i < sizeof denied / sizeof denied[0]; i++) {
    int nr = seccomp_syscall_resolve_name(denied[i]);
    if (nr == __NR_SCMP_ERROR)
      continue; /* not on this architecture */
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
  }
  for (size_t i = 0; r == 0 && i < ARRAY_LEN(unimplemented); i++)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
                         seccomp_syscall_resolve_name(unimplemented[i]), 0);
  const int fam_max = AF_NETLINK; /* the largest allowed family */
  if (r == 0)
    r = allowlist(ctx, SCMP_SYS(socket), 0, allowed_families, ARRAY_LEN(allowed_families), fam_max,
                  EAFNOSUPPORT, NULL);
  if (r == 0)
    r = allowlist(ctx, SCMP_SYS(socketpair), 0, allowed_families, ARRAY_LEN(allowed_families),
                  fam_max, EAFNOSUPPORT, NULL);
  struct scmp_arg_cmp netlink = {0, SCMP_CMP_EQ, AF_NETLINK, 0};
  if (r == 0)
    r = allowlist(ctx, SCMP_SYS(socket), 2, allowed_netlink, ARRAY_LEN(allowed_netlink),
                  NETLINK_SOCK_DIAG, EPROTONOSUPPORT, &netlink);
  /* clone3 passes its flags in memory where seccomp cannot see them: make libc fall back to
   * clone, whose flags can be checked. New namespaces are refused, one rule per flag (rules on
   * one syscall are OR'ed). */
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  static const unsigned long ns_flags[] = {CLONE_NEWNS,     CLONE_NEWUTS, CLONE_NEWIPC,
                                           CLONE_NEWUSER,   CLONE_NEWPID, CLONE_NEWNET,
                                           CLONE_NEWCGROUP, CLONE_NEWTIME};
  for (size_t i = 0; r == 0 && i < sizeof ns_flags / sizeof ns_flags[0]; i++)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
  char tmpl[] = "/tmp/sbx-seccomp-XXXXXX";
  int fd = mkstemp(tmpl);
  if (r == 0 && fd >= 0)
    r = seccomp_export_bpf(ctx, fd);
  seccomp_release(ctx);
  if (r < 0 || fd < 0) {
    fprintf(stderr, "gen-seccomp: %s\n", strerror(r < 0 ? -r : errno));
    return 1;
  }
  off_t len = lseek(fd, 0, SEEK_END);
  lseek(fd, 0, SEEK_SET);
  unsigned char *bpf = malloc((size_t) len);
  if (bpf == NULL || read(fd, bpf, (size_t) len) != len)
    return 1;
  close(fd);
  unlink(tmpl);
  FILE *out = fopen(argv[1], "w");
  if (out == NULL)
    return 1;
  fprintf(out, "/* generated by gen-seccomp.c: do not edit */\n"
               "static const struct sock_filter sbx_seccomp_filter[] = {\n");
  size_t n = (size_t) len / sizeof(struct sock_filter);
  for (size_t i = 0; i < n; i++) {
    struct sock_filter f; /* copied out: clang's -Wcast-align refuses a cast of the bytes */
    memcpy(&f, bpf + i * sizeof f, sizeof f);
    fprintf(out, "    {0x%04x, %u, %u, 0x%08x},\n", f.code, f.jt, f.jf, f.k);
  }
  fprintf(out, "};\n");
  free(bpf);
  return fclose(out) == 0 ? 0 : 1;
}
