/* execd's /files and /directories routes.
 *
 * Uploads stream: the multipart parser hands each file part's bytes to a socketpair read by a
 * worker thread that runs sbx_write_file_mode (an atomic replace inside the sandbox), so a file
 * of any size passes through in bounded memory. If the upload is cut short (client gone,
 * malformed body) the partial file must not be committed: the library commits on EOF and
 * discards on a read error, so the stream is aborted by closing our end with unread data queued
 * on it, which makes the worker's next read fail with ECONNRESET instead of returning EOF.
 * Downloads stream the other way through a pipe. */
#include "sbxd.h"
#include "multipart.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>

#define META_MAX (64u << 10)

/* ---- owners ---- */

static void load_names(struct box *b, const char *file, sbx_strv_t *out)
{
  cleanup_close int fd = memfd_create("sbxd-names", MFD_CLOEXEC);
  if (fd < 0 || sbx_read_range(b->sb, file, 0, 1u << 20, fd, NULL, NULL, NULL) < 0)
    return;
  off_t size = lseek(fd, 0, SEEK_END);
  if (size <= 0)
    return;
  cleanup_free char *text = xmalloc((size_t) size + 1);
  if (pread(fd, text, (size_t) size, 0) != size)
    return;
  text[size] = '\0';
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char *f1 = strchr(line, ':');
    char *f2 = f1 ? strchr(f1 + 1, ':') : NULL;
    if (f2 == NULL)
      continue;
    *f1 = '\0';
    sbx_strv_push_owned(out, xasprintf("%s:%ld", line, strtol(f2 + 1, NULL, 10)));
  }
}

char *sbxd_owner_name(struct box *b, unsigned id, bool group)
{
  pthread_mutex_lock(&b->lock);
  bool loaded = b->names_loaded;
  pthread_mutex_unlock(&b->lock);
  if (!loaded) {
    sbx_strv_t users = {0}, groups = {0};
    load_names(b, "/etc/passwd", &users);
    load_names(b, "/etc/group", &groups);
    pthread_mutex_lock(&b->lock);
    if (!b->names_loaded) {
      b->users = users;
      b->groups = groups;
      b->names_loaded = true;
    } else {
      sbx_strv_free(&users);
      sbx_strv_free(&groups);
    }
    pthread_mutex_unlock(&b->lock);
  }
  char *name = NULL;
  pthread_mutex_lock(&b->lock);
  sbx_strv_t *v = group ? &b->groups : &b->users;
  char want[24];
  snprintf(want, sizeof want, ":%u", id);
  for (size_t i = 0; i < v->n && name == NULL; i++)
    if (sbx_str_has_suffix(v->v[i], want))
      name = xstrndup(v->v[i], strlen(v->v[i]) - strlen(want));
  pthread_mutex_unlock(&b->lock);
  return name ? name : xasprintf("%u", id);
}

json_t *sbxd_file_info_json(struct box *b, const struct sbx_file_info *fi, const char *path)
{
  const char *type = fi->type == 'f'   ? "file"
                     : fi->type == 'd' ? "directory"
                     : fi->type == 'l' ? "symlink"
                                       : "other";
  char mt[40], ct[40];
  sbxd_time_format_ns(fi->mtime_ns, mt);
  sbxd_time_format_ns(fi->ctime_ns, ct);
  cleanup_free char *owner = sbxd_owner_name(b, fi->uid, false);
  cleanup_free char *group = sbxd_owner_name(b, fi->gid, true);
  const char *p = path ? path : fi->path;
  json_t *j = json_object();
  json_object_set_new(j, "path", sbxd_jstr(p, strlen(p)));
  json_object_set_new(j, "type", json_string(type));
  json_object_set_new(j, "size", json_integer((json_int_t) fi->size));
  json_object_set_new(j, "modified_at", json_string(mt));
  json_object_set_new(j, "created_at", json_string(ct));
  json_object_set_new(j, "owner", sbxd_jstr(owner, strlen(owner)));
  json_object_set_new(j, "group", sbxd_jstr(group, strlen(group)));
  json_object_set_new(j, "mode", json_integer((json_int_t) sbxd_mode_to_decimal(fi->mode)));
  return j;
}

/* ---- errors ---- */

static enum MHD_Result file_error(struct req *r, sbx_error_t *err, const char *path)
{
  int kind = (*err)->kind;
  enum MHD_Result ret;
  if (kind == SBX_E_NOT_FOUND)
    ret = sbxd_error(r, 404, "FILE_NOT_FOUND", "file not found. %s", (*err)->msg);
  else if (kind == SBX_E_INVALID || kind == SBX_E_DENIED || kind == SBX_E_NOT_DIR ||
           kind == SBX_E_NOT_TEXT)
    ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY", "%s", (*err)->msg);
  else
    ret = sbxd_error(r, sbxd_kind_status(kind) >= 500 ? sbxd_kind_status(kind) : 500,
                     "RUNTIME_ERROR", "error on %s: %s", path ? path : "", (*err)->msg);
  sbx_error_release(err);
  return ret;
}

