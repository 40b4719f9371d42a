#include "util.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

void sbx__cleanup_freep(void *p)
{
  void **pp = (void **) p;
  free(*pp);
}

void sbx__cleanup_closep(int *fd)
{
  if (*fd >= 0) {
    int saved = errno;
    close(*fd);
    errno = saved;
  }
}

void sbx__cleanup_dirp(DIR **d)
{
  if (*d)
    closedir(*d);
}

void sbx__cleanup_filep(FILE **f)
{
  if (*f)
    fclose(*f);
}

static void oom(void)
{
  static const char msg[] = "sbx: out of memory\n";
  (void) !write(2, msg, sizeof(msg) - 1);
  abort();
}

void *xmalloc(size_t n)
{
  void *p = malloc(n ? n : 1);
  if (UNLIKELY(p == NULL))
    oom();
  return p;
}

void *xzalloc(size_t n)
{
  void *p = calloc(1, n ? n : 1);
  if (UNLIKELY(p == NULL))
    oom();
  return p;
}

void *xrealloc(void *p, size_t n)
{
  p = realloc(p, n ? n : 1);
  if (UNLIKELY(p == NULL))
    oom();
  return p;
}

void *xreallocarray(void *p, size_t n, size_t size)
{
  if (size && n > SIZE_MAX / size)
    oom();
  return xrealloc(p, n * size);
}

char *xstrdup(const char *s)
{
  char *r = strdup(s ? s : "");
  if (UNLIKELY(r == NULL))
    oom();
  return r;
}

char *xstrndup(const char *s, size_t n)
{
  char *r = strndup(s, n);
  if (UNLIKELY(r == NULL))
    oom();
  return r;
}

char *xvasprintf(const char *fmt, va_list ap)
{
  char *r = NULL;
  if (UNLIKELY(vasprintf(&r, fmt, ap) < 0))
    oom();
  return r;
}

char *xasprintf(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  char *r = xvasprintf(fmt, ap);
  va_end(ap);
  return r;
}

void sbx__buf_reserve(sbx_buf_t *b, size_t extra)
{
  if (extra > SIZE_MAX - b->len - 1)
    oom();
  size_t need = b->len + extra + 1;
  if (need <= b->cap)
    return;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  b->data = xrealloc(b->data, cap);
  b->cap = cap;
  b->data[b->len] = '\0'; /* a string even if nothing is ever appended (steal returns it) */
}

