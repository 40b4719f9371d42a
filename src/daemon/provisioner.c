/* DeerFlow's provisioner API (bytedance/deer-flow docker/provisioner/app.py), so that DeerFlow's
 * default provider, AioSandboxProvider with `sandbox.provisioner_url`, gets its sandboxes from
 * sbxd:
 *
 *   GET    /api/capabilities          -> {lark_cli_init_image, lark_cli_broker_image}
 *   POST   /api/sandboxes {sandbox_id, thread_id?, user_id?, extra_mounts?, ...}
 *                                     -> {sandbox_id, sandbox_url, status}   (idempotent)
 *   GET    /api/sandboxes[/{id}]      -> {sandboxes, count} / {sandbox_id, sandbox_url, status}
 *   DELETE /api/sandboxes/{id}        -> {ok: true, sandbox_id}              (missing: the same)
 *
 * A provisioner sandbox is an ordinary managed box (the OpenSandbox API sees it) whose extra
 * JSON carries {"provisioner": {sandbox_id, thread_id, user_id}}; its sandbox_url is the box's
 * AIO API (aio.c). Configuration is app.py's environment: PROVISIONER_API_KEY (every /api/
 * route needs it as X-API-Key; unset, they all answer 401 as app.py does), THREADS_HOST_PATH
 * (the gateway's thread folders: /mnt/user-data is THREADS_HOST_PATH/<thread>/user-data; unset,
 * the (user, thread) scope's folder in sbx's home) and DEER_FLOW_HOST_BASE_DIR (DeerFlow's state
 * root: skills and extra mounts must lie under it; unset, app.py's derivation, the parent of a
 * THREADS_HOST_PATH that ends in /threads; neither, no skills and every extra mount refused with
 * a message naming the variable). Host folders below the root are opened and made with
 * descriptors (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), never by path. */
#include "provisioner.h"
#include "ctx.h"
#include "registry.h"
#include "spares.h"
#include "aio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_EXTRA_MOUNTS 10
#define ID_PATTERN "^[A-Za-z0-9_-]{1,64}$"
#define USER_PATTERN "^[A-Za-z0-9_\\-]+$"

static const char *const allowed_extra[] = {
    "/mnt/acp-workspace",
    "/mnt/skills/custom",
    "/mnt/skills/integrations",
    "/mnt/integrations/lark-cli/config",
    "/mnt/integrations/lark-cli/config/locks",
    "/mnt/integrations/lark-cli/data",
    "/mnt/integrations/lark-cli/runtime",
};

