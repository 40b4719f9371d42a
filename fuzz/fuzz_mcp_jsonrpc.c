/* The MCP JSON-RPC parser (src/mcp/jsonrpc.c): arbitrary bytes give exactly one verdict. A
 * request has a method and a string or integer id, a notification a method and no id; anything
 * refused has a JSON-RPC error code, and its error response (like any result response) is
 * itself valid JSON carrying that code and the id. Nothing may crash, leak or read out of
 * bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"

static void check_response(char *text, json_t *id, int code)
{
  json_t *j = json_loads(text, 0, NULL);
  if (!json_is_object(j))
    abort();
  json_t *got = json_object_get(j, "id");
  if (id ? !json_equal(got, id) : !json_is_null(got))
    abort();
  if (code && json_integer_value(json_object_get(json_object_get(j, "error"), "code")) != code)
    abort();
  json_decref(j);
  free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  struct mcp_msg m;
  mcp_msg_parse((const char *) data, size, &m);
  switch (m.kind) {
  case MCP_MSG_REQUEST:
    if (!m.method || !(json_is_string(m.id) || json_is_integer(m.id)))
      abort();
    if (m.params && !json_is_object(m.params))
      abort();
    check_response(mcp_result_text(m.id, json_object()), m.id, 0);
    (void) mcp_msg_slow(&m);
    break;
  case MCP_MSG_NOTIFICATION:
    if (!m.method || m.id)
      abort();
    break;
  case MCP_MSG_RESPONSE:
    if (m.method)
      abort();
    break;
  default:
    if (m.err_code != MCP_PARSE_ERROR && m.err_code != MCP_INVALID_REQUEST &&
        m.err_code != MCP_INVALID_PARAMS)
      abort();
    if (m.err_msg[0] == '\0')
      abort();
    check_response(mcp_error_text(m.id, m.err_code, m.err_msg), m.id, m.err_code);
    break;
  }
  mcp_msg_free(&m);
  return 0;
}
