/* The bottom of sbxd: a request as the handlers see it, and everything that answers one
 * (responses, errors, the JSON body), plus the JSON-lines log. Calls nothing else in sbxd. */
#ifndef SBXD_HTTP_H
#define SBXD_HTTP_H

#include <jansson.h>
#include <microhttpd.h>
#include <sbx/sbx.h>
#include <stdbool.h>
#include <stdint.h>

#include "parse.h"
#include "text.h"
#include "util.h"

/* ---- logging: JSON lines on stderr ---- */
enum { SBXD_ERROR, SBXD_WARN, SBXD_INFO, SBXD_DEBUG };
void sbxd_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One log line with extra JSON fields (steals fields). */
void sbxd_log_json(int level, const char *msg, json_t *fields);
/* libsbx's log handler (sbx_set_log_handler). */
void sbxd_lib_log(int level, const char *msg, void *arg);

/* ---- requests ---- */

struct box;
struct req;
typedef enum MHD_Result (*req_fn)(struct req *r);

#define SBXD_MAX_PARAMS 4

/* body caps (a route's, router.c) */
#define SBXD_BODY_LIFECYCLE (1u << 20) /* lifecycle JSON */
#define SBXD_BODY_EXECD (16u << 20)    /* execd JSON */
#define SBXD_BODY_CONTRACT (64u << 20) /* contract JSON (write_file content, base64 files) */
#define SBXD_BODY_STREAM (4ull << 30)  /* uploads and proxied bodies */

struct req {
  struct MHD_Connection *conn;
  char *raw_uri; /* as sent: path and query */
  const char *method;
  const char *url; /* the decoded path (MHD's) */
  char rid[80];    /* X-Request-ID */
  uint64_t t0;
  unsigned status;
  bool begun;
  bool responded;
  /* route (router.c) */
  struct {
    const char *name; /* into the route's pattern, name_len bytes */
    size_t name_len;
    char *value;
  } param[SBXD_MAX_PARAMS];
  size_t n_param;
  struct box *box; /* a sandbox endpoint's box (a reference, dropped with the request) */
  const char *sub; /* execd path below the endpoint prefix ("/" at least) */
  char *raw_sub;   /* raw path + query below the prefix (port proxy) */
  int port;
  /* body (server.c collects it up to body_max, or hands it to on_body) */
  sbx_buf_t body;
  uint64_t body_max, body_seen;
  bool body_too_big;
  req_fn done;                                            /* at the end of the body */
  int (*on_body)(struct req *r, const char *d, size_t n); /* streaming consumers */
  void (*on_close)(struct req *r, bool completed);
  void *ctx;
};

/* A route parameter by name ("id" for a pattern's {id}), or NULL. */
const char *sbxd_param(struct req *r, const char *name);
const char *sbxd_header(struct req *r, const char *name);
const char *sbxd_query(struct req *r, const char *name);
/* Every value of a repeated query parameter (pointers into MHD's storage). */
size_t sbxd_query_all(struct req *r, const char *name, const char **out, size_t max);
/* "host[:port]" clients used to reach us: the Host header when sane, else fallback. */
char *sbxd_public_host(struct req *r, const char *fallback);

/* ---- responses (each queues, adds X-Request-ID, and marks r->responded) ---- */

enum MHD_Result sbxd_respond(struct req *r, unsigned status, struct MHD_Response *resp);
enum MHD_Result sbxd_json(struct req *r, unsigned status, json_t *j); /* steals j */
enum MHD_Result sbxd_error(struct req *r, unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
enum MHD_Result sbxd_empty(struct req *r, unsigned status); /* Content-Length: 0 */
enum MHD_Result sbxd_text(struct req *r, unsigned status, const char *type, const char *data,
                          size_t len);
/* The library error's HTTP status and {code, message} (code: "SBX::<KIND>"). Releases err. */
enum MHD_Result sbxd_lib_error(struct req *r, sbx_error_t *err);
unsigned sbxd_kind_status(int kind);

/* ---- the JSON body ---- */

/* Each API words a bad body its own way (tests and SDKs read these): */
enum sbxd_body_style {
  SBXD_JSON_LIFECYCLE, /* 422 SANDBOX::VALIDATION_ERROR "malformed JSON body: ... (line, column)" */
  SBXD_JSON_EXECD,     /* 400 INVALID_REQUEST_BODY "error parsing request, MAYBE invalid ..." */
  SBXD_JSON_CONTRACT,  /* 400 SBX::INVALID "malformed JSON body: ..." */
};
enum sbxd_body_want { SBXD_WANT_ANY, SBXD_WANT_OBJECT, SBXD_WANT_ARRAY };
/* Parses the collected body; on malformed JSON or the wrong type answers in the API's words,
 * sets *ret and returns NULL. */
json_t *sbxd_body_json(struct req *r, enum sbxd_body_style style, enum sbxd_body_want want,
                       enum MHD_Result *ret);

/* ---- JSON values ---- */
json_t *sbxd_jstr(const char *s, size_t len); /* sanitised UTF-8 */
json_t *sbxd_jtime(int64_t ms);
int64_t sbxd_now_ms(void);

#endif
