/* execd's /files and /directories routes but the upload (upload.c): info, delete, move,
 * permissions, search, replace, download (streamed through a pipe fed by a worker), list, make
 * and remove directories. */
#include "files.h"
#include "ctx.h"
#include "registry.h"
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

static json_t *file_info_json(struct box *b, const struct sbx_file_info *fi, const char *path)
{
  const char *type = fi->type == 'f'   ? "file"
                     : fi->type == 'd' ? "directory"
                     : fi->type == 'l' ? "symlink"
                                       : "other";
  char mt[40], ct[40];
  sbxd_time_format_ns(fi->mtime_ns, mt);
  sbxd_time_format_ns(fi->ctime_ns, ct);
  cleanup_free char *owner = box_owner_name(b, fi->uid, false);
  cleanup_free char *group = box_owner_name(b, fi->gid, true);
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

#define MAX_PATHS 256

static size_t query_paths(struct req *r, const char **paths)
{
  return sbxd_query_all(r, "path", paths, MAX_PATHS);
}

/* ---- /files/info, DELETE /files, mv, permissions, search, replace ---- */

enum MHD_Result h_files_info(struct req *r)
{
  const char *paths[MAX_PATHS];
  size_t n = query_paths(r, paths);
  json_auto_t *out = json_object();
  for (size_t i = 0; i < n; i++) {
    cleanup_free char *p = sbxd_path_clean(paths[i]);
    struct sbx_file_info fi;
    sbx_error_t err = NULL;
    if (p == NULL)
      return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "empty path");
    if (sbx_stat(r->box->sb, p, &fi, &err) < 0)
      return file_error(r, &err, p);
    json_object_set_new(out, paths[i], file_info_json(r->box, &fi, p));
    free(fi.path);
  }
  return sbxd_json(r, 200, steal_pointer(&out));
}

enum MHD_Result h_files_delete(struct req *r)
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

enum MHD_Result h_files_mv(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_ARRAY, &ret);
  if (body == NULL)
    return ret;
  size_t i;
  json_t *it;
  json_array_foreach(body, i, it)
  {
    const char *src = json_string_value(json_object_get(it, "src"));
    const char *dst = json_string_value(json_object_get(it, "dest"));
    if (src == NULL || dst == NULL || !*src || !*dst) {
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
      if (err->kind == SBX_E_NOT_FOUND)
        return file_error(r, &err, src);
      ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error moving %s to %s: %s", src, dst, err->msg);
      sbx_error_release(&err);
      return ret;
    }
  }
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
 * one is answered 400. */
static bool perm_body_valid(struct req *r, json_t *body, enum MHD_Result *ret)
{
  const char *k, *owner, *group, *bad = NULL;
  json_t *v;
  unsigned mode;
  json_object_foreach(body, k, v)
  {
    if (perm_entry(v, &mode, &owner, &group, &bad) < 0) {
      *ret = sbxd_error(r, 400, "INVALID_REQUEST_BODY", "%s: %s", k, bad);
      return false;
    }
  }
  return true;
}

enum MHD_Result h_files_permissions(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_OBJECT, &ret);
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
      return ret;
    }
  }
  return sbxd_empty(r, 200);
}

enum MHD_Result h_files_search(struct req *r)
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
    json_array_append_new(out, file_info_json(r->box, &v[i], NULL));
  sbx_file_infos_free(v, n);
  return sbxd_json(r, 200, out);
}

enum MHD_Result h_files_replace(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_OBJECT, &ret);
  if (body == NULL)
    return ret;
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v)
  {
    const char *old = json_string_value(json_object_get(v, "old"));
    json_t *nw = json_object_get(v, "new");
    if (old == NULL || *old == '\0' || (nw && !json_is_null(nw) && !json_is_string(nw))) {
      return sbxd_error(r, 400, "INVALID_REQUEST_BODY",
                        "%s: 'old' must be a non-empty string and 'new' a string", k);
    }
  }
  const char *verbose = sbxd_query(r, "verbose");
  bool detailed = verbose && (strcasecmp(verbose, "true") == 0 || strcmp(verbose, "1") == 0);
  json_auto_t *out = json_object();
  json_object_foreach(body, k, v)
  {
    const char *old = json_string_value(json_object_get(v, "old"));
    const char *nw = json_string_value(json_object_get(v, "new"));
    if (nw == NULL)
      nw = "";
    cleanup_free char *p = sbxd_path_clean(k);
    uint64_t count = 0;
    sbx_error_t err = NULL;
    if (sbx_replace(r->box->sb, p, old, strlen(old), nw, strlen(nw), &count, &err) < 0)
      return file_error(r, &err, p);
    json_object_set_new(out, k, json_pack("{s:I}", "replacedCount", (json_int_t) count));
  }
  if (!detailed)
    return sbxd_empty(r, 200);
  return sbxd_json(r, 200, steal_pointer(&out));
}

