/* MCP (Model Context Protocol) over libsbx, independent of the transport.
 *
 * jsonrpc.c parses one JSON-RPC 2.0 message (pure: the fuzz target links it alone); server.c
 * keeps an MCP session (protocol state, the scope's sandbox, requests in flight) and answers
 * initialize, ping, tools/list, tools/call, resources/list and resources/read. A transport
 * (sbx mcp over stdio, sbxd's /mcp over streamable HTTP) hands it messages and gives it a
 * function that delivers messages to the client. See docs/mcp.md. */
#ifndef SBX_MCP_H
#define SBX_MCP_H

#include <jansson.h>
#include <sbx/sbx.h>
#include <stdbool.h>
#include <stddef.h>

/* JSON-RPC 2.0 error codes (and MCP's resource-not-found) */
enum {
  MCP_PARSE_ERROR = -32700,
  MCP_INVALID_REQUEST = -32600,
  MCP_METHOD_NOT_FOUND = -32601,
  MCP_INVALID_PARAMS = -32602,
  MCP_INTERNAL_ERROR = -32603,
  MCP_RESOURCE_NOT_FOUND = -32002,
};

enum mcp_kind { MCP_MSG_INVALID, MCP_MSG_REQUEST, MCP_MSG_NOTIFICATION, MCP_MSG_RESPONSE };

struct mcp_msg {
  int kind;           /* enum mcp_kind */
  json_t *root;       /* the whole message (owned) */
  json_t *id;         /* request/response id (borrowed from root; NULL for a notification) */
  const char *method; /* requests and notifications */
  json_t *params;     /* object or NULL */
  /* MCP_MSG_INVALID: the error to answer (id is json null when none could be read) */
  int err_code;
  char err_msg[160];
};

#define MCP_MSG_MAX (64u << 20) /* bytes of one message */

/* Parses one message. Always fills m (free with mcp_msg_free); kind INVALID says what was wrong
 * (err_code, err_msg; m->id set if the message had a usable id). */
void mcp_msg_parse(const char *data, size_t len, struct mcp_msg *m);
void mcp_msg_free(struct mcp_msg *m);
/* Error and result responses (compact JSON text, malloc'ed). id NULL means null. */
char *mcp_error_text(json_t *id, int code, const char *msg);
char *mcp_result_text(json_t *id, json_t *result); /* steals result */
/* A request that can take a while (tools/call, resources/read, resources/list): transports let
 * other messages be read while it runs (cancellations above all). */
bool mcp_msg_slow(const struct mcp_msg *m);

/* ---- sessions ---- */

/* How the front-end gets the scope's sandbox and gives it back (the CLI: sbx_acquire and
 * sbx_release; sbxd: through its registry). */
struct mcp_host {
  sbx_sandbox_t *(*acquire)(void *ctx, const char *user, const char *thread, sbx_error_t *err);
  /* destroy: reset_sandbox (the next call starts a fresh one); otherwise park it warm */
  void (*release)(void *ctx, sbx_sandbox_t *sb, bool destroy);
  void *ctx;
  /* list_images: the home whose image store it lists, and the image a sandbox this session
   * creates is made from (both must outlive the session; NULL: the tool fails) */
  const char *home;
  const char *image;
  /* DeerFlow's tool-layer caps (sandbox.*_output_max_chars) on the text execute_command,
   * read_file and list_dir return; 0 = no truncation */
  int64_t bash_output_max_chars, read_file_output_max_chars, ls_output_max_chars;
};

/* Delivers one message (JSON text) to the client. Called from any thread; must be safe. */
typedef void (*mcp_send_fn)(void *arg, const char *json, size_t len);

struct mcp_session;

/* A session for the scope (user, thread); thread NULL: one of its own ("mcp-" + random). The
 * sandbox is acquired on the first call that needs it. */
struct mcp_session *mcp_session_new(const struct mcp_host *host, const char *user,
                                    const char *thread);
/* Cancels what is in flight (the commands are killed), waits for it, parks the sandbox warm. */
void mcp_session_free(struct mcp_session *s);
const char *mcp_session_user(const struct mcp_session *s);
const char *mcp_session_thread(const struct mcp_session *s);
bool mcp_session_initialized(const struct mcp_session *s);
/* The revision initialize agreed on; NULL before (or after a failed) initialize. */
const char *mcp_session_protocol(const struct mcp_session *s);

/* Handles one parsed message: answers a request (through send), acts on a notification
 * (notifications/cancelled kills the command of the request it names). Blocks for as long as
 * the request takes; progress notifications go through send meanwhile. Takes m. */
void mcp_handle(struct mcp_session *s, struct mcp_msg *m, mcp_send_fn send, void *arg);
/* Cancels every request in flight (their commands are killed). */
void mcp_cancel_all(struct mcp_session *s);
/* Cancels the request with that id, as notifications/cancelled does (its command is killed, it
 * gets no response); a front-end calls it when the request's client went away. */
void mcp_cancel(struct mcp_session *s, json_t *id);

/* The protocol revisions we speak, newest first */
extern const char *const mcp_protocol_versions[];
bool mcp_protocol_supported(const char *v);

#endif