/* one create at a time: the sandbox_id -> box lookup and the creation are one step */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *env_nonempty(const char *name)
{
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

/* FastAPI's {"detail": "..."} */
static enum MHD_Result detail(struct req *r, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum MHD_Result detail(struct req *r, unsigned status, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  char *msg = NULL;
  if (vasprintf(&msg, fmt, ap) < 0)
    msg = NULL;
  va_end(ap);
  /* ids and paths come from the request: any bytes */
  json_t *j = json_object();
  json_object_set_new(j, "detail", msg ? sbxd_jstr(msg, strlen(msg)) : json_string("error"));
  free(msg);
  return sbxd_json(r, status, j);
}

/* pydantic's 422: {"detail": [{type, loc: ["body", field], msg, input}]} */
static enum MHD_Result invalid_field(struct req *r, const char *field, const char *type,
                                     const char *msg, json_t *input)
{
  json_t *e = json_pack("{s:s,s:[s,s],s:s,s:O?}", "type", type, "loc", "body", field, "msg", msg,
                        "input", input);
  return sbxd_json(r, 422, json_pack("{s:[o]}", "detail", e));
}

static bool matches(const char *pattern, const char *s)
{
  regex_t re;
  if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
    return false;
  bool ok = regexec(&re, s, 0, NULL, 0) == 0;
  regfree(&re);
  return ok;
}

/* app.py's middleware: every /api/ route needs X-API-Key equal to PROVISIONER_API_KEY. */
static bool authorized(struct req *r)
{
  const char *key = env_nonempty("PROVISIONER_API_KEY");
  const char *got = sbxd_header(r, "X-API-Key");
  return key && got && sbxd_secret_equal(got, key);
}

static enum MHD_Result unauthorized(struct req *r)
{
  sbxd_log(SBXD_WARN, "provisioner auth rejected: %s %s%s", r->method, r->url,
           env_nonempty("PROVISIONER_API_KEY") ? "" : " (PROVISIONER_API_KEY is not set)");
  return sbxd_text(r, 401, "text/plain; charset=utf-8", "Unauthorized", 12);
}

/* ---- the boxes the provisioner made ---- */

static const char *box_psid(struct box *b)
{
  return json_string_value(json_object_get(json_object_get(b->extra, "provisioner"), "sandbox_id"));
}

/* The sandboxes that exist (sbx_list), to tell each box's phase. */
struct live {
  struct sbx_sandbox_info *infos;
  size_t n;
  bool ok;
};

static void live_load(struct live *l)
{
  sbx_error_t err = NULL;
  l->infos = NULL;
  l->n = 0;
  l->ok = sbx_list(srv.p, &l->infos, &l->n, &err) == 0;
  if (!l->ok) {
    sbxd_log(SBXD_WARN, "list sandboxes: %s", err->msg);
    sbx_error_release(&err);
  }
}

/* The Kubernetes pod phase app.py reports: Running, Failed once the sandbox's init died,
 * Pending while paused; NULL when the sandbox is gone (destroyed behind sbxd's back, `sbx
 * down`): the box is then removed, as a pod without its service is not found. */
static const char *box_phase(struct box *b, const struct live *l)
{
  if (!l->ok)
    return "Unknown";
  for (size_t i = 0; i < l->n; i++)
    if (strcmp(l->infos[i].id, b->id) == 0)
      return l->infos[i].state == SBX_STATE_DEAD ? "Failed" : box_paused(b) ? "Pending" : "Running";
  box_remove(b, "vanished", NULL);
  return NULL;
}

/* A reference to the box made for sandbox_id and its phase, or NULL. */
static struct box *find_box(const char *sandbox_id, const char **phase)
{
  size_t n;
  struct box **v = box_list(BOX_MANAGED, &n);
  struct box *found = NULL;
  for (size_t i = 0; i < n && found == NULL; i++) {
    pthread_mutex_lock(&v[i]->lock);
    const char *s = box_psid(v[i]);
    if (s && strcmp(s, sandbox_id) == 0)
      found = box_ref(v[i]);
    pthread_mutex_unlock(&v[i]->lock);
  }
  box_list_free(v, n);
  if (found) {
    struct live l;
    live_load(&l);
    *phase = box_phase(found, &l);
    sbx_sandbox_info_free(l.infos, l.n);
    if (*phase == NULL) {
      box_put(found);
      found = NULL;
    }
  }
  return found;
}

static json_t *sandbox_response(struct req *r, struct box *b, const char *psid, const char *phase)
{
  cleanup_free char *host = sbxd_public_host(r, srv.listen);
  cleanup_free char *url = sbxd_aio_url(host, b);
  return json_pack("{s:s,s:s,s:s}", "sandbox_id", psid, "sandbox_url", url, "status", phase);
}

/* ---- mounts ---- */

static bool under(const char *path, const char *base)
{
  size_t n = strlen(base);
  while (n > 1 && base[n - 1] == '/')
    n--;
  return strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/' || n == 1);
}

struct mounts {
  struct sbx_mount m[MAX_EXTRA_MOUNTS + 3];
  size_t n;
};

static void mounts_free(struct mounts *ms)
{
  for (size_t i = 0; i < ms->n; i++) {
    free(ms->m[i].host_path);
    free(ms->m[i].container_path);
  }
  ms->n = 0;
}

static bool mounted_at(const struct mounts *ms, const char *cpath)
{
  for (size_t i = 0; i < ms->n; i++)
    if (strcmp(ms->m[i].container_path, cpath) == 0)
      return true;
  return false;
}

static void mount_add(struct mounts *ms, const char *host, const char *cpath, bool ro)
{
  ms->m[ms->n].host_path = xstrdup(host);
  ms->m[ms->n].container_path = xstrdup(cpath);
  ms->m[ms->n].read_only = ro;
  ms->n++;
}

/* DeerFlow's state root, the folder every extra mount and skills folder must lie in: app.py's
 * _host_base_dir_for_extra_mounts, DEER_FLOW_HOST_BASE_DIR, else the parent of
 * THREADS_HOST_PATH when that ends in /threads (DeerFlow's layout), else none. The variable it
 * came from goes to *from. Returned clean (no "." or ".." or "//"), or NULL. */
static char *state_root(const char **from)
{
  const char *base = env_nonempty("DEER_FLOW_HOST_BASE_DIR");
  *from = "DEER_FLOW_HOST_BASE_DIR";
  if (base)
    return base[0] == '/' ? sbxd_path_clean(base) : NULL;
  const char *threads = env_nonempty("THREADS_HOST_PATH");
  if (threads == NULL || threads[0] != '/')
    return NULL;
  char *t = sbxd_path_clean(threads);
  char *slash = strrchr(t, '/');
  if (slash == NULL || strcmp(slash, "/threads") != 0 || slash == t) {
    free(t);
    return NULL;
  }
  *slash = '\0';
  *from = "THREADS_HOST_PATH";
  return t;
}

/* Opens the folder rel (relative, clean; "" is the root itself) below the open folder rootfd,
 * one component at a time with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): never through a
 * symbolic link, never out of the root, so nothing outside it is looked at, made or changed.
 * With create, a missing folder is made with mkdirat and given its mode with fchmod on its own
 * descriptor (0777 for the last: a sandbox's root is an unprivileged id on the host; 0755 on the
 * way). Without, a missing folder ends the walk with ENOENT. Returns a descriptor or -1 (errno). */
static int open_beneath(int rootfd, const char *rel, bool create)
{
  int fd = fcntl(rootfd, F_DUPFD_CLOEXEC, 0);
  cleanup_free char *copy = xstrdup(rel);
  char *save = NULL;
  for (char *tok = strtok_r(copy, "/", &save); fd >= 0 && tok; tok = strtok_r(NULL, "/", &save)) {
    struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
    int next = (int) syscall(SYS_openat2, fd, tok, &how, sizeof how);
    if (next < 0 && errno == ENOENT && create) {
      bool last = save == NULL || *save == '\0';
      if (mkdirat(fd, tok, 0700) < 0 && errno != EEXIST) {
        next = -1;
      } else if ((next = (int) syscall(SYS_openat2, fd, tok, &how, sizeof how)) >= 0 &&
                 fchmod(next, last ? 0777 : 0755) < 0) {
        close(next);
        next = -1;
      }
    }
    int e = errno;
    close(fd);
    errno = e;
    fd = next;
  }
  return fd;
}

/* app.py's _validated_extra_mounts: at most 10, host paths absolute and under the DeerFlow state
 * root, container paths from the allowed set, no duplicate. A read-only host folder must exist
 * (a hostPath of type Directory); a writable one is created (DirectoryOrCreate). 400 with
 * app.py's wording otherwise; a refusal for the state root names the variable to set, in the
 * answer and in the log. Each host path is then resolved below the root with descriptors
 * (open_beneath): a path through a symbolic link (a sandbox can plant one in a writable folder
 * under the state root) is refused with one answer whatever lies behind the link. */
static int extra_mounts(struct req *r, json_t *list, const char *base, const char *from,
                        struct mounts *ms, enum MHD_Result *ret)
{
  size_t n = json_array_size(list);
  if (n > MAX_EXTRA_MOUNTS) {
    *ret = detail(r, 400, "Too many extra mounts; max is %d", MAX_EXTRA_MOUNTS);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    json_t *m = json_array_get(list, i);
    const char *hp = json_string_value(json_object_get(m, "host_path"));
    const char *cp = json_string_value(json_object_get(m, "container_path"));
    cleanup_free char *host = sbxd_path_clean(hp);
    cleanup_free char *cont = sbxd_path_clean(cp);
    if (hp[0] != '/') {
      *ret = detail(r, 400, "Extra mount host path must be absolute: %s", hp);
      return -1;
    }
    if (base == NULL || !under(host, base)) {
      char *fix = base == NULL
                      ? xstrdup("sbxd knows no DeerFlow state root: set DEER_FLOW_HOST_BASE_DIR to "
                                "DeerFlow's state folder (the gateway's DEER_FLOW_HOME), or "
                                "THREADS_HOST_PATH to its threads folder")
                  : strcmp(from, "THREADS_HOST_PATH") == 0
                      ? xasprintf("it must be below %s, the parent of THREADS_HOST_PATH; set "
                                  "DEER_FLOW_HOST_BASE_DIR for another state root",
                                  base)
                      : xasprintf("it must be below DEER_FLOW_HOST_BASE_DIR=%s", base);
      sbxd_log(SBXD_WARN, "provisioner: extra mount %s refused: %s", hp, fix);
      *ret = detail(r, 400, "Extra mount host path is outside DeerFlow state: %s (%s)", hp, fix);
      free(fix);
      return -1;
    }
    if (cp[0] != '/') {
      *ret = detail(r, 400, "Extra mount path must be absolute: %s", cp);
      return -1;
    }
    bool allowed = false;
    for (size_t k = 0; k < ARRAY_SIZE(allowed_extra); k++)
      allowed |= strcmp(cont, allowed_extra[k]) == 0;
    if (!allowed) {
      *ret = detail(r, 400, "Unsupported extra mount path: %s", cp);
      return -1;
    }
    if (mounted_at(ms, cont)) {
      *ret = detail(r, 400, "Duplicate extra mount path: %s", cont);
      return -1;
    }
    mount_add(ms, host, cont, json_is_true(json_object_get(m, "read_only")));
  }
  if (ms->n == 0)
    return 0;
  /* the root is the operator's and may be reached through links of its own: resolved once */
  char real[PATH_MAX];
  cleanup_close int rootfd = -1;
  if (realpath(base, real) == NULL || (rootfd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
    sbxd_log(SBXD_WARN, "provisioner: DeerFlow state root %s=%s cannot be opened: %s", from, base,
             strerror(errno));
    *ret = detail(r, 500, "DeerFlow state root %s=%s cannot be opened", from, base);
    return -1;
  }
  /* a dry run first, so that a refused mount leaves nothing made for another; then the
   * writable ones are made; each mount gets the resolved path (no link in it, which the
   * launcher checks again when it binds it) */
  for (int create = 0; create < 2; create++) {
    for (size_t i = 0; i < ms->n; i++) {
      struct sbx_mount *m = &ms->m[i];
      const char *rel = m->host_path + strlen(base);
      rel += strspn(rel, "/");
      int fd = open_beneath(rootfd, rel, create && !m->read_only);
      if (fd < 0 && errno == ENOENT && !create && !m->read_only)
        continue; /* made in the second pass */
      if (fd < 0 && create) {
        sbxd_log(SBXD_WARN, "provisioner: extra mount %s could not be made: %s", m->host_path,
                 strerror(errno));
        *ret = detail(r, 500, "Extra mount host path %s could not be created", m->host_path);
        return -1;
      }
      if (fd < 0) {
        /* missing, not a folder, or through a symbolic link: one answer, which tells nothing
         * about what a link points at */
        *ret = detail(r, 400,
                      "Extra mount host path is not a folder inside DeerFlow state (reached "
                      "without symbolic links): %s",
                      m->host_path);
        return -1;
      }
      close(fd);
      if (create) {
        char *resolved =
            *rel ? xasprintf("%s/%s", strcmp(real, "/") ? real : "", rel) : xstrdup(real);
        free(m->host_path);
        m->host_path = resolved;
      }
    }
  }
  return 0;
}

/* The three skills folders of app.py's hostPath layout, read-only, those that exist below the
 * state root without a symbolic link on the way (an extra mount at the same path wins:
 * DeerFlow's gateway sends /mnt/skills/custom as one). */
static void skills_mounts(const char *base, const char *user, struct mounts *ms)
{
  char real[PATH_MAX];
  if (base == NULL || realpath(base, real) == NULL)
    return;
  cleanup_close int rootfd = open(real, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return;
  const char *top = strcmp(real, "/") ? real : "";
  struct {
    const char *cpath;
    char *rel;
  } s[] = {
      {"/mnt/skills/public", xstrdup("skills_view/public")},
      {"/mnt/skills/custom", xasprintf("users/%s/skills_view/custom", user)},
      {"/mnt/skills/legacy", xasprintf("users/%s/skills_view/legacy", user)},
  };
  for (size_t i = 0; i < ARRAY_SIZE(s); i++) {
    int fd = mounted_at(ms, s[i].cpath) ? -1 : open_beneath(rootfd, s[i].rel, false);
    if (fd >= 0) {
      cleanup_free char *host = xasprintf("%s/%s", top, s[i].rel);
      mount_add(ms, host, s[i].cpath, true);
      close(fd);
    }
    free(s[i].rel);
  }
}

/* /mnt/user-data: the gateway's thread folder (THREADS_HOST_PATH/<thread>/user-data), else the
 * folder sbx keeps for the (user, thread) scope. */
static char *user_data_dir(const char *user, const char *thread)
{
  const char *threads = env_nonempty("THREADS_HOST_PATH");
  if (threads)
    return xasprintf("%s/%s/user-data", threads, thread);
  char home[PATH_MAX];
  if (realpath(srv.home, home) == NULL)
    snprintf(home, sizeof home, "%s", srv.home);
  return xasprintf("%s/users/%s/threads/%s/user-data", home, user, thread);
}

/* ---- the body ---- */

struct create_req {
  const char *sandbox_id, *thread_id, *user_id;
  json_t *extra_mounts;
};

/* pydantic's checks of CreateSandboxRequest (422), plus sandbox_id's (it names folders and
 * Kubernetes objects in app.py, so DeerFlow only ever sends safe ones). */
static int create_parse(struct req *r, json_t *body, struct create_req *c, enum MHD_Result *ret)
{
  json_t *sid = json_object_get(body, "sandbox_id"), *tid = json_object_get(body, "thread_id"),
         *uid = json_object_get(body, "user_id"), *em = json_object_get(body, "extra_mounts");
  if (sid == NULL) {
    *ret = invalid_field(r, "sandbox_id", "missing", "Field required", body);
    return -1;
  }
  if (!json_is_string(sid)) {
    *ret = invalid_field(r, "sandbox_id", "string_type", "Input should be a valid string", sid);
    return -1;
  }
  if (!matches(ID_PATTERN, json_string_value(sid))) {
    *ret = invalid_field(r, "sandbox_id", "string_pattern_mismatch",
                         "String should match pattern '" ID_PATTERN "'", sid);
    return -1;
  }
  if (tid && !json_is_null(tid) &&
      (!json_is_string(tid) || !matches(ID_PATTERN, json_string_value(tid)))) {
    *ret = invalid_field(r, "thread_id",
                         json_is_string(tid) ? "string_pattern_mismatch" : "string_type",
                         json_is_string(tid) ? "String should match pattern '" ID_PATTERN "'"
                                             : "Input should be a valid string",
                         tid);
    return -1;
  }
  if (uid && (!json_is_string(uid) || !matches(USER_PATTERN, json_string_value(uid)))) {
    *ret =
        invalid_field(r, "user_id", json_is_string(uid) ? "string_pattern_mismatch" : "string_type",
                      json_is_string(uid) ? "String should match pattern '" USER_PATTERN "'"
                                          : "Input should be a valid string",
                      uid);
    return -1;
  }
  static const char *const flags[] = {"include_legacy_skills", "provision_lark_cli_runtime",
                                      "provision_lark_cli_broker"};
  for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
    json_t *f = json_object_get(body, flags[i]);
    if (f && !json_is_boolean(f)) {
      *ret = invalid_field(r, flags[i], "bool_type", "Input should be a valid boolean", f);
      return -1;
    }
  }
  if (em && !json_is_null(em) && !json_is_array(em)) {
    *ret = invalid_field(r, "extra_mounts", "list_type", "Input should be a valid list", em);
    return -1;
  }
  for (size_t i = 0; i < json_array_size(em); i++) {
    json_t *m = json_array_get(em, i), *ro = json_object_get(m, "read_only");
    if (!json_is_object(m) || !json_is_string(json_object_get(m, "host_path")) ||
        !json_is_string(json_object_get(m, "container_path")) || (ro && !json_is_boolean(ro))) {
      *ret = invalid_field(r, "extra_mounts", "model_type",
                           "Each extra mount needs host_path and container_path (strings) and "
                           "an optional read_only (boolean)",
                           m);
      return -1;
    }
  }
  c->sandbox_id = json_string_value(sid);
  c->thread_id = json_is_string(tid) ? json_string_value(tid) : c->sandbox_id;
  c->user_id = json_is_string(uid) ? json_string_value(uid) : "default";
  c->extra_mounts = em;
  return 0;
}

static struct box *create_box(struct req *r, const struct create_req *c, enum MHD_Result *ret)
{
  const char *from = NULL;
  cleanup_free char *base_clean = state_root(&from);
  struct mounts ms = {0};
  if (extra_mounts(r, c->extra_mounts, base_clean, from, &ms, ret) < 0) {
    mounts_free(&ms);
    return NULL;
  }
  skills_mounts(base_clean, c->user_id, &ms);
  cleanup_free char *ud = user_data_dir(c->user_id, c->thread_id);
  char token[65];
  sbx__random_hex(token, 64);
  token[64] = '\0';
  json_t *extra =
      json_pack("{s:i,s:s,s:I,s:s,s:{s:s,s:s,s:s}}", "sbxd", 1, "token", token, "createdAt",
                (json_int_t) sbxd_now_ms(), "image", "host", "provisioner", "sandbox_id",
                c->sandbox_id, "thread_id", c->thread_id, "user_id", c->user_id);
  cleanup_free char *extra_s = json_dumps(extra, JSON_COMPACT | JSON_PRESERVE_ORDER);
  struct sbx_create_opts o = {.mounts = ms.m, .n_mounts = ms.n, .extra = extra_s, .user_data = ud};
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_create(srv.p, &o, &err);
  mounts_free(&ms);
  if (sb == NULL) {
    json_decref(extra);
    *ret = detail(r, err->kind == SBX_E_LIMIT ? 429 : 500, "Sandbox creation failed: %s", err->msg);
    sbx_error_release(&err);
    return NULL;
  }
  if (srv.cfg->spares > 0)
    sbxd_spares_kick();
  sbxd_log_json(SBXD_INFO, "provisioner sandbox created",
                json_pack("{s:s,s:s,s:s,s:s,s:s}", "request_id", r->rid, "sandbox_id",
                          sbx_sandbox_id(sb), "provisioner_id", c->sandbox_id, "thread_id",
                          c->thread_id, "user_id", c->user_id));
  return box_add(sb, BOX_MANAGED, extra);
}

/* ---- handlers ---- */

enum MHD_Result h_prov_capabilities(struct req *r)
{
  if (!authorized(r))
    return unauthorized(r);
  /* no lark-cli images: sbxd runs no init containers or sidecars */
  return sbxd_json(r, 200,
                   json_pack("{s:b,s:b}", "lark_cli_init_image", 0, "lark_cli_broker_image", 0));
}

enum MHD_Result h_prov_create(struct req *r)
{
  if (!authorized(r))
    return unauthorized(r);
  json_error_t jerr;
  json_auto_t *body = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &jerr);
  if (body == NULL) {
    json_t *e = json_pack("{s:s,s:[s,i],s:s,s:{},s:{s:o}}", "type", "json_invalid", "loc", "body",
                          jerr.position, "msg", "JSON decode error", "input", "ctx", "error",
                          sbxd_jstr(jerr.text, strlen(jerr.text)));
    return sbxd_json(r, 422, json_pack("{s:[o]}", "detail", e));
  }
  if (!json_is_object(body)) {
    json_t *e =
        json_pack("{s:s,s:[s],s:s,s:O}", "type", "model_attributes_type", "loc", "body", "msg",
                  "Input should be a valid dictionary or object to extract fields "
                  "from",
                  "input", body);
    return sbxd_json(r, 422, json_pack("{s:[o]}", "detail", e));
  }
  struct create_req c;
  enum MHD_Result ret;
  if (create_parse(r, body, &c, &ret) < 0)
    return ret;
  pthread_mutex_lock(&create_lock);
  const char *phase = NULL;
  struct box *b = find_box(c.sandbox_id, &phase);
  if (b && strcmp(phase, "Failed") == 0) {
    /* its init died (killed behind our back): a new one, as the pod's restart policy would */
    box_remove(b, "provisioner_replaced_dead", NULL);
    box_put(b);
    b = NULL;
  }
  if (b == NULL) {
    b = create_box(r, &c, &ret);
    phase = "Running";
  }
  pthread_mutex_unlock(&create_lock);
  if (b == NULL)
    return ret;
  ret = sbxd_json(r, 200, sandbox_response(r, b, c.sandbox_id, phase));
  box_put(b);
  return ret;
}

enum MHD_Result h_prov_get(struct req *r)
{
  if (!authorized(r))
    return unauthorized(r);
  const char *id = sbxd_param(r, "id");
  const char *phase;
  struct box *b = find_box(id, &phase);
  if (b == NULL)
    return detail(r, 404, "Sandbox '%s' not found", id);
  enum MHD_Result ret = sbxd_json(r, 200, sandbox_response(r, b, id, phase));
  box_put(b);
  return ret;
}

enum MHD_Result h_prov_list(struct req *r)
{
  if (!authorized(r))
    return unauthorized(r);
  size_t n;
  struct box **v = box_list(BOX_MANAGED, &n);
  struct live l;
  live_load(&l);
  json_t *items = json_array();
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&v[i]->lock);
    const char *s = box_psid(v[i]);
    char *psid = s ? xstrdup(s) : NULL;
    pthread_mutex_unlock(&v[i]->lock);
    const char *phase = psid ? box_phase(v[i], &l) : NULL;
    if (phase)
      json_array_append_new(items, sandbox_response(r, v[i], psid, phase));
    free(psid);
  }
  sbx_sandbox_info_free(l.infos, l.n);
  box_list_free(v, n);
  size_t count = json_array_size(items);
  return sbxd_json(r, 200, json_pack("{s:o,s:I}", "sandboxes", items, "count", (json_int_t) count));
}

