/* sbx-probe: escape and exhaustion attempts that the shell cannot make, run inside a sandbox by
 * tests/security. Built statically at test time (gcc -static), uploaded with `sbx upload` and
 * run from /mnt/user-data/workspace.
 *
 * Every attempt prints one line "NAME RESULT" where RESULT is "ok" when the call succeeded or
 * the errno name when it failed; the tests decide what must fail. The probe judges nothing
 * itself, except where a success needs a second look (chroot: "same_root 1" means the escape
 * ended in the sandbox's own root).
 *
 *   probe syscalls            mount, namespaces, keyring, bpf, perf, userfaultfd, io_uring...
 *   probe devices             mknod, /dev/mem, raw disks, /proc/sys and /sys writes
 *   probe chroot              the classic chroot escape (chroot, chdir .. x64, chroot .)
 *   probe proc1               /proc/1 magic links and files of sbx-init (PID 1)
 *   probe fds                 the descriptors a command starts with
 *   probe fdpass              a root fd passed over a unix socket, then .. walked from it
 *   probe connect_tcp H P     TCP connect (IPv4 or IPv6 literal)
 *   probe connect_udp H P     UDP send + wait for an echo
 *   probe connect_unix PATH   unix socket connect; PATH starting with '@' is abstract
 *   probe netdev              network interfaces, raw and packet sockets
 *   probe forkbomb SECONDS    fork until refused, hold SECONDS, report the count
 *   probe memhog MIB          allocate and touch MIB mebibytes
 *   probe nofile              open descriptors until refused
 *   probe inodes DIR N        create up to N empty files in DIR
 *   probe deepdir DIR N       mkdir+chdir N levels below DIR (past PATH_MAX)
 *   probe names DIR           NAME_MAX and PATH_MAX edges
 *   probe swap DIR SECONDS    swap DIR/d (a directory) and DIR/l (a symlink to /) atomically
 *                             in a loop (renameat2 RENAME_EXCHANGE)
 *   probe swapfile DIR SECONDS  same with DIR/f.txt (a file) and DIR/fl (a symlink to /etc/passwd)
 *   probe hardlink            hard links to files outside /mnt/user-data
 *   probe spin SECONDS        burn CPU
 *   probe nosys NR CMD...     run CMD with syscall NR failing with ENOSYS (a seccomp filter), as
 *                             on a kernel or under a tracer that lacks it (a fault for the host
 * side)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/reboot.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

static void report(const char *name, long r)
{
  if (r >= 0)
    printf("%s ok\n", name);
  else
    printf("%s %s\n", name, strerrorname_np(errno) ? strerrorname_np(errno) : "E?");
  fflush(stdout);
}

/* Runs fn in a child so that a success (a new namespace, a chroot) never changes the probe. */
static void in_child(const char *name, long (*fn)(void))
{
  int p[2];
  if (pipe(p) < 0)
    return;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    errno = 0;
    long r = fn();
    int e = r < 0 ? errno : 0;
    (void) !write(p[1], &e, sizeof e);
    _exit(0);
  }
  close(p[1]);
  int e = -1;
  ssize_t n = read(p[0], &e, sizeof e);
  close(p[0]);
  waitpid(pid, NULL, 0);
  if (n != sizeof e) {
    printf("%s CRASHED\n", name);
    fflush(stdout);
    return;
  }
  errno = e;
  report(name, e ? -1 : 0);
}

/* ---- syscalls ---- */