/* ---- directories ---- */

enum MHD_Result h_dir_list(struct req *r)
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
    json_array_append_new(out, file_info_json(r->box, &v[i], NULL));
  sbx_file_infos_free(v, n);
  return sbxd_json(r, 200, out);
}

enum MHD_Result h_dir_make(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_OBJECT, &ret);
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
      return ret;
    }
  }
  return sbxd_empty(r, 200);
}

enum MHD_Result h_dir_remove(struct req *r)
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
    sbx__buf_puts(&b, "attachment; filename=\"download\"; filename*=UTF-8''");
    for (const unsigned char *c = (const unsigned char *) base; *c; c++) {
      if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          strchr("-._~", *c))
        sbx__buf_putc(&b, (char) *c);
      else
        sbx__buf_printf(&b, "%%%02X", *c);
    }
    v = sbx__buf_steal(&b);
  }
  MHD_add_response_header(resp, "Content-Disposition", v);
}

static int got_size(void *arg, uint64_t size)
{
  *(uint64_t *) arg = size;
  return 1; /* that is all we wanted: cancel the read */
}

/* The file to download, following a final symlink; answers and returns -1 when it is
 * missing, unreadable or a directory. */
static int download_stat(struct req *r, const char *p, struct sbx_file_info *fi,
                         enum MHD_Result *ret)
{
  sbx_error_t err = NULL;
  if (sbx_stat(r->box->sb, p, fi, &err) < 0) {
    *ret = file_error(r, &err, p);
    return -1;
  }
  free(fi->path);
  fi->path = NULL;
  if (fi->type == 'l') {
    /* stat describes the link itself (its size is the target's name's length): ask the file
     * read through it for its size, which also refuses what cannot be read (a dangling or
     * magic link, a directory) now rather than after a 200 */
    uint64_t size = UINT64_MAX;
    cleanup_close int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (sbx_read_range(r->box->sb, p, 0, 1, null, got_size, &size, &err) < 0 &&
        size == UINT64_MAX) {
      if (err->kind == SBX_E_IS_DIR) {
        sbx_error_release(&err);
        *ret = sbxd_error(r, 400, "INVALID_FILE", "%s is a directory", p);
      } else {
        *ret = file_error(r, &err, p);
      }
      return -1;
    }
    sbx_error_release(&err);
    fi->type = 'f';
    fi->size = size;
  }
  if (fi->type == 'd') {
    *ret = sbxd_error(r, 400, "INVALID_FILE", "%s is a directory", p);
    return -1;
  }
  return 0;
}

/* A body of length bytes from offset, read by a worker into a pipe; NULL with *why (malloc'ed)
 * when the pipe or the worker could not be made (NULL alone: MHD failed). */
static struct MHD_Response *download_body(struct req *r, const char *p, uint64_t offset,
                                          uint64_t length, char **why)
{
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) < 0) {
    *why = xasprintf("pipe: %s", strerror(errno));
    return NULL;
  }
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
    *why = xstrdup("cannot start a thread");
    return NULL;
  }
  return fd_response(pfd[0], length);
}

enum MHD_Result h_files_download(struct req *r)
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
  enum MHD_Result ret;
  if (download_stat(r, p, &fi, &ret) < 0)
    return ret;
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
    ret = sbxd_text(r, 200, "text/plain; charset=utf-8", text, len);
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
    cleanup_free char *why = NULL;
    resp = download_body(r, p, offset, length, &why);
    if (resp == NULL && why)
      return sbxd_error(r, 500, "RUNTIME_ERROR", "%s", why);
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
