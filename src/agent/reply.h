/* sbx-init's answers: the bottom layer of the request handlers (docs/design/agent.md). A
 * handler answers its request here and nowhere else: one OK or ERR frame, optionally preceded
 * by ITEMS frames (agent_items_*). Depends on the protocol (proto.h) only. */
#ifndef SBX_AGENT_REPLY_H
#define SBX_AGENT_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "proto.h"

/* One client connection. */
struct agent_conn {
  int fd;
  uint32_t req; /* id of the request being served */
};

/* Sends an ERR frame for err and releases it. Returns 0 if the frame was sent. */
int agent_reply_error(struct agent_conn *c, sbx_error_t *err);
/* Sends OK with w's fields (NULL: an empty OK). */
int agent_reply_ok(struct agent_conn *c, const sbx_tlv_writer_t *w);

/* A list answer: ITEMS frames of bounded size (each ITEM one record), then OK{TRUNCATED}. */
typedef struct {
  struct agent_conn *c;
  sbx_tlv_writer_t w;
  int failed; /* -1 once a frame could not be sent: the connection is to be dropped */
} agent_items_t;

/* Adds one ITEM (data[0..len)), sending a frame when the batch is full. Returns items->failed. */
int agent_items_add(agent_items_t *items, const void *data, size_t len);
/* Sends what is left and OK{TRUNCATED}; frees items. Returns 0, or -1 if a frame failed. */
int agent_items_finish(agent_items_t *items, bool truncated);

#endif
