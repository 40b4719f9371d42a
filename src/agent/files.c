/* File and search operations, done natively inside the sandbox. Every path is absolute and
 * free of ".." (checked again here), and is resolved with openat2(RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS): symlinks made in the sandbox resolve inside the sandbox's root and
 * /proc magic links are refused. Replacing writes go to a temporary file in the same directory
 * that is renamed over the target after fsync, so a crash never leaves a torn file where a
 * complete one was. */
#include "files.h"
#include "paths.h"
#include "search.h"
#include "walk.h"
#include "text.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

static int root_fd = -1;

/* A writable host folder is idmapped (agent.h's guard_ids): what sbx-init changes for a client
 * gets no setuid/setgid mode; and with guard_nobody no file is given the id NOBODY, which is
 * host root's there (ids.c's foreign owner's slot). NOBODY is also what the kernel shows for a
 * file whose host owner the sandbox does not map. */
static bool guard_ids, guard_nobody;
#define NOBODY 65534u
#define SETID_BITS ((uint64_t) (S_ISUID | S_ISGID))

/* Whether a failure e on base in dirfd comes of its file belonging to a host user the sandbox
 * does not map (shown as NOBODY): root inside has no capability over such a file, and the
 * kernel says EOVERFLOW ("Value too large") when it is deleted or replaced (EOVERFLOW says
 * so in any sandbox, EPERM and EACCES only where a host folder is idmapped). */
static bool unmapped_owner(int e, int dirfd, const char *base, struct stat *st)
{
  return (e == EOVERFLOW || (guard_ids && (e == EPERM || e == EACCES))) && dirfd >= 0 && base &&
         fstatat(dirfd, base, st, AT_SYMLINK_NOFOLLOW) == 0 &&
         (st->st_uid == NOBODY || st->st_gid == NOBODY);
}

/* err for a failed `what path` (base in dirfd): its cause in words when it is an unmapped
 * owner (never the kernel's EOVERFLOW text), else as usual. */
static int file_error(sbx_error_t *err, int e, int dirfd, const char *base, const char *what,
                      const char *path)
{
  struct stat st;
  if (unmapped_owner(e, dirfd, base, &st))
    return sbx__error_setf(err, e, SBX_E_IO,
                           "%s %s: the file belongs to a host user or group this sandbox does not "
                           "map (it shows as %u:%u), so root inside may not change it",
                           what, path, (unsigned) st.st_uid, (unsigned) st.st_gid);
  return sbx__make_error(err, e, sbx__errno_kind(e), "%s %s", what, path);
}

/* Whether fd lies on an idmapped mount (a host folder: ids.c), from its mount's options in
 * /proc/self/mountinfo; true when that cannot be told (the guard's side). */
static bool on_idmapped_mount(int fd)
{
  struct statx stx;
  if (statx(fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) < 0 || !(stx.stx_mask & STATX_MNT_ID))
    return true;
  cleanup_file FILE *f = fopen("/proc/self/mountinfo", "re");
  if (f == NULL)
    return true;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    char *end;
    unsigned long long id = strtoull(line, &end, 10);
    if (end == line || *end != ' ' || id != stx.stx_mnt_id)
      continue;
    /* "ID PARENT MAJ:MIN ROOT POINT OPTIONS ...": the sixth field, the mount's options */
    char *opts = line;
    for (int i = 0; i < 5 && opts; i++)
      opts = strchr(opts + 1, ' ');
    if (opts == NULL)
      return true;
    size_t n = strcspn(++opts, " ");
    opts[n] = '\0';
    char *save = NULL;
    for (char *o = strtok_r(opts, ",", &save); o; o = strtok_r(NULL, ",", &save))
      if (strcmp(o, "idmapped") == 0)
        return true;
    return false;
  }
  return true;
}

/* Search roots (search.c) are resolved like every other path: inside the sandbox's root, never
 * through a magic link (/proc/self/fd/N would otherwise reach whatever sbx-init holds). */
