/* The framed, binary-safe protocol spoken between libsbx and sbx-init over a unix socket
 * (docs/design/protocol.md). Every frame is a 12-byte header (little endian) and a payload:
 *
 *   u32 len | u16 type | u16 flags | u32 req | payload[len]
 *
 * Request and reply payloads are TLV fields (u16 tag, u32 len, bytes); DATA, STDOUT and STDERR
 * payloads are raw bytes. A connection carries one operation at a time: the client sends a
 * request (and, for writes, DATA frames ending in DATA_END), the server answers with zero or
 * more streamed frames and exactly one terminal frame (OK, ERR or EXIT). SIGNAL may be sent on
 * any connection at any time. Every length is checked against a bound before anything is
 * allocated; a malformed frame closes the connection. */
#ifndef SBX_PROTO_H
#define SBX_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "util.h"

#define SBX_PROTO_VERSION 1
#define SBX_PROTO_HDR 12
#define SBX_PROTO_MAX_PAYLOAD (1u << 20) /* 1 MiB; DATA chunks are at most 256 KiB */
#define SBX_PROTO_CHUNK (256u << 10)
#define SBX_PTY_MAX_DIM 4096            /* rows and columns of a terminal */
#define SBX_STDIN_MAX_FRAME (64u << 10) /* the largest STDIN frame sbx-init takes */
#define SBX_READ_TEXT_MAX (100u << 20)  /* read_file: the largest text sbx-init reads and sends */

enum sbx_msg {
  /* requests */
  SBX_MSG_HELLO = 1,
  SBX_MSG_EXEC = 2,
  SBX_MSG_SIGNAL = 3,
  SBX_MSG_READ_TEXT = 4,
  SBX_MSG_READ = 5,
  SBX_MSG_WRITE = 6,
  SBX_MSG_LIST = 7,
  SBX_MSG_GLOB = 8,
  SBX_MSG_GREP = 9,
  SBX_MSG_STAT = 10,
  SBX_MSG_MKDIR = 11,
  SBX_MSG_REMOVE = 12,
  SBX_MSG_RENAME = 13,
  SBX_MSG_CHMOD = 14,
  SBX_MSG_CONNECT = 15,
  SBX_MSG_PING = 16,
  SBX_MSG_CMD_STATUS = 17,
  SBX_MSG_CMD_LOGS = 18,
  SBX_MSG_READDIR = 19,
  SBX_MSG_FIND = 20,
  SBX_MSG_REPLACE = 21,
  SBX_MSG_METRICS = 22,
  SBX_MSG_SET_IDLE = 23, /* idle expiry from now on: SBX_T_TIMEOUT_MS, 0 = never */
  /* sent by the client during an EXEC with SBX_EXEC_STDIN or SBX_EXEC_PTY (never on their own) */
  SBX_MSG_STDIN = 24,     /* raw bytes for the command's stdin (or the terminal) */
  SBX_MSG_STDIN_EOF = 25, /* no more input: the pipe is closed (a terminal gets its EOF char) */
  SBX_MSG_RESIZE = 26,    /* the terminal's new size: SBX_T_ROWS, SBX_T_COLS */
  /* replies and streams */
  SBX_MSG_OK = 100,
  SBX_MSG_ERR = 101,
  SBX_MSG_DATA = 102,
  SBX_MSG_DATA_END = 103,
  SBX_MSG_STARTED = 104,
  SBX_MSG_STDOUT = 105,
  SBX_MSG_STDERR = 106,
  SBX_MSG_EXIT = 107,
  SBX_MSG_ITEMS = 108, /* a batch of result items (paths, matches, infos) */
};

