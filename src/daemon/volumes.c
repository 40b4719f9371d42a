/* The volumes of a new sandbox (OpenSandbox's host and pvc backends): validated, resolved and
 * walked without following any symlink, held open while the sandbox is made, and checked again
 * once it is (volumes_verify). Answers nothing itself: errors come back as {status, code,
 * message} for the lifecycle API to send. */
#include "volumes.h"
#include "ctx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>

/* An optional member that is present and not null. */
static json_t *opt(json_t *o, const char *key)
{
  json_t *v = json_object_get(o, key);
  return json_is_null(v) ? NULL : v;
}

static int fail(struct volume_error *e, unsigned status, const char *code, char *msg)
{
  e->status = status;
  e->code = code;
  e->msg = msg;
  return -1;
}

void volumes_free(struct volumes *v)
{
  for (size_t i = 0; i < v->n; i++) {
    free(v->m[i].host_path);
    free(v->m[i].container_path);
    if (v->fds[i] >= 0)
      close(v->fds[i]);
  }
  free(v->m);
  free(v->fds);
  json_decref(v->info);
}

/* Walks rel (relative, clean) below the directory dirfd without following any symlink. With
 * create, missing directories are made (mode 0777: a sandbox's root is an unprivileged id on the
 * host) and *out gets an O_PATH descriptor of the last one; without, the walk stops quietly at
 * the first missing one (a dry run). */
static int walk(int dirfd, const char *rel, bool create, char **why, int *out)
{
  if (*rel == '\0') {
    if (out && (*out = fcntl(dirfd, F_DUPFD_CLOEXEC, 0)) < 0) {
      *why = xasprintf("cannot hold the directory: %s", strerror(errno));
      return -1;
    }
    return 0;
  }
  cleanup_free char *copy = xstrdup(rel);
  int fd = dup(dirfd);
  char *save = NULL;
  for (char *tok = strtok_r(copy, "/", &save); tok; tok = strtok_r(NULL, "/", &save)) {
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW,
                           .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH};
    int next = (int) syscall(SYS_openat2, fd, tok, &how, sizeof how);
    if (next < 0 && errno == ENOENT && !create)
      break;
    if (next < 0 && errno == ENOENT) {
      if (mkdirat(fd, tok, 0777) < 0 && errno != EEXIST) {
        *why = xasprintf("cannot create '%s': %s", tok, strerror(errno));
        close(fd);
        return -1;
      }
      /* its mode through its own descriptor: by name (fchmodat) a symlink put in its place by a
       * sandbox that has this volume would be followed, and its target made 0777 */
      struct open_how rw = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW,
                            .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH};
      int made = (int) syscall(SYS_openat2, fd, tok, &rw, sizeof rw);
      if (made >= 0) {
        fchmod(made, 0777);
        close(made);
      }
      next = (int) syscall(SYS_openat2, fd, tok, &how, sizeof how);
    }
    struct stat st;
    if (next < 0 && fstatat(fd, tok, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      errno = ELOOP;
    if (next < 0) {
      *why = errno == ELOOP     ? xasprintf("'%s' is a symbolic link", tok)
             : errno == ENOTDIR ? xasprintf("'%s' is not a directory", tok)
                                : xasprintf("cannot open '%s': %s", tok, strerror(errno));
      close(fd);
      return -1;
    }
    close(fd);
    fd = next;
  }
  if (out)
    *out = fd;
  else
    close(fd);
  return 0;
}

static bool mount_path_ok(const char *p, char **why)
{
  static const char *const forbidden[] = {"/proc", "/sys", "/dev", "/mnt/user-data"};
  if (strcmp(p, "/") == 0) {
    *why = xstrdup("must not be '/'");
    return false;
  }
  for (size_t i = 0; i < ARRAY_SIZE(forbidden); i++) {
    size_t n = strlen(forbidden[i]);
    if (strncmp(p, forbidden[i], n) == 0 && (p[n] == '\0' || p[n] == '/')) {
      *why = xasprintf("must not be %s or under it", forbidden[i]);
      return false;
    }
  }
  return true;
}

static bool has_dotdot(const char *p)
{
  for (const char *s = p; (s = strstr(s, "..")); s += 2)
    if ((s == p || s[-1] == '/') && (s[2] == '\0' || s[2] == '/'))
      return true;
  return false;
}