static int open_search_root(const char *path, int flags)
{
  struct open_how how = {.flags = (uint64_t) (flags | O_CLOEXEC),
                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  return (int) syscall(SYS_openat2, root_fd, path, &how, sizeof how);
}

void agent_files_init(bool setid, bool nobody)
{
  guard_ids = setid;
  guard_nobody = nobody;
  root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  sbx__search_open_root = open_search_root;
}

int agent_open(const char *path, int flags, int mode, sbx_error_t *err)
{
  struct open_how how = {.flags = (uint64_t) (flags | O_CLOEXEC),
                         .mode = (flags & (O_CREAT | O_TMPFILE)) ? (uint64_t) mode : 0,
                         .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
  int fd = (int) syscall(SYS_openat2, root_fd, path, &how, sizeof how);
  if (fd < 0) {
    int e = errno;
    switch (e) {
    case ENOENT:
      return sbx__make_error(err, e, SBX_E_NOT_FOUND, "File not found: %s", path);
    case EISDIR:
      return sbx__make_error(err, e, SBX_E_IS_DIR, "Path is a directory, not a file: %s", path);
    case ENOTDIR:
      return sbx__make_error(err, e, SBX_E_NOT_DIR, "Not a directory: %s", path);
    case EACCES:
    case EPERM:
      return sbx__make_error(err, e, SBX_E_IO, "Permission denied: %s", path);
    default:
      return sbx__make_error(err, e, sbx__errno_kind(e), "open %s", path);
    }
  }
  return fd;
}

static int get_path(const char *p, size_t len, uint16_t tag, char **out, sbx_error_t *err)
{
  if (sbx__tlv_get_str(p, len, tag, out) <= 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "path must be a non-empty string");
  return sbx__path_check(*out, err);
}

/* Splits an absolute path into its directory and last component ("/a/b/" -> "/a", "b"). */
static int split_path(const char *path, char **dir, char **base, sbx_error_t *err)
{
  cleanup_free char *p = xstrdup(path);
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/')
    p[--n] = '\0';
  char *slash = strrchr(p, '/');
  if (slash == NULL || slash[1] == '\0' || strcmp(slash + 1, ".") == 0)
    return sbx__make_error(err, 0, SBX_E_INVALID, "path has no final component: %s", path);
  *base = xstrdup(slash + 1);
  *dir = slash == p ? xstrdup("/") : xstrndup(p, (size_t) (slash - p));
  return 0;
}

/* mkdir -p inside the sandbox; every component resolved under the root. */
static int make_dirs(const char *path, int mode, sbx_error_t *err)
{
  cleanup_free char *p = xstrdup(path);
  for (char *s = p + 1;; s++) {
    bool last = *s == '\0';
    if (*s != '/' && !last)
      continue;
    char saved = *s;
    *s = '\0';
    if (s > p + 1 && s[-1] != '/') {
      sbx_error_t e2 = NULL;
      int fd = agent_open(p, O_PATH | O_DIRECTORY, 0, &e2);
      if (fd >= 0) {
        close(fd);
      } else if (e2->kind == SBX_E_NOT_FOUND) {
        sbx_error_release(&e2);
        cleanup_free char *dir = NULL, *base = NULL;
        if (split_path(p, &dir, &base, err) < 0)
          return -1;
        cleanup_close int dfd = agent_open(dir, O_PATH | O_DIRECTORY, 0, err);
        if (dfd < 0)
          return -1;
        if (mkdirat(dfd, base, (mode_t) mode) < 0 && errno != EEXIST)
          return sbx__make_error(err, errno, sbx__errno_kind(errno), "create directory %s", p);
      } else {
        *err = e2;
        return -1;
      }
    }
    *s = saved;
    if (last)
      return 0;
  }
}

static int send_data_from_buf(struct agent_conn *c, const char *data, size_t len)
{
  for (size_t off = 0; off < len;) {
    size_t n = len - off < SBX_PROTO_CHUNK ? len - off : SBX_PROTO_CHUNK;
    if (sbx__frame_send(c->fd, SBX_MSG_DATA, c->req, data + off, n) < 0)
      return -1;
    off += n;
  }
  return 0;
}

static int open_regular(const char *path, sbx_error_t *err, struct stat *st)
{
  int fd = agent_open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, err);
  if (fd < 0)
    return -1;
  if (fstat(fd, st) < 0) {
    close(fd);
    return sbx__make_error(err, errno, SBX_E_IO, "stat %s", path);
  }
  if (S_ISDIR(st->st_mode)) {
    close(fd);
    return sbx__make_error(err, EISDIR, SBX_E_IS_DIR, "Path is a directory, not a file: %s", path);
  }
  if (!S_ISREG(st->st_mode)) {
    close(fd);
    return sbx__make_error(err, 0, SBX_E_INVALID, "not a regular file: %s", path);
  }
  return fd;
}

static int reply_too_large_to_read(struct agent_conn *c, const char *path)
{
  sbx_error_t err = NULL;
  sbx__make_error(&err, EFBIG, SBX_E_TOO_LARGE, "File exceeds maximum read size of %u bytes: %s",
                  SBX_READ_TEXT_MAX, path);
  return agent_reply_error(c, &err);
}

int agent_read_text(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL;
  int64_t start = SBX_LINE_NONE, end = SBX_LINE_NONE;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_i64(payload, len, SBX_T_START, SBX_LINE_NONE, &start) < 0 ||
      sbx__tlv_get_i64(payload, len, SBX_T_END, SBX_LINE_NONE, &end) < 0)
    return agent_reply_error(c, &err);
  struct stat st;
  cleanup_close int fd = open_regular(path, &err, &st);
  if (fd < 0)
    return agent_reply_error(c, &err);
  if ((uint64_t) st.st_size > SBX_READ_TEXT_MAX)
    return reply_too_large_to_read(c, path);
  /* Read straight into a buffer sized from fstat (one more byte shows growth past it). */
  sbx_buf_t b = {0};
  size_t hint = (uint64_t) st.st_size < SBX_READ_TEXT_MAX ? (size_t) st.st_size : SBX_READ_TEXT_MAX;
  sbx__buf_reserve(&b, hint + 1);
  for (;;) {
    if (b.len > SBX_READ_TEXT_MAX) { /* it grew after the fstat */
      sbx__buf_free(&b);
      return reply_too_large_to_read(c, path);
    }
    if (b.cap - b.len - 1 < 65536)
      sbx__buf_reserve(&b, 65536);
    size_t room = b.cap - b.len - 1, cap_left = SBX_READ_TEXT_MAX + 1 - b.len;
    ssize_t r = read(fd, b.data + b.len, room < cap_left ? room : cap_left);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      sbx__buf_free(&b);
      sbx__make_error(&err, errno, SBX_E_IO, "read %s", path);
      return agent_reply_error(c, &err);
    }
    if (r == 0)
      break;
    b.len += (size_t) r;
  }
  b.data[b.len] = '\0';
  size_t n = b.len;
  cleanup_free char *data = sbx__buf_steal(&b);
  if (!sbx__utf8_valid(data, n)) {
    sbx__make_error(&err, 0, SBX_E_NOT_TEXT,
                    "cannot read '%s' as text \xe2\x80\x94 it appears to be a binary file (e.g. "
                    ".xlsx, .pdf, or an image). read_file only supports UTF-8 text. Use bash with "
                    "a suitable library instead (pandas/openpyxl for spreadsheets), or view_image "
                    "for images.",
                    path);
    return agent_reply_error(c, &err);
  }
  /* The whole file goes out as read; a range is cut into a new buffer. */
  bool whole = start == SBX_LINE_NONE && end == SBX_LINE_NONE;
  size_t outlen = n;
  cleanup_free char *cut = whole ? NULL : sbx__text_line_range(data, n, start, end, &outlen);
  const char *out = whole ? data : cut;
  /* The size first, so the client can size its buffer once. */
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_SIZE, outlen);
  int sr = sbx__frame_send_tlv(c->fd, SBX_MSG_STARTED, c->req, &w);
  sbx__tlv_free(&w);
  if (sr < 0 || send_data_from_buf(c, out, outlen) < 0)
    return -1;
  sbx__tlv_put_u64(&w, SBX_T_SIZE, outlen);
  int ret = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return ret;
}

