/* sbxd's pure helpers: everything that parses untrusted text (timestamps, ranges, quantities,
 * labels, query strings, paths, upstream HTTP heads and chunked bodies, output lines). No I/O
 * and no libmicrohttpd, so the fuzz targets (fuzz/fuzz_sbxd_*.c) link them alone. */
#ifndef SBXD_PARSE_H
#define SBXD_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util.h"

/* ---- time ---- */

/* RFC 3339 in UTC with milliseconds: 2025-11-16T14:30:45.123Z (out: 32 bytes). */
void sbxd_time_format(int64_t ms, char out[32]);
/* Same with microseconds (for file times, from nanoseconds since the epoch). */
void sbxd_time_format_ns(int64_t ns, char out[40]);
/* Parses RFC 3339 / ISO 8601 date-times: "Z", "+hh:mm", "-hh:mm" (or none = UTC), any number of
 * fractional digits, 'T' or ' ' between date and time. Returns 0 and ms since the epoch. */
int sbxd_time_parse(const char *s, int64_t *ms);

/* ---- numbers and quantities ---- */

/* A decimal integer with nothing else (optional leading '-'); false on overflow or junk. */
bool sbxd_parse_i64(const char *s, int64_t *out);
/* Memory: "<digits>[k|m|g|t][i][b]" case-insensitive (OpenSandbox's MEMORY_PATTERN). */
int sbxd_parse_memory(const char *s, uint64_t *bytes);
/* CPU: "<float>" or "<float>m"; must be positive and finite. */
int sbxd_parse_cpu(const char *s, double *cpus);
/* execd's mode: octal digits written in decimal (755 -> 0755). -1 on a digit 8/9 or > 7777. */
int sbxd_mode_from_decimal(int64_t dec, unsigned *mode);
unsigned sbxd_mode_to_decimal(unsigned mode);

/* ---- OpenSandbox metadata (Kubernetes labels) ---- */
bool sbxd_label_key_valid(const char *key);
bool sbxd_label_value_valid(const char *value);
/* A DNS label: ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ (volume and claim names). */
bool sbxd_dns_label_valid(const char *s, size_t max);

/* ---- query strings ---- */

/* Python's parse_qsl(strict_parsing=True, keep_blank_values=True): '&'-separated "k=v" pairs,
 * '+' is a space, %XX decoded. On a malformed field returns -1 and *bad gets it (malloc'ed). */
int sbxd_parse_qsl(const char *s, sbx_strv_t *keys, sbx_strv_t *values, char **bad);
/* Percent-decodes (and '+' -> ' ' when plus); NULL on a bad escape or an embedded NUL. */
char *sbxd_url_decode(const char *s, size_t len, bool plus);

/* ---- paths inside a sandbox ---- */

/* execd's path handling: "~" and "~/x" are $HOME (/root), "$HOME"/"${HOME}" too; relative paths
 * are made absolute from "/"; "." and ".." segments and repeated slashes are removed lexically
 * (".." never climbs above "/"). NULL for an empty path or an embedded NUL. */
char *sbxd_path_clean(const char *path);

/* ---- HTTP Range ---- */
enum { SBXD_RANGE_NONE = 0, SBXD_RANGE_OK = 1, SBXD_RANGE_BAD = -1, SBXD_RANGE_UNSATISFIABLE = -2 };
/* Parses "bytes=a-b", "bytes=a-", "bytes=-n" (only the first of several ranges is served)
 * against a file of size bytes; gives the offset and length to send. */
int sbxd_range_parse(const char *header, uint64_t size, uint64_t *offset, uint64_t *length);

/* ---- upstream HTTP/1.x responses (the port proxy) ---- */

struct sbxd_http_head {
  int status;
  char *reason;
  sbx_strv_t names, values; /* in order; names as sent */
  bool chunked;
  bool has_length;
  uint64_t length;
  size_t head_len; /* bytes of the head including the blank line */
};
void sbxd_http_head_free(struct sbxd_http_head *h);
/* Parses a response head from buf. Returns 1 when complete, 0 when more bytes are needed, -1 if
 * malformed (or longer than max). */
int sbxd_http_head_parse(const char *buf, size_t len, size_t max, struct sbxd_http_head *h);

/* Incremental chunked-transfer decoder. */
struct sbxd_chunked {
  int state;
  uint64_t remaining;
  int digits;
  size_t line_len;
};
/* Decodes in place: consumes *len bytes of data, moves the payload to the start of data and sets
 * *out_len. Returns 1 when the final chunk and trailers are done, 0 to continue, -1 if
 * malformed. */
int sbxd_chunked_decode(struct sbxd_chunked *c, char *data, size_t len, size_t *out_len,
                        size_t *consumed);

/* ---- output lines (execd's event stream) ---- */

/* Splits a byte stream into lines on '\n', '\r' or "\r\n" (counted once, even across calls); a
 * line longer than max_line is cut at a UTF-8 boundary and emitted in pieces. */
struct sbxd_lines {
  sbx_buf_t part;
  bool cr; /* the last byte seen was '\r' */
  size_t max_line;
};
typedef void (*sbxd_line_fn)(void *arg, const char *line, size_t len);
void sbxd_lines_feed(struct sbxd_lines *l, const char *data, size_t len, sbxd_line_fn fn,
                     void *arg);
/* Emits a trailing partial line, if any. */
void sbxd_lines_flush(struct sbxd_lines *l, sbxd_line_fn fn, void *arg);
void sbxd_lines_free(struct sbxd_lines *l);

/* Constant-time string equality (for tokens and keys). */
bool sbxd_secret_equal(const char *a, const char *b);

#endif
