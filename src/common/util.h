/* Small helpers shared by libsbx, sbx-init, sbxd and the CLI: scoped cleanup (crun's
 * cleanup_* idiom), checked allocation, growable buffers and string vectors, and I/O loops. */
#ifndef SBX_UTIL_H
#define SBX_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#ifndef TEMP_FAILURE_RETRY
#define TEMP_FAILURE_RETRY(expression)                                                             \
  (__extension__({                                                                                 \
    long int __result;                                                                             \
    do                                                                                             \
      __result = (long int) (expression);                                                          \
    while (__result == -1L && errno == EINTR);                                                     \
    __result;                                                                                      \
  }))
#endif

void sbx__cleanup_freep(void *p);
void sbx__cleanup_closep(int *fd);
void sbx__cleanup_dirp(DIR **d);
void sbx__cleanup_filep(FILE **f);

#define cleanup_free __attribute__((cleanup(sbx__cleanup_freep)))
#define cleanup_close __attribute__((cleanup(sbx__cleanup_closep)))
#define cleanup_dir __attribute__((cleanup(sbx__cleanup_dirp)))
#define cleanup_file __attribute__((cleanup(sbx__cleanup_filep)))

/* Move ownership out of a cleanup variable (bubblewrap's steal_pointer). */
#define steal_pointer(pp)                                                                          \
  (__extension__({                                                                                 \
    __typeof__(*(pp)) __p = *(pp);                                                                 \
    *(pp) = NULL;                                                                                  \
    __p;                                                                                           \
  }))
static inline int steal_fd(int *fd)
{
  int r = *fd;
  *fd = -1;
  return r;
}

/* Allocation failure is the one condition that aborts (crun's OOM()). */
void *xmalloc(size_t n);
void *xzalloc(size_t n);
void *xrealloc(void *p, size_t n);
void *xreallocarray(void *p, size_t n, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* A growable byte buffer; always NUL-terminated past len so it can be used as a string. */
typedef struct {
  char *data;
  size_t len;
  size_t cap;
} sbx_buf_t;

void sbx__buf_reserve(sbx_buf_t *b, size_t extra);
void sbx__buf_append(sbx_buf_t *b, const void *data, size_t len);
void sbx__buf_puts(sbx_buf_t *b, const char *s);
void sbx__buf_putc(sbx_buf_t *b, char c);
void sbx__buf_printf(sbx_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
char *sbx__buf_steal(sbx_buf_t *b); /* returns the string (never NULL); the buffer is reset */
void sbx__buf_free(sbx_buf_t *b);

/* s as one POSIX shell word: single-quoted, each ' written as '\\''. */
char *sbx__shell_quote(const char *s);

/* A NULL-terminated vector of owned strings. */
typedef struct {
  char **v;
  size_t n;
  size_t cap;
} sbx_strv_t;

void sbx__strv_push(sbx_strv_t *s, const char *str);
void sbx__strv_push_owned(sbx_strv_t *s, char *str);
void sbx__strv_free(sbx_strv_t *s);
/* strcmp of two char * elements: a qsort/bsearch comparator for arrays of strings. */
int sbx__strcmp_p(const void *a, const void *b);
void sbx__strv_sort(sbx_strv_t *s);

/* I/O loops that retry EINTR and short transfers. Return 0 or -1 with errno set. */
int sbx__write_all(int fd, const void *buf, size_t len);
/* Reads exactly len bytes; returns 0, or -1 with errno (EPIPE-like EOF reported as ECONNRESET). */
int sbx__read_exact(int fd, void *buf, size_t len);

/* Whole-file helpers relative to a directory fd (AT_FDCWD for plain paths). The read refuses
 * more than max bytes (EFBIG). The write replaces the file atomically (temp + rename), and
 * with durable also survives a power loss (fsync before the rename). */
int sbx__read_file_at(int dirfd, const char *path, size_t max, char **out, size_t *len);
int sbx__write_file_at(int dirfd, const char *path, const void *data, size_t len, int mode,
                       bool durable);

/* Start time of a live process (0 if it is gone or a zombie): with the pid, it identifies a
 * process across pid reuse. */
unsigned long long sbx__proc_start_time(long pid);

int sbx__mkdir_p(const char *path, int mode); /* host paths only; -1 with errno */
/* The state directory when neither --home nor $SBX_HOME names one: SBX_ROOT_HOME for root (a
 * fixed system path, as Docker's /var/lib/docker), else $XDG_STATE_HOME/sbx (default
 * ~/.local/state/sbx). Not created here: the pool makes it, 0700, at its first use. */
#ifndef SBX_ROOT_HOME
#define SBX_ROOT_HOME "/var/lib/sbx"
#endif
const char *sbx__default_home(void);
int sbx__rm_rf_at(int dirfd, const char *name); /* no symlink following */
/* A detached copy (open_tree OPEN_TREE_CLONE, close-on-exec) of the mount tree at path, reached
 * without following any symlink (ELOOP if there is one); recursive copies submounts too. */
int sbx__open_tree_nofollow(const char *path, bool recursive);

uint64_t sbx__now_ms(void);      /* CLOCK_MONOTONIC */
uint64_t sbx__realtime_ms(void); /* CLOCK_REALTIME, ms since the epoch */
double sbx__realtime_sec(void);

bool sbx__str_has_prefix(const char *s, const char *prefix);
bool sbx__str_has_suffix(const char *s, const char *suffix);

/* Lower-case hex of sha256(data), first hexlen characters (hexlen <= 64). */
void sbx__sha256_hex(const void *data, size_t len, char *out, size_t hexlen);
/* hexlen random lower-case hex characters from getrandom(2). */
int sbx__random_hex(char *out, size_t hexlen);

/* clone(fn, stack_top, flags, arg, pidfd) for a CLONE_VM | CLONE_VFORK child (pidfd is filled
 * with CLONE_PIDFD). A ThreadSanitizer build drops CLONE_VM: TSan models a clone as a fork,
 * and a child sharing our memory would run its fork bookkeeping, and its own accesses, on the
 * parent thread's state (TSan then refused to start threads, saw descriptor races between two
 * descriptor tables, and hung when a child died inside free). Without CLONE_VM, what the child
 * writes for the parent (adopt.c's failing step) does not reach it; the exit status does. */
pid_t sbx__clone_vm(int (*fn)(void *), void *stack_top, int flags, void *arg, int *pidfd);

#endif