int agent_read(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL;
  uint64_t offset = 0, limit = 0, max = 0;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_OFFSET, 0, &offset) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_LIMIT, 0, &limit) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_MAX, 0, &max) < 0)
    return agent_reply_error(c, &err);
  struct stat st;
  cleanup_close int fd = open_regular(path, &err, &st);
  if (fd < 0)
    return agent_reply_error(c, &err);
  uint64_t size = (uint64_t) st.st_size;
  if (max && size > max) {
    sbx__make_error(&err, EFBIG, SBX_E_TOO_LARGE,
                    "File exceeds maximum download size of %llu bytes: %s",
                    (unsigned long long) max, path);
    return agent_reply_error(c, &err);
  }
  /* Tell the client the size first so it can answer a ranged request before the data. */
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_SIZE, size);
  int r = sbx__frame_send_tlv(c->fd, SBX_MSG_STARTED, c->req, &w);
  sbx__tlv_free(&w);
  if (r < 0)
    return -1;
  uint64_t sent = 0;
  char buf[65536];
  off_t off = (off_t) offset;
  for (;;) {
    size_t want = sizeof buf;
    if (limit && limit - sent < want)
      want = (size_t) (limit - sent);
    if (want == 0)
      break;
    ssize_t n = pread(fd, buf, want, off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      sbx__make_error(&err, errno, SBX_E_IO, "read %s", path);
      return agent_reply_error(c, &err);
    }
    if (n == 0)
      break;
    /* the file may have grown since fstat: the cap counts what is actually sent */
    if (max && sent + (uint64_t) n > max) {
      sbx__make_error(&err, EFBIG, SBX_E_TOO_LARGE,
                      "File exceeds maximum download size of %llu bytes: %s",
                      (unsigned long long) max, path);
      return agent_reply_error(c, &err);
    }
    if (sbx__frame_send(c->fd, SBX_MSG_DATA, c->req, buf, (size_t) n) < 0)
      return -1;
    sent += (uint64_t) n;
    off += n;
  }
  sbx_tlv_writer_t ok = {0};
  sbx__tlv_put_u64(&ok, SBX_T_SIZE, size);
  sbx__tlv_put_u64(&ok, SBX_T_COUNT, sent);
  int ret = agent_reply_ok(c, &ok);
  sbx__tlv_free(&ok);
  return ret;
}

/* Receives DATA frames until DATA_END, writing them to fd (if fd >= 0 and no error yet). */
static int receive_data(struct agent_conn *c, int fd, uint64_t *written, sbx_error_t *err,
                        const char *path)
{
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *data = NULL;
    if (sbx__frame_recv(c->fd, &hdr, &data, SBX_PROTO_MAX_PAYLOAD) < 0)
      return -1; /* the client went away: the temp file is discarded */
    if (hdr.type == SBX_MSG_DATA_END)
      return 0;
    if (hdr.type != SBX_MSG_DATA)
      return -1;
    if (fd >= 0 && *err == NULL) {
      if (sbx__write_all(fd, data, hdr.len) < 0)
        sbx__make_error(err, errno, sbx__errno_kind(errno), "write %s", path);
      else
        *written += hdr.len;
    }
  }
}

/* A new file in dirfd for an atomic replace of base. With O_TMPFILE it has no name until it is
 * complete (commit_temp), so a write cut short (the client gone, sbx-init killed) leaves
 * nothing behind in the user's folder; file systems without O_TMPFILE get a hidden name at
 * once. *tmpname is NULL for an unnamed file, else the name to unlink on failure. */
static int open_temp(int dirfd, const char *base, char **tmpname)
{
  *tmpname = NULL;
  int fd = openat(dirfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0)
    return fd;
  char suffix[17];
  sbx__random_hex(suffix, 16);
  *tmpname = xasprintf(".%.200s.sbx-%s.tmp", base, suffix);
  return openat(dirfd, *tmpname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* Renames the complete temp file over base, naming an unnamed one first (it is only ever
 * visible under its hidden name between these two calls). */
static int commit_temp(int dirfd, int fd, char **tmpname, const char *base)
{
  if (*tmpname == NULL) {
    char suffix[17], proc[64];
    sbx__random_hex(suffix, 16);
    char *name = xasprintf(".%.200s.sbx-%s.tmp", base, suffix);
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, dirfd, name, AT_SYMLINK_FOLLOW) < 0) {
      free(name);
      return -1;
    }
    *tmpname = name;
  }
  return renameat(dirfd, *tmpname, dirfd, base);
}

