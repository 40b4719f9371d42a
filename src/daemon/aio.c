/* The AIO sandbox API's context and file routes (agent-infra/sandbox's openapi.json, the ones
 * DeerFlow's AioSandbox and the agent_sandbox SDK call), on a box's sandbox:
 *
 *   GET  /v1/sandbox           SandboxResponse (home_dir, version, detail)
 *   POST /v1/file/read         {file, start_line?, end_line?}   0-based start, exclusive end
 *   POST /v1/file/write        {file, content, encoding?, append?, leading/trailing_newline?}
 *   GET  /v1/file/download     ?path=                            the bytes
 *   POST /v1/file/list         {path, recursive?, show_hidden?, max_depth?, file_types?, ...}
 *   POST /v1/file/find         {path, glob}
 *   POST /v1/file/grep         {path, pattern, case_insensitive?, fixed_strings?, include?, ...}
 *
 * Answers are the API's envelope {success, message, data}; a failed file operation is the HTTP
 * status of the library's error with data a FileOperationError. Searches are sbx's own (the
 * contract's walk and matcher), with `truncated` set whenever a cap cut the result. */
#include "aio.h"
#include "ctx.h"
#include "registry.h"

#include "base64.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define AIO_GREP_MAX_RESULTS 10000 /* openapi.json's maximum */
#define AIO_GREP_DEFAULT_RESULTS 500

char *sbxd_aio_url(const char *host, struct box *b)
{
  return xasprintf("http://%s/aio/%s/%s", host, b->id, b->token);
}

enum MHD_Result aio_ok(struct req *r, json_t *data)
{
  return sbxd_json(r, 200,
                   json_pack("{s:b,s:s,s:o}", "success", 1, "message", "Operation successful",
                             "data", data ? data : json_null()));
}

enum MHD_Result aio_invalid(struct req *r, const char *field, const char *msg)
{
  json_t *e =
      json_pack("{s:s,s:[s,s],s:s}", "type", "value_error", "loc", "body", field, "msg", msg);
  return sbxd_json(r, 422, json_pack("{s:[o]}", "detail", e));
}

json_t *aio_body(struct req *r, enum MHD_Result *ret)
{
  json_error_t jerr;
  json_t *body = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &jerr);
  if (body == NULL) {
    json_t *e = json_pack("{s:s,s:[s,i],s:s,s:{s:o}}", "type", "json_invalid", "loc", "body",
                          jerr.position, "msg", "JSON decode error", "ctx", "error",
                          sbxd_jstr(jerr.text, strlen(jerr.text)));
    *ret = sbxd_json(r, 422, json_pack("{s:[o]}", "detail", e));
    return NULL;
  }
  if (!json_is_object(body)) {
    json_decref(body);
    json_t *e = json_pack("{s:s,s:[s],s:s}", "type", "model_attributes_type", "loc", "body", "msg",
                          "Input should be a valid dictionary or object to extract fields from");
    *ret = sbxd_json(r, 422, json_pack("{s:[o]}", "detail", e));
    return NULL;
  }
  return body;
}

/* A failed file operation: the library's status, {success: false, message, data:
 * FileOperationError}. Releases err. */
static enum MHD_Result file_error(struct req *r, sbx_error_t *err, const char *path, const char *op)
{
  int kind = (*err)->kind;
  int no = (*err)->status;
  const char *msg = (*err)->msg;
  json_t *data = json_pack("{s:o,s:s,s:o,s:s,s:b}", "path", sbxd_jstr(path, strlen(path)),
                           "operation", op, "message", sbxd_jstr(msg, strlen(msg)), "error_type",
                           sbx_error_kind_name(kind), "retryable", kind == SBX_E_BUSY);
  if (no > 0) {
    json_object_set_new(data, "errno", json_integer(no));
    const char *name = strerrorname_np(no);
    if (name)
      json_object_set_new(data, "errno_name", json_string(name));
  }
  json_t *j = json_pack("{s:b,s:o,s:o}", "success", 0, "message", sbxd_jstr(msg, strlen(msg)),
                        "data", data);
  sbx_error_release(err);
  return sbxd_json(r, sbxd_kind_status(kind), j);
}