void sbx__buf_append(sbx_buf_t *b, const void *data, size_t len)
{
  sbx__buf_reserve(b, len);
  if (len)
    memcpy(b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
}

void sbx__buf_puts(sbx_buf_t *b, const char *s)
{
  sbx__buf_append(b, s, strlen(s));
}

void sbx__buf_putc(sbx_buf_t *b, char c)
{
  sbx__buf_append(b, &c, 1);
}

void sbx__buf_printf(sbx_buf_t *b, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  cleanup_free char *s = xvasprintf(fmt, ap);
  va_end(ap);
  sbx__buf_puts(b, s);
}

char *sbx__buf_steal(sbx_buf_t *b)
{
  if (b->data == NULL)
    return xstrdup("");
  char *r = b->data;
  b->data = NULL;
  b->len = b->cap = 0;
  return r;
}

void sbx__buf_free(sbx_buf_t *b)
{
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

char *sbx__shell_quote(const char *s)
{
  sbx_buf_t b = {0};
  sbx__buf_putc(&b, '\'');
  for (; *s; s++) {
    if (*s == '\'')
      sbx__buf_puts(&b, "'\\''");
    else
      sbx__buf_putc(&b, *s);
  }
  sbx__buf_putc(&b, '\'');
  return sbx__buf_steal(&b);
}

void sbx__strv_push_owned(sbx_strv_t *s, char *str)
{
  if (s->n + 2 > s->cap) {
    s->cap = s->cap ? s->cap * 2 : 8;
    s->v = xreallocarray(s->v, s->cap, sizeof(char *));
  }
  s->v[s->n++] = str;
  s->v[s->n] = NULL;
}

void sbx__strv_push(sbx_strv_t *s, const char *str)
{
  sbx__strv_push_owned(s, xstrdup(str));
}

void sbx__strv_free(sbx_strv_t *s)
{
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  s->v = NULL;
  s->n = s->cap = 0;
}

int sbx__strcmp_p(const void *a, const void *b)
{
  return strcmp(*(const char *const *) a, *(const char *const *) b);
}

void sbx__strv_sort(sbx_strv_t *s)
{
  if (s->n > 1)
    qsort(s->v, s->n, sizeof(char *), sbx__strcmp_p);
}

int sbx__write_all(int fd, const void *buf, size_t len)
{
  const char *p = buf;
  while (len > 0) {
    ssize_t r = write(fd, p, len);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += r;
    len -= (size_t) r;
  }
  return 0;
}

int sbx__read_exact(int fd, void *buf, size_t len)
{
  char *p = buf;
  while (len > 0) {
    ssize_t r = read(fd, p, len);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    if (r == 0) {
      errno = ECONNRESET;
      return -1;
    }
    p += r;
    len -= (size_t) r;
  }
  return 0;
}

int sbx__read_file_at(int dirfd, const char *path, size_t max, char **out, size_t *len)
{
  cleanup_close int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return -1;
  sbx_buf_t b = {0};
  char tmp[8192];
  for (;;) {
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      sbx__buf_free(&b);
      return -1;
    }
    if (r == 0)
      break;
    if (b.len + (size_t) r > max) {
      sbx__buf_free(&b);
      errno = EFBIG;
      return -1;
    }
    sbx__buf_append(&b, tmp, (size_t) r);
  }
  if (len)
    *len = b.len;
  *out = sbx__buf_steal(&b);
  return 0;
}

int sbx__write_file_at(int dirfd, const char *path, const void *data, size_t len, int mode,
                       bool durable)
{
  char suffix[17];
  if (sbx__random_hex(suffix, 16) < 0)
    return -1;
  cleanup_free char *tmp = xasprintf("%s.%s.tmp", path, suffix);
  cleanup_close int fd =
      openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return -1;
  if (sbx__write_all(fd, data, len) < 0 || (durable && fsync(fd) < 0)) {
    int saved = errno;
    unlinkat(dirfd, tmp, 0);
    errno = saved;
    return -1;
  }
  if (renameat(dirfd, tmp, dirfd, path) < 0) {
    int saved = errno;
    unlinkat(dirfd, tmp, 0);
    errno = saved;
    return -1;
  }
  return 0;
}

const char *sbx__default_home(void)
{
  static char *home; /* computed once per process */
  if (home)
    return home;
  if (geteuid() == 0)
    return home = xstrdup(SBX_ROOT_HOME);
  const char *xdg = getenv("XDG_STATE_HOME"), *h = getenv("HOME");
  if (xdg && xdg[0] == '/')
    home = xasprintf("%s/sbx", xdg);
  else if (h && h[0] == '/')
    home = xasprintf("%s/.local/state/sbx", h);
  else
    return home = xstrdup(".sbx"); /* no home to speak of: the current folder's */
  /* not made here: a verb that only reads (ps, doctor, config) creates nothing; the pool makes
   * it 0700 at its first use (sbx__pool_open) */
  return home;
}

int sbx__mkdir_p(const char *path, int mode)
{
  /* the common case first: it exists (one stat instead of a mkdir per component) */
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return 0;
  cleanup_free char *p = xstrdup(path);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/')
      continue;
    *s = '\0';
    if (mkdir(p, mode) < 0 && errno != EEXIST)
      return -1;
    *s = '/';
  }
  if (mkdir(p, mode) < 0 && errno != EEXIST)
    return -1;
  if (stat(p, &st) < 0)
    return -1;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return -1;
  }
  return 0;
}