static enum MHD_Result missing_query(struct req *r, const char *name)
{
  return sbxd_error(r, 400, "MISSING_QUERY", "missing query parameter '%s'", name);
}

static json_t *json_body(struct req *r, bool want_array, enum MHD_Result *ret)
{
  json_error_t je;
  json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &je);
  if (j == NULL || (want_array ? !json_is_array(j) : !json_is_object(j))) {
    json_decref(j);
    *ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                      "error parsing request, MAYBE invalid body format. %s",
                      j == NULL    ? je.text
                      : want_array ? "expected a JSON array"
                                   : "expected a JSON object");
    return NULL;
  }
  return j;
}

#define MAX_PATHS 256

static size_t query_paths(struct req *r, const char **paths)
{
  return sbxd_query_all(r, "path", paths, MAX_PATHS);
}

/* ---- /files/info, DELETE /files, mv, permissions, search, replace ---- */

static enum MHD_Result h_info(struct req *r)
{
  const char *paths[MAX_PATHS];
  size_t n = query_paths(r, paths);
  json_t *out = json_object();
  for (size_t i = 0; i < n; i++) {
    cleanup_free char *p = sbxd_path_clean(paths[i]);
    struct sbx_file_info fi;
    sbx_error_t err = NULL;
    if (p == NULL) {
      json_decref(out);
      return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "empty path");
    }
    if (sbx_stat(r->box->sb, p, &fi, &err) < 0) {
      json_decref(out);
      return file_error(r, &err, p);
    }
    json_object_set_new(out, paths[i], sbxd_file_info_json(r->box, &fi, p));
    free(fi.path);
  }
  return sbxd_json(r, 200, out);
}

static enum MHD_Result h_delete_files(struct req *r)
{
  const char *paths[MAX_PATHS];
  size_t n = query_paths(r, paths);
  for (size_t i = 0; i < n; i++) {
    cleanup_free char *p = sbxd_path_clean(paths[i]);
    sbx_error_t err = NULL;
    if (p == NULL)
      continue;
    if (sbx_remove(r->box->sb, p, 0, &err) < 0) {
      if (err->kind == SBX_E_NOT_FOUND) {
        sbx_error_release(&err);
        continue;
      }
      enum MHD_Result ret =
          sbxd_error(r, 500, "RUNTIME_ERROR", "error removing file %s: %s", p, err->msg);
      sbx_error_release(&err);
      return ret;
    }
  }
  return sbxd_empty(r, 200);
}

static enum MHD_Result h_mv(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = json_body(r, true, &ret);
  if (body == NULL)
    return ret;
  size_t i;
  json_t *it;
  json_array_foreach(body, i, it)
  {
    const char *src = json_string_value(json_object_get(it, "src"));
    const char *dst = json_string_value(json_object_get(it, "dest"));
    if (src == NULL || dst == NULL || !*src || !*dst) {
      json_decref(body);
      return sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                        "each move needs non-empty 'src' and 'dest' strings");
    }
  }
  json_array_foreach(body, i, it)
  {
    cleanup_free char *src = sbxd_path_clean(json_string_value(json_object_get(it, "src")));
    cleanup_free char *dst = sbxd_path_clean(json_string_value(json_object_get(it, "dest")));
    sbx_error_t err = NULL;
    if (sbx_rename(r->box->sb, src, dst, &err) < 0) {
      json_decref(body);
      if (err->kind == SBX_E_NOT_FOUND)
        return file_error(r, &err, src);
      ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error moving %s to %s: %s", src, dst, err->msg);
      sbx_error_release(&err);
      return ret;
    }
  }
  json_decref(body);
  return sbxd_empty(r, 200);
}

/* {"<path>": {"mode", "owner"?, "group"?}} entries, validated before anything changes. */
static int perm_entry(json_t *v, unsigned *mode, const char **owner, const char **group,
                      const char **bad)
{
  if (!json_is_object(v)) {
    *bad = "each entry must be an object";
    return -1;
  }
  json_t *m = json_object_get(v, "mode"), *o = json_object_get(v, "owner"),
         *gr = json_object_get(v, "group");
  *mode = 0;
  if (m && !json_is_null(m) &&
      (!json_is_integer(m) || sbxd_mode_from_decimal(json_integer_value(m), mode) < 0)) {
    *bad = "mode must be octal digits written in decimal, e.g. 755";
    return -1;
  }
  if ((o && !json_is_null(o) && !json_is_string(o)) ||
      (gr && !json_is_null(gr) && !json_is_string(gr))) {
    *bad = "owner and group must be strings";
    return -1;
  }
  *owner = json_string_value(o);
  *group = json_string_value(gr);
  if (*owner && !**owner)
    *owner = NULL;
  if (*group && !**group)
    *group = NULL;
  return 0;
}

