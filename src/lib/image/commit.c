/* A sandbox's writable upper as a new image (sbx commit, sbxd's snapshots; docs/images.md,
 * "Snapshots"): the upper is written as one uncompressed layer tar (overlayfs whiteouts turned
 * back into OCI `.wh.` entries, owners shifted back to the image's 0-based ids), the parent's
 * config gets its diff_id and a history entry, and the result goes through the ordinary import
 * as an OCI layout, so it is checked and stored like any other image. */
#include "image.h"
#include "dl.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)
#define MEDIA_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define MEDIA_CONFIG "application/vnd.oci.image.config.v1+json"
#define MEDIA_TAR "application/vnd.oci.image.layer.v1.tar"

/* Files the launcher writes into every image sandbox's upper (rootfs.c): a new sandbox of the
 * snapshot gets fresh ones anyway, and committing them would replace the parent image's. */
static const char *const generated[] = {"etc/hostname", "etc/hosts", "etc/resolv.conf"};

struct link_seen {
  dev_t dev;
  ino_t ino;
  char *path;
};

struct wr {
  const struct sbx_archive_api *A;
  struct archive *a;
  struct archive_entry *e;
  int out;
  sbx_sha256_ctx *sha;
  uint64_t bytes;
  uint32_t base, count;
  const char *ovl; /* overlayfs' xattr prefix: trusted.overlay., rootless user.overlay. */
  struct link_seen *links;
  size_t n_links;
  char *buf;
  int io_errno;
  struct sbx_layer_limits lim;
  uint64_t entries, file_bytes;
};

static la_ssize_t write_cb(struct archive *a, void *ctx, const void *p, size_t n)
{
  (void) a;
  struct wr *w = ctx;
  if (sbx__write_all(w->out, p, n) < 0) {
    w->io_errno = errno;
    return -1;
  }
  sbx__sha256_update(w->sha, p, n);
  w->bytes += n;
  return (la_ssize_t) n;
}

/* A host id of the sandbox's range as the image's id (0-based); anything else is nobody. */
static int64_t image_id(const struct wr *w, uint32_t id)
{
  if (w->base == 0)
    return id;
  return id >= w->base && id - w->base < w->count ? (int64_t) (id - w->base) : 65534;
}

/* Copies the xattrs worth keeping (user.* but overlay's, security.capability) into the entry;
 * -1 with a message for overlay features the layer cannot express (redirects, metacopy). */
static int entry_xattrs(struct wr *w, const char *procpath, const char *rel, bool *opaque,
                        sbx_error_t *err)
{
  *opaque = false;
  /* the chunk buffer (not the stack: this frame is on every level of the walk): names in its
   * first half, a value in the second; xattr names and values are at most 64 KiB each */
  char *names = w->buf, *val = w->buf + CHUNK / 2;
  ssize_t n = llistxattr(procpath, names, CHUNK / 2);
  if (n < 0)
    return errno == ENOTSUP ? 0 : sbx__make_error(err, errno, SBX_E_IO, "xattrs of /%s", rel);
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    /* overlay's own (the sandbox cannot set trusted.*); root's overlay is not mounted with
     * userxattr, so user.overlay.* is a sandbox's plain xattr there, neither kept nor obeyed;
     * rootless (userxattr) it is overlay's */
    if (sbx__str_has_prefix(k, w->ovl)) {
      const char *what = k + strlen(w->ovl);
      if (strcmp(what, "redirect") == 0 || strcmp(what, "metacopy") == 0)
        return sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                               "/%s: overlayfs %s (a renamed lower directory or a metadata-only "
                               "copy) cannot be committed as a layer",
                               rel, what);
      if (strcmp(what, "opaque") == 0) {
        ssize_t m = lgetxattr(procpath, k, val, 8);
        *opaque = m > 0 && val[0] == 'y';
      }
      continue; /* origin, impure, nlink, ...: overlay's bookkeeping */
    }
    bool cap = strcmp(k, "security.capability") == 0;
    if ((!sbx__str_has_prefix(k, "user.") && !cap) || sbx__str_has_prefix(k, "user.overlay."))
      continue;
    ssize_t m = lgetxattr(procpath, k, val, CHUNK / 2);
    if (m < 0)
      continue;
    /* a file capability set inside the sandbox is v3 (it names the namespace's root as a host
     * uid): as v2 it means the same in whatever namespace the image runs */
    if (cap && m == 24 && (unsigned char) val[3] == 3) {
      val[3] = 2;
      m = 20;
    }
    w->A->archive_entry_xattr_add_entry(w->e, k, val, (size_t) m);
  }
  return 0;
}