/* How many directory levels sbx__rm_rf_at keeps open. Deeper directories are moved up under
 * the top directory being removed (a rename in the same tree) instead of being descended into,
 * so a tree of any depth is removed with bounded descriptors, memory and stack: a sandbox can
 * make a tree far deeper than the caller's descriptor limit allows to walk. */
#define RM_MAX_LEVELS 64

struct rm_level {
  DIR *d;
  char *name;    /* this directory's name in its parent */
  bool progress; /* something was removed since the last rewind */
};

static void rm_pop(struct rm_level *lv, size_t *depth)
{
  struct rm_level *l = &lv[--*depth];
  if (l->d)
    closedir(l->d);
  free(l->name);
  l->d = NULL;
  l->name = NULL;
}

int sbx__rm_rf_at(int parent, const char *name)
{
  if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
    return 0;
  if (errno != EISDIR && errno != EPERM)
    return -1;
  struct rm_level lv[RM_MAX_LEVELS];
  size_t depth = 0;
  unsigned long long moved = 0;
  int ret = 0;
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : -1;
  lv[0] = (struct rm_level){fdopendir(fd), xstrdup(name), false};
  if (lv[0].d == NULL) {
    close(fd);
    free(lv[0].name);
    return -1;
  }
  depth = 1;
  while (depth > 0) {
    struct rm_level *l = &lv[depth - 1];
    int pfd = depth >= 2 ? dirfd(lv[depth - 2].d) : parent;
    errno = 0;
    struct dirent *de = readdir(l->d);
    if (de == NULL) {
      if (unlinkat(pfd, l->name, AT_REMOVEDIR) == 0 || errno == ENOENT) {
        if (depth >= 2)
          lv[depth - 2].progress = true;
        rm_pop(lv, &depth);
      } else if (errno == ENOTEMPTY && l->progress) {
        /* entries added while reading (moved-up subtrees) may have been missed */
        l->progress = false;
        rewinddir(l->d);
      } else {
        ret = -1;
        rm_pop(lv, &depth);
      }
      continue;
    }
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
      continue;
    int dfd = dirfd(l->d);
    if (unlinkat(dfd, de->d_name, 0) == 0 || errno == ENOENT) {
      l->progress = true;
      continue;
    }
    if (errno != EISDIR && errno != EPERM) {
      ret = -1;
      continue;
    }
    DIR *sd = NULL;
    if (depth < RM_MAX_LEVELS) {
      int sub = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      sd = sub >= 0 ? fdopendir(sub) : NULL;
      if (sd == NULL) {
        int e = errno;
        if (sub >= 0)
          close(sub);
        if (e == ENOENT)
          continue;
        if ((e != EMFILE && e != ENFILE) || depth < 2) {
          ret = -1;
          continue;
        }
      }
    }
    if (sd == NULL) {
      /* too deep (or out of descriptors) to descend: move the subtree up under the top
       * directory, where a later pass of the top finds it */
      bool done = false;
      for (int tries = 0; tries < 16 && !done; tries++) {
        char tmp[64];
        snprintf(tmp, sizeof tmp, ".sbx-rm-%llu", moved++);
        if (renameat2(dfd, de->d_name, dirfd(lv[0].d), tmp, RENAME_NOREPLACE) == 0)
          done = true;
        else if (errno != EEXIST)
          break;
      }
      if (done)
        l->progress = lv[0].progress = true;
      else
        ret = -1;
      continue;
    }
    lv[depth++] = (struct rm_level){sd, xstrdup(de->d_name), false};
  }
  return ret;
}

uint64_t sbx__now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

uint64_t sbx__realtime_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t) ts.tv_sec * 1000u + (uint64_t) ts.tv_nsec / 1000000u;
}