enum sbx_tag {
  SBX_T_VERSION = 1,
  SBX_T_PATH = 2,
  SBX_T_CMD = 3,
  SBX_T_ARG = 4, /* repeated: argv (with SBX_EXEC_ARGV) */
  SBX_T_ENV = 5, /* repeated: "KEY=VALUE" */
  SBX_T_CWD = 6,
  SBX_T_TIMEOUT_MS = 7,
  SBX_T_OUT_CAP = 8,
  SBX_T_ERR_CAP = 9,
  SBX_T_FLAGS = 10,
  SBX_T_ID = 11,
  SBX_T_SIGNO = 12,
  SBX_T_START = 13,
  SBX_T_END = 14,
  SBX_T_OFFSET = 15,
  SBX_T_LIMIT = 16,
  SBX_T_MAX = 17,
  SBX_T_MODE = 18,
  SBX_T_DEPTH = 19,
  SBX_T_PATTERN = 20,
  SBX_T_GLOB = 21,
  SBX_T_KIND = 22,
  SBX_T_STATUS = 23,
  SBX_T_MSG = 24,
  SBX_T_TEXT = 25,
  SBX_T_CODE = 26,
  SBX_T_TIMED_OUT = 27,
  SBX_T_OUT_TOTAL = 28,
  SBX_T_ERR_TOTAL = 29,
  SBX_T_TRUNCATED = 30,
  SBX_T_ITEM = 31, /* repeated: one path / one nested TLV record */
  SBX_T_LINE_NO = 32,
  SBX_T_SIZE = 33,
  SBX_T_PID = 34,
  SBX_T_DEST = 35,
  SBX_T_PORT = 36,
  SBX_T_TYPE = 37,
  SBX_T_MTIME = 38,
  SBX_T_CTIME = 39,
  SBX_T_UID = 40,
  SBX_T_GID = 41,
  SBX_T_RUNNING = 42,
  SBX_T_STARTED_MS = 43,
  SBX_T_FINISHED_MS = 44,
  SBX_T_CURSOR = 45,
  SBX_T_OLD = 46,
  SBX_T_NEW = 47,
  SBX_T_COUNT = 48,
  SBX_T_SIGNALED = 49,
  SBX_T_OWNER = 50,
  SBX_T_GROUP = 51,
  SBX_T_DURATION_MS = 52,
  SBX_T_MEM_TOTAL = 53,
  SBX_T_MEM_USED = 54,
  SBX_T_CPU_COUNT = 55,
  SBX_T_CPU_USAGE_US = 56,
  SBX_T_ROWS = 57, /* terminal size (EXEC with SBX_EXEC_PTY, RESIZE): 1..SBX_PTY_MAX_DIM */
  SBX_T_COLS = 58,
};

/* SBX_T_FLAGS bits */
enum {
  SBX_EXEC_KILL_ON_DISCONNECT = 1u << 0, /* a vanished client kills the process group */
  SBX_EXEC_BACKGROUND = 1u << 1,         /* detach: output to a log read by CMD_LOGS */
  SBX_EXEC_MERGE_OUTPUT = 1u << 2,       /* stderr into stdout */
  SBX_EXEC_ARGV = 1u << 3,               /* run SBX_T_ARG argv directly, no shell */
  SBX_EXEC_STDIN = 1u << 4,              /* stdin is a pipe fed by STDIN frames (not /dev/null) */
  SBX_EXEC_PTY = 1u << 5, /* run on a new terminal: its output is STDOUT, STDIN feeds it */
  SBX_WRITE_APPEND = 1u << 8,
  SBX_WRITE_PARENTS = 1u << 9, /* create missing parent directories */
  SBX_WRITE_ATOMIC = 1u << 10, /* write a temp file and rename it over the target */
  SBX_GREP_LITERAL = 1u << 12,
  SBX_GREP_CASE = 1u << 13,
  SBX_GLOB_DIRS = 1u << 14,
  SBX_REMOVE_RECURSIVE = 1u << 16,
  SBX_REMOVE_DIR = 1u << 17,
  SBX_READ_NOT_UNDER_DATA = 1u << 18,
};

