/* Adopting a spare (src/lib/spares.c): a sandbox started ahead of time under a spare's name
 * becomes the sandbox in->meta describes. Its hostname, /etc/hostname and /etc/hosts take the
 * new id; the host folder for /mnt/user-data replaces the spare's private tmpfs there (unless
 * the new sandbox is a throw-away one, which keeps it); limits asked for by sbx_create are set
 * on its cgroup; a managed sandbox loses the idle expiry.
 *
 * This is done from the host side, as host root, by a short-lived child that enters the
 * sandbox's mount and UTS namespaces. Both belong to the host's user namespace (the launcher
 * made them before the sandbox's own user namespace), so nothing inside can undo the change,
 * and nothing inside runs yet but sbx-init: the moment / is writable again is not observable.
 * The user-data folder travels as a detached mount (open_tree) made in the host's namespace
 * without following any symlink, so no host path is resolved inside the sandbox. */
#include "agent_client.h"
#include "linux.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ADOPT_STACK (64u << 10)

struct adopt_job {
  int pidfd;   /* the sandbox's PID 1 */
  int tree_fd; /* the user-data folder, detached; -1 to keep the spare's tmpfs */
  const char *hostname, *etc_hostname, *etc_hosts;
  bool writable_root; /* an image's overlay root stays writable */
  const char *step;   /* what failed, with err */
  int err;
};

static int write_small(const char *path, const char *data)
{
  int fd = open(path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return -1;
  size_t len = strlen(data);
  ssize_t n = write(fd, data, len);
  int saved = errno;
  close(fd);
  errno = n == (ssize_t) len ? 0 : n < 0 ? saved : EIO;
  return errno ? -1 : 0;
}

/* Runs in a vfork-like child (shared memory, its own fs_struct, as setns requires): system
 * calls only. */
static int adopt_child(void *arg)
{
  struct adopt_job *j = arg;
  struct mount_attr rw = {.attr_clr = MOUNT_ATTR_RDONLY};
  struct mount_attr ro = {.attr_set = MOUNT_ATTR_RDONLY};
  j->step = "enter the sandbox's mount and UTS namespaces";
  if (setns(j->pidfd, CLONE_NEWNS | CLONE_NEWUTS) < 0)
    goto fail;
  j->step = "set the hostname";
  if (sethostname(j->hostname, strlen(j->hostname)) < 0)
    goto fail;
  if (j->tree_fd >= 0) {
    j->step = "unmount the spare's /mnt/user-data";
    if (umount2("/mnt/user-data", MNT_DETACH) < 0)
      goto fail;
    j->step = "mount the user-data folder on /mnt/user-data";
    if (move_mount(j->tree_fd, "", AT_FDCWD, "/mnt/user-data", MOVE_MOUNT_F_EMPTY_PATH) < 0)
      goto fail;
  }
  j->step = "make / writable";
  if (mount_setattr(AT_FDCWD, "/", 0, &rw, sizeof rw) < 0)
    goto fail;
  int wrote = write_small("/etc/hostname", j->etc_hostname) == 0 &&
              write_small("/etc/hosts", j->etc_hosts) == 0;
  int saved = errno;
  j->step = "make / read-only again";
  if (!j->writable_root && mount_setattr(AT_FDCWD, "/", 0, &ro, sizeof ro) < 0)
    goto fail;
  if (!wrote) {
    errno = saved;
    j->step = "write /etc/hostname and /etc/hosts";
    goto fail;
  }
  return 0;
fail:
  j->err = errno;
  return 1;
}

/* The first host id of a running sandbox's range, from its init's uid_map ("0 BASE COUNT"), or
 * 0. */
static uint32_t spare_uid_base(long pid)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/uid_map", pid);
  cleanup_free char *text = NULL;
  unsigned inside = 1, base = 0, count = 0;
  if (sbx__read_file_at(AT_FDCWD, path, 4096, &text, NULL) < 0 ||
      sscanf(text, "%u %u %u", &inside, &base, &count) != 3 || inside != 0 ||
      count != SBX_UID_COUNT)
    return 0;
  return base;
}

