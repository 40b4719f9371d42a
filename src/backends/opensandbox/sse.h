/* An incremental reader of execd's command event stream: bytes arrive in arbitrary pieces;
 * lines are split on '\n', trimmed, blank ones and SSE field lines (":", "event:", "id:",
 * "retry:") skipped, an optional "data:" prefix stripped, and each remaining line that is a JSON
 * object with a string "type" is one event. Lines longer than max_line are dropped (counted). */
#ifndef SBX_OSB_SSE_H
#define SBX_OSB_SSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "util.h"

struct osb_sse {
  sbx_buf_t line;
  size_t max_line;
  bool skipping;    /* inside an over-long line */
  size_t dropped;   /* bytes of over-long lines */
  size_t bad_lines; /* lines that were not JSON events */
  /* Called for each event; returning non-zero stops the stream. */
  int (*on_event)(void *arg, json_t *event);
  void *arg;
};

/* Feeds bytes; returns non-zero if on_event asked to stop. */
int osb_sse_feed(struct osb_sse *p, const char *data, size_t len);
/* At end of stream: a last unterminated line is an event too. */
int osb_sse_finish(struct osb_sse *p);
void osb_sse_free(struct osb_sse *p);

#endif
