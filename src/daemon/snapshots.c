/* OpenSandbox's snapshot API (specs/sandbox-lifecycle.yml, "Snapshots"), with the shapes,
 * states and codes of its server (services/snapshot_service.py): POST /sandboxes/{id}/snapshots
 * answers 202 Creating and a worker thread commits the sandbox (sbx_commit: frozen while its
 * upper is read) into the store as `opensandbox-snapshots:<snapshot id>`, then Ready or Failed;
 * GET /snapshots[/{id}], DELETE /snapshots/{id} (the image goes too); a create with snapshotId
 * starts from that image (snapshots_restore_image, for lifecycle.c).
 *
 * A record is one JSON file, $SBX_HOME/snapshots/<id>.json (written atomically), so snapshots
 * outlive the sandbox and sbxd. A record left Creating or Deleting by an sbxd that stopped is
 * settled on first use: Ready if its image is in the store, else Failed. */
#include "snapshots.h"
#include "ctx.h"
#include "parse.h"
#include "registry.h"
#include "../lib/image/image.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#define SNAP_REPO "opensandbox-snapshots"
#define NOT_FOUND "SNAPSHOT::NOT_FOUND"
#define VALIDATION "SANDBOX::VALIDATION_ERROR"
#define RECORD_MAX (64u << 10)

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* every read-modify-write of a record */
static pthread_once_t recovered = PTHREAD_ONCE_INIT;

static char *dir_path(void)
{
  return xasprintf("%s/snapshots", sbx_provider_home(srv.p));
}

/* A snapshot id as this server makes them (a uuid4), so it is safe in a path. */
static bool id_ok(const char *id)
{
  if (id == NULL || strlen(id) != 36)
    return false;
  for (size_t i = 0; i < 36; i++) {
    char c = id[i];
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  }
  return true;
}

static char *uuid4(void)
{
  char h[33];
  sbx__random_hex(h, 32);
  h[12] = '4';
  h[16] = "89ab"[(h[16] >= 'a' ? h[16] - 'a' + 10 : h[16] - '0') & 3];
  return xasprintf("%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

static json_t *load(const char *id)
{
  if (!id_ok(id))
    return NULL;
  cleanup_free char *d = dir_path();
  cleanup_free char *p = xasprintf("%s/%s.json", d, id);
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, p, RECORD_MAX, &data, &len) < 0)
    return NULL;
  json_t *j = json_loadb(data, len, 0, NULL);
  if (!json_is_object(j)) {
    json_decref(j);
    return NULL;
  }
  return j;
}

static int save(json_t *rec)
{
  cleanup_free char *d = dir_path();
  if (sbx__mkdir_p(d, 0700) < 0)
    return -1;
  cleanup_free char *p = xasprintf("%s/%s.json", d, json_string_value(json_object_get(rec, "id")));
  cleanup_free char *s = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER);
  return s ? sbx__write_file_at(AT_FDCWD, p, s, strlen(s), 0600, true) : -1;
}

static void drop(const char *id)
{
  cleanup_free char *d = dir_path();
  cleanup_free char *p = xasprintf("%s/%s.json", d, id);
  unlink(p);
}

static const char *state_of(json_t *rec)
{
  return json_string_value(json_object_get(rec, "state")) ?: "";
}

static void set_state(json_t *rec, const char *state, const char *reason, const char *message)
{
  json_object_set_new(rec, "state", json_string(state));
  json_object_set_new(rec, "reason", json_string(reason));
  json_object_set_new(rec, "message", json_string(message));
  json_object_set_new(rec, "lastTransitionAt", json_integer(sbxd_now_ms()));
}