/* The folder volume v mounts, as a root that must exist (a configured volume root, or sbxd's
 * named-volume folder for a pvc) and a path relative to it. */
static int volume_source(json_t *v, const char *name, char **root, char **rel,
                         struct volume_error *e)
{
  json_t *host = opt(v, "host"), *pvc = opt(v, "pvc");
  if (host) {
    const char *hp = json_string_value(json_object_get(host, "path"));
    if (hp == NULL || hp[0] != '/')
      return fail(
          e, 400, "VOLUME::INVALID_HOST_PATH",
          xasprintf("Host path '%s' must be an absolute path starting with '/'.", hp ? hp : ""));
    if (has_dotdot(hp))
      return fail(e, 400, "VOLUME::INVALID_HOST_PATH",
                  xasprintf("Host path '%s' contains path traversal component '..'.", hp));
    if (strstr(hp, "//") || (strlen(hp) > 1 && hp[strlen(hp) - 1] == '/'))
      return fail(e, 400, "VOLUME::INVALID_HOST_PATH",
                  xasprintf("Host path '%s' is not normalized. Remove redundant slashes.", hp));
    for (size_t k = 0; k < srv.cfg->n_volume_roots && *root == NULL; k++) {
      const char *vr = srv.cfg->volume_roots[k];
      size_t l = strlen(vr);
      if (strcmp(vr, "/") == 0) {
        *root = xstrdup("/");
        *rel = xstrdup(hp + 1);
      } else if (strncmp(hp, vr, l) == 0 && (hp[l] == '\0' || hp[l] == '/')) {
        *root = xstrdup(vr);
        *rel = xstrdup(hp[l] ? hp + l + 1 : "");
      }
    }
    if (*root == NULL) {
      sbx_buf_t allowed = {0};
      for (size_t k = 0; k < srv.cfg->n_volume_roots; k++)
        sbx__buf_printf(&allowed, "%s'%s'", k ? ", " : "", srv.cfg->volume_roots[k]);
      fail(e, 400, "VOLUME::HOST_PATH_NOT_ALLOWED",
           xasprintf("Host path '%s' is not under any allowed prefix. Allowed prefixes: [%s] "
                     "(sbxd.volume_roots)",
                     hp, allowed.data ? allowed.data : ""));
      sbx__buf_free(&allowed);
      return -1;
    }
    return 0;
  }
  const char *claim = json_string_value(json_object_get(pvc, "claimName"));
  if (!sbxd_dns_label_valid(claim, 253))
    return fail(e, 400, "VOLUME::INVALID_PVC_NAME",
                xasprintf("PVC claim name '%s' is not a valid Kubernetes resource name.",
                          claim ? claim : ""));
  *root = xasprintf("%s/volumes", srv.home);
  *rel = xstrdup(claim);
  json_t *cine = json_object_get(pvc, "createIfNotExists");
  cleanup_free char *vdir = xasprintf("%s/%s", *root, claim);
  struct stat st;
  if (json_is_false(cine) && lstat(vdir, &st) < 0)
    return fail(e, 400, "VOLUME::PVC_NOT_FOUND",
                xasprintf("Volume '%s': named volume '%s' does not exist.", name, claim));
  return 0;
}

/* Checks volume i of the request (its shape was checked by the caller) and appends its mount,
 * whose host_path is "root\nrel" until volumes_open resolves it. */