typedef struct {
  uint32_t len;
  uint16_t type;
  uint16_t flags;
  uint32_t req;
} sbx_frame_hdr_t;

/* Builds a TLV payload. */
typedef struct {
  sbx_buf_t buf;
} sbx_tlv_writer_t;

void sbx__tlv_put(sbx_tlv_writer_t *w, uint16_t tag, const void *data, size_t len);
void sbx__tlv_put_str(sbx_tlv_writer_t *w, uint16_t tag, const char *s);
void sbx__tlv_put_u64(sbx_tlv_writer_t *w, uint16_t tag, uint64_t v);
void sbx__tlv_put_i64(sbx_tlv_writer_t *w, uint16_t tag, int64_t v);
void sbx__tlv_free(sbx_tlv_writer_t *w);

/* Reads a TLV payload (no copies: values point into the payload). */
typedef struct {
  const unsigned char *p;
  size_t len;
  size_t off;
} sbx_tlv_reader_t;

typedef struct {
  uint16_t tag;
  uint32_t len;
  const unsigned char *data;
} sbx_tlv_t;

void sbx__tlv_reader_init(sbx_tlv_reader_t *r, const void *payload, size_t len);
/* 1 = a field was read, 0 = end, -1 = malformed. */
int sbx__tlv_next(sbx_tlv_reader_t *r, sbx_tlv_t *f);
/* First field with tag: 1 found, 0 absent, -1 malformed payload. */
int sbx__tlv_find(const void *payload, size_t len, uint16_t tag, sbx_tlv_t *f);
/* Typed getters over a whole payload; absent fields give the default. Strings are returned
 * as malloc'ed copies (NUL-terminated); a string containing a NUL byte is rejected (-1). */
int sbx__tlv_get_str(const void *payload, size_t len, uint16_t tag, char **out);
int sbx__tlv_get_u64(const void *payload, size_t len, uint16_t tag, uint64_t def, uint64_t *out);
int sbx__tlv_get_i64(const void *payload, size_t len, uint16_t tag, int64_t def, int64_t *out);
bool sbx__tlv_has(const void *payload, size_t len, uint16_t tag);
/* Validates the whole payload's framing (every field inside bounds). */
bool sbx__tlv_valid(const void *payload, size_t len);

/* Frame I/O on a blocking fd. sbx__frame_send writes header + payload in one writev.
 * sbx__frame_recv reads one frame into *payload (malloc'ed, NUL-terminated past len), refusing
 * payloads over max_payload (EMSGSIZE). Both return 0 or -1 with errno (ECONNRESET on EOF). */
int sbx__frame_send(int fd, uint16_t type, uint32_t req, const void *payload, size_t len);
int sbx__frame_send_tlv(int fd, uint16_t type, uint32_t req, const sbx_tlv_writer_t *w);
int sbx__frame_recv(int fd, sbx_frame_hdr_t *hdr, char **payload, size_t max_payload);
void sbx__frame_hdr_encode(unsigned char out[SBX_PROTO_HDR], const sbx_frame_hdr_t *h);
void sbx__frame_hdr_decode(const unsigned char in[SBX_PROTO_HDR], sbx_frame_hdr_t *h);

/* A frame carrying one file descriptor (SCM_RIGHTS), and its receiving side: *passed is the
 * descriptor or -1 if none came. */
int sbx__frame_send_fd(int fd, uint16_t type, uint32_t req, const void *payload, size_t len,
                       int pass);
int sbx__frame_recv_fd(int fd, sbx_frame_hdr_t *hdr, char **payload, size_t max_payload,
                       int *passed);

/* Sends an ERR frame carrying err (kind, status, message). */
int sbx__frame_send_error(int fd, uint32_t req, int kind, int status, const char *msg);
/* Turns a received ERR payload into *err. Returns -1 always. */
int sbx__error_from_frame(const void *payload, size_t len, sbx_error_t *err);

#endif
