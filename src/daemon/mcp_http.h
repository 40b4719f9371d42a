/* MCP over streamable HTTP at /mcp (mcp_http.c; the protocol core is src/mcp). */
#pragma once

#include "http.h"

/* The /mcp route: checks the API key itself (it also takes Authorization: Bearer), then POST
 * (JSON-RPC messages), DELETE (end a session) or 405. */
enum MHD_Result sbxd_mcp(struct req *r);
