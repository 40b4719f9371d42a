/* Size-capped folders: a sparse ext4 image, loop-mounted. Two users, sharing the image and
 * loop code here (this file is in libsbx and in sbx-init):
 *
 * `sandbox.disk_mib`: an image sandbox's writable upper. libsbx makes `disk.img` in the state
 * folder (sbx__disk_image); the launcher mounts it at `<state>/disk` inside the sandbox's own
 * mount namespace (sbx__disk_mount) and puts the overlay's upper and work dirs there. The host
 * never has it mounted: the mount, and with it the loop device (autoclear), goes with the
 * sandbox's last process, and the image goes with the state folder.
 *
 * `sandbox.user_data_size_mib`, library side, below.
 *
 * Without project quotas a bind mount of a host folder lets a sandbox fill the host's file
 * system. With a size set, the thread folder is a size-capped ext4 image (`user-data.img`
 * beside it, sparse: it costs only what is written) loop-mounted on the host at the folder
 * itself: the host and the harness see the files where they always were, a sandbox that fills
 * it gets ENOSPC, and the host's disk never holds more than the image's size. The mount stays
 * after the sandbox (the host reads outputs at any time); the loop device goes with the mount
 * (LO_FLAGS_AUTOCLEAR). What the folder already held (the harness's uploads, an earlier
 * sandbox's files) is copied in the first time, under the scope's lock. */
#include "linux.h"

#include <fcntl.h>
#include <linux/loop.h>
#include <dirent.h>
#include <spawn.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

extern char **environ;

