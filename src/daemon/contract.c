/* DeerFlow's sandbox contract as a small JSON API (docs/contract-http.md), so that a harness can
 * use sbx over HTTP without re-implementing the contract's semantics:
 *
 *   POST /v1/contract/acquire {user?, thread?}      -> {sandbox_id}   (sbx_acquire)
 *   POST /v1/contract/release {sandbox_id}          -> 204            (sbx_release: parked warm)
 *   POST /v1/sandboxes/{id}/contract/{op} {...}     -> the op's result
 *
 * {op} is execute_command, read_file, write_file, update_file, download_file, list_dir, glob or
 * grep, on a sandbox acquired here or made by the lifecycle API. Errors are the library's:
 * {"code": "SBX::<KIND>", "message": <the contract's exact text>}. */
#include "contract.h"
#include "stream.h"
#include "ctx.h"
#include "registry.h"

#include "base64.h"

#include <math.h>
#include <string.h>

static enum MHD_Result invalid(struct req *r, const char *msg)
{
  return sbxd_error(r, 400, "SBX::INVALID", "%s", msg);
}

static bool opt_type(json_t *v, json_type type)
{
  return v == NULL || json_is_null(v) || json_typeof(v) == type ||
         (type == JSON_REAL && json_is_integer(v)) || (type == JSON_TRUE && json_is_boolean(v));
}

static int64_t opt_int(json_t *v, int64_t def)
{
  return json_is_integer(v) ? (int64_t) json_integer_value(v) : def;
}

static enum MHD_Result op_execute(struct req *r, struct box *b, json_t *body)
{
  const char *command = json_string_value(json_object_get(body, "command"));
  json_t *env = json_object_get(body, "env"), *timeout = json_object_get(body, "timeout"),
         *cwd = json_object_get(body, "cwd");
  if (command == NULL)
    return invalid(r, "command must be a string");
  if (!opt_type(env, JSON_OBJECT) || !opt_type(timeout, JSON_REAL) || !opt_type(cwd, JSON_STRING))
    return invalid(r, "env must be an object of strings, timeout a number, cwd a string");
  struct sbx_exec_opts o = {0};
  if (json_is_number(timeout)) {
    o.timeout = json_number_value(timeout);
    if (!(o.timeout > 0) || !isfinite(o.timeout)) {
      char msg[96];
      snprintf(msg, sizeof msg, "timeout must be positive, got %g", o.timeout);
      return invalid(r, msg);
    }
  }
  sbx_strv_t envv = {0};
  const char *k;
  json_t *v;
  if (json_is_object(env))
    json_object_foreach(env, k, v)
    {
      if (!json_is_string(v)) {
        sbx__strv_free(&envv);
        return invalid(r, "env values must be strings");
      }
      sbx__strv_push_owned(&envv, xasprintf("%s=%s", k, json_string_value(v)));
    }
  o.env = (const char *const *) envv.v;
  o.n_env = envv.n;
  o.cwd = json_string_value(cwd);
  /* a client that goes away takes its command with it */
  struct sbxd_watch *w = sbxd_watch_start(r->conn, b->sb, NULL, NULL);
  o.on_start = sbxd_watch_command;
  o.arg = w;
  struct sbx_exec_result res;
  sbx_error_t err = NULL;
  int rc = sbx_execute_command(b->sb, command, &o, &res, &err);
  sbxd_watch_stop(w);
  sbx__strv_free(&envv);
  if (rc < 0)
    return sbxd_lib_error(r, &err);
  json_t *j = json_object();
  json_object_set_new(j, "output", sbxd_jstr(res.output, res.output_len));
  json_object_set_new(j, "exit_code", json_integer(res.exit_code));
  json_object_set_new(j, "timed_out", json_boolean(res.timed_out));
  json_object_set_new(j, "stdout", sbxd_jstr(res.out, res.out_len));
  json_object_set_new(j, "stderr", sbxd_jstr(res.err, res.err_len));
  json_object_set_new(j, "duration_ms", json_integer((json_int_t) res.duration_ms));
  sbx_exec_result_free(&res);
  return sbxd_json(r, 200, j);
}

static enum MHD_Result op_read(struct req *r, struct box *b, json_t *body)
{
  const char *path = json_string_value(json_object_get(body, "path"));
  json_t *s = json_object_get(body, "start_line"), *e = json_object_get(body, "end_line");
  if (path == NULL)
    return invalid(r, "path must be a string");
  if (!opt_type(s, JSON_INTEGER) || !opt_type(e, JSON_INTEGER))
    return invalid(r, "start_line and end_line must be integers");
  char *text = NULL;
  size_t len = 0;
  sbx_error_t err = NULL;
  if (sbx_read_file(b->sb, path, opt_int(s, SBX_LINE_NONE), opt_int(e, SBX_LINE_NONE), &text, &len,
                    &err) < 0)
    return sbxd_lib_error(r, &err);
  json_t *j = json_pack("{s:o}", "content", sbxd_jstr(text, len));
  free(text);
  return sbxd_json(r, 200, j);
}