/* A field that must be a string (present: required), or NULL after answering 422. */
static const char *want_str(struct req *r, json_t *body, const char *field, bool required,
                            enum MHD_Result *ret)
{
  json_t *v = json_object_get(body, field);
  if ((v == NULL || json_is_null(v)) && !required)
    return "";
  if (!json_is_string(v)) {
    *ret = aio_invalid(r, field, v == NULL ? "Field required" : "Input should be a valid string");
    return NULL;
  }
  return json_string_value(v);
}

/* An optional boolean (null or absent: def); false after answering 422 when it is another type. */
static bool want_bool(struct req *r, json_t *body, const char *field, bool def, bool *out,
                      enum MHD_Result *ret)
{
  json_t *v = json_object_get(body, field);
  if (v == NULL || json_is_null(v)) {
    *out = def;
    return true;
  }
  if (!json_is_boolean(v)) {
    *ret = aio_invalid(r, field, "Input should be a valid boolean");
    return false;
  }
  *out = json_is_true(v);
  return true;
}

static bool want_int(struct req *r, json_t *body, const char *field, int64_t def, int64_t lo,
                     int64_t hi, int64_t *out, enum MHD_Result *ret)
{
  json_t *v = json_object_get(body, field);
  if (v == NULL || json_is_null(v)) {
    *out = def;
    return true;
  }
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
    char msg[96];
    snprintf(msg, sizeof msg, "Input should be an integer from %lld to %lld", (long long) lo,
             (long long) hi);
    *ret = aio_invalid(r, field, msg);
    return false;
  }
  *out = (int64_t) json_integer_value(v);
  return true;
}

/* ---- context ---- */

enum MHD_Result h_aio_context(struct req *r)
{
  struct utsname u;
  if (uname(&u) < 0)
    memset(&u, 0, sizeof u);
  const char *home = "/root", *ws = "/mnt/user-data/workspace";
  json_t *system = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:[]}", "os", "linux", "os_version",
                             u.release, "arch", u.machine, "user", "root", "home_dir", home,
                             "workspace", ws, "timezone", "UTC", "occupied_ports");
  json_t *detail = json_pack("{s:o,s:{s:[],s:[]},s:[]}", "system", system, "runtime", "python",
                             "nodejs", "utils");
  json_t *j = json_pack("{s:b,s:s,s:n,s:s,s:s,s:s,s:o}", "success", 1, "message",
                        "Operation successful", "data", "home_dir", home, "workspace", ws,
                        "version", "sbx-" SBX_VERSION, "detail", detail);
  return sbxd_json(r, 200, j);
}

/* ---- read, write, download ---- */

enum MHD_Result h_aio_file_read(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  const char *file = want_str(r, body, "file", true, &ret);
  if (file == NULL)
    return ret;
  int64_t start, end;
  if (!want_int(r, body, "start_line", -1, 0, INT64_MAX - 1, &start, &ret) ||
      !want_int(r, body, "end_line", -1, 0, INT64_MAX, &end, &ret))
    return ret;
  char *text = NULL;
  size_t len = 0;
  sbx_error_t err = NULL;
  /* the API's lines are 0-based with an exclusive end: sbx's are 1-based, inclusive */
  if (sbx_read_file(r->box->sb, file, start >= 0 ? start + 1 : SBX_LINE_NONE,
                    end >= 0 ? end : SBX_LINE_NONE, &text, &len, &err) < 0)
    return file_error(r, &err, file, "read");
  json_t *data = json_pack("{s:o,s:s}", "content", sbxd_jstr(text, len), "file", file);
  free(text);
  return aio_ok(r, data);
}