static int run(char *const argv[], sbx_error_t *err)
{
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDWR, 0);
  posix_spawn_file_actions_adddup2(&fa, 0, 1);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  pid_t pid;
  int r = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r != 0)
    return sbx__make_error(err, r, SBX_E_INTERNAL, "run `%s`", argv[0]);
  int status = 0;
  if (TEMP_FAILURE_RETRY(waitpid(pid, &status, 0)) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return sbx__make_error(err, 0, SBX_E_IO, "`%s` failed (status %d)", argv[0],
                           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

static int make_image(const char *img, uint64_t bytes, sbx_error_t *err)
{
  cleanup_free char *tmp = xasprintf("%s.new", img);
  unlink(tmp);
  cleanup_close int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, (off_t) bytes) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", tmp);
  char owner[128];
  snprintf(owner, sizeof owner, "root_owner=%u:%u,lazy_itable_init=1,lazy_journal_init=1,nodiscard",
           SBX_UID_BASE, SBX_UID_BASE);
  char mkfs[] = "/usr/sbin/mkfs.ext4", q[] = "-q", f[] = "-F", m[] = "-m", zero[] = "0", e[] = "-E";
  char *argv[] = {mkfs, q, f, m, zero, e, owner, tmp, NULL};
  if (run(argv, err) < 0 || rename(tmp, img) < 0) {
    if (err && *err == NULL)
      sbx__make_error(err, errno, SBX_E_IO, "rename `%s`", tmp);
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* Attaches img to a free loop device; returns the device's fd, its path in dev. */
static int attach_loop(const char *img, char dev[32], sbx_error_t *err)
{
  cleanup_close int ifd = open(img, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  cleanup_close int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (ifd < 0 || ctl < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open `%s`", ifd < 0 ? img : "/dev/loop-control");
  for (int attempt = 0; attempt < 16; attempt++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "find a free loop device");
    snprintf(dev, 32, "/dev/loop%d", n);
    /* a container's /dev may lack the nodes the kernel makes */
    if (mknod(dev, S_IFBLK | 0600, makedev(7, (unsigned) n)) < 0 && errno != EEXIST)
      return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", dev);
    int lfd = open(dev, O_RDWR | O_CLOEXEC);
    if (lfd < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "open `%s`", dev);
    struct loop_config cfg = {.fd = (unsigned) ifd, .info = {.lo_flags = LO_FLAGS_AUTOCLEAR}};
    if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0)
      return lfd;
    int e = errno;
    close(lfd);
    if (e != EBUSY) /* EBUSY: another process took it first */
      return sbx__make_error(err, e, SBX_E_IO, "attach `%s` to `%s`", img, dev);
  }
  return sbx__make_error(err, EBUSY, SBX_E_IO, "no free loop device for `%s`", img);
}

int sbx__disk_image(const char *img, uint64_t bytes, sbx_error_t *err)
{
  struct stat st;
  if (lstat(img, &st) < 0) {
    if (errno != ENOENT)
      return sbx__make_error(err, errno, SBX_E_IO, "`%s`", img);
    return make_image(img, bytes, err);
  }
  if (!S_ISREG(st.st_mode))
    return sbx__make_error(err, 0, SBX_E_IO, "`%s` is not a regular file", img);
  /* grown by a larger configured size: the file system follows at its next mount (never shrunk:
   * what is written stays) */
  if ((uint64_t) st.st_size < bytes && truncate(img, (off_t) bytes) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "grow `%s`", img);
  return 0;
}

int sbx__disk_mount(const char *img, const char *at, sbx_error_t *err)
{
  char dev[32];
  cleanup_close int loop = attach_loop(img, dev, err);
  if (loop < 0)
    return -1;
  if (mount(dev, at, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "mount `%s` on `%s`", img, at);
  return 0;
}

static bool is_empty_dir(const char *dir)
{
  DIR *d = opendir(dir);
  if (d == NULL)
    return false;
  struct dirent *e;
  bool empty = true;
  while (empty && (e = readdir(d)))
    empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
  closedir(d);
  return empty;
}

int sbx__user_data_image(const char *dir, uint64_t bytes, sbx_error_t *err)
{
  struct statx stx;
  if (statx(AT_FDCWD, dir, AT_SYMLINK_NOFOLLOW, STATX_TYPE, &stx) < 0 || !S_ISDIR(stx.stx_mode))
    return sbx__make_error(err, errno ? errno : ENOTDIR, SBX_E_IO, "thread folder `%s`", dir);
  if (stx.stx_attributes_mask & stx.stx_attributes & STATX_ATTR_MOUNT_ROOT)
    return 0; /* mounted already (ours, or a file system of the operator's) */
  cleanup_free char *img = xasprintf("%s.img", dir);
  struct stat st;
  bool fresh = lstat(img, &st) < 0 && errno == ENOENT;
  if (sbx__disk_image(img, bytes, err) < 0)
    return -1;
  char dev[32];
  cleanup_close int loop = attach_loop(img, dev, err);
  if (loop < 0)
    return -1;
  /* what the folder holds moves into the image: the folder is set aside, remade as the mount
   * point, and copied from (cp -a never follows a link it copies) */
  cleanup_free char *old = NULL;
  if (!is_empty_dir(dir)) {
    old = xasprintf("%s.old", dir);
    if (rename(dir, old) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "set `%s` aside", dir);
    if (mkdir(dir, 0755) < 0 || chown(dir, SBX_UID_BASE, SBX_UID_BASE) < 0) {
      sbx__make_error(err, errno, SBX_E_IO, "create `%s`", dir);
      rmdir(dir);
      rename(old, dir);
      return -1;
    }
  }
  if (mount(dev, dir, "ext4", MS_NOSUID | MS_NODEV, NULL) < 0) {
    sbx__make_error(err, errno, SBX_E_IO, "mount `%s` on `%s`", img, dir);
    if (old) {
      rmdir(dir);
      rename(old, dir);
    }
    return -1;
  }
  if (fresh) {
    cleanup_free char *lf = xasprintf("%s/lost+found", dir);
    rmdir(lf); /* mkfs's, empty: not part of the thread's files */
  }
  if (old == NULL)
    return 0;
  cleanup_free char *from = xasprintf("%s/.", old);
  cleanup_free char *to = xstrdup(dir);
  char cp[] = "/bin/cp", a[] = "-a", ctx[] = "--no-preserve=context";
  char *argv[] = {cp, a, ctx, from, to, NULL};
  if (run(argv, err) < 0) {
    /* too big for the size (or worse): back as it was, the error says why */
    umount2(dir, MNT_DETACH);
    sbx__rm_rf_at(AT_FDCWD, dir);
    rename(old, dir);
    return -1;
  }
  sbx__rm_rf_at(AT_FDCWD, old);
  return 0;
}
