/* The cgroupfs manager on a unified (v2) hierarchy: sandboxes go below the caller's own cgroup,
 * <mount><own>/sbx/<id>, so whatever bounds the caller (a systemd unit's MemoryMax=, a pod's
 * limits, a container's cgroup namespace) bounds them too, and stopping the caller's unit stops
 * them. The "no internal processes" rule forbids enabling controllers for the children of a
 * cgroup that has processes of its own (EBUSY; only the real root is exempt), so the first time
 * that happens every process of the caller's cgroup is moved to a leaf beside sbx/, as crun,
 * podman and moby's dind do. Later callers started from there find themselves in the leaf and
 * use its parent. */
#include "linux.h"

#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

static const char *const v2_ctrls[] = {"memory", "pids", "cpu"};

static int write_str(const char *dir, const char *file, const char *val)
{
  cleanup_free char *p = xasprintf("%s/%s", dir, file);
  cleanup_close int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  return sbx__write_all(fd, val, strlen(val));
}

static char *read_text(const char *dir, const char *file)
{
  cleanup_free char *p = xasprintf("%s/%s", dir, file);
  char *data = NULL;
  if (sbx__read_file_at(AT_FDCWD, p, 1 << 20, &data, NULL) < 0)
    return NULL;
  return data;
}

/* Is w one of the space-separated words of list? */
static bool has_word(const char *list, const char *w)
{
  size_t n = strlen(w);
  for (const char *p = list; p && *p;) {
    p += strspn(p, " \n");
    size_t len = strcspn(p, " \n");
    if (len == n && strncmp(p, w, n) == 0)
      return true;
    p += len;
  }
  return false;
}

char *sbx__cgroup_v2_own(void)
{
  cleanup_file FILE *f = fopen("/proc/self/cgroup", "re");
  if (f == NULL)
    return NULL;
  char *line = NULL;
  size_t cap = 0;
  char *found = NULL;
  while (found == NULL && getline(&line, &cap, f) > 0)
    if (strncmp(line, "0::", 3) == 0) {
      line[strcspn(line, "\n")] = '\0';
      found = xstrdup(line + 3);
    }
  free(line);
  return found;
}

/* The cgroup the mount at SBX_CG_ROOT shows as its top, as /proc/self/mountinfo says (relative
 * to our cgroup namespace: "/.." and below for a hierarchy mounted from another namespace). */
static char *mount_root(void)
{
  cleanup_file FILE *f = fopen("/proc/self/mountinfo", "re");
  char *line = NULL, *found = NULL;
  size_t cap = 0;
  while (f && getline(&line, &cap, f) > 0) {
    char root[4096], point[4096];
    const char *dash = strstr(line, " - ");
    if (dash == NULL || strncmp(dash + 3, "cgroup2 ", 8) != 0 ||
        sscanf(line, "%*s %*s %*s %4095s %4095s", root, point) != 2 ||
        strcmp(point, SBX_CG_ROOT) != 0)
      continue;
    free(found); /* the last mount there is the one in view */
    found = xstrdup(root);
  }
  free(line);
  return found;
}

char *sbx__cgroup_v2_base(sbx_error_t *err)
{
  cleanup_free char *own = sbx__cgroup_v2_own();
  if (own == NULL || own[0] != '/') {
    sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "no cgroup v2 line in /proc/self/cgroup");
    return NULL;
  }
  /* "/.." when the mount shows another cgroup namespace's root than ours */
  if (strstr(own, "/..") != NULL || strstr(own, " (deleted)") != NULL) {
    sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                    "our cgroup `%s` is not below the cgroup2 mount at " SBX_CG_ROOT
                    " (mounted from another cgroup namespace?)",
                    own);
    return NULL;
  }
  /* a mount of a cgroup below our namespace's root shows paths relative to itself */
  cleanup_free char *top = mount_root();
  if (top && strcmp(top, "/") != 0) {
    size_t t = strlen(top);
    if (strncmp(own, top, t) != 0 || (own[t] != '/' && own[t] != '\0')) {
      sbx__make_error(err, 0, SBX_E_UNSUPPORTED,
                      "the cgroup2 mount at " SBX_CG_ROOT " shows `%s`, which does not hold our "
                      "cgroup `%s` (mounted from another cgroup namespace?)",
                      top, own);
      return NULL;
    }
    memmove(own, own + t, strlen(own + t) + 1);
    if (*own == '\0') {
      free(own);
      own = xstrdup("/");
    }
  }
  size_t n = strlen(own);
  size_t leaf = strlen("/" SBX_CG_LEAF);
  if (n >= leaf && strcmp(own + n - leaf, "/" SBX_CG_LEAF) == 0)
    own[n - leaf] = '\0';
  return xasprintf(SBX_CG_ROOT "%s", strcmp(own, "/") == 0 ? "" : own);
}