enum MHD_Result h_aio_file_write(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  const char *file = want_str(r, body, "file", true, &ret);
  if (file == NULL)
    return ret;
  json_t *content = json_object_get(body, "content");
  if (!json_is_string(content))
    return aio_invalid(r, "content", content ? "Input should be a valid string" : "Field required");
  const char *enc = want_str(r, body, "encoding", false, &ret);
  bool append, lead, trail, sudo;
  if (enc == NULL || !want_bool(r, body, "append", false, &append, &ret) ||
      !want_bool(r, body, "leading_newline", false, &lead, &ret) ||
      !want_bool(r, body, "trailing_newline", false, &trail, &ret) ||
      !want_bool(r, body, "sudo", false, &sudo, &ret))
    return ret;
  bool b64 = strcmp(enc, "base64") == 0;
  if (*enc && !b64 && strcmp(enc, "utf-8") != 0 && strcmp(enc, "raw") != 0)
    return aio_invalid(r, "encoding", "Input should be 'utf-8', 'base64' or 'raw'");
  sbx_buf_t data = {0};
  if (b64) {
    size_t n = 0;
    unsigned char *bytes =
        sbx__base64_decode(json_string_value(content), json_string_length(content), &n);
    if (bytes == NULL)
      return aio_invalid(r, "content", "content is not valid base64");
    sbx__buf_append(&data, bytes, n);
    free(bytes);
  } else {
    if (lead)
      sbx__buf_putc(&data, '\n');
    sbx__buf_append(&data, json_string_value(content), json_string_length(content));
    if (trail)
      sbx__buf_putc(&data, '\n');
  }
  sbx_error_t err = NULL;
  int rc;
  /* sbx_write_file is text and bytes alike: an atomic replace, or an append */
  rc = sbx_write_file(r->box->sb, file, data.data ? data.data : "", data.len, append, &err);
  size_t written = data.len;
  sbx__buf_free(&data);
  if (rc < 0)
    return file_error(r, &err, file, "write");
  return aio_ok(r, json_pack("{s:s,s:I}", "file", file, "bytes_written", (json_int_t) written));
}

enum MHD_Result h_aio_file_download(struct req *r)
{
  const char *path = sbxd_query(r, "path");
  if (path == NULL || *path == '\0') {
    json_t *e = json_pack("{s:s,s:[s,s],s:s}", "type", "missing", "loc", "query", "path", "msg",
                          "Field required");
    return sbxd_json(r, 422, json_pack("{s:[o]}", "detail", e));
  }
  int fd = memfd_create("sbxd-aio-download", MFD_CLOEXEC);
  if (fd < 0)
    return sbxd_error(r, 500, "INTERNAL", "memfd_create: %s", strerror(errno));
  sbx_error_t err = NULL;
  if (sbx_read_range(r->box->sb, path, 0, 0, fd, NULL, NULL, &err) < 0) {
    close(fd);
    return file_error(r, &err, path, "download");
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    close(fd);
    return sbxd_error(r, 500, "INTERNAL", "fstat: %s", strerror(errno));
  }
  struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t) st.st_size, fd);
  if (resp == NULL) {
    close(fd);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  cleanup_free char *disp = xasprintf("attachment; filename=\"%s\"", base);
  for (char *c = disp + 22; *c && c[1]; c++)
    if (*c == '"' || *c == '\\' || (unsigned char) *c < 0x20)
      *c = '_';
  MHD_add_response_header(resp, "Content-Disposition", disp);
  return sbxd_respond(r, 200, resp);
}

/* ---- list, find, grep ---- */

static json_t *file_info(const struct sbx_file_info *fi, bool size, bool perms)
{
  const char *name = strrchr(fi->path, '/');
  name = name && name[1] ? name + 1 : fi->path;
  json_t *j = json_pack("{s:o,s:o,s:b}", "name", sbxd_jstr(name, strlen(name)), "path",
                        sbxd_jstr(fi->path, strlen(fi->path)), "is_directory", fi->type == 'd');
  if (size && fi->type != 'd')
    json_object_set_new(j, "size", json_integer((json_int_t) fi->size));
  time_t t = (time_t) (fi->mtime_ns / 1000000000);
  struct tm tm;
  char ts[40];
  if (gmtime_r(&t, &tm) && strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm))
    json_object_set_new(j, "modified_time", json_string(ts));
  if (perms) {
    char p[8];
    snprintf(p, sizeof p, "%o", fi->mode & 07777);
    json_object_set_new(j, "permissions", json_string(p));
  }
  const char *dot = fi->type == 'd' ? NULL : strrchr(name, '.');
  if (dot && dot != name)
    json_object_set_new(j, "extension", sbxd_jstr(dot, strlen(dot)));
  return j;
}

