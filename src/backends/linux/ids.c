/* Host id ranges of sandboxes (compiled into the launcher and libsbx).
 *
 * Every sandbox runs under a host id range of its own (65536 uids and gids from
 * SBX_RANGE_FIRST up), so that the kernel's per-user budgets (fds in flight, pipe buffers,
 * epoll watches, ...) and its permission checks keep sandboxes apart. A range is taken by an
 * exclusive flock on its slot file in SBX_RANGE_DIR, host-wide (sandboxes of every $SBX_HOME
 * share the host's id space); the sandbox's PID 1 inherits the locked descriptor, so the range
 * is free again exactly when the sandbox's last process is gone (the kernel drops the lock),
 * never earlier and with no stale record to clean. Ranges that overlap an /etc/subuid or
 * /etc/subgid entry are never used: a host user allowed those ids could otherwise enter a
 * sandbox's id space with newuidmap.
 *
 * Files a sandbox writes for the host (the thread folder, volumes) belong on disk to the
 * folder's owner through idmapped mounts: the sandbox's root (its range's first id) is the
 * owner of the folder's top (uid and gid apart), the other ids inside, 1..65535, are
 * SBX_UID_BASE + 1.. on disk, as before, whatever range the sandbox got. So the harness that
 * owns a thread folder owns what its sandboxes write there, a root-owned volume is writable
 * by root inside, and no range's ids are left on disk to be reused. (podman's `:idmap` maps
 * the container's ids to the same ids on disk instead: its root writes files of the host's
 * root.) A folder owned by SBX_UID_BASE, as libsbx makes them, maps exactly as before. */
#include "linux.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

/* One decimal field: digits only (no sign, no space), at most 20 of them; *end past it. */
static bool subid_number(const char *p, const char **end, unsigned long long *v)
{
  if (*p < '0' || *p > '9')
    return false;
  errno = 0;
  char *e;
  *v = strtoull(p, &e, 10);
  *end = e;
  return errno == 0;
}

bool sbx__subids_overlap(const char *text, uint32_t first, uint32_t count)
{
  /* "name:first:count" lines; anything else is not an entry */
  const unsigned long long lo = first, hi = (unsigned long long) first + count; /* [lo, hi) */
  for (const char *line = text; *line;) {
    const char *nl = strchrnul(line, '\n');
    const char *c = memchr(line, ':', (size_t) (nl - line));
    unsigned long long a, n;
    const char *e;
    bool entry =
        c && subid_number(c + 1, &e, &a) && *e == ':' && subid_number(e + 1, &e, &n) && e == nl;
    /* [a, a + n) meets [lo, hi); a + n may wrap: then it reaches past hi */
    if (entry && n > 0 && a < hi && (a + n < a || a + n > lo))
      return true;
    line = *nl ? nl + 1 : nl;
  }
  return false;
}

static bool overlaps_subids(const char *file, uint32_t first, uint32_t count)
{
  cleanup_free char *text = NULL;
  if (sbx__read_file_at(AT_FDCWD, file, 1 << 20, &text, NULL) < 0)
    return false;
  return sbx__subids_overlap(text, first, count);
}

int sbx__ids_claim(uint32_t *base, sbx_error_t *err)
{
  if (mkdir(SBX_RANGE_PARENT, 0755) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create `%s`", SBX_RANGE_PARENT);
  if (mkdir(SBX_RANGE_DIR, 0700) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create `%s`", SBX_RANGE_DIR);
  cleanup_close int dir = open(SBX_RANGE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "open `%s`", SBX_RANGE_DIR);
  /* start at a random slot: concurrent launchers rarely probe the same ones */
  char hex[9];
  sbx__random_hex(hex, 8);
  uint32_t start = (uint32_t) strtoul(hex, NULL, 16) % SBX_RANGE_SLOTS;
  for (uint32_t i = 0; i < SBX_RANGE_SLOTS; i++) {
    uint32_t first = SBX_RANGE_FIRST + ((start + i) % SBX_RANGE_SLOTS) * SBX_UID_COUNT;
    if (overlaps_subids("/etc/subuid", first, SBX_UID_COUNT) ||
        overlaps_subids("/etc/subgid", first, SBX_UID_COUNT))
      continue;
    char name[16];
    snprintf(name, sizeof name, "%u", first);
    int fd = openat(dir, name, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "open `%s/%s`", SBX_RANGE_DIR, name);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      *base = first;
      return fd;
    }
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK)
      return sbx__make_error(err, e, SBX_E_INTERNAL, "lock `%s/%s`", SBX_RANGE_DIR, name);
  }
  return sbx__make_error(err, EAGAIN, SBX_E_INTERNAL, "every host id range is in use (%u)",
                         SBX_RANGE_SLOTS);
}

