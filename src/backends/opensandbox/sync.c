/* Release-time output synchronisation (seed 000): regular files of the remote
 * /mnt/user-data/outputs are copied into the owner's host thread folder, so the person sees
 * what the agent made.
 *
 * - One pass: at most 2,000 files, a 512 KiB listing, 512 MiB in all, 100 MiB per file, and a
 *   cooperative 120 s deadline (checked between files and download chunks). An oversized
 *   listing skips the pass; a failed or oversized download stops it.
 * - Remote links are not followed; a local destination reached through a link is refused.
 * - Names must be portable host paths: traversal, backslashes, colons, control characters,
 *   Windows reserved names and components ending in a space or a dot are skipped.
 * - The whole listing is checked first for names that differ only by case or Unicode
 *   normalisation (directory components included, records beyond the file limit too):
 *   everything under an ambiguous component is skipped, so one remote file cannot overwrite
 *   another on a case-insensitive volume. A name that aliases a differently spelled existing
 *   local file or directory is skipped as well.
 * - Each file is written to a temporary name in its verified directory, synced, and renamed
 *   into place: a failure keeps the previous complete copy. Remote deletions are not
 *   propagated; every release revisits every file (equal sizes prove nothing). */
#include "osb.h"

#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <uninorm.h>

#define OUTPUTS "/mnt/user-data/outputs"

void osb_sync_report_free(struct osb_sync_report *rep)
{
  free(rep->truncated_reason);
  memset(rep, 0, sizeof *rep);
}

bool osb_sync_component_ok(const char *c, size_t len)
{
  if (len == 0 || (len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
    return false;
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char) c[i];
    if (ch < 0x20 || ch == 0x7f || ch == '\\' || ch == ':' || ch == '/')
      return false;
  }
  if (c[len - 1] == ' ' || c[len - 1] == '.')
    return false;
  /* Windows reserved device names, alone or with an extension: CON, con.txt, COM1.log */
  size_t stem = 0;
  while (stem < len && c[stem] != '.')
    stem++;
  static const char *const reserved[] = {"CON", "PRN", "AUX", "NUL"};
  for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
    if (stem == 3 && strncasecmp(c, reserved[i], 3) == 0)
      return false;
  if (stem == 4 && (strncasecmp(c, "COM", 3) == 0 || strncasecmp(c, "LPT", 3) == 0) &&
      c[3] >= '1' && c[3] <= '9')
    return false;
  return true;
}

/* libunistring, loaded on first use like libcurl (only this pass needs it). */
static struct {
  uint8_t *(*casefold)(const uint8_t *, size_t, const char *, uninorm_t, uint8_t *, size_t *);
  uninorm_t nfc;
} un;
static pthread_once_t un_once = PTHREAD_ONCE_INIT;