/* Checks every entry of a {path: {mode?, owner?, group?}} body before any is applied; a bad
 * one is answered 400 (and the body released). */
static bool perm_body_valid(struct req *r, json_t *body, enum MHD_Result *ret)
{
  const char *k, *owner, *group, *bad = NULL;
  json_t *v;
  unsigned mode;
  json_object_foreach(body, k, v)
  {
    if (perm_entry(v, &mode, &owner, &group, &bad) < 0) {
      *ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY", "%s: %s", k, bad);
      json_decref(body);
      return false;
    }
  }
  return true;
}

static enum MHD_Result h_permissions(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = json_body(r, false, &ret);
  if (body == NULL)
    return ret;
  if (!perm_body_valid(r, body, &ret))
    return ret;
  const char *k, *owner, *group, *bad = NULL;
  json_t *v;
  unsigned mode;
  json_object_foreach(body, k, v)
  {
    perm_entry(v, &mode, &owner, &group, &bad);
    cleanup_free char *p = sbxd_path_clean(k);
    sbx_error_t err = NULL;
    if (p == NULL || sbx_chmod(r->box->sb, p, mode, owner, group, &err) < 0) {
      if (err && err->kind == SBX_E_NOT_FOUND)
        ret = file_error(r, &err, p);
      else
        ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error changing permissions of %s: %s", k,
                         err ? err->msg : "empty path");
      sbx_error_release(&err);
      json_decref(body);
      return ret;
    }
  }
  json_decref(body);
  return sbxd_empty(r, 200);
}

static enum MHD_Result h_search(struct req *r)
{
  const char *path = sbxd_query(r, "path");
  if (path == NULL || *path == '\0')
    return missing_query(r, "path");
  const char *pattern = sbxd_query(r, "pattern");
  if (pattern == NULL || *pattern == '\0')
    pattern = "**";
  cleanup_free char *p = sbxd_path_clean(path);
  struct sbx_file_info *v = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (sbx_find(r->box->sb, p, pattern, &v, &n, &err) < 0)
    return file_error(r, &err, p);
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(out, sbxd_file_info_json(r->box, &v[i], NULL));
  sbx_file_infos_free(v, n);
  return sbxd_json(r, 200, out);
}

static enum MHD_Result h_replace(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = json_body(r, false, &ret);
  if (body == NULL)
    return ret;
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v)
  {
    const char *old = json_string_value(json_object_get(v, "old"));
    json_t *nw = json_object_get(v, "new");
    if (old == NULL || *old == '\0' || (nw && !json_is_null(nw) && !json_is_string(nw))) {
      ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                       "%s: 'old' must be a non-empty string and 'new' a string", k);
      json_decref(body);
      return ret;
    }
  }
  const char *verbose = sbxd_query(r, "verbose");
  bool detailed = verbose && (strcasecmp(verbose, "true") == 0 || strcmp(verbose, "1") == 0);
  json_t *out = json_object();
  json_object_foreach(body, k, v)
  {
    const char *old = json_string_value(json_object_get(v, "old"));
    const char *nw = json_string_value(json_object_get(v, "new"));
    if (nw == NULL)
      nw = "";
    cleanup_free char *p = sbxd_path_clean(k);
    uint64_t count = 0;
    sbx_error_t err = NULL;
    if (sbx_replace(r->box->sb, p, old, strlen(old), nw, strlen(nw), &count, &err) < 0) {
      json_decref(out);
      json_decref(body);
      return file_error(r, &err, p);
    }
    json_object_set_new(out, k, json_pack("{s:I}", "replacedCount", (json_int_t) count));
  }
  json_decref(body);
  if (!detailed) {
    json_decref(out);
    return sbxd_empty(r, 200);
  }
  return sbxd_json(r, 200, out);
}

/* ---- directories ---- */