int agent_write(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL, *dir = NULL, *base = NULL, *tmp = NULL;
  uint64_t flags = 0, mode = 0644, written = 0;
  bool replace = false;
  cleanup_close int fd = -1;
  cleanup_close int dirfd = -1;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_FLAGS, 0, &flags) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_MODE, 0644, &mode) < 0 ||
      split_path(path, &dir, &base, &err) < 0)
    goto drain;
  mode &= 07777;
  if (guard_ids && (mode & SETID_BITS) && sbx__tlv_has(payload, len, SBX_T_MODE)) {
    sbx__make_error(&err, 0, SBX_E_INVALID,
                    "mode %04o of %s: setuid/setgid modes are refused in a sandbox with a "
                    "writable host folder",
                    (unsigned) mode, path);
    goto drain;
  }
  if ((flags & SBX_WRITE_PARENTS) && make_dirs(dir, 0755, &err) < 0)
    goto drain;
  dirfd = agent_open(dir, O_PATH | O_DIRECTORY, 0, &err);
  if (dirfd < 0)
    goto drain;
  if (flags & SBX_WRITE_APPEND) {
    sbx_error_t open_err = NULL;
    fd = agent_open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOCTTY | O_NONBLOCK, (int) mode,
                    &open_err);
    struct stat ost;
    if (fd < 0 && unmapped_owner(open_err->status, dirfd, base, &ost)) {
      file_error(&err, open_err->status, dirfd, base, "append to", path);
      sbx_error_release(&open_err);
    } else if (fd < 0) {
      err = open_err;
    }
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
      sbx__make_error(&err, 0, SBX_E_INVALID, "not a regular file: %s", path);
      close(steal_fd(&fd));
    }
    if (fd >= 0)
      fcntl(fd, F_SETFL, O_APPEND);
  } else {
    struct stat st;
    if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISDIR(st.st_mode)) {
        sbx__make_error(&err, EISDIR, SBX_E_IS_DIR, "Path is a directory, not a file: %s", path);
        goto drain;
      }
      if (S_ISREG(st.st_mode) && !sbx__tlv_has(payload, len, SBX_T_MODE))
        mode = st.st_mode & (guard_ids ? 01777 : 07777); /* a setid bit is not carried over */
    }
    fd = open_temp(dirfd, base, &tmp);
    struct stat dst;
    int e = errno;
    if (fd < 0 && unmapped_owner(e, dirfd, ".", &dst))
      sbx__error_setf(&err, e, SBX_E_IO,
                      "create %s: its folder belongs to a host user or group this sandbox does "
                      "not map (it shows as %u:%u), so root inside may not write in it",
                      path, (unsigned) dst.st_uid, (unsigned) dst.st_gid);
    else if (fd < 0)
      sbx__make_error(&err, e, sbx__errno_kind(e), "create %s", path);
    replace = true;
  }
drain:
  if (receive_data(c, fd, &written, &err, path ? path : "") < 0) {
    if (tmp && dirfd >= 0)
      unlinkat(dirfd, tmp, 0);
    sbx_error_release(&err);
    return -1;
  }
  if (err == NULL && fd >= 0 && fsync(fd) < 0)
    sbx__make_error(&err, errno, sbx__errno_kind(errno), "sync %s", path);
  if (err == NULL && replace) {
    if (fchmod(fd, (mode_t) mode) < 0 || commit_temp(dirfd, fd, &tmp, base) < 0)
      file_error(&err, errno, dirfd, base, "replace", path);
  }
  if (err) {
    if (tmp && dirfd >= 0)
      unlinkat(dirfd, tmp, 0);
    return agent_reply_error(c, &err);
  }
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_SIZE, written);
  int ret = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return ret;
}

/* Sends strings as ITEMS, then OK{TRUNCATED}. */
static int send_items(struct agent_conn *c, char **items, size_t n, bool truncated)
{
  agent_items_t it = {.c = c};
  for (size_t i = 0; i < n && agent_items_add(&it, items[i], strlen(items[i])) == 0; i++)
    ;
  return agent_items_finish(&it, truncated);
}

/* A search without a timeout of its own ends by SBX_SEARCH_TIMEOUT (include/sbx/sbx.h), and
 * none takes longer than SBX_SEARCH_TIMEOUT_MAX: 10 s under the client library's 600 s socket
 * timeout, so its answer (truncated) arrives before the client gives up. */
#define SEARCH_DEFAULT_MS SBX_SEARCH_DEFAULT_MS
#define SEARCH_TIMEOUT_MS SBX_SEARCH_TIMEOUT_MAX_MS

/* The deadline of a search asked to take at most timeout_ms (0: SEARCH_DEFAULT_MS; never more
 * than SEARCH_TIMEOUT_MS). While it runs the client's connection is watched too
 * (sbx__search_set_cancel_fd), so a search whose client went away stops. */
static uint64_t search_begin(struct agent_conn *c, uint64_t timeout_ms)
{
  if (timeout_ms == 0)
    timeout_ms = SEARCH_DEFAULT_MS;
  if (timeout_ms > SEARCH_TIMEOUT_MS)
    timeout_ms = SEARCH_TIMEOUT_MS;
  sbx__search_set_cancel_fd(c->fd);
  return sbx__now_ms() + timeout_ms;
}

static void search_end(void)
{
  sbx__search_set_cancel_fd(-1);
}

int agent_list(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL;
  int64_t depth = 2;
  uint64_t max = 10000;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_i64(payload, len, SBX_T_DEPTH, 2, &depth) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_MAX, 10000, &max) < 0)
    return agent_reply_error(c, &err);
  if (depth > SBX_SEARCH_MAX_DEPTH)
    depth = SBX_SEARCH_MAX_DEPTH;
  sbx_strv_t out = {0};
  bool truncated = false;
  /* the longest deadline: list_dir's answer has no truncated flag to tell a cut listing by */
  int r = sbx__search_list_dir(path, (int) depth, (size_t) max, search_begin(c, SEARCH_TIMEOUT_MS),
                               &out, &truncated, &err);
  search_end();
  if (r < 0)
    return agent_reply_error(c, &err);
  int ret = send_items(c, out.v, out.n, truncated);
  sbx__strv_free(&out);
  return ret;
}