static int idle(void *arg)
{
  (void) arg;
  for (;;)
    pause();
  return 0;
}

int sbx__idmap_format(char *buf, size_t size, uint32_t owner, uint32_t base)
{
  const uint32_t lo = SBX_UID_BASE, n = SBX_UID_COUNT;
  if (owner == lo) /* the folders libsbx makes: one line, as before */
    return snprintf(buf, size, "%u %u %u\n", lo, base, n);
  if (owner > lo && owner - lo < n) {
    /* the owner is one of the others' on-disk ids (lo + j): inside j takes lo's place */
    uint32_t j = owner - lo;
    int len = snprintf(buf, size, "%u %u 1\n%u %u 1\n", owner, base, lo, base + j);
    if (j > 1 && len >= 0 && (size_t) len < size)
      len += snprintf(buf + len, size - (size_t) len, "%u %u %u\n", lo + 1, base + 1, j - 1);
    if (j < n - 1 && len >= 0 && (size_t) len < size)
      len += snprintf(buf + len, size - (size_t) len, "%u %u %u\n", owner + 1, base + j + 1,
                      n - 1 - j);
    return len;
  }
  return snprintf(buf, size, "%u %u 1\n%u %u %u\n", owner, base, lo + 1, base + 1, n - 1);
}

int sbx__ids_idmap_userns(uint32_t base, uid_t uid, gid_t gid, struct sbx_idmap_helper *h,
                          sbx_error_t *err)
{
  /* a user namespace needs a process only while its maps are written and it is opened: a
   * child sharing our memory (no copy of the page tables), killed at once and reaped later
   * (waiting for its exit here would be most of the cost) */
  enum { STACK = 16384 };
  h->stack = xmalloc(STACK); /* one per call: libsbx callers are threads */
  h->pid = sbx__clone_vm(idle, (char *) h->stack + STACK, CLONE_NEWUSER | CLONE_VM | SIGCHLD, NULL,
                         NULL);
  if (h->pid < 0) {
    int e = errno;
    free(h->stack);
    h->stack = NULL;
    return sbx__make_error(err, e, SBX_E_INTERNAL, "create the id-mapping namespace");
  }
  char path[64], map[160];
  int fd = -1, saved = 0;
  const char *what = "uid_map";
  for (int i = 0; i < 2 && saved == 0; i++, what = "gid_map") {
    int n = sbx__idmap_format(map, sizeof map, i ? (uint32_t) gid : (uint32_t) uid, base);
    snprintf(path, sizeof path, "/proc/%d/%s", (int) h->pid, what);
    cleanup_close int m = open(path, O_WRONLY | O_CLOEXEC);
    errno = 0;
    if (n <= 0 || (size_t) n >= sizeof map || m < 0 || write(m, map, (size_t) n) != n)
      saved = errno ? errno : EIO;
  }
  if (saved == 0) {
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int) h->pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      saved = errno;
  }
  kill(h->pid, SIGKILL);
  if (fd < 0) {
    sbx__ids_idmap_reap(h);
    return sbx__make_error(err, saved, SBX_E_INTERNAL, "map the id-mapping namespace (%s)", what);
  }
  return fd;
}

void sbx__ids_idmap_reap(struct sbx_idmap_helper *h)
{
  if (h->pid > 0)
    TEMP_FAILURE_RETRY(waitpid(h->pid, NULL, __WALL));
  h->pid = 0;
  free(h->stack); /* only once the child that ran on it is gone */
  h->stack = NULL;
}

int sbx__tree_idmap(int tree, int userns)
{
  struct mount_attr attr = {.attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t) userns};
  return (int) syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr,
                       sizeof attr);
}