/* The API's Snapshot. */
static json_t *snapshot_json(json_t *rec)
{
  json_t *j = json_pack("{s:O,s:O}", "id", json_object_get(rec, "id"), "sandboxId",
                        json_object_get(rec, "sandboxId"));
  json_t *name = json_object_get(rec, "name");
  if (json_is_string(name))
    json_object_set(j, "name", name);
  json_object_set_new(
      j, "status",
      json_pack("{s:O,s:O,s:O,s:o}", "state", json_object_get(rec, "state"), "reason",
                json_object_get(rec, "reason"), "message", json_object_get(rec, "message"),
                "lastTransitionAt",
                sbxd_jtime(json_integer_value(json_object_get(rec, "lastTransitionAt")))));
  json_object_set_new(j, "createdAt",
                      sbxd_jtime(json_integer_value(json_object_get(rec, "createdAt"))));
  return j;
}

static bool image_present(const char *image)
{
  struct sbx_image_rootfs r;
  if (sbx__image_resolve(sbx_provider_home(srv.p), image, &r, NULL) < 0)
    return false;
  sbx__image_rootfs_free(&r);
  return true;
}

/* Every record; sorted newest first. */
static json_t *load_all(void)
{
  json_t *all = json_array();
  cleanup_free char *d = dir_path();
  DIR *dir = opendir(d);
  if (dir == NULL)
    return all;
  struct dirent *de;
  while ((de = readdir(dir))) {
    size_t n = strlen(de->d_name);
    if (n != 41 || strcmp(de->d_name + 36, ".json") != 0)
      continue;
    char id[37];
    memcpy(id, de->d_name, 36);
    id[36] = '\0';
    json_t *rec = load(id);
    if (rec)
      json_array_append_new(all, rec);
  }
  closedir(dir);
  /* insertion sort by createdAt, newest first (a handful of records) */
  for (size_t i = 1; i < json_array_size(all); i++)
    for (size_t k = i; k > 0; k--) {
      json_t *a = json_array_get(all, k - 1), *b = json_array_get(all, k);
      if (json_integer_value(json_object_get(a, "createdAt")) >=
          json_integer_value(json_object_get(b, "createdAt")))
        break;
      json_incref(a);
      json_array_set(all, k - 1, b);
      json_array_set_new(all, k, a);
    }
  return all;
}

/* What an sbxd that stopped left in between (its worker died with it). */
static void recover(void)
{
  pthread_mutex_lock(&mu);
  json_t *all = load_all();
  size_t i;
  json_t *rec;
  json_array_foreach(all, i, rec)
  {
    const char *st = state_of(rec);
    const char *image = json_string_value(json_object_get(rec, "image"));
    if (strcmp(st, "Creating") == 0) {
      if (image_present(image))
        set_state(rec, "Ready", "snapshot_recovery_ready",
                  "Recovered snapshot image after server restart.");
      else
        set_state(rec, "Failed", "snapshot_recovery_missing_image",
                  "Snapshot creation was interrupted and no snapshot image was found.");
      save(rec);
    } else if (strcmp(st, "Deleting") == 0) {
      sbx_error_t err = NULL;
      if (!image_present(image) ||
          sbx__image_remove(sbx_provider_home(srv.p), image, false, &err) == 0)
        drop(json_string_value(json_object_get(rec, "id")));
      sbx_error_release(&err);
    }
  }
  json_decref(all);
  pthread_mutex_unlock(&mu);
}

static void ensure_recovered(void)
{
  pthread_once(&recovered, recover);
}

/* ---- the worker ---- */

struct job {
  char id[37];
  char sandbox[17];
  char *image;
};