/* Moves every process of base into base/SBX_CG_LEAF (new ones may fork meanwhile: repeat). */
static int move_to_leaf(const char *base, sbx_error_t *err)
{
  cleanup_free char *leaf = xasprintf("%s/" SBX_CG_LEAF, base);
  if (mkdir(leaf, 0755) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "create cgroup `%s`", leaf);
  for (int round = 0; round < 100; round++) {
    cleanup_free char *procs = read_text(base, "cgroup.procs");
    if (procs == NULL)
      return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "read `%s/cgroup.procs`", base);
    if (procs[strspn(procs, " \n")] == '\0')
      return 0;
    for (char *tok = strtok(procs, "\n"); tok; tok = strtok(NULL, "\n"))
      if (write_str(leaf, "cgroup.procs", tok) < 0 && errno != ESRCH)
        return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "move process %s to `%s`", tok, leaf);
  }
  return sbx__make_error(err, EBUSY, SBX_E_UNSUPPORTED, "empty `%s` (processes keep appearing)",
                         base);
}

/* Enables in dir's subtree_control those of v2_ctrls that dir has and has not enabled yet. */
static int enable_controllers(const char *dir, bool *busy, sbx_error_t *err)
{
  *busy = false;
  cleanup_free char *avail = read_text(dir, "cgroup.controllers");
  cleanup_free char *on = read_text(dir, "cgroup.subtree_control");
  if (avail == NULL || on == NULL)
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "read the controllers of `%s`", dir);
  sbx_buf_t want = {0};
  for (size_t i = 0; i < sizeof v2_ctrls / sizeof v2_ctrls[0]; i++)
    if (has_word(avail, v2_ctrls[i]) && !has_word(on, v2_ctrls[i]))
      sbx__buf_printf(&want, "%s+%s", want.len ? " " : "", v2_ctrls[i]);
  cleanup_free char *w = sbx__buf_steal(&want);
  if (w == NULL || *w == '\0')
    return 0;
  if (write_str(dir, "cgroup.subtree_control", w) == 0)
    return 0;
  *busy = errno == EBUSY;
  return sbx__make_error(err, errno, SBX_E_UNSUPPORTED,
                         "enable `%s` in `%s/cgroup.subtree_control`", w, dir);
}

int sbx__cgroup_v2_prepare(char **parent_out, sbx_error_t *err)
{
  *parent_out = NULL;
  cleanup_free char *base = sbx__cgroup_v2_base(err);
  if (base == NULL)
    return -1;
  bool busy;
  sbx_error_t first = NULL;
  if (enable_controllers(base, &busy, &first) < 0) {
    if (!busy) {
      if (err && *err == NULL)
        *err = steal_pointer(&first);
      sbx_error_release(&first);
      return -1;
    }
    sbx_error_release(&first);
    /* our cgroup has processes (ours among them): they go to a leaf, then it can delegate */
    if (move_to_leaf(base, err) < 0 || enable_controllers(base, &busy, err) < 0)
      return -1;
  }
  cleanup_free char *parent = xasprintf("%s/sbx", base);
  if (mkdir(parent, 0755) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_UNSUPPORTED, "create cgroup `%s`", parent);
  if (enable_controllers(parent, &busy, err) < 0)
    return -1;
  *parent_out = steal_pointer(&parent);
  return 0;
}

char *sbx__cgroup_v2_missing(const char *dir)
{
  cleanup_free char *avail = read_text(dir, "cgroup.controllers");
  sbx_buf_t b = {0};
  for (size_t i = 0; i < sizeof v2_ctrls / sizeof v2_ctrls[0]; i++)
    if (!has_word(avail, v2_ctrls[i]))
      sbx__buf_printf(&b, "%s%s", b.len ? " " : "", v2_ctrls[i]);
  return sbx__buf_steal(&b);
}