int agent_glob(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL, *pattern = NULL;
  uint64_t max = 200, flags = 0, timeout_ms = 0;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_str(payload, len, SBX_T_PATTERN, &pattern) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_MAX, 200, &max) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_FLAGS, 0, &flags) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_TIMEOUT_MS, 0, &timeout_ms) < 0)
    return agent_reply_error(c, &err);
  sbx_strv_t out = {0};
  bool truncated = false;
  int r = sbx__search_glob(path, pattern ? pattern : "", flags & SBX_GLOB_DIRS, (size_t) max,
                           search_begin(c, timeout_ms), &out, &truncated, &err);
  search_end();
  if (r < 0)
    return agent_reply_error(c, &err);
  int ret = send_items(c, out.v, out.n, truncated);
  sbx__strv_free(&out);
  return ret;
}

int agent_grep(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL, *pattern = NULL, *glob = NULL;
  uint64_t max = 100, flags = 0, timeout_ms = 0;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_str(payload, len, SBX_T_PATTERN, &pattern) < 0 ||
      sbx__tlv_get_str(payload, len, SBX_T_GLOB, &glob) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_MAX, 100, &max) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_FLAGS, 0, &flags) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_TIMEOUT_MS, 0, &timeout_ms) < 0)
    return agent_reply_error(c, &err);
  sbx_grep_matches_t m = {0};
  bool truncated = false;
  int r = sbx__search_grep(path, pattern ? pattern : "", glob, flags & SBX_GREP_LITERAL,
                           flags & SBX_GREP_CASE, (size_t) max, search_begin(c, timeout_ms), &m,
                           &truncated, &err);
  search_end();
  if (r < 0)
    return agent_reply_error(c, &err);
  agent_items_t it = {.c = c};
  for (size_t i = 0; i < m.n && it.failed == 0; i++) {
    sbx_tlv_writer_t rec = {0};
    sbx__tlv_put_str(&rec, SBX_T_PATH, m.v[i].path);
    sbx__tlv_put_u64(&rec, SBX_T_LINE_NO, m.v[i].line_number);
    sbx__tlv_put_str(&rec, SBX_T_TEXT, m.v[i].line);
    agent_items_add(&it, rec.buf.data, rec.buf.len);
    sbx__tlv_free(&rec);
  }
  sbx__search_matches_free(&m);
  return agent_items_finish(&it, truncated);
}

static char type_char(mode_t m)
{
  return S_ISREG(m) ? 'f' : S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'l' : 'o';
}

/* Appends the stat record of st (as the STAT reply and READDIR items carry it). */
void agent_put_stat(sbx_tlv_writer_t *w, const struct stat *st);
void agent_put_stat(sbx_tlv_writer_t *w, const struct stat *st)
{
  char t = type_char(st->st_mode);
  sbx__tlv_put(w, SBX_T_TYPE, &t, 1);
  sbx__tlv_put_u64(w, SBX_T_SIZE, (uint64_t) st->st_size);
  sbx__tlv_put_u64(w, SBX_T_MODE, st->st_mode & 07777);
  sbx__tlv_put_u64(w, SBX_T_MTIME,
                   (uint64_t) st->st_mtim.tv_sec * 1000000000u + (uint64_t) st->st_mtim.tv_nsec);
  sbx__tlv_put_u64(w, SBX_T_CTIME,
                   (uint64_t) st->st_ctim.tv_sec * 1000000000u + (uint64_t) st->st_ctim.tv_nsec);
  sbx__tlv_put_u64(w, SBX_T_UID, st->st_uid);
  sbx__tlv_put_u64(w, SBX_T_GID, st->st_gid);
}

int agent_stat(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0)
    return agent_reply_error(c, &err);
  cleanup_close int fd = agent_open(path, O_PATH | O_NOFOLLOW, 0, &err);
  if (fd < 0)
    return agent_reply_error(c, &err);
  struct stat st;
  if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
    sbx__make_error(&err, errno, SBX_E_IO, "stat %s", path);
    return agent_reply_error(c, &err);
  }
  sbx_tlv_writer_t w = {0};
  agent_put_stat(&w, &st);
  int ret = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return ret;
}

int agent_mkdir(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL;
  uint64_t mode = 0755;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_MODE, 0755, &mode) < 0)
    return agent_reply_error(c, &err);
  /* report whether it was created: only new directories get the requested mode */
  sbx_error_t probe = NULL;
  int fd = agent_open(path, O_PATH, 0, &probe);
  bool existed = fd >= 0;
  if (fd >= 0)
    close(fd);
  sbx_error_release(&probe);
  mode &= guard_ids ? 01777 : 07777; /* no setgid directory either */
  if (make_dirs(path, (int) mode, &err) < 0)
    return agent_reply_error(c, &err);
  if (!existed) {
    cleanup_close int dfd = agent_open(path, O_RDONLY | O_DIRECTORY, 0, &err);
    if (dfd < 0)
      return agent_reply_error(c, &err);
    fchmod(dfd, (mode_t) mode);
  }
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_COUNT, existed ? 0 : 1);
  int ret = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return ret;
}

int agent_remove(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL, *dir = NULL, *base = NULL;
  uint64_t flags = 0;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_FLAGS, 0, &flags) < 0 ||
      split_path(path, &dir, &base, &err) < 0)
    return agent_reply_error(c, &err);
  cleanup_close int dfd = agent_open(dir, O_RDONLY | O_DIRECTORY, 0, &err);
  if (dfd < 0)
    return agent_reply_error(c, &err);
  struct stat st;
  if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    sbx__make_error(&err, errno, sbx__errno_kind(errno), "File not found: %s", path);
    return agent_reply_error(c, &err);
  }
  int r;
  if (S_ISDIR(st.st_mode)) {
    if (!(flags & (SBX_REMOVE_DIR | SBX_REMOVE_RECURSIVE))) {
      sbx__make_error(&err, EISDIR, SBX_E_IS_DIR, "Path is a directory, not a file: %s", path);
      return agent_reply_error(c, &err);
    }
    r = (flags & SBX_REMOVE_RECURSIVE) ? sbx__rm_rf_at(dfd, base)
                                       : unlinkat(dfd, base, AT_REMOVEDIR);
  } else {
    if ((flags & SBX_REMOVE_DIR) && !(flags & SBX_REMOVE_RECURSIVE)) {
      sbx__make_error(&err, ENOTDIR, SBX_E_NOT_DIR, "Not a directory: %s", path);
      return agent_reply_error(c, &err);
    }
    r = unlinkat(dfd, base, 0);
  }
  if (r < 0) {
    file_error(&err, errno, dfd, base, "remove", path);
    return agent_reply_error(c, &err);
  }
  return agent_reply_ok(c, NULL);
}