static int volume_check(json_t *vols, size_t i, struct volumes *out, struct volume_error *e)
{
  json_t *v = json_array_get(vols, i);
  const char *name = json_string_value(json_object_get(v, "name"));
  const char *mp = json_string_value(json_object_get(v, "mountPath"));
  json_t *host = opt(v, "host"), *pvc = opt(v, "pvc"), *oss = opt(v, "ossfs");
  const char *sub = json_string_value(opt(v, "subPath"));
  bool ro = json_is_true(json_object_get(v, "readOnly"));
  for (size_t j = 0; j < i; j++) {
    const char *other = json_string_value(json_object_get(json_array_get(vols, j), "name"));
    if (strcmp(other, name) == 0)
      return fail(
          e, 400, "VOLUME::DUPLICATE_NAME",
          xasprintf("Duplicate volume name '%s'. Each volume must have a unique name.", name));
  }
  if (!sbxd_dns_label_valid(name, 63))
    return fail(e, 400, "VOLUME::INVALID_NAME",
                *name == '\0' ? xstrdup("Volume name cannot be empty.")
                              : xasprintf("Volume name '%s' is not a valid DNS label. Must be "
                                          "lowercase alphanumeric with optional hyphens.",
                                          name));
  if (mp[0] != '/')
    return fail(e, 400, "VOLUME::INVALID_MOUNT_PATH",
                xasprintf("Mount path '%s' must be an absolute path starting with '/'.", mp));
  char *why = NULL;
  cleanup_free char *mclean = sbxd_path_clean(mp);
  if (has_dotdot(mp) || !mount_path_ok(mclean, &why)) {
    char *msg = xasprintf("Mount path '%s' %s.", mp, why ? why : "must not contain '..'");
    free(why);
    return fail(e, 400, "VOLUME::INVALID_MOUNT_PATH", msg);
  }
  for (size_t j = 0; j < out->n; j++)
    if (strcmp(out->m[j].container_path, mclean) == 0)
      return fail(e, 400, "VOLUME::INVALID_MOUNT_PATH",
                  xasprintf("Mount path '%s' is used by two volumes.", mp));
  if (sub && *sub && sub[0] == '/')
    return fail(e, 400, "VOLUME::INVALID_SUB_PATH",
                xasprintf("SubPath '%s' must be a relative path, not absolute.", sub));
  if (sub && *sub && has_dotdot(sub))
    return fail(e, 400, "VOLUME::INVALID_SUB_PATH",
                xasprintf("SubPath '%s' contains path traversal '..' which is not allowed.", sub));
  int backends = (host != NULL) + (pvc != NULL) + (oss != NULL);
  if (backends != 1)
    return fail(e, 400, "VOLUME::INVALID_BACKEND",
                xasprintf("Volume '%s' must specify exactly one backend (host, pvc, ossfs), but %s "
                          "was provided.",
                          name, backends == 0 ? "none" : "more than one"));
  if (oss)
    return fail(e, 400, "VOLUME::UNSUPPORTED_BACKEND",
                xasprintf("Volume '%s': the ossfs backend is not supported by sbxd.", name));
  /* The directory to mount: a folder below a configured volume root (host) or below sbxd's
   * named-volume folder (pvc). Nothing below the root may be a symlink. */
  cleanup_free char *root = NULL, *rel = NULL;
  if (volume_source(v, name, &root, &rel, e) < 0)
    return -1;
  cleanup_free char *full_rel =
      sub && *sub ? (*rel ? xasprintf("%s/%s", rel, sub) : xstrdup(sub)) : xstrdup(rel);
  struct sbx_mount *m = &out->m[out->n++];
  m->host_path = xasprintf("%s\n%s", root, full_rel);
  m->container_path = xstrdup(mclean);
  m->read_only = ro;
  json_array_append_new(
      out->info, json_pack("{s:s,s:s,s:b}", "name", name, "mountPath", mclean, "readOnly", ro));
  return 0;
}

/* Everything is valid: now the filesystem. A dry run first, so that a symlink in one volume
 * leaves no directory created for another; then each folder is made as needed and held open,
 * and its mount gets the resolved path. */