static long t_mount_tmpfs(void)
{
  mkdir("/tmp/sbx-probe-mnt", 0755);
  return mount("none", "/tmp/sbx-probe-mnt", "tmpfs", 0, NULL);
}
static long t_mount_bind(void)
{
  mkdir("/tmp/sbx-probe-mnt", 0755);
  return mount("/", "/tmp/sbx-probe-mnt", NULL, MS_BIND | MS_REC, NULL);
}
static long t_remount_usr_rw(void)
{
  return mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL);
}
static long t_mount_proc(void)
{
  mkdir("/tmp/sbx-probe-proc", 0755);
  return mount("proc", "/tmp/sbx-probe-proc", "proc", 0, NULL);
}
static long t_mount_cgroup(void)
{
  mkdir("/tmp/sbx-probe-cg", 0755);
  return mount("cgroup", "/tmp/sbx-probe-cg", "cgroup", 0, "memory");
}
static long t_umount_proc_sys(void)
{
  return umount2("/proc/sys", MNT_DETACH);
}
static long t_fsopen(void)
{
  return syscall(SYS_fsopen, "tmpfs", 0);
}
static long t_open_tree(void)
{
  return syscall(SYS_open_tree, AT_FDCWD, "/", 1 /* OPEN_TREE_CLONE */);
}
static long t_mount_setattr(void)
{
  uint64_t attr[4] = {0};
  return syscall(SYS_mount_setattr, AT_FDCWD, "/usr", 0, attr, sizeof attr);
}
static long t_unshare_user(void)
{
  return unshare(CLONE_NEWUSER);
}
static long t_unshare_mnt(void)
{
  return unshare(CLONE_NEWNS);
}
static long t_unshare_net(void)
{
  return unshare(CLONE_NEWNET);
}
static long t_unshare_pid(void)
{
  return unshare(CLONE_NEWPID);
}
static long t_unshare_ipc(void)
{
  return unshare(CLONE_NEWIPC);
}
static long t_unshare_uts(void)
{
  return unshare(CLONE_NEWUTS);
}
static long t_unshare_cgroup(void)
{
  return unshare(CLONE_NEWCGROUP);
}
static long t_unshare_time(void)
{
  return unshare(CLONE_NEWTIME);
}
static long clone_with(unsigned long flags)
{
  long pid = syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0UL);
  if (pid == 0)
    _exit(0);
  if (pid > 0)
    waitpid((pid_t) pid, NULL, 0);
  return pid < 0 ? -1 : 0;
}
static long t_clone_newuser(void)
{
  return clone_with(CLONE_NEWUSER);
}
static long t_clone_newns(void)
{
  return clone_with(CLONE_NEWNS);
}
static long t_clone_newnet(void)
{
  return clone_with(CLONE_NEWNET);
}
static long t_clone3_newuser(void)
{
  struct {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
  } args = {.flags = CLONE_NEWUSER, .exit_signal = SIGCHLD};
  long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0)
    _exit(0);
  if (pid > 0)
    waitpid((pid_t) pid, NULL, 0);
  return pid < 0 ? -1 : 0;
}
static long t_setns_net(void)
{
  int fd = open("/proc/self/ns/net", O_RDONLY);
  if (fd < 0)
    return -1;
  long r = setns(fd, 0);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}
static long t_setns_pid1_mnt(void)
{
  int fd = open("/proc/1/ns/mnt", O_RDONLY);
  if (fd < 0)
    return -1;
  long r = setns(fd, 0);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}
static long t_pivot_root(void)
{
  return syscall(SYS_pivot_root, "/tmp", "/tmp");
}
static long t_add_key(void)
{
  return syscall(SYS_add_key, "user", "sbx-probe", "x", 1, KEY_SPEC_SESSION_KEYRING);
}
static long t_keyctl_join(void)
{
  return syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, "sbx-probe");
}
static long t_keyctl_read_user(void)
{
  char buf[256];
  return syscall(SYS_keyctl, KEYCTL_READ, KEY_SPEC_USER_KEYRING, buf, sizeof buf);
}
static long t_request_key(void)
{
  return syscall(SYS_request_key, "user", "sbx-probe", NULL, KEY_SPEC_SESSION_KEYRING);
}
static long t_bpf_map(void)
{
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.map_type = BPF_MAP_TYPE_ARRAY;
  a.key_size = 4;
  a.value_size = 4;
  a.max_entries = 1;
  return syscall(SYS_bpf, BPF_MAP_CREATE, &a, sizeof a);
}
static long t_bpf_prog(void)
{
  struct bpf_insn insns[2] = {{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = 0, .imm = 0},
                              {.code = BPF_JMP | BPF_EXIT}};
  union bpf_attr a;
  memset(&a, 0, sizeof a);
  a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  a.insns = (uint64_t) (uintptr_t) insns;
  a.insn_cnt = 2;
  a.license = (uint64_t) (uintptr_t) "GPL";
  return syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a);
}
static long t_perf_event_open(void)
{
  struct perf_event_attr pe;
  memset(&pe, 0, sizeof pe);
  pe.type = PERF_TYPE_SOFTWARE;
  pe.size = sizeof pe;
  pe.config = PERF_COUNT_SW_CPU_CLOCK;
  pe.disabled = 1;
  return syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0);
}
static long t_userfaultfd(void)
{
  return syscall(SYS_userfaultfd, O_CLOEXEC);
}
static long t_io_uring_setup(void)
{
  char params[120];
  memset(params, 0, sizeof params);
  return syscall(SYS_io_uring_setup, 4, params);
}
static long t_io_uring_enter(void)
{
  return syscall(SYS_io_uring_enter, 0, 0, 0, 0, NULL, 0);
}
static long t_name_to_handle_at(void)
{
  struct {
    unsigned int bytes;
    int type;
    unsigned char h[128];
  } fh = {.bytes = 128};
  int mnt;
  return syscall(SYS_name_to_handle_at, AT_FDCWD, "/etc/passwd", &fh, &mnt, 0);
}
static long t_open_by_handle_at(void)
{
  /* shocker: a handle for inode 2 (the root of most file systems) */
  struct {
    unsigned int bytes;
    int type;
    unsigned char h[8];
  } fh = {.bytes = 8, .type = 1};
  uint32_t ino = 2;
  memcpy(fh.h, &ino, sizeof ino);
  int fd = open("/mnt/user-data", O_RDONLY | O_DIRECTORY);
  long r = syscall(SYS_open_by_handle_at, fd, &fh, O_RDONLY);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}