static void *commit_main(void *arg)
{
  struct job *jb = arg;
  sbx_error_t err = NULL;
  char *digest = NULL;
  uint64_t t0 = sbx__now_ms();
  int r = sbx_commit(srv.p, jb->sandbox, jb->image, &digest, &err);
  pthread_mutex_lock(&mu);
  json_t *rec = load(jb->id);
  if (rec == NULL || strcmp(state_of(rec), "Deleting") == 0) {
    /* deleted while it was made: the image goes too */
    if (r == 0)
      sbx__image_remove(sbx_provider_home(srv.p), jb->image, false, NULL);
    if (rec)
      drop(jb->id);
  } else if (r == 0) {
    set_state(rec, "Ready", "snapshot_runtime_ready", "Snapshot image created successfully.");
    json_object_set_new(rec, "digest", json_string(digest));
    save(rec);
  } else {
    set_state(rec, "Failed", "snapshot_runtime_failed", err->msg);
    save(rec);
  }
  pthread_mutex_unlock(&mu);
  sbxd_log_json(r == 0 ? SBXD_INFO : SBXD_WARN, r == 0 ? "snapshot ready" : "snapshot failed",
                json_pack("{s:s,s:s,s:s,s:s?,s:I}", "snapshot_id", jb->id, "sandbox_id",
                          jb->sandbox, "image", jb->image, "error", r == 0 ? NULL : err->msg, "ms",
                          (json_int_t) (sbx__now_ms() - t0)));
  json_decref(rec);
  sbx_error_release(&err);
  free(digest);
  free(jb->image);
  free(jb);
  sbxd_worker_done();
  return NULL;
}

/* A thread of its own with the default stack: the commit walks the sandbox's tree. */
static int spawn_commit(struct job *jb)
{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 8u << 20);
  pthread_t t;
  sbxd_worker_start();
  int r = pthread_create(&t, &attr, commit_main, jb);
  pthread_attr_destroy(&attr);
  if (r != 0)
    sbxd_worker_done();
  return r == 0 ? 0 : -1;
}

/* ---- the handlers ---- */

/* Whether the box's sandbox runs the `host` image (no writable root: nothing to snapshot). */
static bool box_on_host(struct box *b)
{
  pthread_mutex_lock(&b->lock);
  const char *uri = json_string_value(json_object_get(b->extra, "image"));
  bool snap = json_is_string(json_object_get(b->extra, "snapshotId"));
  bool host = !snap && (uri == NULL || strcmp(uri, "host") == 0);
  for (size_t i = 0; !snap && uri && i < srv.cfg->n_images; i++)
    if (strcmp(srv.cfg->images[i].name, uri) == 0)
      host = strcmp(srv.cfg->images[i].target, "host") == 0;
  pthread_mutex_unlock(&b->lock);
  return host;
}