static int volumes_open(json_t *vols, struct volumes *out, struct volume_error *e)
{
  for (int create = 0; create < 2; create++) {
    for (size_t i = 0; i < out->n; i++) {
      struct sbx_mount *m = &out->m[i];
      const char *name = json_string_value(json_object_get(json_array_get(vols, i), "name"));
      char *nl = strchr(m->host_path, '\n');
      cleanup_free char *root = xstrndup(m->host_path, (size_t) (nl - m->host_path));
      cleanup_free char *clean_rel = sbxd_path_clean(*(nl + 1) ? nl + 1 : "/");
      bool named =
          sbx__str_has_prefix(root, srv.home) && strcmp(root + strlen(srv.home), "/volumes") == 0;
      if (create && named && mkdir(root, 0711) < 0 && errno != EEXIST)
        return fail(e, 500, "VOLUME::HOST_PATH_CREATE_FAILED",
                    xasprintf("cannot create '%s': %s", root, strerror(errno)));
      char real_root[PATH_MAX];
      if (realpath(root, real_root) == NULL) {
        if (named && !create)
          continue; /* made in the second pass */
        return fail(e, 400, "VOLUME::HOST_PATH_NOT_FOUND",
                    xasprintf("Volume '%s': the volume root '%s' does not exist.", name, root));
      }
      char *why = NULL;
      cleanup_close int rootfd = open(real_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (rootfd < 0 ||
          walk(rootfd, clean_rel + 1, create, &why, create ? &out->fds[i] : NULL) < 0) {
        char *msg = xasprintf("Volume '%s': %s", name, why ? why : strerror(errno));
        free(why);
        return fail(e, 400, "VOLUME::INVALID_HOST_PATH", msg);
      }
      if (create) {
        char *src =
            strcmp(clean_rel, "/") == 0
                ? xstrdup(real_root)
                : xasprintf("%s%s", strcmp(real_root, "/") == 0 ? "" : real_root, clean_rel);
        free(m->host_path);
        m->host_path = src;
        json_object_set_new(json_array_get(out->info, i), "source", json_string(src));
      }
    }
  }
  return 0;
}

int volumes_build(json_t *vols, struct volumes *out, struct volume_error *e)
{
  memset(out, 0, sizeof *out);
  out->info = json_array();
  if (vols == NULL)
    return 0;
  size_t n = json_array_size(vols);
  out->m = xzalloc((n + 1) * sizeof *out->m);
  out->fds = xzalloc((n + 1) * sizeof *out->fds);
  for (size_t i = 0; i <= n; i++)
    out->fds[i] = -1;
  for (size_t i = 0; i < n; i++)
    if (volume_check(vols, i, out, e) < 0)
      return -1;
  return volumes_open(vols, out, e);
}

/* Once the sandbox is made: the launcher mounted each host directory by its path, resolved
 * again, so a sandbox that can write to a folder on that path could have swapped a component for
 * a symlink (to the host's /) after the walk. Each mount must be the directory the walk holds
 * (same device and inode), seen through the new sandbox's root; a mount hidden under a later
 * volume is unreachable and skipped. Nothing runs in the sandbox yet. */
int volumes_verify(const char *id, const struct volumes *vs, char **why)
{
  if (vs->n == 0)
    return 0;
  struct sbx_sandbox_info *infos = NULL;
  size_t n = 0;
  long pid = 0;
  sbx_error_t err = NULL;
  if (sbx_list(srv.p, &infos, &n, &err) < 0) {
    *why = xasprintf("cannot find the sandbox: %s", err->msg);
    sbx_error_release(&err);
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    if (strcmp(infos[i].id, id) == 0)
      pid = infos[i].pid;
  sbx_sandbox_info_free(infos, n);
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/%ld/root", pid);
  cleanup_close int root = pid > 0 ? open(proc, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
  if (root < 0) {
    *why = xasprintf("cannot see the sandbox's root: %s", pid > 0 ? strerror(errno) : "no pid");
    return -1;
  }
  for (size_t i = 0; i < vs->n; i++) {
    const char *cp = vs->m[i].container_path;
    bool hidden = false;
    for (size_t j = i + 1; j < vs->n && !hidden; j++) {
      const char *later = vs->m[j].container_path;
      size_t l = strlen(later);
      hidden = strncmp(cp, later, l) == 0 && cp[l] == '/';
    }
    if (hidden)
      continue;
    /* resolved as the launcher did (only the launcher has written in this root yet) */
    struct open_how how = {.flags = O_PATH | O_CLOEXEC,
                           .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
    cleanup_close int fd = (int) syscall(SYS_openat2, root, cp, &how, sizeof how);
    struct stat want, got;
    if (fd < 0 || fstat(fd, &got) < 0 || fstat(vs->fds[i], &want) < 0 ||
        got.st_dev != want.st_dev || got.st_ino != want.st_ino) {
      *why = xasprintf("the host directory of the volume at '%s' changed while it was mounted", cp);
      return -1;
    }
  }
  return 0;
}