static void un_load(void)
{
  void *h = dlopen("libunistring.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    return;
  *(void **) (&un.casefold) = dlsym(h, "u8_casefold");
  un.nfc = dlsym(h, "uninorm_nfc");
}

bool osb_sync_unicode_available(void)
{
  pthread_once(&un_once, un_load);
  return un.casefold && un.nfc;
}

/* NFC + case folding: two names that map to the same key collide somewhere. Without
 * libunistring, ASCII case folding only (and the pass says so once). */
static char *name_key(const char *s, size_t len)
{
  if (osb_sync_unicode_available()) {
    size_t n = 0;
    uint8_t *k = un.casefold((const uint8_t *) s, len, NULL, un.nfc, NULL, &n);
    if (k) {
      char *r = xstrndup((const char *) k, n);
      free(k);
      return r;
    }
  }
  char *r = xstrndup(s, len);
  for (char *p = r; *p; p++)
    if (*p >= 'A' && *p <= 'Z')
      *p = (char) (*p - 'A' + 'a');
  return r;
}

struct rec {
  char *rel; /* below outputs/ */
  uint64_t size;
  int64_t mtime_ns;
  bool ok; /* portable names */
};

struct prefix {
  char *key;  /* normalised prefix */
  char *orig; /* as spelled */
};

static int cmp_prefix(const void *a, const void *b)
{
  const struct prefix *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : strcmp(x->orig, y->orig);
}

/* Marks as ambiguous every normalised prefix spelled two ways in the listing. */
static void find_ambiguous(struct rec *recs, size_t n, sbx_strv_t *ambiguous)
{
  struct prefix *p = NULL;
  size_t np = 0, cap = 0;
  for (size_t i = 0; i < n; i++) {
    if (!recs[i].ok)
      continue;
    const char *rel = recs[i].rel;
    sbx_buf_t key = {0};
    for (const char *c = rel; *c;) {
      const char *e = strchr(c, '/');
      size_t len = e ? (size_t) (e - c) : strlen(c);
      cleanup_free char *k = name_key(c, len);
      if (key.len)
        sbx__buf_putc(&key, '/');
      sbx__buf_puts(&key, k);
      if (np == cap) {
        cap = cap ? cap * 2 : 64;
        p = xreallocarray(p, cap, sizeof *p);
      }
      p[np].key = xstrdup(key.data);
      p[np].orig = xstrndup(rel, (size_t) (c - rel) + len);
      np++;
      c += len + (e != NULL);
    }
    sbx__buf_free(&key);
  }
  if (np > 1)
    qsort(p, np, sizeof *p, cmp_prefix);
  for (size_t i = 1; i < np; i++)
    if (strcmp(p[i].key, p[i - 1].key) == 0 && strcmp(p[i].orig, p[i - 1].orig) != 0 &&
        (ambiguous->n == 0 || strcmp(ambiguous->v[ambiguous->n - 1], p[i].key) != 0))
      sbx__strv_push(ambiguous, p[i].key);
  for (size_t i = 0; i < np; i++) {
    free(p[i].key);
    free(p[i].orig);
  }
  free(p);
}

static bool under_ambiguous(const char *rel, const sbx_strv_t *ambiguous)
{
  if (ambiguous->n == 0)
    return false;
  sbx_buf_t key = {0};
  bool hit = false;
  for (const char *c = rel; *c && !hit;) {
    const char *e = strchr(c, '/');
    size_t len = e ? (size_t) (e - c) : strlen(c);
    cleanup_free char *k = name_key(c, len);
    if (key.len)
      sbx__buf_putc(&key, '/');
    sbx__buf_puts(&key, k);
    hit = ambiguous->n &&
          bsearch(&key.data, ambiguous->v, ambiguous->n, sizeof(char *), sbx__strcmp_p) != NULL;
    c += len + (e != NULL);
  }
  sbx__buf_free(&key);
  return hit;
}

/* True if dirfd holds an entry spelled differently from name with the same normalised key. */
static bool aliases_local(int dirfd, const char *name)
{
  int fd = dup(dirfd);
  if (fd < 0)
    return false;
  DIR *d = fdopendir(fd);
  if (d == NULL) {
    close(fd);
    return false;
  }
  cleanup_free char *want = name_key(name, strlen(name));
  bool alias = false;
  struct dirent *de;
  rewinddir(d);
  while (!alias && (de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, name) == 0 || de->d_name[0] == '.')
      continue;
    cleanup_free char *k = name_key(de->d_name, strlen(de->d_name));
    alias = strcmp(k, want) == 0;
  }
  closedir(d);
  return alias;
}

/* Opens (creating) the directory of rel below outputs, one component at a time, never
 * through a link and never through an alias. Returns the directory fd and sets *base. */
static int open_parent(int outputs_fd, const char *rel, const char **base, const char **why)
{
  int fd = dup(outputs_fd);
  const char *c = rel;
  for (;;) {
    const char *e = strchr(c, '/');
    if (e == NULL) {
      *base = c;
      if (aliases_local(fd, c)) {
        *why = "it aliases a differently spelled local file";
        close(fd);
        return -1;
      }
      return fd;
    }
    cleanup_free char *comp = xstrndup(c, (size_t) (e - c));
    if (aliases_local(fd, comp)) {
      *why = "it aliases a differently spelled local directory";
      close(fd);
      return -1;
    }
    if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
      *why = "its local directory cannot be created";
      close(fd);
      return -1;
    }
    int sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(fd);
    if (sub < 0) {
      *why = errno == ELOOP || errno == ENOTDIR ? "its local destination is a link or a file"
                                                : "its local directory cannot be opened";
      return -1;
    }
    fd = sub;
    c = e + 1;
  }
}

