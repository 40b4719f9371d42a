/* WebSocket (RFC 6455), server side: the handshake's accept value, an incremental frame parser
 * that enforces the protocol (client masking, fragmentation, control frame rules, UTF-8 text,
 * size limits) and names the close code for every violation, and frame encoding. Pure: no I/O,
 * so the fuzzer and the unit tests drive it directly. */
#ifndef SBXD_WS_H
#define SBXD_WS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

enum {
  WS_OP_CONT = 0x0,
  WS_OP_TEXT = 0x1,
  WS_OP_BINARY = 0x2,
  WS_OP_CLOSE = 0x8,
  WS_OP_PING = 0x9,
  WS_OP_PONG = 0xA,
};

/* close codes (RFC 6455 section 7.4.1) */
enum {
  WS_CLOSE_NORMAL = 1000,
  WS_CLOSE_GOING_AWAY = 1001,
  WS_CLOSE_PROTOCOL = 1002,
  WS_CLOSE_UNSUPPORTED = 1003,
  WS_CLOSE_NO_STATUS = 1005, /* never sent: what a close frame without a code means */
  WS_CLOSE_BAD_DATA = 1007,  /* text that is not UTF-8 */
  WS_CLOSE_POLICY = 1008,
  WS_CLOSE_TOO_BIG = 1009,
  WS_CLOSE_INTERNAL = 1011,
};

/* The largest message (all fragments together) a client may send. */
#define SBXD_WS_MAX_MESSAGE (1u << 20)

struct ws_rx {
  sbx_buf_t in;   /* received, not yet parsed */
  size_t in_off;  /* parsed bytes at the front of in */
  sbx_buf_t msg;  /* the fragmented message being assembled */
  int msg_op;     /* its opcode, 0 when none is open */
  size_t max;     /* message size limit; 0: SBXD_WS_MAX_MESSAGE */
  bool client;    /* the client's side: frames (a server's) must not be masked */
  sbx_buf_t ctl;  /* the last control frame's payload */
  bool closed;    /* a close frame was parsed: nothing after it counts */
  int close_code; /* after an error: the code to close with */
  char err[96];   /* after an error: why */
};

struct ws_event {
  int op; /* WS_OP_TEXT, WS_OP_BINARY (a whole message), WS_OP_PING, WS_OP_PONG, WS_OP_CLOSE */
  const char *data; /* valid until the next sbxd_ws_next or sbxd_ws_feed */
  size_t len;
  int code; /* WS_OP_CLOSE: the peer's code (WS_CLOSE_NO_STATUS without one) */
};

/* Appends received bytes. */
void sbxd_ws_feed(struct ws_rx *rx, const void *d, size_t n);
/* The next event: 1 (ev filled), 0 (more bytes needed), -1 (a protocol violation: rx->close_code
 * and rx->err say which; the connection must be closed with that code). */
int sbxd_ws_next(struct ws_rx *rx, struct ws_event *ev);
void sbxd_ws_rx_free(struct ws_rx *rx);

/* Appends one unmasked, final frame (a server's) to out. */
void sbxd_ws_frame(sbx_buf_t *out, int op, const void *d, size_t n);
/* Appends a close frame with code and reason (at most 123 bytes of it). */
void sbxd_ws_close_frame(sbx_buf_t *out, int code, const char *reason);
/* A client's frame: final, masked with a fresh random key (RFC 6455 section 5.3). */
void sbxd_ws_client_frame(sbx_buf_t *out, int op, const void *d, size_t n);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key; false when the key is not 16 bytes in base64. */
bool sbxd_ws_accept(const char *key, char out[29]);

/* SHA-1 (FIPS 180-4), for the handshake only. */
void sbxd_sha1(const void *d, size_t n, uint8_t out[20]);

#endif