int agent_rename(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *src = NULL, *dst = NULL, *sdir = NULL, *sbase = NULL, *ddir = NULL,
                    *dbase = NULL;
  if (get_path(payload, len, SBX_T_PATH, &src, &err) < 0 ||
      get_path(payload, len, SBX_T_DEST, &dst, &err) < 0 ||
      split_path(src, &sdir, &sbase, &err) < 0 || split_path(dst, &ddir, &dbase, &err) < 0)
    return agent_reply_error(c, &err);
  cleanup_close int sfd = agent_open(sdir, O_PATH | O_DIRECTORY, 0, &err);
  if (sfd < 0)
    return agent_reply_error(c, &err);
  struct stat st;
  if (fstatat(sfd, sbase, &st, AT_SYMLINK_NOFOLLOW) < 0) {
    sbx__make_error(&err, errno, SBX_E_NOT_FOUND, "File not found: %s", src);
    return agent_reply_error(c, &err);
  }
  if (make_dirs(ddir, 0755, &err) < 0)
    return agent_reply_error(c, &err);
  cleanup_close int dfd = agent_open(ddir, O_PATH | O_DIRECTORY, 0, &err);
  if (dfd < 0)
    return agent_reply_error(c, &err);
  if (renameat2(sfd, sbase, dfd, dbase, RENAME_NOREPLACE) < 0) {
    int e = errno;
    cleanup_free char *to = xasprintf("%s to %s", src, dst);
    file_error(&err, e, sfd, sbase, "move", to);
    return agent_reply_error(c, &err);
  }
  return agent_reply_ok(c, NULL);
}

/* file_error for path, whose directory is looked up again (only on failure: "/" has none). */
static int path_error(sbx_error_t *err, int e, const char *what, const char *path)
{
  cleanup_free char *dir = NULL, *base = NULL;
  sbx_error_t ignored = NULL;
  cleanup_close int dirfd = split_path(path, &dir, &base, &ignored) < 0
                                ? -1
                                : agent_open(dir, O_PATH | O_DIRECTORY, 0, &ignored);
  sbx_error_release(&ignored);
  return file_error(err, e, dirfd, base, what, path);
}

/* Looks up a user or group name in the sandbox's own /etc file, or takes a number. */
static int lookup_id(const char *file, const char *name, uint64_t *out)
{
  char *end;
  unsigned long v = strtoul(name, &end, 10);
  if (*name && *end == '\0') {
    *out = v;
    return 0;
  }
  cleanup_file FILE *f = fopen(file, "re");
  if (f == NULL)
    return -1;
  char line[1024];
  size_t nl = strlen(name);
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, name, nl) != 0 || line[nl] != ':')
      continue;
    char *p = strchr(line + nl + 1, ':');
    if (p == NULL)
      return -1;
    *out = strtoul(p + 1, NULL, 10);
    return 0;
  }
  return -1;
}

int agent_chmod(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL, *owner = NULL, *group = NULL;
  uint64_t mode = 0;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_u64(payload, len, SBX_T_MODE, 0, &mode) < 0 ||
      sbx__tlv_get_str(payload, len, SBX_T_OWNER, &owner) < 0 ||
      sbx__tlv_get_str(payload, len, SBX_T_GROUP, &group) < 0)
    return agent_reply_error(c, &err);
  if (guard_ids && (mode & SETID_BITS)) {
    sbx__make_error(&err, 0, SBX_E_INVALID,
                    "mode %04o of %s: setuid/setgid modes are refused in a sandbox with a "
                    "writable host folder",
                    (unsigned) (mode & 07777), path);
    return agent_reply_error(c, &err);
  }
  uint64_t uid = (uint64_t) -1, gid = (uint64_t) -1;
  if (owner && *owner && lookup_id("/etc/passwd", owner, &uid) < 0) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "unknown user %s", owner);
    return agent_reply_error(c, &err);
  }
  if (group && *group && lookup_id("/etc/group", group, &gid) < 0) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "unknown group %s", group);
    return agent_reply_error(c, &err);
  }
  cleanup_close int fd = agent_open(path, O_PATH, 0, &err);
  if (fd < 0)
    return agent_reply_error(c, &err);
  /* as the id guard does for commands (uid_t is 32 bits: compare what the kernel takes), but
   * only on an idmapped folder: elsewhere (/tmp, the image's root) NOBODY is nobody's */
  if (guard_nobody && ((uint32_t) uid == NOBODY || (uint32_t) gid == NOBODY) &&
      on_idmapped_mount(fd)) {
    sbx__make_error(&err, 0, SBX_E_INVALID,
                    "owner of %s: id %u is host root's in this sandbox's host folders", path,
                    NOBODY);
    return agent_reply_error(c, &err);
  }
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (mode && chmod(proc, (mode_t) (mode & 07777)) < 0) {
    path_error(&err, errno, "chmod", path);
    return agent_reply_error(c, &err);
  }
  if ((uid != (uint64_t) -1 || gid != (uint64_t) -1) &&
      fchownat(fd, "", (uid_t) uid, (gid_t) gid, AT_EMPTY_PATH) < 0) {
    path_error(&err, errno, "chown", path);
    return agent_reply_error(c, &err);
  }
  return agent_reply_ok(c, NULL);
}