static enum MHD_Result h_list_dir(struct req *r)
{
  const char *path = sbxd_query(r, "path");
  if (path == NULL || *path == '\0')
    return missing_query(r, "path");
  const char *ds = sbxd_query(r, "depth");
  int64_t depth = 1;
  if (ds && *ds && (!sbxd_parse_i64(ds, &depth) || depth < 0 || depth > 64))
    return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "depth must be an integer from 0 to 64");
  cleanup_free char *p = sbxd_path_clean(path);
  struct sbx_file_info fi;
  sbx_error_t err = NULL;
  if (sbx_stat(r->box->sb, p, &fi, &err) < 0)
    return file_error(r, &err, p);
  free(fi.path);
  if (fi.type != 'd')
    return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "%s is %s, not a directory", p,
                      fi.type == 'l' ? "a symbolic link" : "a file");
  if (depth == 0)
    return sbxd_json(r, 200, json_array());
  struct sbx_file_info *v = NULL;
  size_t n = 0;
  if (sbx_readdir(r->box->sb, p, (int) depth, &v, &n, &err) < 0)
    return file_error(r, &err, p);
  json_t *out = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(out, sbxd_file_info_json(r->box, &v[i], NULL));
  sbx_file_infos_free(v, n);
  return sbxd_json(r, 200, out);
}

static enum MHD_Result h_mkdir(struct req *r)
{
  enum MHD_Result ret;
  json_t *body = json_body(r, false, &ret);
  if (body == NULL)
    return ret;
  if (!perm_body_valid(r, body, &ret))
    return ret;
  const char *k, *owner, *group, *bad = NULL;
  json_t *v;
  unsigned mode;
  json_object_foreach(body, k, v)
  {
    perm_entry(v, &mode, &owner, &group, &bad);
    cleanup_free char *p = sbxd_path_clean(k);
    bool created = false;
    sbx_error_t err = NULL;
    if (p == NULL || sbx_mkdir(r->box->sb, p, mode ? mode : 0755, &created, &err) < 0 ||
        (created && (owner || group) && sbx_chmod(r->box->sb, p, 0, owner, group, &err) < 0)) {
      ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error creating directory %s: %s", k,
                       err ? err->msg : "empty path");
      sbx_error_release(&err);
      json_decref(body);
      return ret;
    }
  }
  json_decref(body);
  return sbxd_empty(r, 200);
}

static enum MHD_Result h_rmdir(struct req *r)
{
  const char *paths[MAX_PATHS];
  size_t n = query_paths(r, paths);
  for (size_t i = 0; i < n; i++) {
    cleanup_free char *p = sbxd_path_clean(paths[i]);
    sbx_error_t err = NULL;
    if (p == NULL)
      continue;
    if (sbx_remove(r->box->sb, p, SBX_RM_DIR | SBX_RM_RECURSIVE, &err) < 0) {
      if (err->kind == SBX_E_NOT_FOUND) {
        sbx_error_release(&err);
        continue;
      }
      enum MHD_Result ret =
          sbxd_error(r, 500, "RUNTIME_ERROR", "error removing directory %s: %s", p, err->msg);
      sbx_error_release(&err);
      return ret;
    }
  }
  return sbxd_empty(r, 200);
}

/* ---- download ---- */

struct dl {
  struct box *b;
  char *path;
  uint64_t off, len;
  int fd;
};

static void *dl_main(void *arg)
{
  struct dl *d = arg;
  sbx_error_t err = NULL;
  if (sbx_read_range(d->b->sb, d->path, d->off, d->len, d->fd, NULL, NULL, &err) < 0) {
    sbxd_log(SBXD_DEBUG, "download %s: %s", d->path, err->msg);
    sbx_error_release(&err);
  }
  close(d->fd);
  box_put(d->b);
  free(d->path);
  free(d);
  sbxd_worker_done();
  return NULL;
}

static void add_disposition(struct MHD_Response *resp, const char *path)
{
  const char *base = strrchr(path, '/');
  base = base && base[1] ? base + 1 : path;
  bool plain = true;
  for (const char *c = base; *c; c++)
    if ((unsigned char) *c < 32 || (unsigned char) *c >= 127 || *c == '"' || *c == '\\')
      plain = false;
  cleanup_free char *v = NULL;
  if (plain) {
    v = xasprintf("attachment; filename=\"%s\"", base);
  } else {
    sbx_buf_t b = {0};
    sbx_buf_puts(&b, "attachment; filename=\"download\"; filename*=UTF-8''");
    for (const unsigned char *c = (const unsigned char *) base; *c; c++) {
      if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          strchr("-._~", *c))
        sbx_buf_putc(&b, (char) *c);
      else
        sbx_buf_printf(&b, "%%%02X", *c);
    }
    v = sbx_buf_steal(&b);
  }
  MHD_add_response_header(resp, "Content-Disposition", v);
}

static int got_size(void *arg, uint64_t size)
{
  *(uint64_t *) arg = size;
  return 1; /* that is all we wanted: cancel the read */
}

