/* OpenSandbox's lifecycle API (mounted at / and /v1): create, get, list, delete, pause, resume,
 * renew, metadata, endpoints. Validation follows the real server: schema errors are 422, semantic
 * ones 400 with its codes and messages; sbxd plays the role of its single-host Docker runtime, so
 * runtime errors carry the DOCKER:: codes. */
#include "sbxd.h"
#include "../lib/image/image.h"
#include "../lib/image/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>

#define VALIDATION "SANDBOX::VALIDATION_ERROR"
#define NOT_FOUND "DOCKER::SANDBOX_NOT_FOUND"
#define INVALID_PARAMETER "SANDBOX::INVALID_PARAMETER"
#define NOT_SUPPORTED "SANDBOX::API_NOT_SUPPORTED"
#define RESERVED_PREFIX "opensandbox.io/"

static enum MHD_Result not_found(struct req *r, const char *id)
{
  return sbxd_error(r, 404, NOT_FOUND, "Sandbox %s not found.", id);
}

/* ---- state ---- */

/* Sandbox states by id from the library (alive, paused); a box whose sandbox vanished is
 * removed. */
struct live {
  struct sbx_sandbox_info *infos;
  size_t n;
};

static void live_load(struct live *l)
{
  l->infos = NULL;
  l->n = 0;
  sbx_error_t err = NULL;
  if (sbx_list(g.p, &l->infos, &l->n, &err) < 0) {
    sbxd_log(SBXD_WARN, "list sandboxes: %s", err->msg);
    sbx_error_release(&err);
  }
}

static const struct sbx_sandbox_info *live_find(const struct live *l, const char *id)
{
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->infos[i].id, id) == 0)
      return &l->infos[i];
  return NULL;
}

/* The OpenSandbox state of b, or NULL if its sandbox no longer exists (b is then removed). */
static const char *box_state(struct box *b, const struct live *l)
{
  const struct sbx_sandbox_info *in = live_find(l, b->id);
  if (in == NULL && l->infos != NULL) {
    box_remove(b, "vanished", NULL);
    return NULL;
  }
  if (in && in->state == SBX_STATE_DEAD)
    return "Failed";
  pthread_mutex_lock(&b->lock);
  bool paused = b->paused;
  pthread_mutex_unlock(&b->lock);
  return paused ? "Paused" : "Running";
}

json_t *sbxd_sandbox_json(struct box *b, const char *state, bool for_create)
{
  pthread_mutex_lock(&b->lock);
  json_t *j = json_object();
  json_object_set_new(j, "id", json_string(b->id));
  json_t *image = json_object_get(b->extra, "image");
  if (!for_create && json_is_string(image))
    json_object_set_new(j, "image", json_pack("{s:O}", "uri", image));
  json_t *platform = json_object_get(b->extra, "platform");
  if (platform)
    json_object_set(j, "platform", platform);
  const char *reason = "CONTAINER_RUNNING", *message = "Sandbox container started successfully.";
  if (strcmp(state, "Paused") == 0) {
    reason = "CONTAINER_PAUSED";
    message = "Sandbox container is paused.";
  } else if (strcmp(state, "Failed") == 0) {
    reason = "SANDBOX_EXITED";
    message = "The sandbox's init process is gone; delete the sandbox.";
  }
  int64_t trans = json_is_integer(json_object_get(b->extra, "stateChangedAt"))
                      ? (int64_t) json_integer_value(json_object_get(b->extra, "stateChangedAt"))
                      : b->created_ms;
  json_object_set_new(j, "status",
                      json_pack("{s:s,s:s,s:s,s:o}", "state", state, "reason", reason, "message",
                                message, "lastTransitionAt", sbxd_jtime(trans)));
  json_t *md = json_object_get(b->extra, "metadata");
  if (md)
    json_object_set(j, "metadata", md);
  json_t *ep = json_object_get(b->extra, "entrypoint");
  json_object_set(j, "entrypoint", ep ? ep : json_array());
  if (b->expires_ms)
    json_object_set_new(j, "expiresAt", sbxd_jtime(b->expires_ms));
  json_object_set_new(j, "createdAt", sbxd_jtime(b->created_ms));
  pthread_mutex_unlock(&b->lock);
  return j;
}

/* ---- validation helpers ---- */

static bool string_map(json_t *v, bool allow_null_values)
{
  if (!json_is_object(v))
    return false;
  const char *k;
  json_t *x;
  json_object_foreach(v, k, x)
  {
    if (!json_is_string(x) && !(allow_null_values && json_is_null(x)))
      return false;
  }
  return true;
}

/* An optional member that is present and not null. */
static json_t *opt(json_t *o, const char *key)
{
  json_t *v = json_object_get(o, key);
  return json_is_null(v) ? NULL : v;
}