static enum MHD_Result op_write(struct req *r, struct box *b, json_t *body)
{
  const char *path = json_string_value(json_object_get(body, "path"));
  json_t *content = json_object_get(body, "content"), *append = json_object_get(body, "append");
  if (path == NULL || !json_is_string(content))
    return invalid(r, "path and content must be strings");
  if (!opt_type(append, JSON_TRUE))
    return invalid(r, "append must be a boolean");
  sbx_error_t err = NULL;
  if (sbx_write_file(b->sb, path, json_string_value(content), json_string_length(content),
                     json_is_true(append), &err) < 0)
    return sbxd_lib_error(r, &err);
  return sbxd_json(r, 200, json_object());
}

static enum MHD_Result op_update(struct req *r, struct box *b, json_t *body)
{
  const char *path = json_string_value(json_object_get(body, "path"));
  const char *data = json_string_value(json_object_get(body, "content_base64"));
  if (path == NULL || data == NULL)
    return invalid(r, "path and content_base64 must be strings");
  size_t len = 0;
  cleanup_free unsigned char *bytes = sbx__base64_decode(data, strlen(data), &len);
  if (bytes == NULL)
    return invalid(r, "content_base64 is not valid base64");
  sbx_error_t err = NULL;
  if (sbx_update_file(b->sb, path, bytes, len, &err) < 0)
    return sbxd_lib_error(r, &err);
  return sbxd_json(r, 200, json_object());
}

static enum MHD_Result op_download(struct req *r, struct box *b, json_t *body)
{
  const char *path = json_string_value(json_object_get(body, "path"));
  if (path == NULL)
    return invalid(r, "path must be a string");
  void *data = NULL;
  size_t len = 0;
  sbx_error_t err = NULL;
  if (sbx_download_file(b->sb, path, &data, &len, &err) < 0)
    return sbxd_lib_error(r, &err);
  char *enc = sbx__base64_encode(data, len);
  free(data);
  json_t *j = json_pack("{s:s,s:I}", "content_base64", enc, "size", (json_int_t) len);
  free(enc);
  return sbxd_json(r, 200, j);
}

static json_t *strv_json(char **v, size_t n)
{
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(a, sbxd_jstr(v[i], strlen(v[i])));
  return a;
}

static enum MHD_Result op_list_dir(struct req *r, struct box *b, json_t *body)
{
  const char *path = json_string_value(json_object_get(body, "path"));
  json_t *d = json_object_get(body, "max_depth");
  if (path == NULL || !opt_type(d, JSON_INTEGER))
    return invalid(r, "path must be a string and max_depth an integer");
  int64_t depth = opt_int(d, 2);
  if (depth < 0)
    return invalid(r, "max_depth must be non-negative");
  char **entries = NULL;
  size_t n = 0;
  sbx_error_t err = NULL;
  if (sbx_list_dir(b->sb, path, depth > 64 ? 64 : (int) depth, &entries, &n, &err) < 0)
    return sbxd_lib_error(r, &err);
  json_t *j = json_pack("{s:o}", "entries", strv_json(entries, n));
  sbx_strv_free_array(entries, n);
  return sbxd_json(r, 200, j);
}

static enum MHD_Result op_glob(struct req *r, struct box *b, json_t *body)
{
  const char *path = json_string_value(json_object_get(body, "path"));
  const char *pattern = json_string_value(json_object_get(body, "pattern"));
  json_t *dirs = json_object_get(body, "include_dirs"), *max = json_object_get(body, "max_results");
  if (path == NULL || pattern == NULL)
    return invalid(r, "path and pattern must be strings");
  if (!opt_type(dirs, JSON_TRUE) || !opt_type(max, JSON_INTEGER) || opt_int(max, 200) < 0)
    return invalid(r, "include_dirs must be a boolean and max_results a non-negative integer");
  char **m = NULL;
  size_t n = 0;
  bool truncated = false;
  sbx_error_t err = NULL;
  if (sbx_glob(b->sb, path, pattern, json_is_true(dirs), (size_t) opt_int(max, 200), &m, &n,
               &truncated, &err) < 0)
    return sbxd_lib_error(r, &err);
  json_t *j = json_pack("{s:o,s:b}", "matches", strv_json(m, n), "truncated", truncated);
  sbx_strv_free_array(m, n);
  return sbxd_json(r, 200, j);
}