static bool hidden_below(const char *path, size_t root_len)
{
  for (const char *p = path + root_len; *p; p++)
    if (*p == '.' && (p == path + root_len || p[-1] == '/'))
      return true;
  return false;
}

static bool type_wanted(json_t *types, const struct sbx_file_info *fi)
{
  if (!json_is_array(types) || json_array_size(types) == 0 || fi->type == 'd')
    return true;
  const char *dot = strrchr(fi->path, '.');
  size_t i;
  json_t *t;
  json_array_foreach(types, i, t)
  {
    const char *s = json_string_value(t);
    if (s && dot && (strcmp(s, dot) == 0 || (s[0] != '.' && strcmp(s, dot + 1) == 0)))
      return true;
  }
  return false;
}

/* sort_by: name (the library's order), size, modified or type (directories first) */
static int by_key(const void *a, const void *b, void *arg)
{
  const struct sbx_file_info *x = a, *y = b;
  const char *key = arg;
  int c = 0;
  if (strcmp(key, "size") == 0)
    c = (x->size > y->size) - (x->size < y->size);
  else if (strcmp(key, "modified") == 0)
    c = (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
  else if (strcmp(key, "type") == 0)
    c = (y->type == 'd') - (x->type == 'd');
  return c ? c : strcmp(x->path, y->path);
}

enum MHD_Result h_aio_file_list(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  const char *path = want_str(r, body, "path", true, &ret);
  if (path == NULL)
    return ret;
  bool recursive, hidden, size, perms, desc;
  int64_t depth;
  if (!want_bool(r, body, "recursive", false, &recursive, &ret) ||
      !want_bool(r, body, "show_hidden", true, &hidden, &ret) ||
      !want_bool(r, body, "include_size", true, &size, &ret) ||
      !want_bool(r, body, "include_permissions", false, &perms, &ret) ||
      !want_bool(r, body, "sort_desc", false, &desc, &ret) ||
      !want_int(r, body, "max_depth", 0, 0, 4096, &depth, &ret))
    return ret;
  json_t *types = json_object_get(body, "file_types");
  if (types && !json_is_null(types) && !json_is_array(types))
    return aio_invalid(r, "file_types", "Input should be a valid list");
  const char *sort = want_str(r, body, "sort_by", false, &ret);
  if (sort == NULL)
    return ret;
  int d = !recursive ? 1 : depth > 0 ? (int) depth : 4096;
  cleanup_free char *root = sbxd_path_clean(path);
  struct sbx_file_info *v = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (sbx_readdir(r->box->sb, root, d, &v, &n, &err) < 0)
    return file_error(r, &err, path, "list");
  if (*sort && strcmp(sort, "name") != 0 && strcmp(sort, "size") != 0 &&
      strcmp(sort, "modified") != 0 && strcmp(sort, "type") != 0) {
    sbx_file_infos_free(v, n);
    return aio_invalid(r, "sort_by", "sort_by must be name, size, modified or type");
  }
  if (*sort && strcmp(sort, "name") != 0)
    qsort_r(v, n, sizeof *v, by_key, (void *) sort);
  if (desc)
    for (size_t i = 0; i < n / 2; i++) {
      struct sbx_file_info t = v[i];
      v[i] = v[n - 1 - i];
      v[n - 1 - i] = t;
    }
  size_t rl = strcmp(root, "/") == 0 ? 1 : strlen(root) + 1;
  json_t *files = json_array();
  size_t dirs = 0, regular = 0;
  for (size_t i = 0; i < n; i++) {
    if ((!hidden && hidden_below(v[i].path, rl)) || !type_wanted(types, &v[i]))
      continue;
    json_array_append_new(files, file_info(&v[i], size, perms));
    if (v[i].type == 'd')
      dirs++;
    else
      regular++;
  }
  sbx_file_infos_free(v, n);
  return aio_ok(r, json_pack("{s:s,s:o,s:I,s:I,s:I}", "path", root, "files", files, "total_count",
                             (json_int_t) (dirs + regular), "directory_count", (json_int_t) dirs,
                             "file_count", (json_int_t) regular));
}

enum MHD_Result h_aio_file_find(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  const char *path = want_str(r, body, "path", true, &ret);
  const char *glob = path ? want_str(r, body, "glob", true, &ret) : NULL;
  if (glob == NULL)
    return ret;
  cleanup_free char *root = sbxd_path_clean(path);
  json_t *files = json_array();
  sbx_error_t err = NULL;
  if (strchr(glob, '/')) {
    /* a pattern with a slash: DeerFlow's glob semantics (relative paths), every match */
    char **m = NULL;
    size_t n = 0;
    bool truncated = false;
    if (sbx_glob(r->box->sb, root, glob, false, SIZE_MAX, &m, &n, &truncated, &err) < 0) {
      json_decref(files);
      return file_error(r, &err, path, "find");
    }
    for (size_t i = 0; i < n; i++)
      json_array_append_new(files, sbxd_jstr(m[i], strlen(m[i])));
    sbx_strv_free_array(m, n);
  } else {
    /* a name pattern: every non-directory below whose name matches */
    struct sbx_file_info *v = NULL;
    size_t n = 0;
    if (sbx_find(r->box->sb, root, glob, &v, &n, &err) < 0) {
      json_decref(files);
      return file_error(r, &err, path, "find");
    }
    for (size_t i = 0; i < n; i++)
      json_array_append_new(files, sbxd_jstr(v[i].path, strlen(v[i].path)));
    sbx_file_infos_free(v, n);
  }
  return aio_ok(r, json_pack("{s:s,s:o}", "path", root, "files", files));
}

enum MHD_Result h_aio_file_grep(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = aio_body(r, &ret);
  if (body == NULL)
    return ret;
  const char *path = want_str(r, body, "path", true, &ret);
  const char *pattern = path ? want_str(r, body, "pattern", true, &ret) : NULL;
  if (pattern == NULL)
    return ret;
  bool ci, fixed;
  int64_t max;
  if (!want_bool(r, body, "case_insensitive", false, &ci, &ret) ||
      !want_bool(r, body, "fixed_strings", false, &fixed, &ret) ||
      !want_int(r, body, "max_results", AIO_GREP_DEFAULT_RESULTS, 1, AIO_GREP_MAX_RESULTS, &max,
                &ret))
    return ret;
  json_t *inc = json_object_get(body, "include");
  if (inc && !json_is_null(inc) && !json_is_array(inc))
    return aio_invalid(r, "include", "Input should be a valid list");
  if (json_array_size(inc) > 1)
    return aio_invalid(r, "include", "sbxd takes at most one include glob");
  cleanup_free char *root = sbxd_path_clean(path);
  struct sbx_grep_opts o = {.glob = json_string_value(json_array_get(inc, 0)),
                            .literal = fixed,
                            .case_sensitive = !ci,
                            .max_results = (size_t) max};
  struct sbx_grep_match *m = NULL;
  size_t n = 0;
  bool truncated = false;
  sbx_error_t err = NULL;
  if (sbx_grep(r->box->sb, root, pattern, &o, &m, &n, &truncated, &err) < 0)
    return file_error(r, &err, path, "grep");
  json_t *matches = json_array();
  json_t *seen = json_object();
  for (size_t i = 0; i < n; i++) {
    json_array_append_new(matches, json_pack("{s:o,s:I,s:o}", "file",
                                             sbxd_jstr(m[i].path, strlen(m[i].path)), "line_number",
                                             (json_int_t) m[i].line_number, "line_content",
                                             sbxd_jstr(m[i].line, strlen(m[i].line))));
    json_object_set_new(seen, m[i].path, json_true());
  }
  sbx_grep_matches_free(m, n);
  size_t files_matched = json_object_size(seen);
  json_decref(seen);
  return aio_ok(r, json_pack("{s:s,s:s,s:o,s:I,s:I,s:b}", "path", root, "pattern", pattern,
                             "matches", matches, "match_count", (json_int_t) n, "files_matched",
                             (json_int_t) files_matched, "truncated", truncated));
}