static const char *metadata_error(json_t *md, char **msg)
{
  const char *k;
  json_t *v;
  json_object_foreach(md, k, v)
  {
    if (strncmp(k, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0) {
      *msg = xasprintf("Metadata key '%s' uses the reserved prefix '" RESERVED_PREFIX
                       "'. Keys under this prefix are managed by the system and cannot be set "
                       "via metadata.",
                       k);
      return "SANDBOX::INVALID_METADATA_LABEL";
    }
    if (!sbxd_label_key_valid(k)) {
      *msg = xasprintf(
          "Metadata key '%s' is invalid: must be either a name or a DNS-subdomain prefix and "
          "name separated by /, where the name is up to 63 characters and matches "
          "[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, and the optional prefix is a valid DNS "
          "subdomain up to 253 characters.",
          k);
      return "SANDBOX::INVALID_METADATA_LABEL";
    }
    const char *s = json_string_value(v);
    if (s && !sbxd_label_value_valid(s)) {
      *msg = xasprintf("Metadata value '%s' is invalid: must be 63 characters or less, "
                       "start/end with an alphanumeric character, and contain only "
                       "alphanumeric, '-', '_', or '.' characters.",
                       s);
      return "SANDBOX::INVALID_METADATA_LABEL";
    }
  }
  return NULL;
}

static const char *host_arch(void)
{
  struct utsname u;
  if (uname(&u) == 0 && (strcmp(u.machine, "aarch64") == 0 || strcmp(u.machine, "arm64") == 0))
    return "arm64";
  return "amd64";
}

/* ---- volumes ---- */

struct volumes {
  struct sbx_mount *m;
  int *fds; /* the directories to mount, held open until the sandbox is made */
  size_t n;
  json_t *info; /* what is kept in extra */
};

static void volumes_free(struct volumes *v)
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
      fchmodat(fd, tok, 0777, 0);
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

static enum MHD_Result vol_error(struct req *r, unsigned status, const char *code, char *msg)
{
  enum MHD_Result ret = sbxd_error(r, status, code, "%s", msg);
  free(msg);
  return ret;
}

/* Validates the request's volumes and builds the bind mounts; answers and returns -1 on error. */
static int build_volumes(struct req *r, json_t *vols, struct volumes *out, enum MHD_Result *ret)
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
  for (size_t i = 0; i < n; i++) {
    json_t *v = json_array_get(vols, i);
    const char *name = json_string_value(json_object_get(v, "name"));
    const char *mp = json_string_value(json_object_get(v, "mountPath"));
    json_t *host = opt(v, "host"), *pvc = opt(v, "pvc"), *oss = opt(v, "ossfs");
    const char *sub = json_string_value(opt(v, "subPath"));
    bool ro = json_is_true(json_object_get(v, "readOnly"));
    for (size_t j = 0; j < i; j++) {
      const char *other = json_string_value(json_object_get(json_array_get(vols, j), "name"));
      if (strcmp(other, name) == 0) {
        *ret = vol_error(r, 400, "VOLUME::DUPLICATE_NAME",
                         xasprintf("Duplicate volume name '%s'. Each volume must have a unique "
                                   "name.",
                                   name));
        return -1;
      }
    }
    if (!sbxd_dns_label_valid(name, 63)) {
      *ret =
          vol_error(r, 400, "VOLUME::INVALID_NAME",
                    *name == '\0' ? xstrdup("Volume name cannot be empty.")
                                  : xasprintf("Volume name '%s' is not a valid DNS label. Must be "
                                              "lowercase alphanumeric with optional hyphens.",
                                              name));
      return -1;
    }
    if (mp[0] != '/') {
      *ret =
          vol_error(r, 400, "VOLUME::INVALID_MOUNT_PATH",
                    xasprintf("Mount path '%s' must be an absolute path starting with '/'.", mp));
      return -1;
    }
    char *why = NULL;
    cleanup_free char *mclean = sbxd_path_clean(mp);
    if (has_dotdot(mp) || !mount_path_ok(mclean, &why)) {
      char *msg = xasprintf("Mount path '%s' %s.", mp, why ? why : "must not contain '..'");
      free(why);
      *ret = vol_error(r, 400, "VOLUME::INVALID_MOUNT_PATH", msg);
      return -1;
    }
    for (size_t j = 0; j < out->n; j++)
      if (strcmp(out->m[j].container_path, mclean) == 0) {
        *ret = vol_error(r, 400, "VOLUME::INVALID_MOUNT_PATH",
                         xasprintf("Mount path '%s' is used by two volumes.", mp));
        return -1;
      }
    if (sub && *sub) {
      if (sub[0] == '/') {
        *ret = vol_error(r, 400, "VOLUME::INVALID_SUB_PATH",
                         xasprintf("SubPath '%s' must be a relative path, not absolute.", sub));
        return -1;
      }
      if (has_dotdot(sub)) {
        *ret = vol_error(r, 400, "VOLUME::INVALID_SUB_PATH",
                         xasprintf("SubPath '%s' contains path traversal '..' which is not "
                                   "allowed.",
                                   sub));
        return -1;
      }
    }
    int backends = (host != NULL) + (pvc != NULL) + (oss != NULL);
    if (backends != 1) {
      *ret = vol_error(r, 400, "VOLUME::INVALID_BACKEND",
                       xasprintf("Volume '%s' must specify exactly one backend (host, pvc, "
                                 "ossfs), but %s was provided.",
                                 name, backends == 0 ? "none" : "more than one"));
      return -1;
    }
    if (oss) {
      *ret = vol_error(r, 400, "VOLUME::UNSUPPORTED_BACKEND",
                       xasprintf("Volume '%s': the ossfs backend is not supported by sbxd.", name));
      return -1;
    }
    /* The directory to mount: a folder below a configured volume root (host) or below sbxd's
     * named-volume folder (pvc). Nothing below the root may be a symlink. */
    cleanup_free char *root = NULL, *rel = NULL;
    if (host) {
      const char *hp = json_string_value(json_object_get(host, "path"));
      if (hp == NULL || hp[0] != '/') {
        *ret = vol_error(
            r, 400, "VOLUME::INVALID_HOST_PATH",
            xasprintf("Host path '%s' must be an absolute path starting with '/'.", hp ? hp : ""));
        return -1;
      }
      if (has_dotdot(hp)) {
        *ret = vol_error(r, 400, "VOLUME::INVALID_HOST_PATH",
                         xasprintf("Host path '%s' contains path traversal component '..'.", hp));
        return -1;
      }
      if (strstr(hp, "//") || (strlen(hp) > 1 && hp[strlen(hp) - 1] == '/')) {
        *ret =
            vol_error(r, 400, "VOLUME::INVALID_HOST_PATH",
                      xasprintf("Host path '%s' is not normalized. Remove redundant slashes.", hp));
        return -1;
      }
      for (size_t k = 0; k < g.cfg->n_volume_roots && root == NULL; k++) {
        const char *vr = g.cfg->volume_roots[k];
        size_t l = strlen(vr);
        if (strcmp(vr, "/") == 0) {
          root = xstrdup("/");
          rel = xstrdup(hp + 1);
        } else if (strncmp(hp, vr, l) == 0 && (hp[l] == '\0' || hp[l] == '/')) {
          root = xstrdup(vr);
          rel = xstrdup(hp[l] ? hp + l + 1 : "");
        }
      }
      if (root == NULL) {
        sbx_buf_t allowed = {0};
        for (size_t k = 0; k < g.cfg->n_volume_roots; k++)
          sbx_buf_printf(&allowed, "%s'%s'", k ? ", " : "", g.cfg->volume_roots[k]);
        *ret = vol_error(r, 400, "VOLUME::HOST_PATH_NOT_ALLOWED",
                         xasprintf("Host path '%s' is not under any allowed prefix. Allowed "
                                   "prefixes: [%s] (sbxd.volume_roots)",
                                   hp, allowed.data ? allowed.data : ""));
        sbx_buf_free(&allowed);
        return -1;
      }
    } else {
      const char *claim = json_string_value(json_object_get(pvc, "claimName"));
      if (!sbxd_dns_label_valid(claim, 253)) {
        *ret = vol_error(r, 400, "VOLUME::INVALID_PVC_NAME",
                         xasprintf("PVC claim name '%s' is not a valid Kubernetes resource "
                                   "name.",
                                   claim ? claim : ""));
        return -1;
      }
      root = xasprintf("%s/volumes", g.home);
      rel = xstrdup(claim);
      json_t *cine = json_object_get(pvc, "createIfNotExists");
      cleanup_free char *vdir = xasprintf("%s/%s", root, claim);
      struct stat st;
      if (json_is_false(cine) && lstat(vdir, &st) < 0) {
        *ret = vol_error(r, 400, "VOLUME::PVC_NOT_FOUND",
                         xasprintf("Volume '%s': named volume '%s' does not exist.", name, claim));
        return -1;
      }
    }
    char *full_rel =
        sub && *sub ? (*rel ? xasprintf("%s/%s", rel, sub) : xstrdup(sub)) : xstrdup(rel);
    struct sbx_mount *m = &out->m[out->n++];
    m->host_path = xasprintf("%s\n%s", root, full_rel); /* resolved below */
    m->container_path = xstrdup(mclean);
    m->read_only = ro;
    free(full_rel);
    json_array_append_new(
        out->info, json_pack("{s:s,s:s,s:b}", "name", name, "mountPath", mclean, "readOnly", ro));
  }
  /* Everything is valid: now the filesystem. A dry run first, so that a symlink in one volume
   * leaves no directory created for another. */
  for (int create = 0; create < 2; create++) {
    for (size_t i = 0; i < out->n; i++) {
      struct sbx_mount *m = &out->m[i];
      const char *name = json_string_value(json_object_get(json_array_get(vols, i), "name"));
      char *nl = strchr(m->host_path, '\n');
      cleanup_free char *root = xstrndup(m->host_path, (size_t) (nl - m->host_path));
      cleanup_free char *clean_rel = sbxd_path_clean(*(nl + 1) ? nl + 1 : "/");
      bool named =
          sbx_str_has_prefix(root, g.home) && strcmp(root + strlen(g.home), "/volumes") == 0;
      if (create && named && mkdir(root, 0711) < 0 && errno != EEXIST) {
        *ret = vol_error(r, 500, "VOLUME::HOST_PATH_CREATE_FAILED",
                         xasprintf("cannot create '%s': %s", root, strerror(errno)));
        return -1;
      }
      char real_root[PATH_MAX];
      if (realpath(root, real_root) == NULL) {
        if (named && !create)
          continue; /* made in the second pass */
        *ret =
            vol_error(r, 400, "VOLUME::HOST_PATH_NOT_FOUND",
                      xasprintf("Volume '%s': the volume root '%s' does not exist.", name, root));
        return -1;
      }
      char *why = NULL;
      cleanup_close int rootfd = open(real_root, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (rootfd < 0 ||
          walk(rootfd, clean_rel + 1, create, &why, create ? &out->fds[i] : NULL) < 0) {
        char *msg = xasprintf("Volume '%s': %s", name, why ? why : strerror(errno));
        free(why);
        *ret = vol_error(r, 400, "VOLUME::INVALID_HOST_PATH", msg);
        return -1;
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

/* Once the sandbox is made: the launcher mounted each host directory by its path, resolved
 * again, so a sandbox that can write to a folder on that path could have swapped a component for
 * a symlink (to the host's /) after the walk. Each mount must be the directory the walk holds
 * (same device and inode), seen through the new sandbox's root; a mount hidden under a later
 * volume is unreachable and skipped. Nothing runs in the sandbox yet. */
static int volumes_verify(const char *id, const struct volumes *vs, char **why)
{
  if (vs->n == 0)
    return 0;
  struct sbx_sandbox_info *infos = NULL;
  size_t n = 0;
  long pid = 0;
  sbx_error_t err = NULL;
  if (sbx_list(g.p, &infos, &n, &err) < 0) {
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

/* ---- create ---- */

static const char *resolve_image(const char *uri, json_t *auth, char **why)
{
  if (strcmp(uri, "host") == 0)
    return "host";
  for (size_t i = 0; i < g.cfg->n_images; i++)
    if (strcmp(g.cfg->images[i].name, uri) == 0)
      return g.cfg->images[i].target;
  /* an image of the store (sbx image import), else a reference pulled now with image.auth */
  struct sbx_pull_opts po = {0};
  sbx_pull_opts_from_config(g.cfg, &po);
  po.username = json_string_value(json_object_get(auth, "username"));
  po.password = json_string_value(json_object_get(auth, "password"));
  sbx_error_t err = NULL;
  if (sbx_image_ensure(sbx_provider_home(g.p), uri, &po, &err) < 0) {
    *why = xstrdup(err->msg);
    sbx_error_release(&err);
    return NULL;
  }
  return uri;
}

static enum MHD_Result h_create(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = sbxd_body_json(r, 422, VALIDATION, &ret);
  if (body == NULL)
    return ret;
  const char *bad = NULL;
  json_t *image = opt(body, "image"), *snap = opt(body, "snapshotId");
  json_t *entry = opt(body, "entrypoint"), *timeout = opt(body, "timeout");
  json_t *limits = opt(body, "resourceLimits"), *env = opt(body, "env");
  json_t *md = opt(body, "metadata"), *platform = opt(body, "platform");
  json_t *netpol = opt(body, "networkPolicy"), *cred = opt(body, "credentialProxy");
  json_t *vols = opt(body, "volumes"), *ext = opt(body, "extensions");
  json_t *secure = opt(body, "secureAccess");
  int64_t tmo = 0;
  if (!json_is_object(body))
    bad = "body: Input should be a valid dictionary";
  else if ((image != NULL) == (snap != NULL))
    bad = "body: exactly one of image or snapshotId must be provided";
  else if (image && (!json_is_object(image) || !json_is_string(json_object_get(image, "uri"))))
    bad = "body.image.uri: Field required (a string)";
  else if (snap && !json_is_string(snap))
    bad = "body.snapshotId: Input should be a valid string";
  else if (image && entry == NULL)
    bad = "body.entrypoint: Field required when image is given";
  else if (entry && (!json_is_array(entry) || json_array_size(entry) == 0))
    bad = "body.entrypoint: List should have at least 1 item";
  else if (ext && !string_map(ext, false))
    bad = "body.extensions: Input should be a map of strings";
  else if (limits == NULL && !(ext && json_object_get(ext, "poolRef")))
    bad = "body.resourceLimits: Field required";
  else if (limits && !string_map(limits, false))
    bad = "body.resourceLimits: Input should be a map of strings";
  else if (env && !string_map(env, true))
    bad = "body.env: Input should be a map of strings";
  else if (md && !string_map(md, false))
    bad = "body.metadata: Input should be a map of strings";
  else if (platform && (!json_is_string(json_object_get(platform, "os")) ||
                        !json_is_string(json_object_get(platform, "arch"))))
    bad = "body.platform: os and arch are required strings";
  else if (secure && !json_is_boolean(secure))
    bad = "body.secureAccess: Input should be a valid boolean";
  else if (cred && (!json_is_object(cred) || (json_object_get(cred, "enabled") &&
                                              !json_is_boolean(json_object_get(cred, "enabled")))))
    bad = "body.credentialProxy: Input should be an object with a boolean 'enabled'";
  else if (netpol &&
           (!json_is_object(netpol) ||
            (opt(netpol, "defaultAction") && !json_is_string(opt(netpol, "defaultAction"))) ||
            (opt(netpol, "egress") && !json_is_array(opt(netpol, "egress")))))
    bad = "body.networkPolicy: Input should be {defaultAction?: string, egress?: list}";
  else if (vols && !json_is_array(vols))
    bad = "body.volumes: Input should be a valid list";
  if (bad == NULL && entry) {
    for (size_t i = 0; i < json_array_size(entry) && !bad; i++)
      if (!json_is_string(json_array_get(entry, i)))
        bad = "body.entrypoint: items should be strings";
  }
  if (bad == NULL && timeout) {
    double d = json_is_real(timeout) ? json_real_value(timeout) : 0;
    if (json_is_integer(timeout))
      tmo = (int64_t) json_integer_value(timeout);
    else if (json_is_real(timeout) && d == (double) (int64_t) d)
      tmo = (int64_t) d;
    else
      bad = "body.timeout: Input should be a valid integer";
    if (!bad && tmo < 60)
      bad = "body.timeout: Input should be greater than or equal to 60";
  }
  for (size_t i = 0; bad == NULL && vols && i < json_array_size(vols); i++) {
    json_t *v = json_array_get(vols, i);
    if (!json_is_object(v) || !json_is_string(json_object_get(v, "name")) ||
        !json_is_string(json_object_get(v, "mountPath")))
      bad = "body.volumes: each volume needs a string name and mountPath";
    else if ((opt(v, "readOnly") && !json_is_boolean(opt(v, "readOnly"))) ||
             (opt(v, "subPath") && !json_is_string(opt(v, "subPath"))) ||
             (opt(v, "host") && !json_is_string(json_object_get(opt(v, "host"), "path"))) ||
             (opt(v, "pvc") && !json_is_string(json_object_get(opt(v, "pvc"), "claimName"))))
      bad = "body.volumes: host needs a string path, pvc a string claimName";
  }
  if (bad) {
    json_decref(body);
    return sbxd_error(r, 422, VALIDATION, "%s", bad);
  }

  /* semantic checks (400) */
  char *msg = NULL;
  const char *code = NULL;
  unsigned status = 400;
  const char *uri = image ? json_string_value(json_object_get(image, "uri")) : NULL;
  const char *target = NULL;
  char *pull_why = NULL;
  if (snap) {
    code = NOT_SUPPORTED;
    msg = xstrdup("Snapshots are not supported by sbxd.");
  } else if (ext && json_object_get(ext, "poolRef")) {
    code = "SANDBOX::UNSUPPORTED_POOL_REF";
    msg = xstrdup("poolRef is not supported by sbxd (a single-host runtime).");
  } else if (timeout && g.cfg->max_sandbox_timeout > 0 && tmo > g.cfg->max_sandbox_timeout) {
    code = INVALID_PARAMETER;
    msg = xasprintf("Sandbox timeout %llds exceeds configured maximum of %llds.", (long long) tmo,
                    (long long) g.cfg->max_sandbox_timeout);
  } else if (md && (code = metadata_error(md, &msg)) != NULL) {
    /* message set */
  } else if ((target = resolve_image(uri, json_object_get(image, "auth"), &pull_why)) == NULL) {
    code = "SANDBOX::IMAGE_NOT_FOUND";
    sbx_buf_t known = {0};
    sbx_buf_puts(&known, "host");
    for (size_t i = 0; i < g.cfg->n_images; i++)
      sbx_buf_printf(&known, ", %s", g.cfg->images[i].name);
    msg = xasprintf("Image '%s' is not in sbxd's local image store (known: %s); import it with "
                    "`sbx image import` (sbx images lists them) or declare an alias under "
                    "sbxd.images in the configuration (%s).",
                    uri, known.data, pull_why ? pull_why : "not found");
    free(pull_why);
    sbx_buf_free(&known);
  } else if (platform) {
    const char *os = json_string_value(json_object_get(platform, "os"));
    const char *arch = json_string_value(json_object_get(platform, "arch"));
    if (strcasecmp(os, "linux") != 0 && strcasecmp(os, "windows") != 0) {
      code = INVALID_PARAMETER;
      msg = xasprintf("Unsupported platform.os '%s'. Supported values: ['linux', 'windows'].", os);
    } else if (strcasecmp(arch, "amd64") != 0 && strcasecmp(arch, "arm64") != 0) {
      code = INVALID_PARAMETER;
      msg =
          xasprintf("Unsupported platform.arch '%s'. Supported values: ['amd64', 'arm64'].", arch);
    } else if (strcasecmp(os, "linux") != 0 || strcasecmp(arch, host_arch()) != 0) {
      code = INVALID_PARAMETER;
      msg = xasprintf("Platform %s/%s is not available: sbxd runs linux/%s sandboxes.", os, arch,
                      host_arch());
    }
  }
  if (code == NULL && netpol) {
    const char *def = json_string_value(opt(netpol, "defaultAction"));
    size_t rules = json_array_size(opt(netpol, "egress"));
    bool host_net = g.cfg->network && strcmp(g.cfg->network, "host") == 0;
    bool ok = host_net ? (def && strcmp(def, "allow") == 0 && rules == 0)
                       : ((def == NULL || strcmp(def, "deny") == 0) && rules == 0);
    if (!ok) {
      code = NOT_SUPPORTED;
      msg = xasprintf("networkPolicy is not supported beyond the configured network: sandboxes %s "
                      "(sandbox.network: %s), so only {\"defaultAction\": \"%s\"} with no egress "
                      "rules is accepted.",
                      host_net ? "share the host's network" : "have no network access",
                      host_net ? "host" : "none", host_net ? "allow" : "deny");
    }
  }
  if (code == NULL && cred && json_is_true(json_object_get(cred, "enabled"))) {
    code = NOT_SUPPORTED;
    msg = xstrdup("credentialProxy is not supported by sbxd.");
  }
  double cpus = 0;
  uint64_t memory = 0;
  const char *k;
  json_t *v;
  if (code == NULL && limits) {
    json_object_foreach(limits, k, v)
    {
      const char *s = json_string_value(v);
      if (strcmp(k, "cpu") == 0 && sbxd_parse_cpu(s, &cpus) < 0) {
        code = INVALID_PARAMETER;
        msg = xasprintf("Invalid resourceLimits.cpu '%s': expected a positive number of CPUs or "
                        "millicores (e.g. '1', '0.5', '500m').",
                        s);
        break;
      }
      if (strcmp(k, "memory") == 0 && (sbxd_parse_memory(s, &memory) < 0 || memory == 0)) {
        code = INVALID_PARAMETER;
        msg = xasprintf("Invalid resourceLimits.memory '%s': expected a size such as '512Mi', "
                        "'2Gi' or '1G'.",
                        s);
        break;
      }
      if (strcmp(k, "gpu") == 0 && strcmp(s, "0") != 0 && *s != '\0') {
        code = INVALID_PARAMETER;
        msg = xasprintf("resourceLimits.gpu '%s' cannot be satisfied: sbxd has no GPUs.", s);
        break;
      }
    }
  }
  sbx_strv_t envv = {0};
  if (code == NULL && env) {
    json_object_foreach(env, k, v)
    {
      if (!sbx_env_key_valid(k, strlen(k))) {
        code = INVALID_PARAMETER;
        msg = xasprintf("env key '%s' is not a valid environment variable name (must match "
                        "^[A-Za-z_][A-Za-z0-9_]*$).",
                        k);
        break;
      }
      if (json_is_string(v))
        sbx_strv_push_owned(&envv, xasprintf("%s=%s", k, json_string_value(v)));
    }
  }
  struct volumes vs = {0};
  if (code == NULL && build_volumes(r, vols, &vs, &ret) < 0) {
    volumes_free(&vs);
    sbx_strv_free(&envv);
    json_decref(body);
    return ret;
  }
  if (code) {
    ret = sbxd_error(r, status, code, "%s", msg);
    free(msg);
    volumes_free(&vs);
    sbx_strv_free(&envv);
    json_decref(body);
    return ret;
  }

  /* what sbxd keeps with the sandbox */
  int64_t now = sbxd_now_ms();
  char token[65];
  sbx_random_hex(token, 64);
  token[64] = '\0';
  json_t *extra = json_object();
  json_object_set_new(extra, "sbxd", json_integer(1));
  json_object_set_new(extra, "token", json_string(token));
  json_object_set_new(extra, "createdAt", json_integer(now));
  if (timeout)
    json_object_set_new(extra, "expiresAt", json_integer(now + tmo * 1000));
  json_object_set_new(extra, "image", json_string(uri));
  json_object_set(extra, "entrypoint", entry);
  if (md)
    json_object_set(extra, "metadata", md);
  if (platform)
    json_object_set_new(extra, "platform",
                        json_pack("{s:s,s:s}", "os", "linux", "arch", host_arch()));
  if (json_array_size(vs.info))
    json_object_set(extra, "volumes", vs.info);
  cleanup_free char *extra_s = json_dumps(extra, JSON_COMPACT | JSON_PRESERVE_ORDER);

  struct sbx_create_opts o = {.image = target,
                              .env = (const char *const *) envv.v,
                              .n_env = envv.n,
                              .memory_bytes = memory,
                              .cpus = cpus,
                              .mounts = vs.m,
                              .n_mounts = vs.n,
                              .extra = extra_s};
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_create(g.p, &o, &err);
  if (sb && g.cfg->spares > 0)
    sbxd_spares_kick(); /* it may have taken one */
  sbx_strv_free(&envv);
  char *why = NULL;
  if (sb && volumes_verify(sbx_sandbox_id(sb), &vs, &why) < 0) {
    volumes_free(&vs);
    struct box *b = box_add(sb, BOX_MANAGED, extra);
    box_remove(b, "volume_changed", NULL);
    box_put(b);
    json_decref(body);
    ret = sbxd_error(r, 400, "VOLUME::INVALID_HOST_PATH", "%s", why);
    free(pull_why);
    return ret;
  }
  size_t n_volumes = vs.n;
  volumes_free(&vs);
  if (sb == NULL) {
    json_decref(extra);
    json_decref(body);
    int kind = err->kind;
    if (n_volumes && err->status == ELOOP) {
      /* the launcher follows no symlink to a volume: one appeared on a path sbxd had walked */
      ret = sbxd_error(r, 400, "VOLUME::INVALID_HOST_PATH",
                       "the host directory of a volume changed while it was mounted: %s", err->msg);
      sbx_error_release(&err);
      return ret;
    }
    ret = sbxd_error(r, kind == SBX_E_INVALID || kind == SBX_E_CONFIG ? 400 : 500,
                     kind == SBX_E_INVALID || kind == SBX_E_CONFIG ? INVALID_PARAMETER
                                                                   : "DOCKER::SANDBOX_START_FAILED",
                     "%s", err->msg);
    sbx_error_release(&err);
    return ret;
  }
  struct box *b = box_add(sb, BOX_MANAGED, extra);

  /* the entrypoint runs in the background, like a container's main process */
  size_t n_ep = json_array_size(entry);
  const char **argv = xzalloc((n_ep + 1) * sizeof *argv);
  for (size_t i = 0; i < n_ep; i++)
    argv[i] = json_string_value(json_array_get(entry, i));
  char ep_id[65] = "";
  struct sbx_exec_opts eo = {.argv = argv, .background = true, .id_out = ep_id, .cwd = "/"};
  struct sbx_exec_result res;
  int rc = sbx_execute_command(sb, NULL, &eo, &res, &err);
  sbx_exec_result_free(&res);
  free(argv);
  if (rc < 0) {
    ret = sbxd_error(r, 500, "DOCKER::SANDBOX_START_FAILED", "start the entrypoint: %s", err->msg);
    sbx_error_release(&err);
    box_remove(b, "entrypoint_failed", NULL);
    box_put(b);
    json_decref(body);
    return ret;
  }
  pthread_mutex_lock(&b->lock);
  json_object_set_new(b->extra, "entrypointId", json_string(ep_id));
  if (box_save(b, &err) < 0) {
    sbxd_log(SBXD_WARN, "save sandbox %s: %s", b->id, err->msg);
    sbx_error_release(&err);
  }
  pthread_mutex_unlock(&b->lock);
  sbxd_expiry_kick();
  sbxd_log_json(SBXD_INFO, "sandbox created",
                json_pack("{s:s,s:s,s:s,s:I}", "request_id", r->rid, "sandbox_id", b->id, "image",
                          uri, "timeout", (json_int_t) tmo));
  json_decref(body);
  ret = sbxd_json(r, 202, sbxd_sandbox_json(b, "Running", true));
  box_put(b);
  return ret;
}

/* ---- get, list, delete ---- */

static const char *seg_id(struct req *r)
{
  size_t base = r->seg.n > 0 && strcmp(r->seg.v[0], "v1") == 0 ? 1 : 0;
  return r->seg.v[base + 1];
}

static struct box *managed_box(const char *id)
{
  struct box *b = box_get(id);
  if (b && b->kind != BOX_MANAGED) {
    box_put(b);
    return NULL;
  }
  return b;
}

static enum MHD_Result h_get(struct req *r)
{
  const char *id = seg_id(r);
  struct box *b = managed_box(id);
  if (b == NULL)
    return not_found(r, id);
  struct live l;
  live_load(&l);
  const char *state = box_state(b, &l);
  enum MHD_Result ret =
      state ? sbxd_json(r, 200, sbxd_sandbox_json(b, state, false)) : not_found(r, id);
  sbx_sandbox_info_free(l.infos, l.n);
  box_put(b);
  return ret;
}

static bool parse_page(const char *s, int64_t def, int64_t *out)
{
  if (s == NULL) {
    *out = def;
    return true;
  }
  return sbxd_parse_i64(s, out);
}

static enum MHD_Result h_list(struct req *r)
{
  int64_t page, size;
  if (!parse_page(sbxd_query(r, "page"), 1, &page) || page < 1)
    return sbxd_error(r, 422, VALIDATION, "query.page: Input should be an integer >= 1");
  if (!parse_page(sbxd_query(r, "pageSize"), 20, &size) || size < 1 || size > 200)
    return sbxd_error(r, 422, VALIDATION,
                      "query.pageSize: Input should be an integer between 1 and 200");
  const char *states[64];
  size_t n_states = sbxd_query_all(r, "state", states, ARRAY_SIZE(states));
  sbx_strv_t mk = {0}, mv = {0};
  const char *mdq = sbxd_query(r, "metadata");
  if (mdq && *mdq) {
    char *bad = NULL;
    if (sbxd_parse_qsl(mdq, &mk, &mv, &bad) < 0) {
      enum MHD_Result ret = sbxd_error(r, 400, "INVALID_METADATA_FORMAT",
                                       "Invalid metadata format: bad query field: '%s'", bad);
      free(bad);
      sbx_strv_free(&mk);
      sbx_strv_free(&mv);
      return ret;
    }
  }
  size_t n;
  struct box **boxes = box_list(BOX_MANAGED, &n);
  struct live l;
  live_load(&l);
  json_t *items = json_array();
  int64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    struct box *b = boxes[i];
    const char *state = box_state(b, &l);
    if (state == NULL)
      continue;
    bool ok = n_states == 0;
    for (size_t k = 0; k < n_states && !ok; k++)
      ok = strcasecmp(states[k], state) == 0;
    pthread_mutex_lock(&b->lock);
    json_t *md = json_object_get(b->extra, "metadata");
    for (size_t k = 0; k < mk.n && ok; k++) {
      const char *have = json_string_value(json_object_get(md, mk.v[k]));
      ok = have && strcmp(have, mv.v[k]) == 0;
    }
    pthread_mutex_unlock(&b->lock);
    if (!ok)
      continue;
    total++;
    if (total > (page - 1) * size && total <= page * size)
      json_array_append_new(items, sbxd_sandbox_json(b, state, false));
  }
  sbx_sandbox_info_free(l.infos, l.n);
  box_list_free(boxes, n);
  sbx_strv_free(&mk);
  sbx_strv_free(&mv);
  int64_t pages = (total + size - 1) / size;
  json_t *pag = json_pack("{s:I,s:I,s:I,s:I,s:b}", "page", (json_int_t) page, "pageSize",
                          (json_int_t) size, "totalItems", (json_int_t) total, "totalPages",
                          (json_int_t) pages, "hasNextPage", page < pages);
  return sbxd_json(r, 200, json_pack("{s:o,s:o}", "items", items, "pagination", pag));
}

static enum MHD_Result h_delete(struct req *r)
{
  const char *id = seg_id(r);
  struct box *b = managed_box(id);
  if (b == NULL)
    return not_found(r, id);
  sbx_error_t err = NULL;
  int rc = box_remove(b, "user_delete", &err);
  box_put(b);
  if (rc < 0) {
    enum MHD_Result ret = sbxd_error(r, 500, "DOCKER::SANDBOX_DELETE_FAILED",
                                     "Failed to delete sandbox container: %s", err->msg);
    sbx_error_release(&err);
    return ret;
  }
  return sbxd_empty(r, 204);
}

/* ---- pause, resume ---- */

static enum MHD_Result pause_resume(struct req *r, bool pause)
{
  const char *id = seg_id(r);
  struct box *b = managed_box(id);
  if (b == NULL)
    return not_found(r, id);
  struct live l;
  live_load(&l);
  const char *state = box_state(b, &l);
  sbx_sandbox_info_free(l.infos, l.n);
  enum MHD_Result ret;
  if (state == NULL) {
    ret = not_found(r, id);
  } else if (pause && strcmp(state, "Running") != 0) {
    ret = sbxd_error(r, 409, "DOCKER::SANDBOX_NOT_RUNNING", "Sandbox is not in a running state.");
  } else if (!pause && strcmp(state, "Paused") != 0) {
    ret = sbxd_error(r, 409, "DOCKER::SANDBOX_NOT_PAUSED", "Sandbox is not in a paused state.");
  } else {
    sbx_error_t err = NULL;
    if (sbx_pause(g.p, id, pause, &err) < 0) {
      ret = sbxd_error(r, 500,
                       pause ? "DOCKER::SANDBOX_PAUSE_FAILED" : "DOCKER::SANDBOX_RESUME_FAILED",
                       "Failed to %s sandbox container: %s", pause ? "pause" : "resume", err->msg);
      sbx_error_release(&err);
    } else {
      pthread_mutex_lock(&b->lock);
      b->paused = pause;
      json_object_set_new(b->extra, "stateChangedAt", json_integer(sbxd_now_ms()));
      box_save(b, NULL);
      pthread_mutex_unlock(&b->lock);
      ret = sbxd_empty(r, 202);
    }
  }
  box_put(b);
  return ret;
}

static enum MHD_Result h_pause(struct req *r)
{
  return pause_resume(r, true);
}

static enum MHD_Result h_resume(struct req *r)
{
  return pause_resume(r, false);
}

/* ---- renew, metadata ---- */

static enum MHD_Result h_renew(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = sbxd_body_json(r, 422, VALIDATION, &ret);
  if (body == NULL)
    return ret;
  const char *s = json_string_value(json_object_get(body, "expiresAt"));
  int64_t ms;
  if (s == NULL || sbxd_time_parse(s, &ms) < 0) {
    json_decref(body);
    return sbxd_error(r, 422, VALIDATION,
                      "body.expiresAt: Input should be a valid RFC 3339 datetime");
  }
  json_decref(body);
  const char *id = seg_id(r);
  struct box *b = managed_box(id);
  if (b == NULL)
    return not_found(r, id);
  if (ms <= sbxd_now_ms()) {
    ret = sbxd_error(r, 400, "DOCKER::INVALID_EXPIRATION",
                     "New expiration time must be in the future.");
  } else {
    pthread_mutex_lock(&b->lock);
    bool manual = b->expires_ms == 0;
    sbx_error_t err = NULL;
    int rc = 0;
    if (!manual) {
      b->expires_ms = ms;
      json_object_set_new(b->extra, "expiresAt", json_integer(ms));
      rc = box_save(b, &err);
    }
    pthread_mutex_unlock(&b->lock);
    if (manual)
      ret = sbxd_error(r, 409, "DOCKER::INVALID_EXPIRATION",
                       "Sandbox %s does not have automatic expiration enabled.", id);
    else if (rc < 0)
      ret = sbxd_lib_error(r, &err);
    else
      ret = sbxd_json(r, 200, json_pack("{s:o}", "expiresAt", sbxd_jtime(ms)));
    sbxd_expiry_kick();
  }
  box_put(b);
  return ret;
}

static enum MHD_Result h_metadata(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = sbxd_body_json(r, 422, VALIDATION, &ret);
  if (body == NULL)
    return ret;
  if (!string_map(body, true)) {
    json_decref(body);
    return sbxd_error(r, 422, VALIDATION,
                      "body: Input should be a map of strings (null removes a key)");
  }
  const char *id = seg_id(r);
  struct box *b = managed_box(id);
  if (b == NULL) {
    json_decref(body);
    return not_found(r, id);
  }
  const char *k;
  json_t *v;
  json_t *additions = json_object();
  const char *bad_key = NULL;
  json_object_foreach(body, k, v)
  {
    if (strncmp(k, RESERVED_PREFIX, strlen(RESERVED_PREFIX)) == 0 && !bad_key)
      bad_key = k;
    if (json_is_string(v))
      json_object_set(additions, k, v);
  }
  char *msg = NULL;
  const char *code = NULL;
  if (bad_key)
    ret = sbxd_error(r, 400, "INVALID_METADATA_LABEL",
                     "Metadata key '%s' is reserved (opensandbox.io/ prefix).", bad_key);
  else if ((code = metadata_error(additions, &msg)) != NULL)
    ret = sbxd_error(r, 400, code, "%s", msg);
  free(msg);
  json_decref(additions);
  if (bad_key || code) {
    json_decref(body);
    box_put(b);
    return ret;
  }
  struct live l;
  live_load(&l);
  const char *state = box_state(b, &l);
  sbx_sandbox_info_free(l.infos, l.n);
  if (state == NULL) {
    json_decref(body);
    box_put(b);
    return not_found(r, id);
  }
  pthread_mutex_lock(&b->lock);
  json_t *md = json_object_get(b->extra, "metadata");
  if (!json_is_object(md)) {
    md = json_object();
    json_object_set_new(b->extra, "metadata", md);
  }
  json_object_foreach(body, k, v)
  {
    if (json_is_null(v))
      json_object_del(md, k);
    else
      json_object_set(md, k, v);
  }
  sbx_error_t err = NULL;
  int rc = box_save(b, &err);
  pthread_mutex_unlock(&b->lock);
  json_decref(body);
  ret = rc < 0 ? sbxd_lib_error(r, &err) : sbxd_json(r, 200, sbxd_sandbox_json(b, state, false));
  box_put(b);
  return ret;
}

/* ---- endpoints ---- */

static int parse_bool_query(const char *s, bool *out)
{
  if (s == NULL) {
    *out = false;
    return 0;
  }
  static const char *const yes[] = {"true", "1", "yes", "on", "t", "y"};
  static const char *const no[] = {"false", "0", "no", "off", "f", "n"};
  for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
    if (strcasecmp(s, yes[i]) == 0) {
      *out = true;
      return 0;
    }
    if (strcasecmp(s, no[i]) == 0) {
      *out = false;
      return 0;
    }
  }
  return -1;
}

static enum MHD_Result h_endpoint(struct req *r)
{
  size_t base = r->seg.n > 0 && strcmp(r->seg.v[0], "v1") == 0 ? 1 : 0;
  const char *id = r->seg.v[base + 1], *port_s = r->seg.v[base + 3];
  int64_t port;
  bool proxy;
  if (!sbxd_parse_i64(port_s, &port))
    return sbxd_error(r, 422, VALIDATION, "path.port: Input should be a valid integer");
  if (parse_bool_query(sbxd_query(r, "use_server_proxy"), &proxy) < 0)
    return sbxd_error(r, 422, VALIDATION,
                      "query.use_server_proxy: Input should be a valid boolean");
  const char *expires = sbxd_query(r, "expires");
  if (proxy && expires)
    return sbxd_error(r, 400, INVALID_PARAMETER,
                      "use_server_proxy cannot be combined with expires; signed endpoints "
                      "require the gateway route.");
  struct box *b = managed_box(id);
  if (b == NULL)
    return not_found(r, id);
  enum MHD_Result ret;
  if (port < 1 || port > 65535) {
    ret = sbxd_error(r, 400, "DOCKER::INVALID_PORT", "Port must be between 1 and 65535.");
  } else if (expires) {
    ret = sbxd_error(r, 400, NOT_SUPPORTED,
                     "Signed endpoints (expires) are not supported by sbxd; endpoints are "
                     "protected by the X-EXECD-ACCESS-TOKEN header instead.");
  } else {
    cleanup_free char *host = sbxd_public_host(r);
    cleanup_free char *ep =
        proxy ? xasprintf("%s/sandboxes/%s/proxy/%lld", host, id, (long long) port)
              : xasprintf("%s/direct/%s/%lld", host, id, (long long) port);
    ret = sbxd_json(
        r, 200, json_pack("{s:s,s:{s:s}}", "endpoint", ep, "headers", SBXD_TOKEN_HEADER, b->token));
  }
  box_put(b);
  return ret;
}

/* ---- routing ---- */

static enum MHD_Result h_accept_204(struct req *r)
{
  return sbxd_empty(r, 204);
}

static enum MHD_Result h_snapshots(struct req *r)
{
  return sbxd_error(r, 400, NOT_SUPPORTED, "Snapshots are not supported by sbxd.");
}

static enum MHD_Result later(struct req *r, req_fn fn, uint64_t body_max)
{
  r->done = fn;
  r->body_max = body_max;
  return MHD_YES;
}

enum MHD_Result sbxd_lifecycle(struct req *r, sbx_strv_t *seg)
{
  size_t base = seg->n > 0 && strcmp(seg->v[0], "v1") == 0 ? 1 : 0;
  size_t n = seg->n - base;
  char **s = seg->v + base;
  const char *m = r->method;
  bool get = strcmp(m, "GET") == 0, post = strcmp(m, "POST") == 0;
  bool sandboxes = n >= 1 && strcmp(s[0], "sandboxes") == 0;
  req_fn fn = NULL;
  uint64_t cap = SBXD_BODY_LIFECYCLE;
  bool known = true;
  if (sandboxes && n == 1)
    fn = get ? h_list : post ? h_create : NULL;
  else if (n == 2 && strcmp(s[0], "metrics") == 0 && strcmp(s[1], "events") == 0)
    fn = post ? h_accept_204 : NULL;
  else if (sandboxes && n == 2)
    fn = get ? h_get : strcmp(m, "DELETE") == 0 ? h_delete : NULL;
  else if (sandboxes && n == 3 && strcmp(s[2], "metadata") == 0)
    fn = strcmp(m, "PATCH") == 0 ? h_metadata : NULL;
  else if (sandboxes && n == 3 && strcmp(s[2], "pause") == 0)
    fn = post ? h_pause : NULL;
  else if (sandboxes && n == 3 && strcmp(s[2], "resume") == 0)
    fn = post ? h_resume : NULL;
  else if (sandboxes && n == 3 && strcmp(s[2], "renew-expiration") == 0)
    fn = post ? h_renew : NULL;
  else if (sandboxes && n == 3 && strcmp(s[2], "snapshots") == 0)
    fn = h_snapshots;
  else if (sandboxes && n == 4 && strcmp(s[2], "endpoints") == 0)
    fn = get ? h_endpoint : NULL;
  else if (n >= 1 && strcmp(s[0], "snapshots") == 0)
    fn = h_snapshots;
  else
    known = false;
  if (!known)
    return sbxd_error(r, 404, "GENERAL::NOT_FOUND", "Not Found: %s %s", m, r->url);
  if (fn == NULL)
    return sbxd_error(r, 405, "GENERAL::METHOD_NOT_ALLOWED", "Method Not Allowed: %s %s", m,
                      r->url);
  return later(r, fn, cap);
}