static enum MHD_Result h_download(struct req *r)
{
  const char *path = sbxd_query(r, "path");
  if (path == NULL || *path == '\0')
    return missing_query(r, "path");
  cleanup_free char *p = sbxd_path_clean(path);
  const char *range = sbxd_header(r, "Range");
  const char *os = sbxd_query(r, "offset"), *ls = sbxd_query(r, "limit");
  int64_t off = 0, lim = 0;
  if ((os && (!sbxd_parse_i64(os, &off) || off < 1)) ||
      (ls && (!sbxd_parse_i64(ls, &lim) || lim < 1)))
    return sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                      "offset and limit must be integers >= 1 (lines)");
  sbx_error_t err = NULL;
  struct sbx_file_info fi;
  if (sbx_stat(r->box->sb, p, &fi, &err) < 0)
    return file_error(r, &err, p);
  free(fi.path);
  if (fi.type == 'l') {
    /* stat describes the link itself (its size is the target's name's length): ask the file
     * read through it for its size, which also refuses what cannot be read (a dangling or
     * magic link, a directory) now rather than after a 200 */
    uint64_t size = UINT64_MAX;
    cleanup_close int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (sbx_read_range(r->box->sb, p, 0, 1, null, got_size, &size, &err) < 0 &&
        size == UINT64_MAX) {
      if (err->kind == SBX_E_IS_DIR) {
        sbx_error_release(&err);
        return sbxd_error(r, 400, "INVALID_FILE", "%s is a directory", p);
      }
      return file_error(r, &err, p);
    }
    sbx_error_release(&err);
    fi.type = 'f';
    fi.size = size;
  }
  if (fi.type == 'd')
    return sbxd_error(r, 400, "INVALID_FILE", "%s is a directory", p);
  if (os || ls) {
    if (range)
      return sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                        "a Range header cannot be combined with offset/limit");
    int64_t start = os ? off : 1;
    int64_t end = ls ? start + lim - 1 : SBX_LINE_NONE;
    char *text = NULL;
    size_t len = 0;
    if (sbx_read_file(r->box->sb, p, start, end, &text, &len, &err) < 0)
      return file_error(r, &err, p);
    enum MHD_Result ret = sbxd_text(r, 200, "text/plain; charset=utf-8", text, len);
    free(text);
    return ret;
  }
  uint64_t offset = 0, length = fi.size;
  int rr = sbxd_range_parse(range, fi.size, &offset, &length);
  if (rr == SBXD_RANGE_BAD)
    return sbxd_error(r, 416, "UNKNOWN", "invalid range: %s", range);
  if (rr == SBXD_RANGE_UNSATISFIABLE) {
    json_t *j = json_pack("{s:s,s:s}", "code", "UNKNOWN", "message", "range not satisfiable");
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
    char cr[64];
    snprintf(cr, sizeof cr, "bytes */%llu", (unsigned long long) fi.size);
    MHD_add_response_header(resp, "Content-Range", cr);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    return sbxd_respond(r, 416, resp);
  }
  struct MHD_Response *resp;
  if (length == 0) {
    resp = MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
  } else {
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0)
      return sbxd_error(r, 500, "RUNTIME_ERROR", "pipe: %s", strerror(errno));
    fcntl(pfd[0], F_SETPIPE_SZ, 1 << 20);
    struct dl *d = xzalloc(sizeof *d);
    d->b = box_ref(r->box);
    d->path = xstrdup(p);
    d->off = offset;
    d->len = length;
    d->fd = pfd[1];
    sbxd_worker_start();
    if (sbxd_spawn(dl_main, d) < 0) {
      sbxd_worker_done();
      close(pfd[0]);
      close(pfd[1]);
      box_put(d->b);
      free(d->path);
      free(d);
      return sbxd_error(r, 500, "RUNTIME_ERROR", "cannot start a thread");
    }
    resp = fd_response(pfd[0], length);
  }
  if (resp == NULL)
    return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
  MHD_add_response_header(resp, "Accept-Ranges", "bytes");
  add_disposition(resp, p);
  if (rr == SBXD_RANGE_OK) {
    char cr[96];
    snprintf(cr, sizeof cr, "bytes %llu-%llu/%llu", (unsigned long long) offset,
             (unsigned long long) (offset + length - 1), (unsigned long long) fi.size);
    MHD_add_response_header(resp, "Content-Range", cr);
    return sbxd_respond(r, 206, resp);
  }
  return sbxd_respond(r, 200, resp);
}

/* ---- upload ---- */

struct writer {
  pthread_t thread;
  int rd, wr;
  struct box *b;
  char *path;
  unsigned mode;
  char *owner, *group;
  int rc;
  sbx_error_t err;
  bool broken; /* our writes failed: the worker stopped reading */
};

