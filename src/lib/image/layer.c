/* Layer extraction. A layer is attacker input: every entry is created by *at() calls relative
 * to directories opened with openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS) from the layer's
 * root, so no name (absolute, `..`, or through a symlink an earlier entry made) reaches outside
 * it. The layer directory starts empty, so a hard link can only name an entry of this layer.
 * Device nodes are refused except overlayfs whiteouts, which the `.wh.` convention becomes:
 * `.wh.NAME` a 0/0 character device NAME, `.wh..wh..opq` the opaque xattr on its directory.
 * Owners, modes (setuid included), xattrs (not trusted.*: overlayfs' own) and times are kept
 * (so the store folder is private: sbx__image_store_private). Aligned blocks of zeros become
 * holes, and every byte counts against the whole image's budget (sbx__image_charge), which
 * also keeps a reserve of free space on the store's file system.
 *
 * Rootless (tally->rootless: an ordinary user's store, written in its user namespace, userns.c)
 * the same calls run as that namespace's root, so the kernel's checks are the user's: device
 * nodes cannot be made and are skipped (counted), an owner the namespace does not map becomes
 * root's (counted), and the opaque mark is overlayfs' userxattr one, user.overlay.opaque (so
 * an image's own user.overlay.* xattrs are refused: they would forge it).
 *
 * The tar stream is hashed while it is read (the diff_id): a raw libarchive reader undoes the
 * compression and a tar reader reads through it. */
#include "image.h"
#include "dl.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>

#define CHUNK (256u << 10)

struct reader {
  const struct sbx_archive_api *ar;
  struct archive *raw;
  sbx_sha256_ctx *sha;
  char *buf;
  bool failed;
};

static la_ssize_t tar_read(struct archive *a, void *arg, const void **out)
{
  struct reader *r = arg;
  la_ssize_t n = r->ar->archive_read_data(r->raw, r->buf, CHUNK);
  if (n < 0) {
    r->failed = true;
    r->ar->archive_set_error(a, EIO, "%s", r->ar->archive_error_string(r->raw));
    return -1;
  }
  sbx__sha256_update(r->sha, r->buf, (size_t) n);
  *out = r->buf;
  return n;
}

/* Splits a tar name into its parent path and last component, refusing what cannot be inside
 * the layer. "" stands for the root. */
static int split_name(const char *name, char **parent, char **base, sbx_error_t *err)
{
  const char *p = name;
  while (p[0] == '.' && p[1] == '/')
    p += 2;
  if (name[0] == '/')
    return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry `%s`: absolute name", name);
  cleanup_free char *s = xstrdup(p);
  size_t n = strlen(s);
  while (n > 0 && s[n - 1] == '/')
    s[--n] = '\0';
  /* every component checked: no "..", no "." in the middle, no empty one */
  for (char *c = s; *c;) {
    char *e = strchr(c, '/');
    size_t l = e ? (size_t) (e - c) : strlen(c);
    if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "layer entry `%s`: `..`, `.` or empty "
                             "component",
                             name);
    c += l + (e != NULL);
  }
  if (n == 0 || strcmp(s, ".") == 0) {
    *parent = xstrdup("");
    *base = xstrdup("");
    return 0;
  }
  char *slash = strrchr(s, '/');
  if (slash) {
    *slash = '\0';
    *parent = xstrdup(s);
    *base = xstrdup(slash + 1);
  } else {
    *parent = xstrdup("");
    *base = xstrdup(s);
  }
  return 0;
}

static int open_in(int rootfd, const char *path)
{
  struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                                    RESOLVE_NO_XDEV};
  return (int) syscall(SYS_openat2, rootfd, *path ? path : ".", &how, sizeof how);
}

/* Opens the parent directory, creating missing ones (0755, root) on the way. */
static int open_parent(int rootfd, const char *parent, const char *name, sbx_error_t *err)
{
  int fd = open_in(rootfd, parent);
  if (fd >= 0 || errno != ENOENT) {
    if (fd < 0)
      sbx__make_error(err, errno, SBX_E_INVALID, "layer entry `%s`: parent%s", name,
                      errno == ELOOP ? " goes through a symlink" : "");
    return fd;
  }
  cleanup_free char *p = xstrdup(parent);
  /* component by component: mkdir where missing */
  cleanup_close int cur = open_in(rootfd, "");
  if (cur < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "open the layer root");
  char *save = NULL;
  for (char *c = strtok_r(p, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
    if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: create parent", name);
    int next = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0)
      return sbx__make_error(err, errno, SBX_E_INVALID, "layer entry `%s`: parent%s", name,
                             errno == ELOOP ? " goes through a symlink" : " is not a directory");
    close(cur);
    cur = next;
  }
  return steal_fd(&cur);
}