static enum MHD_Result op_grep(struct req *r, struct box *b, json_t *body)
{
  const char *path = json_string_value(json_object_get(body, "path"));
  const char *pattern = json_string_value(json_object_get(body, "pattern"));
  json_t *glob = json_object_get(body, "glob"), *lit = json_object_get(body, "literal"),
         *cs = json_object_get(body, "case_sensitive"), *max = json_object_get(body, "max_results");
  if (path == NULL || pattern == NULL)
    return invalid(r, "path and pattern must be strings");
  if (!opt_type(glob, JSON_STRING) || !opt_type(lit, JSON_TRUE) || !opt_type(cs, JSON_TRUE) ||
      !opt_type(max, JSON_INTEGER) || opt_int(max, 100) < 0)
    return invalid(r, "glob must be a string, literal and case_sensitive booleans, max_results a "
                      "non-negative integer");
  struct sbx_grep_opts o = {.glob = json_string_value(glob),
                            .literal = json_is_true(lit),
                            .case_sensitive = json_is_true(cs),
                            .max_results = (size_t) opt_int(max, 100)};
  struct sbx_grep_match *m = NULL;
  size_t n = 0;
  bool truncated = false;
  sbx_error_t err = NULL;
  if (sbx_grep(b->sb, path, pattern, &o, &m, &n, &truncated, &err) < 0)
    return sbxd_lib_error(r, &err);
  json_t *a = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(a, json_pack("{s:o,s:I,s:o}", "path",
                                       sbxd_jstr(m[i].path, strlen(m[i].path)), "line_number",
                                       (json_int_t) m[i].line_number, "line",
                                       sbxd_jstr(m[i].line, strlen(m[i].line))));
  sbx_grep_matches_free(m, n);
  return sbxd_json(r, 200, json_pack("{s:o,s:b}", "matches", a, "truncated", truncated));
}

typedef enum MHD_Result (*op_fn)(struct req *r, struct box *b, json_t *body);

/* An operation on a held sandbox: {id} of the route. */
static enum MHD_Result contract_op(struct req *r, op_fn fn)
{
  const char *id = sbxd_param(r, "id");
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_CONTRACT, SBXD_WANT_OBJECT, &ret);
  if (body == NULL)
    return ret;
  struct box *b = box_get(id);
  if (b == NULL)
    return sbxd_error(r, 404, "SBX::NOT_FOUND",
                      "no sandbox %s is held by sbxd (acquire it or create it first)", id);
  if (box_paused(b))
    ret = sbxd_error(r, 409, "SBX::CONFLICT", "sandbox %s is paused; resume it first", id);
  else
    ret = fn(r, b, body);
  box_put(b);
  return ret;
}

enum MHD_Result h_contract_execute(struct req *r)
{
  return contract_op(r, op_execute);
}

enum MHD_Result h_contract_read(struct req *r)
{
  return contract_op(r, op_read);
}

enum MHD_Result h_contract_write(struct req *r)
{
  return contract_op(r, op_write);
}

enum MHD_Result h_contract_update(struct req *r)
{
  return contract_op(r, op_update);
}

enum MHD_Result h_contract_download(struct req *r)
{
  return contract_op(r, op_download);
}

enum MHD_Result h_contract_list_dir(struct req *r)
{
  return contract_op(r, op_list_dir);
}

enum MHD_Result h_contract_glob(struct req *r)
{
  return contract_op(r, op_glob);
}

enum MHD_Result h_contract_grep(struct req *r)
{
  return contract_op(r, op_grep);
}

enum MHD_Result h_contract_acquire(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_CONTRACT, SBXD_WANT_OBJECT, &ret);
  if (body == NULL)
    return ret;
  json_t *user = json_object_get(body, "user"), *thread = json_object_get(body, "thread");
  if (!opt_type(user, JSON_STRING) || !opt_type(thread, JSON_STRING))
    return invalid(r, "user and thread must be strings");
  sbx_error_t err = NULL;
  sbxd_scope_lock(true);
  sbx_sandbox_t *sb = sbx_acquire(srv.p, json_string_value(user), json_string_value(thread), &err);
  if (sb == NULL) {
    sbxd_scope_lock(false);
    return sbxd_lib_error(r, &err);
  }
  struct box *b = box_get(sbx_sandbox_id(sb));
  if (b == NULL)
    b = box_add(sb, BOX_SCOPE, NULL);
  sbxd_scope_lock(false);
  ret = sbxd_json(r, 200, json_pack("{s:s}", "sandbox_id", b->id));
  box_put(b);
  return ret;
}

enum MHD_Result h_contract_release(struct req *r)
{
  enum MHD_Result ret;
  json_auto_t *body = sbxd_body_json(r, SBXD_JSON_CONTRACT, SBXD_WANT_OBJECT, &ret);
  if (body == NULL)
    return ret;
  const char *id = json_string_value(json_object_get(body, "sandbox_id"));
  if (id == NULL)
    return invalid(r, "sandbox_id must be a string");
  struct box *b = box_get_kind(id, BOX_SCOPE);
  if (b == NULL)
    return sbxd_error(r, 404, "SBX::NOT_FOUND", "no acquired sandbox %s", id);
  box_remove(b, "released", NULL);
  box_put(b);
  return sbxd_empty(r, 204);
}