double sbx__realtime_sec(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

bool sbx__str_has_prefix(const char *s, const char *prefix)
{
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool sbx__str_has_suffix(const char *s, const char *suffix)
{
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

int sbx__random_hex(char *out, size_t hexlen)
{
  static const char hex[] = "0123456789abcdef";
  unsigned char raw[32];
  size_t need = (hexlen + 1) / 2;
  if (need > sizeof raw) {
    errno = EINVAL;
    return -1;
  }
  size_t got = 0;
  while (got < need) {
    ssize_t r = getrandom(raw + got, need - got, 0);
    if (r < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    got += (size_t) r;
  }
  for (size_t i = 0; i < hexlen; i++)
    out[i] = hex[(raw[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
  out[hexlen] = '\0';
  return 0;
}

/* SHA-256 (FIPS 180-4), used for sandbox ids; small enough not to need libcrypto. */
static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR32(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char *p)
{
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t) p[4 * i] << 24 | (uint32_t) p[4 * i + 1] << 16 |
           (uint32_t) p[4 * i + 2] << 8 | (uint32_t) p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR32(w[i - 15], 7) ^ ROR32(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR32(w[i - 2], 17) ^ ROR32(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 =
        hh + (ROR32(e, 6) ^ ROR32(e, 11) ^ ROR32(e, 25)) + ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
    uint32_t t2 = (ROR32(a, 2) ^ ROR32(a, 13) ^ ROR32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

void sbx__sha256_hex(const void *data, size_t len, char *out, size_t hexlen)
{
  static const char hex[] = "0123456789abcdef";
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  const unsigned char *p = data;
  size_t left = len;
  while (left >= 64) {
    sha256_block(h, p);
    p += 64;
    left -= 64;
  }
  unsigned char tail[128] = {0};
  memcpy(tail, p, left);
  tail[left] = 0x80;
  size_t tl = left + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t) len * 8;
  for (int i = 0; i < 8; i++)
    tail[tl - 1 - i] = (unsigned char) (bits >> (8 * i));
  sha256_block(h, tail);
  if (tl == 128)
    sha256_block(h, tail + 64);
  if (hexlen > 64)
    hexlen = 64;
  for (size_t i = 0; i < hexlen; i++) {
    unsigned char byte = (unsigned char) (h[i / 8] >> (24 - 8 * ((i / 2) % 4)));
    out[i] = hex[(byte >> (i % 2 ? 0 : 4)) & 0xf];
  }
  out[hexlen] = '\0';
}

int sbx__open_tree_nofollow(const char *path, bool recursive)
{
  struct open_how how = {.flags = O_PATH | O_CLOEXEC, .resolve = RESOLVE_NO_SYMLINKS};
  int src = (int) syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
  if (src < 0)
    return -1;
  int tree = (int) syscall(SYS_open_tree, src, "",
                           OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH |
                               (recursive ? AT_RECURSIVE : 0));
  int saved = errno;
  close(src);
  errno = saved;
  return tree;
}

unsigned long long sbx__proc_start_time(long pid)
{
  if (pid <= 0)
    return 0;
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  cleanup_free char *data = NULL;
  if (sbx__read_file_at(AT_FDCWD, path, 4096, &data, NULL) < 0)
    return 0;
  /* the command name may contain spaces and parentheses: fields follow the last ')' */
  char *p = strrchr(data, ')');
  if (p == NULL || p[1] == '\0')
    return 0;
  p += 2;
  /* a zombie is dead: it only waits for the host's init to reap it */
  if (*p == 'Z' || *p == 'X')
    return 0;
  /* p is at field 3 (state); start time is field 22 */
  for (int field = 3; field < 22 && p; field++) {
    p = strchr(p, ' ');
    if (p)
      p++;
  }
  return p ? strtoull(p, NULL, 10) : 0;
}

pid_t sbx__clone_vm(int (*fn)(void *), void *stack_top, int flags, void *arg, int *pidfd)
{
#ifdef SBX_TSAN_BUILD
  flags &= ~CLONE_VM;
#endif
  return clone(fn, stack_top, flags, arg, pidfd);
}