int sbx__linux_adopt(struct sbx_instance *in, const char *user_data, sbx_error_t *err)
{
  const char *id = in->meta.id;
  /* before 5.12 a spare's read-only / cannot be made writable for its new name */
  if (sbx__kernel_require(SBX_KF_MOUNT_SETATTR, "adopting a spare", err) < 0 ||
      sbx__kernel_require(SBX_KF_PIDFD_OPEN, "adopting a spare", err) < 0)
    return -1;
  cleanup_close int pidfd = (int) syscall(SYS_pidfd_open, (pid_t) in->meta.pid, 0);
  /* pid reuse: the pidfd names the process whose start time still matches */
  if (pidfd < 0 || sbx__proc_start_time(in->meta.pid) != in->meta.pid_start)
    return sbx__make_error(err, pidfd < 0 ? errno : ESRCH, SBX_E_BACKEND,
                           "sandbox %s: the spare's init is gone", id);
  cleanup_close int tree = -1;
  if (user_data && *user_data && in->cfg->user_data_size_mib &&
      sbx__user_data_image(user_data, in->cfg->user_data_size_mib << 20, err) < 0)
    return -1;
  if (user_data && *user_data) {
    tree = sbx__open_tree_nofollow(user_data, false);
    if (tree < 0 || sbx_tree_nosuid_nodev(tree) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "sandbox %s: clone a mount of `%s`", id,
                             user_data);
    /* a folder of someone else's would be idmapped to that owner, whose files the spare's
     * commands, started without the setuid guard (confine.c), could make setuid: a new
     * sandbox is launched instead (the caller does, on this error) */
    struct stat st;
    if (fstat(tree, &st) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "sandbox %s: `%s`", id, user_data);
    if (st.st_uid != SBX_UID_BASE || st.st_gid != SBX_UID_BASE)
      return sbx__make_error(err, 0, SBX_E_BACKEND,
                             "sandbox %s: a spare takes only folders owned by %u:%u (`%s` is "
                             "%u:%u)",
                             id, SBX_UID_BASE, SBX_UID_BASE, user_data, (unsigned) st.st_uid,
                             (unsigned) st.st_gid);
    /* the folder's on-disk ids (SBX_UID_BASE..) appear as the spare's own range, which its
     * init's uid_map names (the metadata's record may predate ranges); host root's files stay
     * unmapped (no foreign owner's slot, ids.c): the spare's commands run without the id
     * guard that must go with it */
    uint32_t base = spare_uid_base(in->meta.pid);
    if (base == 0)
      return sbx__make_error(err, errno, SBX_E_BACKEND, "sandbox %s: read the spare's id map", id);
    if (base != SBX_UID_BASE) {
      struct sbx_idmap_helper helper = {0};
      cleanup_close int userns =
          sbx__ids_idmap_userns(base, SBX_UID_BASE, SBX_UID_BASE, false, &helper, err);
      if (userns < 0)
        return -1;
      int r = sbx__tree_idmap(tree, userns);
      int e = errno;
      sbx__ids_idmap_reap(&helper);
      if (r < 0)
        return sbx__make_error(err, e, SBX_E_BACKEND, "sandbox %s: idmap `%s`", id, user_data);
    }
    in->meta.uid_base = base;
  }
  cleanup_free char *hostname = xasprintf(SBX_HOSTNAME_FMT, id);
  cleanup_free char *etc_hostname = xasprintf(SBX_HOSTNAME_FMT "\n", id);
  cleanup_free char *etc_hosts = xasprintf(SBX_ETC_HOSTS_FMT, id);
  struct adopt_job job = {.pidfd = pidfd,
                          .tree_fd = tree,
                          .hostname = hostname,
                          .etc_hostname = etc_hostname,
                          .etc_hosts = etc_hosts,
                          .writable_root = in->meta.image && strcmp(in->meta.image, "host") != 0};
  cleanup_free char *stack = xmalloc(ADOPT_STACK);
  /* CLONE_VFORK: we resume once the child is done; CLONE_VM: it writes job.step/err for us */
  pid_t child =
      sbx__clone_vm(adopt_child, stack + ADOPT_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &job, NULL);
  if (child < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "sandbox %s: start the adopting child", id);
  int status = 0;
  if (TEMP_FAILURE_RETRY(waitpid(child, &status, 0)) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return sbx__make_error(err, job.err, SBX_E_INTERNAL, "sandbox %s: adopt the spare: %s", id,
                           job.step ? job.step : "the child died");
  /* a spare has the configured limits; sbx_create may ask for others */
  if (in->meta.memory_bytes || in->meta.cpus > 0) {
    uint64_t memory = in->meta.memory_bytes ? in->meta.memory_bytes : in->cfg->memory_mib << 20;
    double cpus = in->meta.cpus > 0 ? in->meta.cpus : in->cfg->cpus;
    struct sbx_cgroup cg = {0};
    int r = in->meta.cgroups ? sbx__cgroup_parse(in->meta.cgroups, &cg) : -1;
    if (r == 0)
      r = sbx__cgroup_set_limits(&cg, memory, (uint64_t) (cpus * 1000.0 + 0.5), err);
    else
      sbx__make_error(err, 0, SBX_E_BACKEND, "sandbox %s: the spare has no cgroup", id);
    sbx__cgroup_free(&cg);
    if (r < 0)
      return -1;
  }
  if (in->meta.managed && sbx__agent_set_idle(in->dir, 0, err) < 0)
    return -1;
  return 0;
}
