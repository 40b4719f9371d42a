/* HTTP for the opensandbox backend: libcurl, loaded with dlopen the first time this backend is
 * used, so that front-ends on the default (linux) backend never pay for loading libcurl and
 * its TLS stack. One easy handle per call: remotes are independent of each other. */
#ifndef SBX_OSB_HTTP_H
#define SBX_OSB_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "util.h"

struct osb_http_req {
  const char *method; /* GET POST DELETE PATCH */
  const char *url;
  const char *const *headers; /* "Name: value", NULL-terminated (may be NULL) */
  const char *content_type;   /* for body */
  const void *body;
  size_t body_len;
  /* Or a streamed body (chunked): fills buf, returns bytes, 0 at the end, < 0 to abort. */
  ssize_t (*source)(void *arg, char *buf, size_t len);
  void *source_arg;
  double timeout_s; /* whole request; 0 = none (streams) */
  double connect_timeout_s;
  /* Response body: to sink (return non-zero to abort) or, if NULL, into resp->body up to
   * max_body bytes (over the cap: SBX_E_TOO_LARGE). */
  int (*sink)(void *arg, const char *data, size_t len);
  void *arg;
  size_t max_body;
  /* Checked between transfers: non-zero aborts (a cooperative deadline). */
  int (*progress)(void *arg);
};

struct osb_http_resp {
  long status;
  sbx_buf_t body;
  char *request_id;
};

/* Performs the request. Transport failures (DNS, refused, reset, timeout) are SBX_E_BACKEND
 * ("broken transport") except a timeout, which is SBX_E_TIMEOUT; an HTTP error status is not
 * an error here (the caller looks at resp->status). */
int osb_http(const struct osb_http_req *req, struct osb_http_resp *resp, sbx_error_t *err);
void osb_http_resp_free(struct osb_http_resp *resp);
/* Percent-encodes s for a query string value. */
char *osb_url_escape(const char *s);

/* Multipart body with one or more (metadata JSON, file bytes) pairs, as execd's upload wants.
 * head writes one part's header alone (the file's bytes may follow from a stream); filename may
 * hold any byte but NUL. */
void osb_multipart_head(sbx_buf_t *body, const char *boundary, const char *name,
                        const char *filename, const char *content_type);
void osb_multipart_append(sbx_buf_t *body, const char *boundary, const char *name,
                          const char *filename, const char *content_type, const void *data,
                          size_t len);
void osb_multipart_end(sbx_buf_t *body, const char *boundary);

#endif