static enum MHD_Result create(struct req *r, const char *sandbox)
{
  json_auto_t *body = NULL;
  enum MHD_Result ret;
  if (r->body.len > 0) {
    body = sbxd_body_json(r, SBXD_JSON_LIFECYCLE, SBXD_WANT_ANY, &ret);
    if (body == NULL)
      return ret;
    if (!json_is_object(body))
      return sbxd_error(r, 422, VALIDATION, "body: Input should be a valid dictionary");
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
      if (strcmp(k, "name") != 0)
        return sbxd_error(r, 422, VALIDATION, "body.%s: Extra inputs are not permitted", k);
    }
  }
  json_t *name = json_object_get(body, "name");
  if (name && !json_is_null(name) && (!json_is_string(name) || json_string_length(name) == 0))
    return sbxd_error(r, 422, VALIDATION, "body.name: String should have at least 1 character");
  struct box *b = box_get_kind(sandbox, BOX_MANAGED);
  if (b == NULL)
    return sbxd_error(r, 404, "DOCKER::SANDBOX_NOT_FOUND", "Sandbox %s not found.", sandbox);
  bool paused = box_paused(b), host = box_on_host(b);
  box_put(b);
  if (paused)
    return sbxd_error(r, 409, "SNAPSHOT::INVALID_SOURCE_STATE",
                      "Snapshot can only be created from a Running sandbox.");
  if (host)
    return sbxd_error(r, 501, "SNAPSHOT::NOT_IMPLEMENTED",
                      "Sandbox %s runs the `host` image (the host's /usr, read-only): it has no "
                      "writable root to snapshot. Create it from an image of the store.",
                      sandbox);
  ensure_recovered();
  cleanup_free char *id = uuid4();
  int64_t now = sbxd_now_ms();
  json_auto_t *rec = json_pack("{s:s,s:s,s:s+,s:I}", "id", id, "sandboxId", sandbox, "image",
                               SNAP_REPO ":", id, "createdAt", (json_int_t) now);
  if (json_is_string(name))
    json_object_set(rec, "name", name);
  set_state(rec, "Creating", "snapshot_accepted", "Snapshot creation accepted.");
  pthread_mutex_lock(&mu);
  int saved = save(rec);
  pthread_mutex_unlock(&mu);
  if (saved < 0)
    return sbxd_error(r, 500, "SNAPSHOT::CREATE_FAILED", "record the snapshot: %s",
                      strerror(errno));
  struct job *jb = xzalloc(sizeof *jb);
  memcpy(jb->id, id, sizeof jb->id);
  snprintf(jb->sandbox, sizeof jb->sandbox, "%s", sandbox);
  jb->image = xstrdup(json_string_value(json_object_get(rec, "image")));
  if (spawn_commit(jb) < 0) {
    free(jb->image);
    free(jb);
    pthread_mutex_lock(&mu);
    set_state(rec, "Failed", "snapshot_runtime_failed", "could not start the snapshot worker");
    save(rec);
    pthread_mutex_unlock(&mu);
  }
  sbxd_log_json(
      SBXD_INFO, "snapshot accepted",
      json_pack("{s:s,s:s,s:s}", "request_id", r->rid, "snapshot_id", id, "sandbox_id", sandbox));
  return sbxd_json(r, 202, snapshot_json(rec));
}

static enum MHD_Result list(struct req *r)
{
  int64_t page = 1, size = 20;
  const char *q;
  if ((q = sbxd_query(r, "page")) && (!sbxd_parse_i64(q, &page) || page < 1))
    return sbxd_error(r, 422, VALIDATION, "query.page: Input should be an integer >= 1");
  if ((q = sbxd_query(r, "pageSize")) && (!sbxd_parse_i64(q, &size) || size < 1 || size > 200))
    return sbxd_error(r, 422, VALIDATION,
                      "query.pageSize: Input should be an integer between 1 and 200");
  const char *states[64];
  size_t n_states = sbxd_query_all(r, "state", states, ARRAY_SIZE(states));
  const char *sandbox = sbxd_query(r, "sandboxId");
  const char *name = sbxd_query(r, "name"); /* not in the spec; the SDK's listSnapshots sends it */
  ensure_recovered();
  pthread_mutex_lock(&mu);
  json_t *all = load_all();
  pthread_mutex_unlock(&mu);
  json_t *items = json_array();
  int64_t total = 0;
  size_t i;
  json_t *rec;
  json_array_foreach(all, i, rec)
  {
    bool ok = n_states == 0;
    for (size_t k = 0; k < n_states && !ok; k++)
      ok = strcasecmp(states[k], state_of(rec)) == 0;
    if (ok && sandbox && *sandbox)
      ok = strcmp(sandbox, json_string_value(json_object_get(rec, "sandboxId")) ?: "") == 0;
    if (ok && name)
      ok = strcmp(name, json_string_value(json_object_get(rec, "name")) ?: "") == 0;
    if (!ok)
      continue;
    total++;
    if (total > (page - 1) * size && total <= page * size)
      json_array_append_new(items, snapshot_json(rec));
  }
  json_decref(all);
  int64_t pages = (total + size - 1) / size;
  json_t *pag = json_pack("{s:I,s:I,s:I,s:I,s:b}", "page", (json_int_t) page, "pageSize",
                          (json_int_t) size, "totalItems", (json_int_t) total, "totalPages",
                          (json_int_t) pages, "hasNextPage", page < pages);
  return sbxd_json(r, 200, json_pack("{s:o,s:o}", "items", items, "pagination", pag));
}