static long t_kexec_load(void)
{
  return syscall(SYS_kexec_load, 0, 0, NULL, 0);
}
static long t_init_module(void)
{
  return syscall(SYS_init_module, "", 0, "");
}
static long t_finit_module(void)
{
  int fd = open("/dev/null", O_RDONLY);
  long r = syscall(SYS_finit_module, fd, "", 0);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}
static long t_delete_module(void)
{
  return syscall(SYS_delete_module, "loop", O_NONBLOCK);
}
static long t_iopl(void)
{
  return syscall(SYS_iopl, 3);
}
static long t_ioperm(void)
{
  return syscall(SYS_ioperm, 0x80, 1, 1);
}
static long t_reboot(void)
{
  /* a bad magic: EINVAL if the call were allowed, so nothing ever happens */
  return syscall(SYS_reboot, 0, 0, 0, NULL);
}
static long t_syslog(void)
{
  char buf[128];
  return syscall(SYS_syslog, 3 /* READ_ALL */, buf, sizeof buf);
}
static long t_swapon(void)
{
  return syscall(SYS_swapon, "/tmp/nonexistent-swap", 0);
}
static long t_acct(void)
{
  return syscall(SYS_acct, NULL);
}
/* The current time and zone: a no-op if it were ever allowed, EPERM when refused. */
static long t_settimeofday(void)
{
  struct timeval tv;
  struct timezone tz;
  gettimeofday(&tv, &tz);
  return settimeofday(&tv, &tz);
}
static long t_clock_settime(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return clock_settime(CLOCK_REALTIME, &ts);
}
static long t_sethostname(void)
{
  return sethostname("pwned", 5);
}
static long t_setdomainname(void)
{
  return setdomainname("pwned", 5);
}
static long t_ptrace_pid1(void)
{
  long r = ptrace(PTRACE_ATTACH, 1, NULL, NULL);
  if (r == 0)
    ptrace(PTRACE_DETACH, 1, NULL, NULL);
  return r;
}
static long t_ptrace_seize_pid1(void)
{
  long r = ptrace(PTRACE_SEIZE, 1, NULL, NULL);
  if (r == 0)
    ptrace(PTRACE_DETACH, 1, NULL, NULL);
  return r;
}
static long t_process_vm_readv(void)
{
  char buf[16];
  struct iovec l = {buf, sizeof buf}, rv = {(void *) 0x400000, sizeof buf};
  return syscall(SYS_process_vm_readv, 1, &l, 1, &rv, 1, 0);
}
static long t_pidfd_getfd(void)
{
  int pfd = (int) syscall(SYS_pidfd_open, 1, 0);
  if (pfd < 0)
    return -1;
  long r = syscall(SYS_pidfd_getfd, pfd, 5, 0);
  int e = errno;
  close(pfd);
  errno = e;
  return r;
}
static long t_kcmp(void)
{
  return syscall(SYS_kcmp, getpid(), 1, 0 /* KCMP_FILE */, 0, 0);
}
static long t_setuid_host_root(void)
{
  /* uid 0 inside is 100000 outside; there is no mapping to the host's root */
  return setresuid(65536, 65536, 65536);
}

