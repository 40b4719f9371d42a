/* JSON-RPC 2.0 messages as MCP uses them: one object per message (MCP dropped batches in
 * 2025-06-18), ids a string or an integer (never null), params an object when present. */
#include "mcp.h"

#include "text.h"
#include "util.h"

#include <stdarg.h>
#include <string.h>

const char *const mcp_protocol_versions[] = {"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05",
                                             NULL};

bool mcp_protocol_supported(const char *v)
{
  for (size_t i = 0; v && mcp_protocol_versions[i]; i++)
    if (strcmp(v, mcp_protocol_versions[i]) == 0)
      return true;
  return false;
}

static void invalid(struct mcp_msg *m, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void invalid(struct mcp_msg *m, int code, const char *fmt, ...)
{
  m->kind = MCP_MSG_INVALID;
  m->err_code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->err_msg, sizeof m->err_msg, fmt, ap);
  va_end(ap);
}

static bool id_ok(json_t *id)
{
  return json_is_string(id) || json_is_integer(id);
}

void mcp_msg_parse(const char *data, size_t len, struct mcp_msg *m)
{
  memset(m, 0, sizeof *m);
  if (len > MCP_MSG_MAX) {
    invalid(m, MCP_INVALID_REQUEST, "message of %zu bytes exceeds the limit of %u bytes", len,
            MCP_MSG_MAX);
    return;
  }
  json_error_t je;
  m->root = json_loadb(data ? data : "", len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
  if (m->root == NULL) {
    invalid(m, MCP_PARSE_ERROR, "Parse error: %s (at byte %d)", je.text, je.position);
    return;
  }
  if (json_is_array(m->root)) {
    invalid(m, MCP_INVALID_REQUEST,
            "Invalid Request: batches are not supported; send one "
            "message at a time");
    return;
  }
  if (!json_is_object(m->root)) {
    invalid(m, MCP_INVALID_REQUEST, "Invalid Request: a message must be a JSON object");
    return;
  }
  json_t *id = json_object_get(m->root, "id");
  if (id_ok(id))
    m->id = id;
  const char *ver = json_string_value(json_object_get(m->root, "jsonrpc"));
  if (ver == NULL || strcmp(ver, "2.0") != 0) {
    invalid(m, MCP_INVALID_REQUEST, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
    return;
  }
  json_t *method = json_object_get(m->root, "method");
  if (method == NULL) {
    /* a response to a request of ours (we send none, so it is only checked) */
    bool has_result = json_object_get(m->root, "result") != NULL;
    bool has_error = json_is_object(json_object_get(m->root, "error"));
    if (id == NULL || !(id_ok(id) || json_is_null(id)) || has_result == has_error) {
      invalid(m, MCP_INVALID_REQUEST,
              "Invalid Request: a message needs a string \"method\" (or is a response with an id "
              "and one of \"result\" or \"error\")");
      return;
    }
    m->kind = MCP_MSG_RESPONSE;
    return;
  }
  if (!json_is_string(method) || json_string_length(method) == 0) {
    invalid(m, MCP_INVALID_REQUEST, "Invalid Request: \"method\" must be a non-empty string");
    return;
  }
  m->method = json_string_value(method);
  if (strlen(m->method) != json_string_length(method)) {
    invalid(m, MCP_INVALID_REQUEST, "Invalid Request: \"method\" contains a NUL character");
    return;
  }
  json_t *params = json_object_get(m->root, "params");
  if (params != NULL && !json_is_object(params)) {
    invalid(m, MCP_INVALID_PARAMS, "Invalid params: \"params\" must be an object");
    return;
  }
  m->params = params;
  if (id == NULL) {
    m->kind = MCP_MSG_NOTIFICATION;
    return;
  }
  if (!id_ok(id)) {
    invalid(m, MCP_INVALID_REQUEST, "Invalid Request: \"id\" must be a string or an integer");
    return;
  }
  m->kind = MCP_MSG_REQUEST;
}

void mcp_msg_free(struct mcp_msg *m)
{
  json_decref(m->root);
  memset(m, 0, sizeof *m);
}

static char *dump(json_t *j)
{
  char *s = json_dumps(j, JSON_COMPACT);
  json_decref(j);
  if (s == NULL)
    s = xstrdup("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32603,\"message\":"
                "\"Internal error: the response could not be encoded\"}}");
  return s;
}

char *mcp_error_text(json_t *id, int code, const char *msg)
{
  /* a parser's message may quote the input: never let it break the answer's UTF-8 */
  size_t n;
  cleanup_free char *clean = sbx__utf8_sanitize(msg ? msg : "", msg ? strlen(msg) : 0, &n);
  json_t *j = json_pack("{s:s,s:O,s:{s:i,s:s%}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
                        "error", "code", code, "message", clean, n);
  return dump(j);
}

char *mcp_result_text(json_t *id, json_t *result)
{
  json_t *j = json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
                        result ? result : json_object());
  return dump(j);
}

bool mcp_msg_slow(const struct mcp_msg *m)
{
  return m->kind == MCP_MSG_REQUEST &&
         (strcmp(m->method, "tools/call") == 0 || strncmp(m->method, "resources/", 10) == 0);
}