static int put_header(struct wr *w, const char *rel, sbx_error_t *err)
{
  if (w->A->archive_write_header(w->a, w->e) != ARCHIVE_OK)
    return sbx__make_error(err, w->io_errno, SBX_E_IO, "write the layer: /%s: %s", rel,
                           w->A->archive_error_string(w->a));
  return 0;
}

/* An empty regular file entry (a `.wh.` marker). */
static int put_marker(struct wr *w, const char *rel)
{
  w->A->archive_entry_clear(w->e);
  w->A->archive_entry_set_pathname(w->e, rel);
  w->A->archive_entry_set_filetype(w->e, AE_IFREG);
  w->A->archive_entry_set_perm(w->e, 0644);
  w->A->archive_entry_set_size(w->e, 0);
  return w->A->archive_write_header(w->a, w->e) == ARCHIVE_OK ? 0 : -1;
}

static int walk(struct wr *w, int dirfd, const char *rel, int depth, sbx_error_t *err);

static int one(struct wr *w, int dirfd, const char *name, const char *rel, int depth,
               sbx_error_t *err)
{
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "stat /%s", rel);
  /* the import's bounds, checked here already: the work folder never grows past them */
  if (++w->entries > w->lim.max_entries)
    return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                           "the sandbox's root has more than %llu entries "
                           "(sandbox.image_layer_max_entries), at /%s",
                           (unsigned long long) w->lim.max_entries, rel);
  if (S_ISREG(st.st_mode) && (w->file_bytes += (uint64_t) st.st_size) > w->lim.max_bytes)
    return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                           "the sandbox's root holds more than %llu MiB "
                           "(sandbox.image_layer_max_mib), at /%s",
                           (unsigned long long) (w->lim.max_bytes >> 20), rel);
  for (size_t i = 0; i < ARRAY_SIZE(generated); i++)
    if (strcmp(rel, generated[i]) == 0)
      return 0;
  const char *slash = strrchr(rel, '/');
  if (S_ISCHR(st.st_mode) && st.st_rdev == 0) {
    /* an overlay whiteout: NAME deleted */
    cleanup_free char *wh = slash ? xasprintf("%.*s/.wh.%s", (int) (slash - rel), rel, slash + 1)
                                  : xasprintf(".wh.%s", rel);
    if (put_marker(w, wh) < 0)
      return sbx__make_error(err, w->io_errno, SBX_E_IO, "write the layer: /%s: %s", rel,
                             w->A->archive_error_string(w->a));
    return 0;
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISFIFO(st.st_mode))
    return 0; /* sockets and device nodes: a layer has none (extraction refuses them) */
  char procpath[64];
  snprintf(procpath, sizeof procpath, "/proc/self/fd/%d/", dirfd);
  cleanup_free char *xpath = xasprintf("%s%s", procpath, name);
  w->A->archive_entry_clear(w->e);
  w->A->archive_entry_set_pathname(w->e, rel);
  w->A->archive_entry_set_uid(w->e, image_id(w, st.st_uid));
  w->A->archive_entry_set_gid(w->e, image_id(w, st.st_gid));
  w->A->archive_entry_set_perm(w->e, st.st_mode & 07777);
  w->A->archive_entry_set_mtime(w->e, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  bool opaque = false;
  if (entry_xattrs(w, xpath, rel, &opaque, err) < 0)
    return -1;
  if (S_ISDIR(st.st_mode)) {
    w->A->archive_entry_set_filetype(w->e, AE_IFDIR);
    if (put_header(w, rel, err) < 0)
      return -1;
    if (opaque) {
      cleanup_free char *opq = xasprintf("%s/.wh..wh..opq", rel);
      if (put_marker(w, opq) < 0)
        return sbx__make_error(err, w->io_errno, SBX_E_IO, "write the layer: /%s", opq);
    }
    cleanup_close int sub = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "open /%s", rel);
    return walk(w, sub, rel, depth + 1, err);
  }
  if (S_ISLNK(st.st_mode)) {
    /* the chunk buffer, not the stack: this frame is on every level of the walk */
    char *target = w->buf;
    ssize_t n = readlinkat(dirfd, name, target, CHUNK - 1);
    if (n < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "readlink /%s", rel);
    target[n] = '\0';
    w->A->archive_entry_set_filetype(w->e, AE_IFLNK);
    w->A->archive_entry_set_symlink(w->e, target);
    return put_header(w, rel, err);
  }
  if (S_ISFIFO(st.st_mode)) {
    w->A->archive_entry_set_filetype(w->e, AE_IFIFO);
    return put_header(w, rel, err);
  }
  if (st.st_nlink > 1) {
    for (size_t i = 0; i < w->n_links; i++)
      if (w->links[i].dev == st.st_dev && w->links[i].ino == st.st_ino) {
        w->A->archive_entry_set_filetype(w->e, AE_IFREG);
        w->A->archive_entry_set_hardlink(w->e, w->links[i].path);
        w->A->archive_entry_set_size(w->e, 0);
        return put_header(w, rel, err);
      }
    w->links = xreallocarray(w->links, w->n_links + 1, sizeof *w->links);
    w->links[w->n_links++] = (struct link_seen){st.st_dev, st.st_ino, xstrdup(rel)};
  }
  cleanup_close int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open /%s", rel);
  w->A->archive_entry_set_filetype(w->e, AE_IFREG);
  w->A->archive_entry_set_size(w->e, st.st_size);
  if (put_header(w, rel, err) < 0)
    return -1;
  for (off_t left = st.st_size; left > 0;) {
    ssize_t n = TEMP_FAILURE_RETRY(read(fd, w->buf, left < CHUNK ? (size_t) left : CHUNK));
    if (n <= 0)
      return sbx__make_error(err, n < 0 ? errno : 0, SBX_E_IO, "read /%s%s", rel,
                             n == 0 ? ": it shrank while it was read" : "");
    if (w->A->archive_write_data(w->a, w->buf, (size_t) n) != n)
      return sbx__make_error(err, w->io_errno, SBX_E_IO, "write the layer: /%s: %s", rel,
                             w->A->archive_error_string(w->a));
    left -= n;
  }
  return 0;
}