static const struct {
  const char *name;
  long (*fn)(void);
} tests[] = {
    {"mount_tmpfs", t_mount_tmpfs},
    {"mount_bind_root", t_mount_bind},
    {"remount_usr_rw", t_remount_usr_rw},
    {"mount_proc", t_mount_proc},
    {"mount_cgroup", t_mount_cgroup},
    {"umount_proc_sys", t_umount_proc_sys},
    {"fsopen", t_fsopen},
    {"open_tree", t_open_tree},
    {"mount_setattr", t_mount_setattr},
    {"unshare_user", t_unshare_user},
    {"unshare_mnt", t_unshare_mnt},
    {"unshare_net", t_unshare_net},
    {"unshare_pid", t_unshare_pid},
    {"unshare_ipc", t_unshare_ipc},
    {"unshare_uts", t_unshare_uts},
    {"unshare_cgroup", t_unshare_cgroup},
    {"unshare_time", t_unshare_time},
    {"clone_newuser", t_clone_newuser},
    {"clone_newns", t_clone_newns},
    {"clone_newnet", t_clone_newnet},
    {"clone3_newuser", t_clone3_newuser},
    {"setns_net", t_setns_net},
    {"setns_pid1_mnt", t_setns_pid1_mnt},
    {"pivot_root", t_pivot_root},
    {"add_key", t_add_key},
    {"keyctl_join", t_keyctl_join},
    {"keyctl_read_user", t_keyctl_read_user},
    {"request_key", t_request_key},
    {"bpf_map_create", t_bpf_map},
    {"bpf_prog_load", t_bpf_prog},
    {"perf_event_open", t_perf_event_open},
    {"userfaultfd", t_userfaultfd},
    {"io_uring_setup", t_io_uring_setup},
    {"io_uring_enter", t_io_uring_enter},
    {"name_to_handle_at", t_name_to_handle_at},
    {"open_by_handle_at", t_open_by_handle_at},
    {"kexec_load", t_kexec_load},
    {"init_module", t_init_module},
    {"finit_module", t_finit_module},
    {"delete_module", t_delete_module},
    {"iopl", t_iopl},
    {"ioperm", t_ioperm},
    {"reboot", t_reboot},
    {"syslog", t_syslog},
    {"swapon", t_swapon},
    {"acct", t_acct},
    {"settimeofday", t_settimeofday},
    {"clock_settime", t_clock_settime},
    {"sethostname", t_sethostname},
    {"setdomainname", t_setdomainname},
    {"ptrace_attach_pid1", t_ptrace_pid1},
    {"ptrace_seize_pid1", t_ptrace_seize_pid1},
    {"process_vm_readv_pid1", t_process_vm_readv},
    {"pidfd_getfd_pid1", t_pidfd_getfd},
    {"kcmp_pid1", t_kcmp},
    {"setuid_unmapped", t_setuid_host_root},
};

/* int 0x80 (the i386 ABI) from a 64-bit process: a filter that only knows x86_64 numbers would
 * let i386 "mount" (21) or "unshare" (310) through; the bad-arch action kills the process. */
static void t_int80(void)
{
#if defined(__x86_64__)
  pid_t pid = fork();
  if (pid == 0) {
    long ret;
    /* i386 getpid = 20: harmless if it ran */
    __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (WIFSIGNALED(st))
    printf("int80_getpid KILLED_%d\n", WTERMSIG(st));
  else
    printf("int80_getpid ok\n");
  fflush(stdout);
#endif
}

static int cmd_syscalls(void)
{
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
    in_child(tests[i].name, tests[i].fn);
  t_int80();
  return 0;
}

/* ---- devices, /proc/sys, /sys ---- */

static void try_open(const char *name, const char *path, int flags)
{
  int fd = open(path, flags | O_CLOEXEC);
  report(name, fd);
  if (fd >= 0)
    close(fd);
}

static void try_write(const char *name, const char *path, const char *val)
{
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    report(name, -1);
    return;
  }
  ssize_t n = write(fd, val, strlen(val));
  int e = errno;
  close(fd);
  errno = e;
  report(name, n < 0 ? -1 : 0);
}