enum MHD_Result h_prov_delete(struct req *r)
{
  if (!authorized(r))
    return unauthorized(r);
  const char *id = sbxd_param(r, "id");
  const char *phase;
  struct box *b = find_box(id, &phase);
  if (b) {
    sbx_error_t err = NULL;
    int rc = box_remove(b, "provisioner_delete", &err);
    box_put(b);
    if (rc < 0) {
      enum MHD_Result ret = detail(r, 500, "Partial cleanup: sandbox: %s", err->msg);
      sbx_error_release(&err);
      return ret;
    }
  }
  /* a missing sandbox is not an error (app.py ignores Kubernetes' 404s) */
  return sbxd_json(r, 200,
                   json_pack("{s:b,s:o}", "ok", 1, "sandbox_id", sbxd_jstr(id, strlen(id))));
}

/* Any other /api/ request: the key first (app.py's middleware runs before routing). */
enum MHD_Result h_prov_other(struct req *r)
{
  if (!authorized(r))
    return unauthorized(r);
  const char *u = r->url;
  bool known = strcmp(u, "/api/sandboxes") == 0 || strcmp(u, "/api/capabilities") == 0 ||
               (strncmp(u, "/api/sandboxes/", 15) == 0 && u[15] && !strchr(u + 15, '/'));
  return known ? detail(r, 405, "Method Not Allowed") : detail(r, 404, "Not Found");
}