static int64_t parse_time_ns(const char *s)
{
  if (s == NULL)
    return 0;
  struct tm tm = {0};
  const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (p == NULL)
    return 0;
  int64_t ns = 0;
  if (*p == '.') {
    int digits = 0;
    for (p++; *p >= '0' && *p <= '9'; p++, digits++)
      if (digits < 9)
        ns = ns * 10 + (*p - '0');
    for (; digits < 9; digits++)
      ns *= 10;
  }
  time_t t = timegm(&tm);
  int off = 0;
  if (*p == '+' || *p == '-') {
    int hh = 0, mm = 0;
    if (sscanf(p + 1, "%2d:%2d", &hh, &mm) == 2)
      off = (hh * 3600 + mm * 60) * (*p == '-' ? -1 : 1);
  }
  return ((int64_t) t - off) * 1000000000LL + ns;
}

struct dl_ctx {
  int fd;
  uint64_t deadline_ms;
};

static int dl_write(void *arg, const char *data, size_t len)
{
  struct dl_ctx *d = arg;
  return sbx__write_all(d->fd, data, len) < 0 ? 1 : 0;
}

static int dl_progress(void *arg)
{
  struct dl_ctx *d = arg;
  return sbx__now_ms() >= d->deadline_ms;
}

static void set_reason(struct osb_sync_report *rep, char *why)
{
  if (rep->truncated_reason == NULL)
    rep->truncated_reason = why;
  else
    free(why);
}