static int cmd_devices(void)
{
  unlink("/tmp/sbx-probe-mem");
  report("mknod_char_mem", mknod("/tmp/sbx-probe-mem", S_IFCHR | 0600, makedev(1, 1)));
  unlink("/tmp/sbx-probe-kmsg");
  report("mknod_char_kmsg", mknod("/tmp/sbx-probe-kmsg", S_IFCHR | 0600, makedev(1, 11)));
  unlink("/tmp/sbx-probe-vda");
  report("mknod_block_vda", mknod("/tmp/sbx-probe-vda", S_IFBLK | 0600, makedev(254, 0)));
  unlink("/tmp/sbx-probe-sda");
  report("mknod_block_sda", mknod("/tmp/sbx-probe-sda", S_IFBLK | 0600, makedev(8, 0)));
  report("mknod_in_user_data",
         mknod("/mnt/user-data/workspace/.sbx-probe-mem", S_IFCHR | 0600, makedev(1, 1)));
  /* if a node was made anyway, it must not open */
  try_open("open_made_mem", "/tmp/sbx-probe-mem", O_RDONLY);
  try_open("open_made_vda", "/tmp/sbx-probe-vda", O_RDONLY);
  try_open("open_dev_mem", "/dev/mem", O_RDONLY);
  try_open("open_dev_kmem", "/dev/kmem", O_RDONLY);
  try_open("open_dev_port", "/dev/port", O_RDONLY);
  try_open("open_dev_kmsg", "/dev/kmsg", O_RDONLY);
  try_open("open_dev_vda", "/dev/vda", O_RDONLY);
  try_open("open_dev_sda", "/dev/sda", O_RDONLY);
  try_open("open_dev_kvm", "/dev/kvm", O_RDWR);
  try_open("open_dev_fuse", "/dev/fuse", O_RDWR);
  /* kernels with CONFIG_PROC_KCORE (Debian's) have it: sbx masks it with /dev/null, so it may
   * open but must read nothing */
  {
    int fd = open("/proc/kcore", O_RDONLY | O_CLOEXEC);
    char byte;
    ssize_t n = fd < 0 ? -1 : read(fd, &byte, 1);
    if (n == 0)
      printf("read_proc_kcore masked\n");
    else
      report("read_proc_kcore", n > 0 ? 0 : -1);
    if (fd >= 0)
      close(fd);
  }
  try_write("write_proc_sys_hostname", "/proc/sys/kernel/hostname", "pwned");
  try_write("write_proc_sys_core_pattern", "/proc/sys/kernel/core_pattern", "|/tmp/x");
  try_write("write_proc_sys_drop_caches", "/proc/sys/vm/drop_caches", "3");
  try_write("write_proc_sys_ip_forward", "/proc/sys/net/ipv4/ip_forward", "1");
  try_write("write_proc_sysrq", "/proc/sysrq-trigger", "h");
  try_write("write_sys_kernel_uevent_helper", "/sys/kernel/uevent_helper", "/tmp/x");
  try_write("write_sys_power_state", "/sys/power/state", "freeze");
  try_write("write_sys_module_param", "/sys/module/kernel/parameters/panic", "1");
  try_write("write_proc_self_oom_score_adj_low", "/proc/self/oom_score_adj", "-1000");
  try_write("write_proc_1_oom_score_adj", "/proc/1/oom_score_adj", "1000");
  /* the cgroup tree is not mounted inside; the host's must not be reachable */
  struct stat st;
  report("stat_sys_fs_cgroup_memory", stat("/sys/fs/cgroup/memory/memory.limit_in_bytes", &st));
  return 0;
}

/* ---- chroot escape ---- */

static int cmd_chroot(void)
{
  struct stat before, after;
  if (stat("/", &before) < 0)
    return 1;
  mkdir("/tmp/sbx-probe-jail", 0755);
  int fd = open("/", O_RDONLY | O_DIRECTORY);
  long r = chroot("/tmp/sbx-probe-jail");
  report("chroot", r);
  if (r == 0) {
    /* the classic: step out of the jail through a descriptor of the old root and climb */
    if (fchdir(fd) < 0)
      return 1;
    for (int i = 0; i < 64; i++)
      if (chdir("..") < 0)
        break;
    report("chroot_dot", chroot("."));
  }
  if (stat("/", &after) < 0)
    return 1;
  printf("same_root %d\n", before.st_dev == after.st_dev && before.st_ino == after.st_ino);
  /* host markers: things only the host's root has */
  printf("host_marker_work %d\n", access("/work", F_OK) == 0);
  printf("host_marker_boot %d\n", access("/boot", F_OK) == 0);
  printf("user_data_visible %d\n", access("/mnt/user-data", F_OK) == 0);
  fflush(stdout);
  return 0;
}

/* ---- /proc/1 ---- */

static int cmd_proc1(void)
{
  char buf[4096];
  const char *links[] = {"/proc/1/root", "/proc/1/cwd",  "/proc/1/exe",  "/proc/1/fd/0",
                         "/proc/1/fd/5", "/proc/1/fd/6", "/proc/1/fd/8", "/proc/1/ns/mnt"};
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
    char name[64];
    snprintf(name, sizeof name, "readlink_%s", links[i] + 6);
    for (char *p = name; *p; p++)
      if (*p == '/')
        *p = '_';
    report(name, readlink(links[i], buf, sizeof buf));
    snprintf(name, sizeof name, "open_%s", links[i] + 6);
    for (char *p = name; *p; p++)
      if (*p == '/')
        *p = '_';
    try_open(name, links[i], O_RDONLY);
  }
  try_open("open_1_root_etc_passwd", "/proc/1/root/etc/passwd", O_RDONLY);
  try_open("open_1_environ", "/proc/1/environ", O_RDONLY);
  try_open("open_1_mem", "/proc/1/mem", O_RDONLY);
  try_open("open_1_maps", "/proc/1/maps", O_RDONLY);
  try_open("open_1_fd_dir", "/proc/1/fd", O_RDONLY | O_DIRECTORY);
  try_open("open_1_map_files", "/proc/1/map_files", O_RDONLY | O_DIRECTORY);
  try_write("write_1_mem", "/proc/1/mem", "x");
  try_write("write_1_comm", "/proc/1/comm", "pwned");
  /* PID 1 of a pid namespace ignores signals it has no handler for, even SIGKILL from inside */
  report("kill_1_sigkill", kill(1, SIGKILL));
  report("kill_1_sigsegv", kill(1, SIGSEGV));
  report("kill_1_sigstop", kill(1, SIGSTOP));
  int pfd = (int) syscall(SYS_pidfd_open, 1, 0);
  report("pidfd_send_signal_1",
         pfd < 0 ? -1 : syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0));
  usleep(200000);
  printf("pid1_alive %d\n", kill(1, 0) == 0);
  fflush(stdout);
  return 0;
}