static void *writer_main(void *arg)
{
  struct writer *w = arg;
  w->rc = sbx_write_file_mode(w->b->sb, w->path, NULL, 0, w->rd, w->mode, &w->err);
  if (w->rc == 0 && (w->owner || w->group))
    w->rc = sbx_chmod(w->b->sb, w->path, 0, w->owner, w->group, &w->err);
  /* unblock a feeder still writing: its sends now fail instead of waiting for room */
  shutdown(w->rd, SHUT_RD);
  return NULL;
}

struct meta {
  char *path;
  unsigned mode;
  char *owner, *group;
};

struct upload {
  struct box *b;
  struct sbxd_mp mp;
  int part; /* 0 ignored, 1 metadata, 2 file */
  sbx_buf_t meta_buf;
  struct meta *metas;
  size_t n_metas, n_files;
  int *spool; /* a file part that came before its metadata, by file index (-1: none) */
  size_t n_spool;
  int spool_fd;
  struct writer *w;
  bool failed;
  unsigned status;
  char *code, *msg;
};

static void up_fail(struct upload *u, unsigned status, const char *code, char *msg)
{
  if (u->failed) {
    free(msg);
    return;
  }
  u->failed = true;
  u->status = status;
  u->code = xstrdup(code);
  u->msg = msg;
}

static void up_fail_lib(struct upload *u, sbx_error_t *err, const char *path)
{
  int kind = (*err)->kind;
  unsigned status = kind == SBX_E_NOT_FOUND ? 404 : sbxd_kind_status(kind);
  if (status < 400)
    status = 500;
  up_fail(u, status, status < 500 ? "INVALID_FILE" : "RUNTIME_ERROR",
          xasprintf("error writing %s: %s", path, (*err)->msg));
  sbx_error_release(err);
}

static void writer_free(struct writer *w)
{
  if (w->rd >= 0)
    close(w->rd);
  if (w->wr >= 0)
    close(w->wr);
  box_put(w->b);
  sbx_error_release(&w->err);
  free(w->path);
  free(w->owner);
  free(w->group);
  free(w);
}

static struct writer *writer_start(struct upload *u, const struct meta *m)
{
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return NULL;
  struct writer *w = xzalloc(sizeof *w);
  w->rd = sv[0];
  w->wr = sv[1];
  w->b = box_ref(u->b);
  w->path = xstrdup(m->path);
  w->mode = m->mode;
  w->owner = m->owner ? xstrdup(m->owner) : NULL;
  w->group = m->group ? xstrdup(m->group) : NULL;
  if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
    writer_free(w);
    return NULL;
  }
  return w;
}

/* Ends the current file: commit (EOF) or abort (a read error in the worker). */
static int writer_finish(struct writer *w, bool commit)
{
  if (!commit)
    (void) !send(w->rd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  close(w->wr);
  w->wr = -1;
  pthread_join(w->thread, NULL);
  return commit ? w->rc : -1;
}

static int send_all(int fd, const char *data, size_t len)
{
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    data += n;
    len -= (size_t) n;
  }
  return 0;
}

static void meta_free(struct meta *m)
{
  free(m->path);
  free(m->owner);
  free(m->group);
}

/* Writes a spooled file now that its metadata is known. */
static void write_spooled(struct upload *u, size_t idx)
{
  int fd = u->spool[idx];
  u->spool[idx] = -1;
  const struct meta *m = &u->metas[idx];
  sbx_error_t err = NULL;
  if (u->failed) {
    close(fd);
    return;
  }
  if (lseek(fd, 0, SEEK_SET) < 0 ||
      sbx_write_file_mode(u->b->sb, m->path, NULL, 0, fd, m->mode, &err) < 0 ||
      ((m->owner || m->group) && sbx_chmod(u->b->sb, m->path, 0, m->owner, m->group, &err) < 0)) {
    if (err)
      up_fail_lib(u, &err, m->path);
    else
      up_fail(u, 500, "RUNTIME_ERROR", xasprintf("spool: %s", strerror(errno)));
  }
  close(fd);
}