int osb_sync_outputs(struct osb_remote *r, const char *user_data, const struct osb_sync_limits *lim,
                     struct osb_sync_report *rep, sbx_error_t *err)
{
  memset(rep, 0, sizeof *rep);
  if (!osb_sync_unicode_available())
    sbx__log(SBX_LOG_WARNING, "output sync: libunistring is missing; names are compared with "
                              "ASCII case folding only");
  uint64_t deadline = sbx__now_ms() + (uint64_t) (lim->deadline_s * 1000);
  json_t *infos = NULL;
  sbx_error_t lerr = NULL;
  if (osb_list(r, OUTPUTS, OSB_LIST_DEPTH, lim->max_listing, &infos, &lerr) < 0) {
    if (lerr->kind == SBX_E_NOT_FOUND) {
      sbx_error_release(&lerr);
      return 0; /* nothing to copy */
    }
    if (lerr->kind == SBX_E_TOO_LARGE) {
      sbx_error_release(&lerr);
      rep->truncated_reason = xasprintf("listing byte cap %zu", lim->max_listing);
      return 0;
    }
    *err = lerr;
    return -1;
  }
  /* the records: regular files below outputs/, never links */
  size_t n = json_array_size(infos), k = 0;
  struct rec *recs = xzalloc((n + 1) * sizeof *recs);
  size_t i;
  json_t *v;
  json_array_foreach(infos, i, v)
  {
    const char *path = json_string_value(json_object_get(v, "path"));
    const char *type = json_string_value(json_object_get(v, "type"));
    if (path == NULL || type == NULL || strcmp(type, "file") != 0 ||
        !sbx__str_has_prefix(path, OUTPUTS "/"))
      continue;
    const char *rel = path + sizeof OUTPUTS;
    struct rec *rc = &recs[k++];
    rc->rel = xstrdup(rel);
    rc->size = (uint64_t) json_integer_value(json_object_get(v, "size"));
    rc->mtime_ns = parse_time_ns(json_string_value(json_object_get(v, "modified_at")));
    rc->ok = *rel != '\0';
    for (const char *c = rel; rc->ok && *c;) {
      const char *e = strchr(c, '/');
      size_t len = e ? (size_t) (e - c) : strlen(c);
      rc->ok = osb_sync_component_ok(c, len);
      c += len + (e != NULL);
    }
    if (!rc->ok) {
      sbx__log(SBX_LOG_WARNING, "output sync: skipping `%s`: not a portable host path", rel);
      rep->skipped++;
    }
  }
  json_decref(infos);
  sbx_strv_t ambiguous = {0};
  find_ambiguous(recs, k, &ambiguous);
  int ret = 0;
  cleanup_free char *outputs = xasprintf("%s/outputs", user_data);
  cleanup_close int outputs_fd = open(outputs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (outputs_fd < 0) {
    ret = sbx__make_error(err, errno, SBX_E_IO, "output sync: open `%s`", outputs);
    goto done;
  }
  for (i = 0; i < k; i++) {
    struct rec *rc = &recs[i];
    if (!rc->ok)
      continue;
    if (under_ambiguous(rc->rel, &ambiguous)) {
      sbx__log(SBX_LOG_WARNING,
               "output sync: skipping `%s`: another output differs from it only by case or "
               "Unicode normalisation",
               rc->rel);
      rep->skipped++;
      continue;
    }
    if (sbx__now_ms() >= deadline) {
      set_reason(rep, xasprintf("time budget %gs", lim->deadline_s));
      break;
    }
    if (rc->size > lim->max_file) {
      sbx__log(SBX_LOG_WARNING, "output sync: skipping oversize artefact `%s` (%llu bytes)",
               rc->rel, (unsigned long long) rc->size);
      rep->skipped++;
      continue;
    }
    if (rep->downloaded_files >= lim->max_files) {
      set_reason(rep, xasprintf("file count cap %zu", lim->max_files));
      break;
    }
    if (rep->downloaded_bytes + rc->size > lim->max_total) {
      set_reason(rep, xasprintf("total byte budget %llu", (unsigned long long) lim->max_total));
      break;
    }
    const char *base = NULL, *why = NULL;
    int dirfd = open_parent(outputs_fd, rc->rel, &base, &why);
    if (dirfd < 0) {
      sbx__log(SBX_LOG_WARNING, "output sync: skipping `%s`: %s", rc->rel, why);
      rep->skipped++;
      continue;
    }
    char hex[25];
    sbx__random_hex(hex, 24);
    cleanup_free char *tmp = xasprintf(".%.200s.%s.sync.tmp", base, hex);
    struct dl_ctx d = {
        .fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600),
        .deadline_ms = deadline};
    uint64_t allowance = lim->max_total - rep->downloaded_bytes;
    if (allowance > lim->max_file)
      allowance = lim->max_file;
    cleanup_free char *remote = xasprintf(OUTPUTS "/%s", rc->rel);
    sbx_error_t derr = NULL;
    int dr = d.fd < 0 ? sbx__make_error(&derr, errno, SBX_E_IO, "create a temporary file")
                      : osb_download(r, remote, allowance, dl_write, &d, dl_progress, 0, &derr);
    struct stat st;
    if (dr == 0 && (fsync(d.fd) < 0 || fstat(d.fd, &st) < 0))
      dr = sbx__make_error(&derr, errno, SBX_E_IO, "write `%s`", rc->rel);
    if (dr == 0 && rc->mtime_ns > 0) {
      struct timespec ts[2] = {
          {.tv_nsec = UTIME_OMIT},
          {.tv_sec = rc->mtime_ns / 1000000000LL, .tv_nsec = rc->mtime_ns % 1000000000LL}};
      futimens(d.fd, ts); /* an out-of-range time is ignored */
    }
    if (dr == 0 && renameat(dirfd, tmp, dirfd, base) < 0)
      dr = sbx__make_error(&derr, errno, SBX_E_IO, "replace `%s`", rc->rel);
    if (d.fd >= 0)
      close(d.fd);
    if (dr < 0) {
      unlinkat(dirfd, tmp, 0);
      close(dirfd);
      /* a partial stream cannot be charged to the budget: the pass stops */
      sbx__log(SBX_LOG_WARNING, "output sync: `%s`: %s", rc->rel, derr->msg);
      if (derr->kind == SBX_E_TIMEOUT)
        set_reason(rep, xasprintf("time budget %gs", lim->deadline_s));
      else if (derr->kind == SBX_E_TOO_LARGE && allowance < lim->max_file)
        set_reason(rep, xasprintf("total byte budget %llu", (unsigned long long) lim->max_total));
      else
        set_reason(rep, xasprintf("download failed: %s", derr->msg));
      bool terminal = derr->kind == SBX_E_BACKEND;
      if (terminal) {
        *err = derr;
        ret = -1;
      } else {
        sbx_error_release(&derr);
      }
      break;
    }
    close(dirfd);
    rep->downloaded_files++;
    rep->downloaded_bytes += (uint64_t) st.st_size;
    rep->synced++;
  }
  if (rep->truncated_reason)
    sbx__log(SBX_LOG_WARNING,
             "output sync truncated (%s); downloaded=%zu files/%llu bytes this pass, remaining "
             "artefacts deferred to next release",
             rep->truncated_reason, rep->downloaded_files,
             (unsigned long long) rep->downloaded_bytes);
done:
  for (i = 0; i < k; i++)
    free(recs[i].rel);
  free(recs);
  sbx__strv_free(&ambiguous);
  return ret;
}
