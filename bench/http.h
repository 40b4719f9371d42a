/* A minimal HTTP/1.1 client for the sbxd rows of the benchmark (one connection per request,
 * Content-Length or chunked responses, and OpenSandbox's SSE command stream). */
#ifndef SBX_BENCH_HTTP_H
#define SBX_BENCH_HTTP_H

#include <stddef.h>

struct http_target {
  char host[256];
  int port;
  char prefix[512]; /* path prefix without a trailing '/', may be empty */
};

struct http_header {
  char *name, *value;
};

/* Every function returns -1 with *err on failure; HTTP_TIMEOUT when a send or receive waited
 * longer than tb_run_timeout_s. */
#define HTTP_TIMEOUT (-2)

/* "http://host:port/prefix" or "host:port/prefix" (an endpoint has no scheme). */
int http_parse_target(const char *url, struct http_target *t);

/* Sends one request and reads the whole response. Returns 0 and sets *status and *body
 * (malloc'ed, NUL-terminated), or -1 with *err. */
int http_request(const struct http_target *t, const char *method, const char *path,
                 const struct http_header *hdrs, size_t nh, const char *body, int *status,
                 char **resp, size_t *resp_len, char **err);

/* POST {prefix}/command with body and reads the SSE stream until its terminal event
 * (execution_complete or error); closes the connection there (execd may keep the stream open
 * for a grace period afterwards). *exit_code is 0, the error event's evalue, or -1. */
int http_command(const struct http_target *t, const struct http_header *hdrs, size_t nh,
                 const char *body, int *exit_code, char **err);

#endif