/* ---- descriptors ---- */

static int cmd_fds(void)
{
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL)
    return 1;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    if (atoi(de->d_name) == dirfd(d))
      continue;
    char p[300], target[4096];
    snprintf(p, sizeof p, "/proc/self/fd/%s", de->d_name);
    ssize_t n = readlink(p, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    printf("fd %s %s\n", de->d_name, target);
  }
  closedir(d);
  fflush(stdout);
  return 0;
}

static int send_fd(int sock, int fd)
{
  char b = 'x';
  struct iovec iov = {&b, 1};
  union {
    char raw[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.raw, .msg_controllen = sizeof u.raw};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return sendmsg(sock, &m, 0) == 1 ? 0 : -1;
}

static int recv_fd(int sock)
{
  char b;
  struct iovec iov = {&b, 1};
  union {
    char raw[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.raw, .msg_controllen = sizeof u.raw};
  if (recvmsg(sock, &m, 0) != 1)
    return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (c == NULL || c->cmsg_type != SCM_RIGHTS)
    return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

/* A descriptor of the sandbox's root, passed to another process over a socket, gives that
 * process nothing beyond the sandbox: climbing from it ends at the same root. */
static int cmd_fdpass(void)
{
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
    return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    int fd = open("/", O_RDONLY | O_DIRECTORY);
    report("send_root_fd", send_fd(sv[1], fd));
    int p1 = open("/proc/self/ns/user", O_RDONLY);
    report("send_ns_fd", send_fd(sv[1], p1));
    _exit(0);
  }
  close(sv[1]);
  int rootfd = recv_fd(sv[0]);
  int nsfd = recv_fd(sv[0]);
  waitpid(pid, NULL, 0);
  struct stat root, st;
  stat("/", &root);
  report("recv_root_fd", rootfd);
  if (rootfd >= 0 && fchdir(rootfd) == 0) {
    for (int i = 0; i < 64; i++)
      if (chdir("..") < 0)
        break;
    stat(".", &st);
    printf("climb_same_root %d\n", st.st_dev == root.st_dev && st.st_ino == root.st_ino);
  }
  report("recv_ns_fd", nsfd);
  if (nsfd >= 0)
    report("setns_passed_userns", setns(nsfd, CLONE_NEWUSER));
  /* a pathname socket in a place the host can see: only the thread folder is shared */
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "/tmp/sbx-probe.sock");
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  unlink(sa.sun_path);
  report("bind_tmp_socket", bind(s, (struct sockaddr *) &sa, sizeof sa));
  close(s);
  fflush(stdout);
  return 0;
}

/* ---- network ---- */

static int parse_addr(const char *host, const char *port, struct sockaddr_storage *ss,
                      socklen_t *len)
{
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *a4 = (struct sockaddr_in *) ss;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *) ss;
  if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t) atoi(port));
    *len = sizeof *a4;
    return AF_INET;
  }
  if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t) atoi(port));
    *len = sizeof *a6;
    return AF_INET6;
  }
  return -1;
}

static int cmd_connect_tcp(const char *host, const char *port)
{
  struct sockaddr_storage ss;
  socklen_t len;
  int af = parse_addr(host, port, &ss, &len);
  if (af < 0)
    return 2;
  int s = socket(af, SOCK_STREAM | SOCK_NONBLOCK, 0);
  long r = connect(s, (struct sockaddr *) &ss, len);
  if (r < 0 && errno == EINPROGRESS) {
    struct pollfd p = {s, POLLOUT, 0};
    if (poll(&p, 1, 2000) == 1) {
      int e = 0;
      socklen_t el = sizeof e;
      getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
      errno = e;
      r = e ? -1 : 0;
    } else {
      errno = ETIMEDOUT;
    }
  }
  report("connect_tcp", r);
  close(s);
  return 0;
}

static int cmd_connect_udp(const char *host, const char *port)
{
  struct sockaddr_storage ss;
  socklen_t len;
  int af = parse_addr(host, port, &ss, &len);
  if (af < 0)
    return 2;
  int s = socket(af, SOCK_DGRAM, 0);
  report("udp_send", sendto(s, "ping", 4, 0, (struct sockaddr *) &ss, len));
  struct pollfd p = {s, POLLIN, 0};
  char buf[16];
  if (poll(&p, 1, 1000) == 1 && recv(s, buf, sizeof buf, 0) > 0)
    printf("udp_echo ok\n");
  else
    printf("udp_echo none\n");
  fflush(stdout);
  close(s);
  return 0;
}