/* Removes what is at base (a directory only if the new entry is not one). */
static int clear(int pfd, const char *base, bool keep_dir, const char *name, sbx_error_t *err)
{
  struct stat st;
  if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`", name);
  if (S_ISDIR(st.st_mode)) {
    if (keep_dir)
      return 1;
    if (sbx__rm_rf_at(pfd, base) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: replace", name);
    return 0;
  }
  if (unlinkat(pfd, base, 0) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: replace", name);
  return 0;
}

/* chown, or rootless with an owner the store's namespace does not map (EINVAL), root's */
static int own(int dirfd, const char *path, int flags, uid_t uid, gid_t gid,
               struct sbx_layer_tally *t)
{
  if (fchownat(dirfd, path, uid, gid, flags) == 0)
    return 0;
  if (errno != EINVAL || t == NULL || !t->rootless)
    return -1;
  t->squashed++;
  return fchownat(dirfd, path, 0, 0, flags);
}

static int own_entry(const struct sbx_archive_api *ar, struct archive_entry *e, int dirfd,
                     const char *path, int flags, struct sbx_layer_tally *t)
{
  return own(dirfd, path, flags, (uid_t) ar->archive_entry_uid(e), (gid_t) ar->archive_entry_gid(e),
             t);
}

static int set_xattrs(const struct sbx_archive_api *ar, struct archive_entry *e, int fd,
                      const char *name, const struct sbx_layer_tally *t, sbx_error_t *err)
{
  const char *key;
  const void *val;
  size_t size;
  ar->archive_entry_xattr_reset(e);
  while (ar->archive_entry_xattr_next(e, &key, &val, &size) == ARCHIVE_OK) {
    /* overlayfs reads trusted.overlay.* (redirects, metacopy): an image must not forge them */
    if (strncmp(key, "trusted.", 8) == 0 ||
        (t && t->rootless && strncmp(key, "user.overlay.", 13) == 0))
      return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry `%s`: xattr `%s` refused", name,
                             key);
    if (strncmp(key, "user.", 5) != 0 && strcmp(key, "security.capability") != 0)
      continue; /* ACLs and LSM labels are the host's business */
    if (fsetxattr(fd, key, val, size, 0) < 0 && errno != ENOTSUP)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: xattr `%s`", name, key);
  }
  return 0;
}

static int set_meta(const struct sbx_archive_api *ar, struct archive_entry *e, int fd,
                    const char *name, struct sbx_layer_tally *t, sbx_error_t *err)
{
  /* chown first: it clears setuid and setgid, which the chmod puts back */
  if (own_entry(ar, e, fd, "", AT_EMPTY_PATH, t) < 0 ||
      fchmod(fd, ar->archive_entry_perm(e) & 07777) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: owner and mode", name);
  if (set_xattrs(ar, e, fd, name, t, err) < 0)
    return -1;
  struct timespec ts[2] = {
      {.tv_sec = ar->archive_entry_mtime(e), .tv_nsec = ar->archive_entry_mtime_nsec(e)},
      {.tv_sec = ar->archive_entry_mtime(e), .tv_nsec = ar->archive_entry_mtime_nsec(e)}};
  if (ar->archive_entry_atime_is_set(e))
    ts[0] = (struct timespec){.tv_sec = ar->archive_entry_atime(e),
                              .tv_nsec = ar->archive_entry_atime_nsec(e)};
  (void) futimens(fd, ts);
  return 0;
}

/* ---- the whole image's budget, and zeros as holes ---- */

#define HOLE 4096u                   /* a block of zeros this large, aligned, is not written */
#define FREE_CHECK_EVERY (32u << 20) /* bytes between two looks at the free space */

static bool zeros(const char *p, size_t n)
{
  return p[0] == 0 && memcmp(p, p + 1, n - 1) == 0;
}

static bool hole_at(const char *buf, size_t n, size_t j, uint64_t off, size_t *k)
{
  size_t in_block = HOLE - (size_t) ((off + j) % HOLE);
  *k = n - j < in_block ? n - j : in_block;
  return *k == HOLE && zeros(buf + j, HOLE);
}

int sbx__write_sparse(int fd, const char *buf, size_t n, uint64_t *off)
{
  size_t i = 0, k;
  while (i < n) {
    size_t j = i;
    while (j < n && !hole_at(buf, n, j, *off, &k))
      j += k;
    for (size_t w = i; w < j;) {
      ssize_t got = TEMP_FAILURE_RETRY(pwrite(fd, buf + w, j - w, (off_t) (*off + w)));
      if (got <= 0) {
        if (got == 0)
          errno = EIO;
        return -1;
      }
      w += (size_t) got;
    }
    while (j < n && hole_at(buf, n, j, *off, &k))
      j += k; /* seeked over: the file system allocates nothing there */
    i = j;
  }
  *off += n;
  return 0;
}

int sbx__sparse_end(int fd, uint64_t off)
{
  return ftruncate(fd, (off_t) off);
}

int sbx__image_charge(struct sbx_image_budget *b, const struct sbx_layer_limits *lim, int fd,
                      uint64_t n, const char *what, sbx_error_t *err)
{
  uint64_t max = lim->max_image_bytes ? lim->max_image_bytes : SBX_IMAGE_MAX_BYTES_DEFAULT;
  if (n > max - b->spent)
    return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                           "%s: the image unpacks to more than its budget of %llu MiB "
                           "(sandbox.image_max_mib); nothing of it was stored",
                           what, (unsigned long long) (max >> 20));
  bool first = b->spent == 0 && b->checked == 0;
  b->spent += n;
  if (lim->reserve_none || (!first && b->spent - b->checked < FREE_CHECK_EVERY))
    return 0;
  /* every import in flight looks: together they leave the reserve free (or fail), however many
   * there are */
  b->checked = b->spent ? b->spent : 1;
  struct statvfs v;
  if (fstatvfs(fd, &v) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "%s: statvfs of the image store", what);
  uint64_t avail = (uint64_t) v.f_bavail * v.f_frsize;
  uint64_t reserve = lim->reserve_bytes;
  if (reserve == 0) {
    /* the default: 1 GiB, or 5% of a smaller file system (a small tmpfs as the home) */
    uint64_t part = (uint64_t) v.f_blocks * v.f_frsize / 20;
    reserve = part < SBX_IMAGE_RESERVE_DEFAULT ? part : SBX_IMAGE_RESERVE_DEFAULT;
  }
  if (avail < reserve)
    return sbx__make_error(err, ENOSPC, SBX_E_TOO_LARGE,
                           "%s: the image store's file system has %llu MiB free, under the "
                           "reserve of %llu MiB imports keep (sandbox.image_min_free_mib); "
                           "nothing of the image was stored",
                           what, (unsigned long long) (avail >> 20),
                           (unsigned long long) (reserve >> 20));
  return 0;
}

static int write_data(struct archive *a, const struct sbx_archive_api *ar, int fd, const char *name,
                      char *buf, uint64_t *total, const struct sbx_layer_limits *lim,
                      struct sbx_image_budget *budget, sbx_error_t *err)
{
  uint64_t max = lim->max_bytes, off = 0;
  cleanup_free char *what = xasprintf("layer entry `%s`", name);
  for (;;) {
    la_ssize_t n = ar->archive_read_data(a, buf, CHUNK);
    if (n < 0)
      return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry `%s`: %s", name,
                             ar->archive_error_string(a));
    if (n == 0)
      break;
    *total += (uint64_t) n;
    if (*total > max)
      return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                             "layer entry `%s`: the layer exceeds %llu "
                             "bytes",
                             name, (unsigned long long) max);
    if (budget && sbx__image_charge(budget, lim, fd, (uint64_t) n, what, err) < 0)
      return -1;
    if (sbx__write_sparse(fd, buf, (size_t) n, &off) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: write", name);
  }
  if (sbx__sparse_end(fd, off) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: write", name);
  return 0;
}

static int entry(struct archive *a, const struct sbx_archive_api *ar, struct archive_entry *e,
                 int rootfd, char *buf, uint64_t *total, const struct sbx_layer_limits *lim,
                 struct sbx_layer_tally *t, sbx_error_t *err)
{
  const char *name = ar->archive_entry_pathname(e);
  if (name == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry without a name");
  cleanup_free char *parent = NULL, *base = NULL;
  if (split_name(name, &parent, &base, err) < 0)
    return -1;
  mode_t type = ar->archive_entry_filetype(e);
  const char *hardlink = ar->archive_entry_hardlink(e);
  int64_t size = ar->archive_entry_size(e);
  if (size < 0 || (uint64_t) size > lim->max_bytes - *total)
    return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                           "layer entry `%s`: the layer exceeds %llu bytes", name,
                           (unsigned long long) lim->max_bytes);
  if (t && t->budget) {
    /* refused at its header: an entry larger than what is left is not written at all */
    struct sbx_image_budget ahead = *t->budget;
    ahead.checked = ahead.spent; /* no free space check for the look ahead */
    cleanup_free char *what = xasprintf("layer entry `%s`", name);
    if (sbx__image_charge(&ahead, lim, rootfd, (uint64_t) size, what, err) < 0)
      return -1;
  }
  if (*base == '\0') {
    /* the layer root itself ("./"): its metadata only */
    if (type != AE_IFDIR)
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "layer entry `%s`: the root must be a "
                             "directory",
                             name);
    return set_meta(ar, e, rootfd, name, t, err);
  }
  cleanup_close int pfd = open_parent(rootfd, parent, name, err);
  if (pfd < 0)
    return -1;
  if (strcmp(base, ".wh..wh..opq") == 0) {
    bool user = t && t->rootless;
    if (fsetxattr(pfd, user ? "user.overlay.opaque" : "trusted.overlay.opaque", "y", 1, 0) < 0)
      return sbx__make_error(err, errno, SBX_E_UNSUPPORTED,
                             "layer entry `%s`: mark the directory opaque (%s xattrs)", name,
                             user ? "user" : "trusted");
    return 0;
  }
  if (strncmp(base, ".wh..wh.", 8) == 0)
    return 0; /* aufs bookkeeping */
  if (strncmp(base, ".wh.", 4) == 0) {
    const char *victim = base + 4;
    if (*victim == '\0' || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0)
      return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry `%s`: bad whiteout", name);
    if (clear(pfd, victim, false, name, err) < 0)
      return -1;
    if (mknodat(pfd, victim, S_IFCHR | 0000, makedev(0, 0)) < 0)
      return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "layer entry `%s`: make the whiteout",
                             name);
    return 0;
  }
  if (hardlink) {
    cleanup_free char *tparent = NULL, *tbase = NULL;
    if (split_name(hardlink, &tparent, &tbase, NULL) < 0)
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "layer entry `%s`: hard link to `%s`, outside the layer", name,
                             hardlink);
    if (*tbase == '\0')
      return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry `%s`: hard link to the root",
                             name);
    cleanup_close int tfd = open_in(rootfd, tparent);
    struct stat st;
    if (tfd < 0 || fstatat(tfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
      return sbx__make_error(err, errno, SBX_E_INVALID,
                             "layer entry `%s`: hard link to `%s`, which is not a file of this "
                             "layer",
                             name, hardlink);
    if (clear(pfd, base, false, name, err) < 0)
      return -1;
    if (linkat(tfd, tbase, pfd, base, 0) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: hard link", name);
    return 0;
  }
  int kept = clear(pfd, base, type == AE_IFDIR, name, err);
  if (kept < 0)
    return -1;
  switch (type) {
  case AE_IFREG: {
    cleanup_close int fd =
        openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: create", name);
    if (write_data(a, ar, fd, name, buf, total, lim, t ? t->budget : NULL, err) < 0)
      return -1;
    return set_meta(ar, e, fd, name, t, err);
  }
  case AE_IFDIR: {
    if (!kept && mkdirat(pfd, base, 0700) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: mkdir", name);
    cleanup_close int fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: open", name);
    return set_meta(ar, e, fd, name, t, err);
  }
  case AE_IFLNK: {
    const char *target = ar->archive_entry_symlink(e);
    if (target == NULL || *target == '\0')
      return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry `%s`: symlink without a target",
                             name);
    /* the target is never followed here; inside the sandbox it resolves in its own root */
    if (symlinkat(target, pfd, base) < 0 || own_entry(ar, e, pfd, base, AT_SYMLINK_NOFOLLOW, t) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: symlink", name);
    struct timespec ts[2] = {{.tv_sec = ar->archive_entry_mtime(e)},
                             {.tv_sec = ar->archive_entry_mtime(e)}};
    (void) utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW);
    return 0;
  }
  case AE_IFIFO: {
    if (mknodat(pfd, base, S_IFIFO | 0600, 0) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: fifo", name);
    cleanup_close int fd = openat(pfd, base, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || own_entry(ar, e, fd, "", AT_EMPTY_PATH, t) < 0 ||
        fchmodat(pfd, base, ar->archive_entry_perm(e) & 0777, 0) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "layer entry `%s`: fifo", name);
    return 0;
  }
  case AE_IFCHR:
  case AE_IFBLK:
    if (t && t->rootless) {
      t->devices++; /* an ordinary user cannot make one (podman skips them too) */
      return 0;
    }
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "layer entry `%s`: device nodes are refused (only whiteouts are kept)",
                           name);
  default:
    return sbx__make_error(err, 0, SBX_E_INVALID, "layer entry `%s`: unsupported type 0%o", name,
                           (unsigned) type);
  }
}

int sbx__layer_extract(int fd, int rootfd, const struct sbx_layer_limits *lim,
                       struct sbx_layer_tally *tally, char diff_id[SBX_DIGEST_HEX + 1],
                       sbx_error_t *err)
{
  if (sbx__image_dl(err) < 0)
    return -1;
  const struct sbx_archive_api *ar = sbx__archive_api();
  struct reader r = {.ar = ar, .buf = xmalloc(CHUNK)};
  cleanup_free char *data = xmalloc(CHUNK);
  struct archive *tar = NULL;
  struct archive_entry *e;
  int ret = -1;
  uint64_t total = 0, entries = 0;
  r.raw = ar->archive_read_new();
  ar->archive_read_support_filter_gzip(r.raw);
  ar->archive_read_support_filter_zstd(r.raw);
  ar->archive_read_support_format_raw(r.raw);
  if (ar->archive_read_open_fd(r.raw, fd, CHUNK) != ARCHIVE_OK ||
      ar->archive_read_next_header(r.raw, &e) != ARCHIVE_OK) {
    sbx__make_error(err, 0, SBX_E_INVALID, "layer: %s", ar->archive_error_string(r.raw));
    goto out;
  }
  r.sha = sbx__sha256_new();
  tar = ar->archive_read_new();
  ar->archive_read_support_format_tar(tar);
  if (ar->archive_read_open(tar, &r, NULL, tar_read, NULL) != ARCHIVE_OK) {
    sbx__make_error(err, 0, SBX_E_INVALID, "layer: %s", ar->archive_error_string(tar));
    goto out;
  }
  for (;;) {
    int h = ar->archive_read_next_header(tar, &e);
    if (h == ARCHIVE_EOF)
      break;
    if (h < ARCHIVE_WARN) {
      sbx__make_error(err, 0, SBX_E_INVALID, "layer: %s (truncated or not a tar?)",
                      ar->archive_error_string(tar));
      goto out;
    }
    if (++entries > lim->max_entries) {
      sbx__make_error(err, 0, SBX_E_TOO_LARGE, "layer: more than %llu entries",
                      (unsigned long long) lim->max_entries);
      goto out;
    }
    if (entry(tar, ar, e, rootfd, data, &total, lim, tally, err) < 0)
      goto out;
  }
  /* the rest of the stream (end-of-archive blocks, padding) belongs to the diff_id too */
  for (;;) {
    la_ssize_t n = ar->archive_read_data(r.raw, r.buf, CHUNK);
    if (n < 0) {
      sbx__make_error(err, 0, SBX_E_INVALID, "layer: %s", ar->archive_error_string(r.raw));
      goto out;
    }
    if (n == 0)
      break;
    sbx__sha256_update(r.sha, r.buf, (size_t) n);
  }
  sbx__sha256_final(r.sha, diff_id);
  r.sha = NULL;
  ret = 0;
out:
  if (r.sha) {
    char dummy[SBX_DIGEST_HEX + 1];
    sbx__sha256_final(r.sha, dummy);
  }
  if (tar)
    ar->archive_read_free(tar);
  ar->archive_read_free(r.raw);
  free(r.buf);
  return ret;
}