/* The entries of dirfd, sorted (one upper gives one digest). */
static int walk(struct wr *w, int dirfd, const char *rel, int depth, sbx_error_t *err)
{
  if (depth > 4096)
    return sbx__make_error(err, 0, SBX_E_INVALID, "/%s: directories nested too deep", rel);
  DIR *d = fdopendir(dup(dirfd));
  if (d == NULL)
    return sbx__make_error(err, errno, SBX_E_IO, "read /%s", rel);
  sbx_strv_t names = {0};
  struct dirent *de;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
      sbx__strv_push(&names, de->d_name);
  closedir(d);
  sbx__strv_sort(&names);
  int r = 0;
  for (size_t i = 0; r == 0 && i < names.n; i++) {
    cleanup_free char *sub = *rel ? xasprintf("%s/%s", rel, names.v[i]) : xstrdup(names.v[i]);
    r = one(w, dirfd, names.v[i], sub, depth, err);
  }
  sbx__strv_free(&names);
  return r;
}

int sbx__commit_begin(const char *home, struct sbx_commit_work *cw, sbx_error_t *err)
{
  memset(cw, 0, sizeof *cw);
  if (sbx__image_dl(err) < 0 || sbx__image_store_private(home, true, err) < 0)
    return -1;
  cleanup_free char *store = sbx__image_dir(home);
  char name[] = "commit-XXXXXXXX";
  sbx__random_hex(name + 7, 8);
  cw->dir = xasprintf("%s/tmp/%s", store, name);
  cleanup_free char *blobs = xasprintf("%s/blobs/sha256", cw->dir);
  if (sbx__mkdir_p(blobs, 0700) < 0) {
    sbx__make_error(err, errno, SBX_E_IO, "create `%s`", blobs);
    sbx__commit_end(cw);
    return -1;
  }
  return 0;
}

