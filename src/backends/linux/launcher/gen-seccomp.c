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
#include <sys/stat.h>
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

/* The setid guard, a second filter stacked on commands only (sbx-init's own openat2 stays)
 * when a writable folder is idmapped to a host user (ids.c): the sandbox's root is that
 * user's owner there, so a setuid or setgid file it made would be the user's on the host,
 * where the mount's nosuid does not apply. A mode with S_ISUID or S_ISGID is EPERM for the
 * calls that take the mode in a register; openat2 and fchmodat2 carry it where seccomp
 * cannot look: ENOSYS, as on a kernel without them (libc falls back). */
static int guard_rules(scmp_filter_ctx ctx)
{
  static const struct {
    const char *name;
    unsigned arg;
  } modes[] = {{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"creat", 1},
               {"open", 2},  {"openat", 3}, {"mknod", 1},    {"mknodat", 2}};
  int r = 0;
  for (size_t i = 0; r == 0 && i < ARRAY_LEN(modes); i++) {
    int nr = seccomp_syscall_resolve_name(modes[i].name);
    if (nr == __NR_SCMP_ERROR)
      continue;
    for (int bit = 0; r == 0 && bit < 2; bit++) {
      scmp_datum_t m = bit ? S_ISGID : S_ISUID;
      struct scmp_arg_cmp c = {modes[i].arg, SCMP_CMP_MASKED_EQ, m, m};
      r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, c);
    }
  }
  /* fchmodat2 is 452 on every architecture; libseccomp before 2.5.5 has no name for it */
  int fchmodat2 = seccomp_syscall_resolve_name("fchmodat2");
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
                         fchmodat2 == __NR_SCMP_ERROR ? 452 : fchmodat2, 0);
  if (r == 0)
    r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(openat2), 0);
  return r;
}

/* The id guard, with the setid guard, when a writable folder maps host root's files (ids.c's
 * foreign owner's slot): there the id SBX_FOREIGN_ID inside is host root on disk, so no command
 * may take it as a uid or gid (a file it made would be host root's) nor give it to a file.
 * Every set*id call with any argument 65534, and every chown with uid or gid 65534, is EPERM;
 * -1 (no change) stays allowed. The kernel takes these arguments as 32-bit ids: only the low
 * 32 bits of each register are compared, so high bits do not slip a 65534 past. (setgroups
 * takes its list in memory, out of seccomp's sight: a supplementary group makes no file.) */
static int id_guard_rules(scmp_filter_ctx ctx)
{
  static const struct {
    const char *name;
    unsigned nargs, first;
  } ids[] = {
      {"setuid", 1, 0},     {"setgid", 1, 0},     {"setfsuid", 1, 0},    {"setfsgid", 1, 0},
      {"setreuid", 2, 0},   {"setregid", 2, 0},   {"setresuid", 3, 0},   {"setresgid", 3, 0},
      {"chown", 2, 1},      {"lchown", 2, 1},     {"fchown", 2, 1},      {"fchownat", 2, 2},
      {"setuid32", 1, 0},   {"setgid32", 1, 0},   {"setfsuid32", 1, 0},  {"setfsgid32", 1, 0},
      {"setreuid32", 2, 0}, {"setregid32", 2, 0}, {"setresuid32", 3, 0}, {"setresgid32", 3, 0},
      {"chown32", 2, 1},    {"lchown32", 2, 1},   {"fchown32", 2, 1}};
  int r = 0;
  for (size_t i = 0; r == 0 && i < ARRAY_LEN(ids); i++) {
    int nr = seccomp_syscall_resolve_name(ids[i].name);
    if (nr == __NR_SCMP_ERROR)
      continue; /* not on this architecture */
    for (unsigned a = 0; r == 0 && a < ids[i].nargs; a++) {
      struct scmp_arg_cmp c = {ids[i].first + a, SCMP_CMP_MASKED_EQ, 0xffffffffu, 65534};
      r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, c);
    }
  }
  return r;
}

/* Writes ctx's BPF program to out as the C array name. */
static int emit(scmp_filter_ctx ctx, const char *name, FILE *out)
{
  char tmpl[] = "/tmp/sbx-seccomp-XXXXXX";
  int fd = mkstemp(tmpl);
  if (fd < 0)
    return -errno;
  unlink(tmpl);
  int r = seccomp_export_bpf(ctx, fd);
  off_t len = r == 0 ? lseek(fd, 0, SEEK_END) : 0;
  unsigned char *bpf = r == 0 ? malloc((size_t) len) : NULL;
  lseek(fd, 0, SEEK_SET);
  if (r == 0 && (bpf == NULL || read(fd, bpf, (size_t) len) != len))
    r = -EIO;
  close(fd);
  if (r < 0) {
    free(bpf);
    return r;
  }
  fprintf(out, "static const struct sock_filter %s[] = {\n", name);
  size_t n = (size_t) len / sizeof(struct sock_filter);
  for (size_t i = 0; i < n; i++) {
    struct sock_filter f; /* copied out: clang's -Wcast-align refuses a cast of the bytes */
    memcpy(&f, bpf + i * sizeof f, sizeof f);
    fprintf(out, "    {0x%04x, %u, %u, 0x%08x},\n", f.code, f.jt, f.jf, f.k);
  }
  fprintf(out, "};\n");
  free(bpf);
  return 0;
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
  FILE *out = r == 0 ? fopen(argv[1], "w") : NULL;
  if (out)
    fprintf(out, "/* generated by gen-seccomp.c: do not edit */\n");
  if (out && r == 0)
    r = emit(ctx, "sbx_seccomp_filter", out);
  seccomp_release(ctx);
  ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == NULL)
    r = -ENOMEM;
  if (r == 0)
    r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (r == 0)
    r = guard_rules(ctx);
  if (out && r == 0)
    r = emit(ctx, "sbx_seccomp_setid_guard", out);
  if (ctx)
    seccomp_release(ctx);
  ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == NULL)
    r = -ENOMEM;
  if (r == 0)
    r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (r == 0)
    r = guard_rules(ctx);
  if (r == 0)
    r = id_guard_rules(ctx);
  if (out && r == 0)
    r = emit(ctx, "sbx_seccomp_foreign_guard", out);
  if (ctx)
    seccomp_release(ctx);
  if (out == NULL || fclose(out) != 0 || r < 0) {
    fprintf(stderr, "gen-seccomp: %s\n", strerror(r < 0 ? -r : errno));
    return 1;
  }
  return 0;
}