int agent_connect(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  uint64_t port = 0;
  if (sbx__tlv_get_u64(payload, len, SBX_T_PORT, 0, &port) <= 0 || port == 0 || port > 65535) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "port must be 1-65535");
    return agent_reply_error(c, &err);
  }
  cleanup_close int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t) port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (s < 0 || connect(s, (struct sockaddr *) &sa, sizeof sa) < 0) {
    /* an app may listen on ::1 only */
    int saved = errno;
    close(steal_fd(&s));
    s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6,
                               .sin6_port = htons((uint16_t) port),
                               .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (s < 0 || connect(s, (struct sockaddr *) &sa6, sizeof sa6) < 0) {
      sbx__make_error(&err, saved, SBX_E_NOT_FOUND, "connect to port %llu in the sandbox",
                      (unsigned long long) port);
      return agent_reply_error(c, &err);
    }
  }
  return sbx__frame_send_fd(c->fd, SBX_MSG_OK, c->req, NULL, 0, s);
}

/* ---- execd's directory listing, name search and replace ---- */

#define INFO_MAX 100000

struct info_walk {
  agent_items_t items;
  size_t count;
  bool truncated;
  const sbx_strv_t *pats; /* find: the name patterns */
};

static int info_emit(struct info_walk *iw, const char *path, const struct stat *st)
{
  if (iw->count >= INFO_MAX) {
    iw->truncated = true;
    return 0;
  }
  sbx_tlv_writer_t rec = {0};
  sbx__tlv_put_str(&rec, SBX_T_PATH, path);
  agent_put_stat(&rec, st);
  int r = agent_items_add(&iw->items, rec.buf.data, rec.buf.len);
  sbx__tlv_free(&rec);
  iw->count++;
  return r;
}

/* readdir and find walk with the search walker (walk.h) in its VISIT mode: every entry, in
 * strcmp order, each before its children; symlinks reported, never followed. Paths are the
 * request's path (less one trailing '/') + "/" + the path below it. */
static void info_walk_run(struct info_walk *iw, int dfd, const char *path, int max_depth,
                          int (*visit)(sbx_walker_t *, int, const sbx_walk_entry_t *, const char *))
{
  sbx_walker_t w;
  sbx__walker_init(&w, SBX_WALK_VISIT, 0);
  w.max_depth = max_depth;
  w.visit = visit;
  w.arg = iw;
  size_t n = strlen(path);
  sbx__walker_set_base_n(&w, path, n > 0 && path[n - 1] == '/' ? n - 1 : n);
  sbx__walk_run(&w, dfd);
  sbx__walker_fini(&w);
}

/* readdir: children, each followed by its own children, down to depth. */
static int readdir_visit(sbx_walker_t *w, int dir_fd, const sbx_walk_entry_t *e, const char *path)
{
  struct info_walk *iw = w->arg;
  struct stat st;
  if (fstatat(dir_fd, e->name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return 0;
  if (info_emit(iw, path, &st) < 0 || iw->truncated)
    return -1;
  return 0;
}

int agent_readdir(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL;
  int64_t depth = 1;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_i64(payload, len, SBX_T_DEPTH, 1, &depth) < 0)
    return agent_reply_error(c, &err);
  if (depth < 0) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "depth must be non-negative");
    return agent_reply_error(c, &err);
  }
  cleanup_close int dfd = agent_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0, &err);
  if (dfd < 0) {
    if (err->status == ELOOP) {
      sbx_error_release(&err);
      sbx__make_error(&err, ENOTDIR, SBX_E_NOT_DIR, "Not a directory (a symlink): %s", path);
    }
    return agent_reply_error(c, &err);
  }
  struct stat st;
  if (fstat(dfd, &st) < 0 || !S_ISDIR(st.st_mode)) {
    sbx__make_error(&err, ENOTDIR, SBX_E_NOT_DIR, "Not a directory: %s", path);
    return agent_reply_error(c, &err);
  }
  struct info_walk iw = {.items = {.c = c}};
  if (depth > 0) {
    info_walk_run(&iw, dfd, path, depth > SBX_SEARCH_MAX_DEPTH ? SBX_SEARCH_MAX_DEPTH : (int) depth,
                  readdir_visit);
    dfd = -1; /* the walker took it */
  }
  return agent_items_finish(&iw.items, iw.truncated);
}

#define BRACE_MAX_PATTERNS 256
#define BRACE_MAX_DEPTH 32 /* brace groups expanded; later ones are kept literally */
#define BRACE_MAX_LEN 8192 /* longer patterns are not expanded */

/* Expands {a,b} alternatives (nested allowed) into plain fnmatch patterns, at most 256. The
 * recursion is bounded (it runs on a connection thread's small stack): past BRACE_MAX_DEPTH
 * groups, or for a pattern over BRACE_MAX_LEN bytes, braces are kept literally. */