static int cmd_connect_unix(const char *path)
{
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  socklen_t len;
  if (path[0] == '@') {
    size_t n = strlen(path + 1);
    if (n > sizeof sa.sun_path - 1)
      n = sizeof sa.sun_path - 1;
    memcpy(sa.sun_path + 1, path + 1, n);
    len = (socklen_t) (offsetof(struct sockaddr_un, sun_path) + 1 + n);
  } else {
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    len = sizeof sa;
  }
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  report("connect_unix", connect(s, (struct sockaddr *) &sa, len));
  close(s);
  return 0;
}

static int cmd_netdev(void)
{
  struct if_nameindex *ifs = if_nameindex();
  for (struct if_nameindex *i = ifs; i && i->if_index; i++)
    printf("netdev %s\n", i->if_name);
  if (ifs)
    if_freenameindex(ifs);
  int s = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
  report("socket_raw_icmp", s);
  if (s >= 0)
    close(s);
  s = socket(AF_PACKET, SOCK_RAW, htons(3 /* ETH_P_ALL */));
  report("socket_packet", s);
  if (s >= 0)
    close(s);
  /* bring up a new interface / change lo: needs CAP_NET_ADMIN over the netns (host-owned) */
  s = socket(AF_INET, SOCK_DGRAM, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  ifr.ifr_mtu = 1280;
  report("siocsifmtu_lo", ioctl(s, SIOCSIFMTU, &ifr));
  close(s);
  fflush(stdout);
  return 0;
}

/* ---- exhaustion ---- */

static int cmd_forkbomb(int seconds)
{
  enum { MAX_KIDS = 100000 };
  pid_t *kids = calloc(MAX_KIDS, sizeof *kids);
  long count = 0;
  int first_err = 0;
  while (count < MAX_KIDS) {
    pid_t pid = fork();
    if (pid == 0) {
      pause();
      _exit(0);
    }
    if (pid < 0) {
      first_err = errno;
      break;
    }
    kids[count++] = pid;
  }
  printf("forked %ld\n", count);
  errno = first_err;
  report("fork_refused", first_err ? -1 : 0);
  sleep((unsigned) seconds);
  for (long i = 0; i < count; i++)
    kill(kids[i], SIGKILL);
  while (wait(NULL) > 0)
    ;
  free(kids);
  return 0;
}

static int cmd_memhog(long mib)
{
  long done = 0;
  for (; done < mib; done++) {
    char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      report("mmap", -1);
      break;
    }
    memset(p, 0x5a, 1 << 20);
    if (done % 64 == 0) {
      printf("touched %ld\n", done);
      fflush(stdout);
    }
  }
  printf("touched %ld\n", done);
  fflush(stdout);
  return 0;
}

static int cmd_nofile(void)
{
  long n = 0;
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  printf("rlimit_nofile %llu %llu\n", (unsigned long long) rl.rlim_cur,
         (unsigned long long) rl.rlim_max);
  /* try to raise it past what the sandbox was given */
  struct rlimit more = {rl.rlim_max * 2, rl.rlim_max * 2};
  report("raise_rlimit_nofile", setrlimit(RLIMIT_NOFILE, &more));
  /* what any process may do: its soft limit up to the hard one, then exhaust that */
  struct rlimit all = {rl.rlim_max, rl.rlim_max};
  report("raise_soft_to_hard", setrlimit(RLIMIT_NOFILE, &all));
  for (;;) {
    int fd = open("/dev/null", O_RDONLY);
    if (fd < 0) {
      report("open_refused", -1);
      break;
    }
    n++;
    if (n >= 1000000)
      break;
  }
  printf("opened %ld\n", n);
  fflush(stdout);
  return 0;
}

static int cmd_inodes(const char *dir, long max)
{
  int dfd = open(dir, O_RDONLY | O_DIRECTORY);
  if (dfd < 0)
    return 1;
  long n = 0;
  char name[32];
  for (; n < max; n++) {
    snprintf(name, sizeof name, "i%ld", n);
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
      report("create_refused", -1);
      break;
    }
    close(fd);
  }
  printf("created %ld\n", n);
  fflush(stdout);
  return 0;
}

static int cmd_deepdir(const char *dir, long n)
{
  if (chdir(dir) < 0)
    return 1;
  long i = 0;
  for (; i < n; i++)
    if (mkdir("d", 0755) < 0 || chdir("d") < 0)
      break;
  int fd = open("leaf.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    (void) !write(fd, "DEEP-LEAF\n", 10);
    close(fd);
  }
  printf("depth %ld\n", i);
  fflush(stdout);
  return 0;
}

