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
 * root.) A folder owned by SBX_UID_BASE, as libsbx makes them, maps as before, but for one id:
 *
 * The foreign owner's slot. A file of host root's in a folder that is not root's (DeerFlow's
 * gateway, running as root, writes the uploads into a folder libsbx made) would be unmapped:
 * shown as the overflow id 65534, with no capability of root inside over it (the kernel wants
 * its owner mapped) and EOVERFLOW for a rename over it or an unlink of it. So on-disk 0 maps to
 * SBX_FOREIGN_ID (65534) inside instead of SBX_UID_BASE + 65534, which loses its mapping: what
 * the sandbox sees is the same, but root inside may now replace, append to and delete those
 * files (a replace is a new file, the folder owner's; an append keeps root's). Any process
 * acting as 65534 would write as host root there, so a sandbox with such a folder runs its
 * commands under the id guard (gen-seccomp.c: no set*id or chown to 65534) and sbx-init refuses
 * that id too; spares, whose commands started without the guard, do not get the slot
 * (adopt.c). Files of any other host id stay unmapped (agent/files.c names the cause). */
#include "linux.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/nsfs.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

extern char **environ;

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

bool sbx__subids_find(const char *text, const char *name, uint32_t uid, uint32_t min,
                      uint32_t *first, uint32_t *count)
{
  char uidtext[16];
  snprintf(uidtext, sizeof uidtext, "%u", (unsigned) uid);
  for (const char *line = text; *line;) {
    const char *nl = strchrnul(line, '\n');
    const char *c = memchr(line, ':', (size_t) (nl - line));
    unsigned long long a, n;
    const char *e;
    if (c && subid_number(c + 1, &e, &a) && *e == ':' && subid_number(e + 1, &e, &n) && e == nl) {
      size_t k = (size_t) (c - line);
      bool who = (name && strlen(name) == k && memcmp(line, name, k) == 0) ||
                 (strlen(uidtext) == k && memcmp(line, uidtext, k) == 0);
      /* the whole range must be ids a map can name (below 2^32 - 1) */
      if (who && n >= min && n <= UINT32_MAX && a + n < UINT32_MAX) {
        *first = (uint32_t) a;
        *count = (uint32_t) n;
        return true;
      }
    }
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

/* The on-disk id of id k (1..65535) inside an idmapped folder whose top belongs to owner. */
static uint32_t idmap_disk(uint32_t owner, bool foreign, uint32_t k)
{
  const uint32_t lo = SBX_UID_BASE;
  if (foreign && owner != 0 && k == SBX_FOREIGN_ID)
    return 0; /* host root's files: the foreign owner's slot */
  if (owner > lo && owner - lo == k)
    return lo; /* the owner is one of the others' on-disk ids: lo takes its place */
  return lo + k;
}

int sbx__idmap_format(char *buf, size_t size, uint32_t owner, uint32_t base, bool foreign)
{
  if (owner == 0)
    foreign = false; /* root owns the top: root is root inside already */
  int len = snprintf(buf, size, "%u %u ", owner, base);
  if (owner == SBX_UID_BASE && len >= 0 && (size_t) len < size && !foreign) {
    len += snprintf(buf + len, size - (size_t) len, "%u\n", SBX_UID_COUNT); /* as always */
    return len;
  }
  if (owner == SBX_UID_BASE && len >= 0 && (size_t) len < size) {
    /* the folders libsbx makes: one line up to the foreign slot, as before up to there */
    len += snprintf(buf + len, size - (size_t) len, "%u\n", SBX_FOREIGN_ID);
  } else if (len >= 0 && (size_t) len < size) {
    len += snprintf(buf + len, size - (size_t) len, "1\n");
  }
  /* runs of ids inside whose on-disk ids follow each other */
  uint32_t k = owner == SBX_UID_BASE ? SBX_FOREIGN_ID : 1;
  while (k < SBX_UID_COUNT && len >= 0 && (size_t) len < size) {
    uint32_t first = idmap_disk(owner, foreign, k), n = 1;
    while (k + n < SBX_UID_COUNT && idmap_disk(owner, foreign, k + n) == first + n)
      n++;
    len += snprintf(buf + len, size - (size_t) len, "%u %u %u\n", first, base + k, n);
    k += n;
  }
  return len;
}

/* A user namespace with these uid and gid maps, held open by fd (h is reaped later). */
static int userns_with_maps(const char *umap, int ulen, const char *gmap, int glen,
                            struct sbx_idmap_helper *h, sbx_error_t *err)
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
  char path[64];
  int fd = -1, saved = 0;
  const char *what = "uid_map";
  for (int i = 0; i < 2 && saved == 0; i++, what = "gid_map") {
    const char *map = i ? gmap : umap;
    int n = i ? glen : ulen;
    snprintf(path, sizeof path, "/proc/%d/%s", (int) h->pid, what);
    cleanup_close int m = open(path, O_WRONLY | O_CLOEXEC);
    errno = 0;
    if (n <= 0 || m < 0 || write(m, map, (size_t) n) != n)
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

int sbx__ids_idmap_userns(uint32_t base, uid_t uid, gid_t gid, bool foreign,
                          struct sbx_idmap_helper *h, sbx_error_t *err)
{
  char umap[256], gmap[256]; /* at most 6 lines of 3 numbers */
  int ul = sbx__idmap_format(umap, sizeof umap, (uint32_t) uid, base, foreign);
  int gl = sbx__idmap_format(gmap, sizeof gmap, (uint32_t) gid, base, foreign);
  if (ul <= 0 || (size_t) ul >= sizeof umap || gl <= 0 || (size_t) gl >= sizeof gmap)
    return sbx__make_error(err, EINVAL, SBX_E_INTERNAL, "format the id map");
  return userns_with_maps(umap, ul, gmap, gl, h, err);
}

int sbx__ids_userns_map(uint32_t inside, uint32_t base, struct sbx_idmap_helper *h,
                        sbx_error_t *err)
{
  char map[64];
  int n = snprintf(map, sizeof map, "%u %u %u\n", inside, base, SBX_UID_COUNT);
  return userns_with_maps(map, n, map, n, h, err);
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

/* ---- rootless ----
 *
 * An ordinary user's sandbox maps root inside to the user (so what it writes in the thread
 * folder is the user's on the host) and, when /etc/subuid and /etc/subgid give the user
 * subordinate ids and newuidmap/newgidmap are there to map them, ids 1..65535 inside to a slice
 * of its own of them: SBX_UID_COUNT - 1 ids per slot, a slot taken by an flock as for root's
 * ranges, in a folder of the user's ($XDG_RUNTIME_DIR/sbx/id-ranges, else id-ranges in the
 * state folder's home), never /run/sbx. Once every slot is taken the last one is shared by
 * the sandboxes beyond them (root inside is the same user in all of them anyway; their ids
 * only keep the kernel's per-user budgets apart). Without them the user alone is mapped: files of
 * other ids inside show as nobody, and chown to them fails (what `sbx doctor` says).
 * Image sandboxes are the exception: their layers' ids on disk are the store slice's (the first
 * slot, lib/image/userns.c extracts with it; no idmapped mounts rootless), so they all map it,
 * unlocked, and host sandboxes skip that slot when the user has others. */

#define SUB_SLOT (SBX_UID_COUNT - 1)

static char *rootless_range_dir(const struct sbx_launch_spec *s)
{
  const char *rt = getenv("XDG_RUNTIME_DIR");
  struct stat st;
  if (rt && rt[0] == '/' && stat(rt, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
    return xasprintf("%s/sbx", rt);
  /* <home>/sandboxes/<id>: the home's own */
  char *home = xstrdup(s->state_dir);
  for (int i = 0; i < 2; i++) {
    char *slash = strrchr(home, '/');
    if (slash && slash != home)
      *slash = '\0';
  }
  return home;
}

static bool find_tool(const char *name)
{
  const char *path = getenv("PATH");
  cleanup_free char *dirs = xstrdup(path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  char *save = NULL;
  for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    cleanup_free char *p = xasprintf("%s/%s", d, name);
    if (access(p, X_OK) == 0)
      return true;
  }
  return false;
}

static bool sub_entry(const char *file, const char *name, uint32_t uid, uint32_t *first,
                      uint32_t *count)
{
  cleanup_free char *text = NULL;
  if (sbx__read_file_at(AT_FDCWD, file, 1 << 20, &text, NULL) < 0)
    return false;
  return sbx__subids_find(text, name, uid, SUB_SLOT, first, count);
}

static bool sub_ranges(const char *user_name, uint32_t *ufirst, uint32_t *gfirst, uint32_t *slots)
{
  uint32_t ucount, gcount;
  if (!sub_entry("/etc/subuid", user_name, (uint32_t) geteuid(), ufirst, &ucount) ||
      !sub_entry("/etc/subgid", user_name, (uint32_t) getegid(), gfirst, &gcount) ||
      !find_tool("newuidmap") || !find_tool("newgidmap"))
    return false;
  *slots = (ucount < gcount ? ucount : gcount) / SUB_SLOT;
  return true;
}

bool sbx__ids_store_slice(const char *user_name, uint32_t *sub_uid, uint32_t *sub_gid)
{
  uint32_t slots;
  return sub_ranges(user_name, sub_uid, sub_gid, &slots);
}

int sbx__ids_rootless(struct sbx_launch_spec *s, sbx_error_t *err)
{
  s->uid_base = (uint32_t) geteuid();
  s->uid_count = 1;
  s->sub_uid = s->sub_gid = 0;
  uint32_t ufirst, gfirst, slots;
  if (!sub_ranges(s->user_name, &ufirst, &gfirst, &slots))
    return SBX_IDS_SINGLE;
  if (s->layers) {
    /* an image's layers carry the store slice's ids on disk (no idmapped mounts rootless):
     * every image sandbox maps that slice, shared, no lock */
    s->uid_count = SBX_UID_COUNT;
    s->sub_uid = ufirst;
    s->sub_gid = gfirst;
    return SBX_IDS_SHARED;
  }
  cleanup_free char *parent = rootless_range_dir(s);
  cleanup_free char *dir = xasprintf("%s/id-ranges", parent);
  if ((mkdir(parent, 0700) < 0 && errno != EEXIST) || (mkdir(dir, 0700) < 0 && errno != EEXIST))
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create `%s`", dir);
  cleanup_close int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dfd < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "open `%s`", dir);
  /* the first slot is the image store's (shared by image sandboxes): skipped if there are more */
  for (uint32_t i = slots > 1; i < slots; i++) {
    char name[32];
    snprintf(name, sizeof name, "sub-%u", ufirst + i * SUB_SLOT);
    int fd = openat(dfd, name, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return sbx__make_error(err, errno, SBX_E_INTERNAL, "open `%s/%s`", dir, name);
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      s->uid_count = SBX_UID_COUNT;
      s->sub_uid = ufirst + i * SUB_SLOT;
      s->sub_gid = gfirst + i * SUB_SLOT;
      return fd;
    }
    int e = errno;
    close(fd);
    if (e != EWOULDBLOCK)
      return sbx__make_error(err, e, SBX_E_INTERNAL, "lock `%s/%s`", dir, name);
  }
  /* every slot taken: the last one is shared (docs/hosts.md: a user's sandboxes beyond its
   * slots share ids; sbx doctor counts the slots) */
  uint32_t last = slots - 1;
  s->uid_count = SBX_UID_COUNT;
  s->sub_uid = ufirst + last * SUB_SLOT;
  s->sub_gid = gfirst + last * SUB_SLOT;
  return SBX_IDS_SHARED;
}

static int write_proc(pid_t pid, const char *file, const char *text, sbx_error_t *err)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/%s", (int) pid, file);
  cleanup_close int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t) strlen(text))
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED,
                           "write %s (an ordinary user's user namespace): run `sbx doctor`", path);
  return 0;
}

static int run_map_tool(const char *tool, pid_t pid, uint32_t own, uint32_t sub, sbx_error_t *err)
{
  char p[16], o[16], f[16], n[16];
  snprintf(p, sizeof p, "%d", (int) pid);
  snprintf(o, sizeof o, "%u", (unsigned) own);
  snprintf(f, sizeof f, "%u", (unsigned) sub);
  snprintf(n, sizeof n, "%u", (unsigned) SUB_SLOT);
  char zero[] = "0", one[] = "1";
  char *argv[] = {(char *) tool, p, zero, o, one, one, f, n, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t child;
  int r = posix_spawnp(&child, tool, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (r != 0)
    return sbx__make_error(err, r, SBX_E_UNSUPPORTED, "run %s: run `sbx doctor`", tool);
  int status = 0;
  TEMP_FAILURE_RETRY(waitpid(child, &status, 0));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return sbx__make_error(err, EPERM, SBX_E_UNSUPPORTED,
                           "%s %s 0 %s 1 1 %s %s failed (status %d): /etc/subuid and /etc/subgid "
                           "must grant those ids; run `sbx doctor`",
                           tool, p, o, f, n, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  return 0;
}

int sbx__ids_map_rootless(pid_t pid, const struct sbx_launch_spec *s, sbx_error_t *err)
{
  return sbx__ids_map_sub(pid, s->uid_count, s->sub_uid, s->sub_gid, err);
}

int sbx__ids_map_sub(pid_t pid, uint32_t uid_count, uint32_t sub_uid, uint32_t sub_gid,
                     sbx_error_t *err)
{
  if (uid_count > 1)
    return run_map_tool("newuidmap", pid, (uint32_t) geteuid(), sub_uid, err) < 0 ||
                   run_map_tool("newgidmap", pid, (uint32_t) getegid(), sub_gid, err) < 0
               ? -1
               : 0;
  /* the user alone: an unprivileged writer may map only its own ids, and its gid only once
   * setgroups is denied (else it could drop a group that denies it a file) */
  char map[64];
  snprintf(map, sizeof map, "0 %u 1\n", (unsigned) geteuid());
  if (write_proc(pid, "uid_map", map, err) < 0 || write_proc(pid, "setgroups", "deny", err) < 0)
    return -1;
  snprintf(map, sizeof map, "0 %u 1\n", (unsigned) getegid());
  return write_proc(pid, "gid_map", map, err);
}

/* Rootless egress (launch.c): pid's user namespace is a child of the one the launch mapped;
 * only a process in that parent may write its maps, and the launcher is not in it. A helper
 * joins it (the user owns it: every capability there) and maps the child one to one. */
int sbx__ids_map_nested(pid_t pid, uint32_t count, sbx_error_t *err)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/ns/user", (int) pid);
  cleanup_close int ns = open(path, O_RDONLY | O_CLOEXEC);
  cleanup_close int parent = ns < 0 ? -1 : ioctl(ns, NS_GET_PARENT);
  if (parent < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "find the sandbox's outer user namespace");
  pid_t helper = fork();
  if (helper < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "fork");
  if (helper == 0) {
    /* an extent must lie within one of the parent's: the user's own id and its subordinate
     * range are two */
    char map[64];
    if (count > 1)
      snprintf(map, sizeof map, "0 0 1\n1 1 %u\n", (unsigned) count - 1);
    else
      snprintf(map, sizeof map, "0 0 1\n");
    _exit(setns(parent, CLONE_NEWUSER) < 0 || write_proc(pid, "uid_map", map, NULL) < 0 ||
                  write_proc(pid, "gid_map", map, NULL) < 0
              ? 1
              : 0);
  }
  int status = 0;
  if (TEMP_FAILURE_RETRY(waitpid(helper, &status, 0)) < 0 || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    return sbx__make_error(err, EPERM, SBX_E_INTERNAL,
                           "map the sandbox's inner user namespace (rootless egress)");
  return 0;
}