static enum MHD_Result get_one(struct req *r, const char *id)
{
  ensure_recovered();
  pthread_mutex_lock(&mu);
  json_t *rec = load(id);
  pthread_mutex_unlock(&mu);
  if (rec == NULL)
    return sbxd_error(r, 404, NOT_FOUND, "Snapshot %s not found", id);
  enum MHD_Result ret = sbxd_json(r, 200, snapshot_json(rec));
  json_decref(rec);
  return ret;
}

static enum MHD_Result delete_one(struct req *r, const char *id)
{
  ensure_recovered();
  pthread_mutex_lock(&mu);
  json_auto_t *rec = load(id);
  if (rec == NULL) {
    pthread_mutex_unlock(&mu);
    return sbxd_error(r, 404, NOT_FOUND, "Snapshot %s not found", id);
  }
  if (strcmp(state_of(rec), "Creating") == 0) {
    pthread_mutex_unlock(&mu);
    return sbxd_error(r, 409, "SNAPSHOT::INVALID_STATE",
                      "Snapshot %s is still being created and cannot be deleted", id);
  }
  json_auto_t *before = json_deep_copy(rec);
  set_state(rec, "Deleting", "snapshot_delete_requested", "Snapshot deletion requested.");
  save(rec);
  const char *image = json_string_value(json_object_get(rec, "image"));
  sbx_error_t err = NULL;
  int rc =
      image_present(image) ? sbx__image_remove(sbx_provider_home(srv.p), image, false, &err) : 0;
  enum MHD_Result ret;
  if (rc == 0) {
    drop(id);
    ret = sbxd_empty(r, 204);
  } else {
    /* the image stays (a sandbox made from it uses it): so does the snapshot, as it was */
    save(before);
    ret = err->kind == SBX_E_BUSY
              ? sbxd_error(r, 409, "SNAPSHOT::DELETE_CONFLICT",
                           "snapshot image cannot be deleted due to a conflict: %s", err->msg)
              : sbxd_error(r, 500, "DOCKER::SNAPSHOT_IMAGE_REMOVE_FAILED",
                           "Failed to delete snapshot image %s: %s", image, err->msg);
    sbx_error_release(&err);
  }
  pthread_mutex_unlock(&mu);
  return ret;
}

enum MHD_Result h_snapshot_create(struct req *r)
{
  return create(r, sbxd_param(r, "id"));
}

enum MHD_Result h_snapshot_list(struct req *r)
{
  return list(r);
}

enum MHD_Result h_snapshot_get(struct req *r)
{
  return get_one(r, sbxd_param(r, "sid"));
}

enum MHD_Result h_snapshot_delete(struct req *r)
{
  return delete_one(r, sbxd_param(r, "sid"));
}

int snapshots_restore_image(const char *id, char **image, unsigned *status, const char **code,
                            char **msg)
{
  ensure_recovered();
  pthread_mutex_lock(&mu);
  json_auto_t *rec = load(id);
  pthread_mutex_unlock(&mu);
  if (rec == NULL) {
    *status = 404;
    *code = NOT_FOUND;
    *msg = xasprintf("Snapshot %s not found", id);
    return -1;
  }
  if (strcmp(state_of(rec), "Ready") != 0) {
    *status = 409;
    *code = "SNAPSHOT::NOT_READY";
    *msg = xasprintf("Snapshot %s is not ready for restore.", id);
    return -1;
  }
  const char *img = json_string_value(json_object_get(rec, "image"));
  if (img == NULL || !image_present(img)) {
    *status = 409;
    *code = "SNAPSHOT::INVALID_RESTORE_CONFIG";
    *msg = xasprintf("Snapshot %s does not have a restorable image.", id);
    return -1;
  }
  *image = xstrdup(img);
  return 0;
}