static int cmd_names(const char *dir)
{
  if (chdir(dir) < 0)
    return 1;
  char name[300];
  memset(name, 'n', 255);
  name[255] = '\0';
  int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  report("create_name_255", fd);
  if (fd >= 0) {
    (void) !write(fd, "MAXNAME\n", 8);
    close(fd);
  }
  memset(name, 'm', 256);
  name[256] = '\0';
  report("create_name_256", open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  fflush(stdout);
  return 0;
}

static volatile sig_atomic_t stop;

static void on_alarm(int sig)
{
  (void) sig;
  stop = 1;
}

static int cmd_swap(const char *dir, int seconds, bool file)
{
  if (chdir(dir) < 0)
    return 1;
  const char *a = file ? "f.txt" : "d", *b = file ? "fl" : "l";
  signal(SIGALRM, on_alarm);
  alarm((unsigned) seconds);
  long n = 0;
  while (!stop) {
    if (syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 2 /* RENAME_EXCHANGE */) < 0)
      break;
    n++;
  }
  /* leave the real object in place */
  struct stat st;
  if (lstat(a, &st) == 0 && S_ISLNK(st.st_mode))
    syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b, 2);
  printf("swaps %ld\n", n);
  fflush(stdout);
  return 0;
}

static int cmd_hardlink(void)
{
  report("link_usr_bin_sh", link("/usr/bin/sh", "/mnt/user-data/workspace/.sbx-hl-sh"));
  report("link_etc_passwd", link("/etc/passwd", "/mnt/user-data/workspace/.sbx-hl-passwd"));
  report("link_etc_ssl", link("/etc/ssl/certs/ca-certificates.crt", "/tmp/.sbx-hl-ca"));
  report("link_proc_self_exe",
         linkat(AT_FDCWD, "/proc/self/exe", AT_FDCWD, "/tmp/.sbx-hl-exe", AT_SYMLINK_FOLLOW));
  fflush(stdout);
  return 0;
}

static int cmd_spin(int seconds)
{
  time_t end = time(NULL) + seconds;
  volatile unsigned long x = 0;
  while (time(NULL) < end)
    x++;
  return 0;
}

static int cmd_nosys(long nr, char **cmd)
{
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned) nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short) (sizeof f / sizeof f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
    perror("probe nosys: seccomp");
    return 125;
  }
  execvp(cmd[0], cmd);
  perror("probe nosys: exec");
  return 127;
}

int main(int argc, char **argv)
{
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 2)
    return 2;
  const char *c = argv[1];
  if (strcmp(c, "syscalls") == 0)
    return cmd_syscalls();
  if (strcmp(c, "devices") == 0)
    return cmd_devices();
  if (strcmp(c, "chroot") == 0)
    return cmd_chroot();
  if (strcmp(c, "proc1") == 0)
    return cmd_proc1();
  if (strcmp(c, "fds") == 0)
    return cmd_fds();
  if (strcmp(c, "fdpass") == 0)
    return cmd_fdpass();
  if (strcmp(c, "connect_tcp") == 0 && argc == 4)
    return cmd_connect_tcp(argv[2], argv[3]);
  if (strcmp(c, "connect_udp") == 0 && argc == 4)
    return cmd_connect_udp(argv[2], argv[3]);
  if (strcmp(c, "connect_unix") == 0 && argc == 3)
    return cmd_connect_unix(argv[2]);
  if (strcmp(c, "netdev") == 0)
    return cmd_netdev();
  if (strcmp(c, "forkbomb") == 0 && argc == 3)
    return cmd_forkbomb(atoi(argv[2]));
  if (strcmp(c, "memhog") == 0 && argc == 3)
    return cmd_memhog(atol(argv[2]));
  if (strcmp(c, "nofile") == 0)
    return cmd_nofile();
  if (strcmp(c, "nosys") == 0 && argc >= 4)
    return cmd_nosys(atol(argv[2]), argv + 3);
  if (strcmp(c, "inodes") == 0 && argc == 4)
    return cmd_inodes(argv[2], atol(argv[3]));
  if (strcmp(c, "deepdir") == 0 && argc == 4)
    return cmd_deepdir(argv[2], atol(argv[3]));
  if (strcmp(c, "names") == 0 && argc == 3)
    return cmd_names(argv[2]);
  if (strcmp(c, "swap") == 0 && argc == 4)
    return cmd_swap(argv[2], atoi(argv[3]), false);
  if (strcmp(c, "swapfile") == 0 && argc == 4)
    return cmd_swap(argv[2], atoi(argv[3]), true);
  if (strcmp(c, "hardlink") == 0)
    return cmd_hardlink();
  if (strcmp(c, "spin") == 0 && argc == 3)
    return cmd_spin(atoi(argv[2]));
  fprintf(stderr, "probe: unknown command %s\n", c);
  return 2;
}