static void expand_braces(const char *pat, sbx_strv_t *out, int depth)
{
  if (out->n >= BRACE_MAX_PATTERNS)
    return;
  if (depth >= BRACE_MAX_DEPTH || strlen(pat) > BRACE_MAX_LEN) {
    sbx__strv_push(out, pat);
    return;
  }
  const char *open = NULL;
  for (const char *p = pat; *p; p++) {
    if (*p == '\\' && p[1]) {
      p++;
      continue;
    }
    if (*p == '{') {
      open = p;
      break;
    }
  }
  if (open == NULL) {
    sbx__strv_push(out, pat);
    return;
  }
  /* find the matching close brace and the top-level commas */
  int level = 0;
  const char *close = NULL;
  sbx_strv_t alts = {0};
  const char *start = open + 1;
  for (const char *p = open + 1; *p; p++) {
    if (*p == '\\' && p[1]) {
      p++;
      continue;
    }
    if (*p == '{')
      level++;
    else if (*p == '}' && level > 0)
      level--;
    else if (*p == '}') {
      close = p;
      sbx__strv_push_owned(&alts, xstrndup(start, (size_t) (p - start)));
      break;
    } else if (*p == ',' && level == 0) {
      sbx__strv_push_owned(&alts, xstrndup(start, (size_t) (p - start)));
      start = p + 1;
    }
  }
  if (close == NULL || alts.n < 2) {
    /* not a brace expression: keep the brace literally */
    sbx__strv_free(&alts);
    sbx__strv_push(out, pat);
    return;
  }
  for (size_t i = 0; i < alts.n && out->n < BRACE_MAX_PATTERNS; i++) {
    cleanup_free char *next = xasprintf("%.*s%s%s", (int) (open - pat), pat, alts.v[i], close + 1);
    expand_braces(next, out, depth + 1);
  }
  sbx__strv_free(&alts);
}

static bool name_matches(const sbx_strv_t *pats, const char *name)
{
  for (size_t i = 0; i < pats->n; i++)
    if (fnmatch(pats->v[i], name, 0) == 0)
      return true;
  return false;
}

/* find: the non-directories whose name matches, at any depth (directories down to depth
 * SBX_SEARCH_MAX_DEPTH are entered). */
static int find_visit(sbx_walker_t *w, int dir_fd, const sbx_walk_entry_t *e, const char *path)
{
  struct info_walk *iw = w->arg;
  if (e->type == DT_DIR || !name_matches(iw->pats, e->name))
    return 0;
  struct stat st;
  if (fstatat(dir_fd, e->name, &st, AT_SYMLINK_NOFOLLOW) < 0 || S_ISDIR(st.st_mode))
    return 0;
  if (info_emit(iw, path, &st) < 0 || iw->truncated)
    return -1;
  return 0;
}

int agent_find(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL, *pattern = NULL;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      sbx__tlv_get_str(payload, len, SBX_T_PATTERN, &pattern) < 0)
    return agent_reply_error(c, &err);
  cleanup_close int dfd = agent_open(path, O_RDONLY | O_DIRECTORY, 0, &err);
  if (dfd < 0)
    return agent_reply_error(c, &err);
  /* doublestar on a name: `**` is `*` there */
  cleanup_free char *pat = xstrdup(pattern && *pattern ? pattern : "**");
  for (char *p; (p = strstr(pat, "**")) != NULL;)
    memmove(p, p + 1, strlen(p + 1) + 1);
  sbx_strv_t pats = {0};
  expand_braces(pat, &pats, 0);
  struct info_walk iw = {.items = {.c = c}, .pats = &pats};
  info_walk_run(&iw, dfd, path, SBX_SEARCH_MAX_DEPTH + 1, find_visit);
  dfd = -1; /* the walker took it */
  sbx__strv_free(&pats);
  return agent_items_finish(&iw.items, iw.truncated);
}

int agent_replace(struct agent_conn *c, const char *payload, size_t len)
{
  sbx_error_t err = NULL;
  cleanup_free char *path = NULL, *dir = NULL, *base = NULL, *tmp = NULL;
  sbx_tlv_t old, neu;
  if (get_path(payload, len, SBX_T_PATH, &path, &err) < 0 ||
      split_path(path, &dir, &base, &err) < 0)
    return agent_reply_error(c, &err);
  if (sbx__tlv_find(payload, len, SBX_T_OLD, &old) <= 0 || old.len == 0 ||
      sbx__tlv_find(payload, len, SBX_T_NEW, &neu) < 0) {
    sbx__make_error(&err, 0, SBX_E_INVALID, "replace needs a non-empty old string");
    return agent_reply_error(c, &err);
  }
  if (!sbx__tlv_has(payload, len, SBX_T_NEW))
    neu.len = 0, neu.data = (const unsigned char *) "";
  struct stat st;
  cleanup_close int fd = open_regular(path, &err, &st);
  if (fd < 0)
    return agent_reply_error(c, &err);
  if ((uint64_t) st.st_size > SBX_READ_TEXT_MAX) {
    sbx__make_error(&err, EFBIG, SBX_E_TOO_LARGE, "file too large to edit: %s", path);
    return agent_reply_error(c, &err);
  }
  sbx_buf_t in = {0}, out = {0};
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0 && in.len <= SBX_READ_TEXT_MAX)
    sbx__buf_append(&in, buf, (size_t) n);
  uint64_t count = 0;
  const char *p = in.data ? in.data : "", *end = p + in.len;
  while (p < end) {
    const char *hit = memmem(p, (size_t) (end - p), old.data, old.len);
    if (hit == NULL)
      break;
    sbx__buf_append(&out, p, (size_t) (hit - p));
    sbx__buf_append(&out, neu.data, neu.len);
    p = hit + old.len;
    count++;
  }
  int ret;
  if (count > 0) {
    sbx__buf_append(&out, p, (size_t) (end - p));
    cleanup_close int dfd = agent_open(dir, O_PATH | O_DIRECTORY, 0, &err);
    cleanup_close int tfd = dfd < 0 ? -1 : open_temp(dfd, base, &tmp);
    if (dfd >= 0 &&
        (tfd < 0 || sbx__write_all(tfd, out.data, out.len) < 0 || fsync(tfd) < 0 ||
         fchmod(tfd, st.st_mode & 07777) < 0 || commit_temp(dfd, tfd, &tmp, base) < 0)) {
      sbx__make_error(&err, errno, sbx__errno_kind(errno), "rewrite %s", path);
      if (tmp)
        unlinkat(dfd, tmp, 0);
    }
  }
  sbx__buf_free(&in);
  sbx__buf_free(&out);
  if (err)
    return agent_reply_error(c, &err);
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_COUNT, count);
  ret = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return ret;
}