void sbx__commit_end(struct sbx_commit_work *cw)
{
  if (cw->dir) {
    char *slash = strrchr(cw->dir, '/');
    *slash = '\0';
    cleanup_close int tfd = open(cw->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (tfd >= 0)
      sbx__rm_rf_at(tfd, slash + 1);
  }
  free(cw->dir);
  memset(cw, 0, sizeof *cw);
}

static int commit_layer(struct sbx_commit_work *cw, const char *upper, uint32_t uid_base,
                        uint32_t uid_count, const char *ovl, const struct sbx_layer_limits *lim,
                        sbx_error_t *err)
{
  cleanup_close int root = open(upper, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (root < 0)
    return sbx__make_error(err, errno, errno == ENOENT ? SBX_E_NOT_FOUND : SBX_E_IO,
                           "open the sandbox's upper `%s`", upper);
  cleanup_free char *tmp = xasprintf("%s/layer.tar", cw->dir);
  struct wr w = {.A = sbx__archive_api(), .base = uid_base, .count = uid_count, .ovl = ovl};
  if (lim)
    w.lim = *lim;
  w.lim.max_bytes = lim && lim->max_bytes ? lim->max_bytes : SBX_LAYER_MAX_BYTES_DEFAULT;
  w.lim.max_entries = lim && lim->max_entries ? lim->max_entries : SBX_LAYER_MAX_ENTRIES_DEFAULT;
  w.out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (w.out < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", tmp);
  w.sha = sbx__sha256_new();
  w.buf = xmalloc(CHUNK);
  w.a = w.A->archive_write_new();
  w.e = w.A->archive_entry_new();
  int r = 0;
  if (w.a == NULL || w.e == NULL || w.A->archive_write_set_format_pax_restricted(w.a) != 0 ||
      w.A->archive_write_set_bytes_in_last_block(w.a, 1) != 0 ||
      w.A->archive_write_open(w.a, &w, NULL, write_cb, NULL) != ARCHIVE_OK)
    r = sbx__make_error(err, 0, SBX_E_INTERNAL, "start the layer tar");
  if (r == 0)
    r = walk(&w, root, "", 0, err);
  if (r == 0 && w.A->archive_write_close(w.a) != ARCHIVE_OK)
    r = sbx__make_error(err, w.io_errno, SBX_E_IO, "write the layer: %s",
                        w.A->archive_error_string(w.a));
  if (w.a)
    w.A->archive_write_free(w.a);
  if (w.e)
    w.A->archive_entry_free(w.e);
  char hex[SBX_DIGEST_HEX + 1];
  sbx__sha256_final(w.sha, hex);
  close(w.out); /* synced by sbx__commit_finish, after the thaw */
  for (size_t i = 0; i < w.n_links; i++)
    free(w.links[i].path);
  free(w.links);
  free(w.buf);
  if (r < 0)
    return -1;
  cleanup_free char *dst = xasprintf("%s/blobs/sha256/%s", cw->dir, hex);
  if (rename(tmp, dst) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "stage the layer");
  memcpy(cw->layer_hex, hex, sizeof hex);
  cw->lim = w.lim;
  cw->layer_size = w.bytes;
  return 0;
}

struct commit_args {
  struct sbx_commit_work *cw;
  const char *upper;
  const struct sbx_layer_limits *lim;
};

/* In the store's namespace the upper's ids are the sandbox's own, 0-based (base 0). */
static int commit_child(void *arg, sbx_buf_t *out, sbx_error_t *err)
{
  struct commit_args *a = arg;
  if (commit_layer(a->cw, a->upper, 0, 0, "user.overlay.", a->lim, err) < 0)
    return -1;
  sbx__buf_printf(out, "%s %llu", a->cw->layer_hex, (unsigned long long) a->cw->layer_size);
  return 0;
}

int sbx__commit_layer(struct sbx_commit_work *cw, const char *upper, uint32_t uid_base,
                      uint32_t uid_count, const struct sbx_layer_limits *lim, sbx_error_t *err)
{
  if (geteuid() == 0)
    return commit_layer(cw, upper, uid_base, uid_count, "trusted.overlay.", lim, err);
  /* rootless: an image sandbox's upper has files of the store slice's ids (userns.c) */
  struct commit_args a = {cw, upper, lim};
  sbx_buf_t out = {0};
  char hex[SBX_DIGEST_HEX + 1];
  unsigned long long size = 0;
  int r = sbx__store_run(commit_child, &a, &out, err);
  if (r == 0 && (out.data == NULL || sscanf(out.data, "%64s %llu", hex, &size) != 2 ||
                 strlen(hex) != SBX_DIGEST_HEX))
    r = sbx__make_error(err, 0, SBX_E_INTERNAL, "the layer's writer said nothing");
  sbx__buf_free(&out);
  if (r < 0)
    return -1;
  memcpy(cw->layer_hex, hex, sizeof hex);
  cw->layer_size = size;
  if (lim)
    cw->lim = *lim; /* the image's budget and reserve too, for the import */
  cw->lim.max_bytes = lim && lim->max_bytes ? lim->max_bytes : SBX_LAYER_MAX_BYTES_DEFAULT;
  cw->lim.max_entries = lim && lim->max_entries ? lim->max_entries : SBX_LAYER_MAX_ENTRIES_DEFAULT;
  return 0;
}

/* A docker layer media type as its OCI twin (the new manifest is an OCI one). */
static const char *oci_layer_type(const char *t)
{
  if (t == NULL)
    return MEDIA_TAR "+gzip";
  if (strcmp(t, "application/vnd.docker.image.rootfs.diff.tar.gzip") == 0)
    return MEDIA_TAR "+gzip";
  if (strcmp(t, "application/vnd.docker.image.rootfs.diff.tar.zstd") == 0)
    return MEDIA_TAR "+zstd";
  if (strcmp(t, "application/vnd.docker.image.rootfs.diff.tar") == 0)
    return MEDIA_TAR;
  return t;
}

static int read_blob(const char *store, const char *digest, char **data, size_t *len,
                     sbx_error_t *err)
{
  cleanup_free char *p = xasprintf("%s/blobs/sha256/%s", store, digest + 7);
  if (!sbx__digest_valid(digest) || sbx__read_file_at(AT_FDCWD, p, 64u << 20, data, len) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "read blob %s of the store", digest);
  return 0;
}

/* Writes data as a blob of the layout; hex receives its digest. */
static int put_blob(struct sbx_commit_work *cw, const char *data, char hex[SBX_DIGEST_HEX + 1],
                    sbx_error_t *err)
{
  sbx_sha256_ctx *sha = sbx__sha256_new();
  sbx__sha256_update(sha, data, strlen(data));
  sbx__sha256_final(sha, hex);
  cleanup_free char *p = xasprintf("%s/blobs/sha256/%s", cw->dir, hex);
  if (sbx__write_file_at(AT_FDCWD, p, data, strlen(data), 0644, false) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write `%s`", p);
  return 0;
}

static char *now_rfc3339(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char s[40];
  strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return xstrdup(s);
}

/* The parent's config with the new layer: its diff_id appended, a history entry, created now. */
static char *derive_config(const char *pjson, size_t plen, const char *diff_hex,
                           const char *created_by, const char *created, sbx_error_t *err)
{
  json_error_t je;
  json_auto_t *c = json_loadb(pjson, plen, 0, &je);
  if (!json_is_object(c)) {
    sbx__make_error(err, 0, SBX_E_INVALID, "the parent image's config: %s", je.text);
    return NULL;
  }
  json_t *rootfs = json_object_get(c, "rootfs");
  if (!json_is_object(rootfs))
    json_object_set_new(c, "rootfs",
                        rootfs = json_pack("{s:s,s:[]}", "type", "layers", "diff_ids"));
  json_t *ids = json_object_get(rootfs, "diff_ids");
  if (!json_is_array(ids))
    json_object_set_new(rootfs, "diff_ids", ids = json_array());
  json_array_append_new(ids, json_sprintf("sha256:%s", diff_hex));
  json_t *hist = json_object_get(c, "history");
  if (!json_is_array(hist))
    json_object_set_new(c, "history", hist = json_array());
  json_array_append_new(hist, json_pack("{s:s,s:s,s:s}", "created", created, "created_by",
                                        created_by, "comment", "sbx commit"));
  json_object_set_new(c, "created", json_string(created));
  return json_dumps(c, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

int sbx__commit_finish(const char *home, struct sbx_commit_work *cw, const char *parent,
                       const sbx_strv_t *parent_layers, const char *name, const char *created_by,
                       char **digest_out, sbx_error_t *err)
{
  cleanup_free char *store = sbx__image_dir(home);
  cleanup_free char *lpath = xasprintf("%s/blobs/sha256/%s", cw->dir, cw->layer_hex);
  cleanup_close int lfd = open(lpath, O_RDONLY | O_CLOEXEC);
  if (lfd < 0 || fsync(lfd) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "sync `%s`", lpath);
  struct sbx_image_rootfs pr;
  if (sbx__image_resolve(home, parent, &pr, err) < 0)
    return -1;
  /* the image the sandbox was made from, not whatever has its name now */
  bool same = pr.layer_ids.n == parent_layers->n;
  for (size_t i = 0; same && i < pr.layer_ids.n; i++)
    same = strcmp(pr.layer_ids.v[i], parent_layers->v[i]) == 0;
  cleanup_free char *mdigest = pr.digest ? xstrdup(pr.digest) : NULL;
  sbx__image_rootfs_free(&pr);
  if (!same || mdigest == NULL)
    return sbx__make_error(err, 0, SBX_E_CONFLICT,
                           "image `%s` is no longer the one the sandbox was made from (it was "
                           "replaced): its layers cannot be named",
                           parent);
  cleanup_free char *mjson = NULL, *cjson = NULL;
  size_t mlen = 0, clen = 0;
  struct sbx_manifest m;
  if (read_blob(store, mdigest, &mjson, &mlen, err) < 0 ||
      sbx__manifest_parse(mjson, mlen, &m, err) < 0)
    return -1;
  int r = read_blob(store, m.config.digest, &cjson, &clen, err);
  json_t *layers = json_array();
  for (size_t i = 0; r == 0 && i < m.n_layers; i++) {
    const struct sbx_desc *l = &m.layers[i];
    cleanup_free char *from = xasprintf("%s/blobs/sha256/%s", store, l->digest + 7);
    cleanup_free char *to = xasprintf("%s/blobs/sha256/%s", cw->dir, l->digest + 7);
    if (link(from, to) < 0 && errno != EEXIST)
      r = sbx__make_error(err, errno, SBX_E_IO, "link the parent's layer %s", l->digest);
    json_array_append_new(layers,
                          json_pack("{s:s,s:s,s:I}", "mediaType", oci_layer_type(l->media_type),
                                    "digest", l->digest, "size", (json_int_t) l->size));
  }
  sbx__manifest_free(&m);
  cleanup_free char *created = now_rfc3339();
  cleanup_free char *config =
      r == 0 ? derive_config(cjson, clen, cw->layer_hex, created_by, created, err) : NULL;
  char chex[SBX_DIGEST_HEX + 1], mhex[SBX_DIGEST_HEX + 1];
  if (r == 0 && (config == NULL || put_blob(cw, config, chex, err) < 0))
    r = -1;
  if (r < 0) {
    json_decref(layers);
    return -1;
  }
  cleanup_free char *ldigest = xasprintf("sha256:%s", cw->layer_hex);
  cleanup_free char *cdigest = xasprintf("sha256:%s", chex);
  json_array_append_new(layers, json_pack("{s:s,s:s,s:I}", "mediaType", MEDIA_TAR, "digest",
                                          ldigest, "size", (json_int_t) cw->layer_size));
  json_auto_t *man = json_pack("{s:i,s:s,s:{s:s,s:s,s:I},s:o}", "schemaVersion", 2, "mediaType",
                               MEDIA_MANIFEST, "config", "mediaType", MEDIA_CONFIG, "digest",
                               cdigest, "size", (json_int_t) strlen(config), "layers", layers);
  cleanup_free char *mtext = json_dumps(man, JSON_COMPACT | JSON_PRESERVE_ORDER);
  if (put_blob(cw, mtext, mhex, err) < 0)
    return -1;
  cleanup_free char *norm = sbx__image_normalize(name);
  json_auto_t *ix =
      json_pack("{s:i,s:[{s:s,s:s+,s:I,s:{s:s}}]}", "schemaVersion", 2, "manifests", "mediaType",
                MEDIA_MANIFEST, "digest", "sha256:", mhex, "size", (json_int_t) strlen(mtext),
                "annotations", "org.opencontainers.image.ref.name", norm);
  cleanup_free char *ixtext = json_dumps(ix, JSON_COMPACT);
  cleanup_free char *ixpath = xasprintf("%s/index.json", cw->dir);
  cleanup_free char *olpath = xasprintf("%s/oci-layout", cw->dir);
  static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
  if (sbx__write_file_at(AT_FDCWD, ixpath, ixtext, strlen(ixtext), 0644, false) < 0 ||
      sbx__write_file_at(AT_FDCWD, olpath, layout, strlen(layout), 0644, false) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write the layout in `%s`", cw->dir);
  struct sbx_image_import_opts o = {.name = norm, .limits = cw->lim, .verified = true};
  sbx_strv_t names = {0};
  r = sbx__image_import(home, cw->dir, &o, &names, err);
  sbx__strv_free(&names);
  if (r == 0 && digest_out)
    *digest_out = xasprintf("sha256:%s", mhex);
  return r;
}