static int on_part_begin(void *arg, const struct sbxd_mp_part *p)
{
  struct upload *u = arg;
  u->part = 0;
  if (u->failed || p->name == NULL)
    return 0;
  if (strcmp(p->name, "metadata") == 0) {
    u->part = 1;
    u->meta_buf.len = 0;
    return 0;
  }
  if (strcmp(p->name, "file") != 0)
    return 0;
  u->part = 2;
  size_t idx = u->n_files++;
  if (idx < u->n_metas) {
    u->w = writer_start(u, &u->metas[idx]);
    if (u->w == NULL)
      up_fail(u, 500, "RUNTIME_ERROR", xasprintf("cannot start a writer: %s", strerror(errno)));
    return 0;
  }
  /* the file came before its metadata: keep it aside until the metadata arrives */
  u->spool_fd = open(g.home, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (u->spool_fd < 0)
    up_fail(u, 500, "RUNTIME_ERROR", xasprintf("cannot spool the upload: %s", strerror(errno)));
  return 0;
}

static int on_part_data(void *arg, const char *data, size_t len)
{
  struct upload *u = arg;
  if (u->failed)
    return 0;
  if (u->part == 1) {
    if (u->meta_buf.len + len > META_MAX) {
      up_fail(u, 400, "INVALID_FILE_METADATA",
              xasprintf("metadata is larger than %u bytes", META_MAX));
      return 0;
    }
    sbx_buf_append(&u->meta_buf, data, len);
  } else if (u->part == 2 && u->w && !u->w->broken) {
    if (send_all(u->w->wr, data, len) < 0)
      u->w->broken = true; /* the writer failed; its error is reported at the part's end */
  } else if (u->part == 2 && u->spool_fd >= 0) {
    if (sbx_write_all(u->spool_fd, data, len) < 0)
      up_fail(u, 500, "RUNTIME_ERROR", xasprintf("cannot spool the upload: %s", strerror(errno)));
  }
  return 0;
}

static int parse_meta(struct upload *u, struct meta *m)
{
  memset(m, 0, sizeof *m);
  json_error_t je;
  json_t *j = json_loadb(u->meta_buf.data ? u->meta_buf.data : "", u->meta_buf.len, 0, &je);
  const char *path = json_string_value(json_object_get(j, "path"));
  json_t *mode = json_object_get(j, "mode"), *o = json_object_get(j, "owner"),
         *gr = json_object_get(j, "group");
  const char *bad = NULL;
  if (!json_is_object(j))
    bad = "metadata must be a JSON object";
  else if (path == NULL || *path == '\0')
    bad = "metadata path is empty";
  else if (mode && !json_is_null(mode) &&
           (!json_is_integer(mode) ||
            sbxd_mode_from_decimal(json_integer_value(mode), &m->mode) < 0))
    bad = "metadata mode must be octal digits written in decimal, e.g. 644";
  else if ((o && !json_is_null(o) && !json_is_string(o)) ||
           (gr && !json_is_null(gr) && !json_is_string(gr)))
    bad = "metadata owner and group must be strings";
  if (bad) {
    up_fail(u, 400, "INVALID_FILE_METADATA",
            j == NULL ? xasprintf("invalid metadata: %s", je.text) : xstrdup(bad));
    json_decref(j);
    return -1;
  }
  m->path = sbxd_path_clean(path);
  if (json_string_value(o) && *json_string_value(o))
    m->owner = xstrdup(json_string_value(o));
  if (json_string_value(gr) && *json_string_value(gr))
    m->group = xstrdup(json_string_value(gr));
  json_decref(j);
  return 0;
}

static int on_part_end(void *arg)
{
  struct upload *u = arg;
  if (u->part == 1 && !u->failed) {
    struct meta m;
    if (parse_meta(u, &m) == 0) {
      u->metas = xreallocarray(u->metas, u->n_metas + 1, sizeof *u->metas);
      size_t idx = u->n_metas++;
      u->metas[idx] = m;
      if (idx < u->n_spool && u->spool[idx] >= 0)
        write_spooled(u, idx);
    }
  } else if (u->part == 2 && u->w) {
    struct writer *w = u->w;
    u->w = NULL;
    if (writer_finish(w, !u->failed) < 0 && !u->failed) {
      if (w->err)
        up_fail_lib(u, &w->err, w->path);
      else
        up_fail(u, 500, "RUNTIME_ERROR", xasprintf("error writing %s", w->path));
    }
    writer_free(w);
  } else if (u->part == 2 && u->spool_fd >= 0) {
    size_t idx = u->n_files - 1;
    if (idx >= u->n_spool) {
      u->spool = xreallocarray(u->spool, idx + 1, sizeof *u->spool);
      for (size_t i = u->n_spool; i <= idx; i++)
        u->spool[i] = -1;
      u->n_spool = idx + 1;
    }
    u->spool[idx] = u->spool_fd;
    u->spool_fd = -1;
  }
  u->part = 0;
  return 0;
}

static const struct sbxd_mp_callbacks up_cb = {on_part_begin, on_part_data, on_part_end};

static int up_body(struct req *r, const char *data, size_t len)
{
  struct upload *u = r->ctx;
  int rc = sbxd_mp_feed(&u->mp, data, len);
  if (rc == SBXD_MP_BAD)
    up_fail(u, 400, "INVALID_FILE", xasprintf("malformed multipart body: %s", u->mp.err));
  return 0;
}

static void up_cleanup(struct upload *u)
{
  if (u->w) {
    writer_finish(u->w, false);
    writer_free(u->w);
    u->w = NULL;
  }
  if (u->spool_fd >= 0)
    close(u->spool_fd);
  for (size_t i = 0; i < u->n_spool; i++)
    if (u->spool[i] >= 0)
      close(u->spool[i]);
  free(u->spool);
  for (size_t i = 0; i < u->n_metas; i++)
    meta_free(&u->metas[i]);
  free(u->metas);
  sbx_buf_free(&u->meta_buf);
  sbxd_mp_free(&u->mp);
  free(u->code);
  free(u->msg);
  free(u);
}

static void up_close(struct req *r, bool completed)
{
  (void) completed;
  if (r->ctx)
    up_cleanup(r->ctx);
  r->ctx = NULL;
}

static enum MHD_Result up_done(struct req *r)
{
  struct upload *u = r->ctx;
  if (!u->failed && sbxd_mp_finish(&u->mp) != SBXD_MP_OK)
    up_fail(u, 400, "INVALID_FILE", xasprintf("malformed multipart body: %s", u->mp.err));
  if (u->w) { /* the body ended inside a file part */
    writer_finish(u->w, false);
    writer_free(u->w);
    u->w = NULL;
  }
  if (!u->failed) {
    if (u->n_metas == 0)
      up_fail(u, 400, "INVALID_FILE_METADATA", xstrdup("metadata file is missing"));
    else if (u->n_files == 0)
      up_fail(u, 400, "INVALID_FILE_CONTENT", xstrdup("file is missing"));
    else if (u->n_metas != u->n_files)
      up_fail(u, 400, "INVALID_FILE",
              xasprintf("metadata and file parts do not pair up (%zu metadata, %zu files)",
                        u->n_metas, u->n_files));
  }
  if (u->failed)
    return sbxd_error(r, u->status, u->code, "%s", u->msg);
  return sbxd_empty(r, 200);
}

static enum MHD_Result up_begin(struct req *r)
{
  cleanup_free char *boundary = sbxd_mp_boundary(sbxd_header(r, "Content-Type"));
  if (boundary == NULL)
    return sbxd_error(r, 400, "INVALID_FILE",
                      "the upload must be multipart/form-data with a boundary");
  struct upload *u = xzalloc(sizeof *u);
  u->b = r->box;
  u->spool_fd = -1;
  sbxd_mp_init(&u->mp, boundary, &up_cb, u);
  r->ctx = u;
  r->on_body = up_body;
  r->on_close = up_close;
  r->done = up_done;
  r->body_max = SBXD_BODY_STREAM;
  return MHD_YES;
}

/* ---- dispatch ---- */

static enum MHD_Result later(struct req *r, req_fn fn, uint64_t cap)
{
  r->done = fn;
  r->body_max = cap;
  return MHD_YES;
}

enum MHD_Result sbxd_files_begin(struct req *r, const char *sub)
{
  const char *m = r->method;
  bool get = strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0, post = strcmp(m, "POST") == 0,
       del = strcmp(m, "DELETE") == 0;
  if (strcmp(sub, "/files") == 0 && del)
    return later(r, h_delete_files, 0);
  if (strcmp(sub, "/files/info") == 0 && get)
    return later(r, h_info, 0);
  if (strcmp(sub, "/files/mv") == 0 && post)
    return later(r, h_mv, SBXD_BODY_EXECD);
  if (strcmp(sub, "/files/permissions") == 0 && post)
    return later(r, h_permissions, SBXD_BODY_EXECD);
  if (strcmp(sub, "/files/search") == 0 && get)
    return later(r, h_search, 0);
  if (strcmp(sub, "/files/replace") == 0 && post)
    return later(r, h_replace, SBXD_BODY_EXECD);
  if (strcmp(sub, "/files/upload") == 0 && post)
    return up_begin(r);
  if (strcmp(sub, "/files/download") == 0 && get)
    return later(r, h_download, 0);
  if (strcmp(sub, "/directories/list") == 0 && get)
    return later(r, h_list_dir, 0);
  if (strcmp(sub, "/directories") == 0 && post)
    return later(r, h_mkdir, SBXD_BODY_EXECD);
  if (strcmp(sub, "/directories") == 0 && del)
    return later(r, h_rmdir, 0);
  return sbxd_error(r, 404, "NOT_FOUND", "no execd route for %s %s", m, sub);
}
