#include "http.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/types.h>

#include <curl/curl.h>

/* The few libcurl entry points used, resolved at first use. */
static struct {
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_perform)(CURL *);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  void (*easy_cleanup)(CURL *);
  const char *(*easy_strerror)(CURLcode);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  CURLcode (*global_init)(long);
  bool ok;
  char error[256];
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void)
{
  void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(cu.error, sizeof cu.error, "cannot load libcurl: %s", dlerror());
    return;
  }
#define SYM(field, name)                                                                           \
  do {                                                                                             \
    *(void **) (&cu.field) = dlsym(h, name);                                                       \
    if (cu.field == NULL) {                                                                        \
      snprintf(cu.error, sizeof cu.error, "libcurl lacks %s", name);                               \
      return;                                                                                      \
    }                                                                                              \
  } while (0)
  SYM(easy_init, "curl_easy_init");
  SYM(easy_setopt, "curl_easy_setopt");
  SYM(easy_perform, "curl_easy_perform");
  SYM(easy_getinfo, "curl_easy_getinfo");
  SYM(easy_cleanup, "curl_easy_cleanup");
  SYM(easy_strerror, "curl_easy_strerror");
  SYM(slist_append, "curl_slist_append");
  SYM(slist_free_all, "curl_slist_free_all");
  SYM(global_init, "curl_global_init");
#undef SYM
  /* once, before any thread uses curl (pthread_once makes this thread-safe) */
  if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(cu.error, sizeof cu.error, "curl_global_init failed");
    return;
  }
  cu.ok = true;
}

static int cu_ready(sbx_error_t *err)
{
  pthread_once(&cu_once, cu_load);
  if (!cu.ok)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "opensandbox backend: %s", cu.error);
  return 0;
}

struct xfer {
  const struct osb_http_req *req;
  struct osb_http_resp *resp;
  bool too_large;
  bool sink_stopped;
  char *request_id;
};

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
  struct xfer *x = arg;
  size_t len = size * n;
  if (x->req->sink) {
    if (x->req->sink(x->req->arg, data, len) != 0) {
      x->sink_stopped = true;
      return 0;
    }
    return len;
  }
  if (x->req->max_body && x->resp->body.len + len > x->req->max_body) {
    x->too_large = true;
    return 0;
  }
  sbx__buf_append(&x->resp->body, data, len);
  return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
  struct xfer *x = arg;
  size_t len = size * n;
  static const char name[] = "x-request-id:";
  if (len > sizeof name && strncasecmp(data, name, sizeof name - 1) == 0 && !x->request_id) {
    const char *v = data + sizeof name - 1;
    size_t vl = len - (sizeof name - 1);
    while (vl && (*v == ' ' || *v == '\t'))
      v++, vl--;
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
      vl--;
    x->request_id = xstrndup(v, vl);
  }
  return len;
}

static size_t on_read(char *buf, size_t size, size_t n, void *arg)
{
  struct xfer *x = arg;
  ssize_t r = x->req->source(x->req->source_arg, buf, size * n);
  return r < 0 ? CURL_READFUNC_ABORT : (size_t) r;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
  (void) a, (void) b, (void) c, (void) d;
  struct xfer *x = arg;
  return x->req->progress && x->req->progress(x->req->arg) != 0;
}

int osb_http(const struct osb_http_req *req, struct osb_http_resp *resp, sbx_error_t *err)
{
  memset(resp, 0, sizeof *resp);
  if (cu_ready(err) < 0)
    return -1;
  CURL *h = cu.easy_init();
  if (h == NULL)
    return sbx__make_error(err, ENOMEM, SBX_E_INTERNAL, "curl_easy_init");
  struct xfer x = {.req = req, .resp = resp};
  struct curl_slist *hdrs = NULL;
  for (const char *const *p = req->headers; p && *p; p++)
    hdrs = cu.slist_append(hdrs, *p);
  char ct[128];
  if (req->content_type) {
    snprintf(ct, sizeof ct, "Content-Type: %s", req->content_type);
    hdrs = cu.slist_append(hdrs, ct);
  }
  hdrs = cu.slist_append(hdrs, "Expect:"); /* no 100-continue round trip */
  cu.easy_setopt(h, CURLOPT_URL, req->url);
  cu.easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
  cu.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  cu.easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  cu.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  cu.easy_setopt(h, CURLOPT_WRITEDATA, &x);
  cu.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  cu.easy_setopt(h, CURLOPT_HEADERDATA, &x);
  cu.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (req->progress) {
    cu.easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    cu.easy_setopt(h, CURLOPT_XFERINFODATA, &x);
    cu.easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  }
  if (req->timeout_s > 0)
    cu.easy_setopt(h, CURLOPT_TIMEOUT_MS, (long) (req->timeout_s * 1000));
  cu.easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                 (long) ((req->connect_timeout_s > 0 ? req->connect_timeout_s : 30) * 1000));
  if (req->source) {
    cu.easy_setopt(h, CURLOPT_UPLOAD, 1L);
    cu.easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    cu.easy_setopt(h, CURLOPT_READDATA, &x);
    cu.easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
  } else if (req->body) {
    cu.easy_setopt(h, CURLOPT_POSTFIELDS, req->body);
    cu.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
  } else if (strcmp(req->method, "POST") == 0 || strcmp(req->method, "PATCH") == 0) {
    cu.easy_setopt(h, CURLOPT_POSTFIELDS, "");
    cu.easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) 0);
  }
  CURLcode rc = cu.easy_perform(h);
  cu.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
  resp->request_id = x.request_id;
  cu.slist_free_all(hdrs);
  cu.easy_cleanup(h);
  if (rc == CURLE_OK)
    return 0;
  if (x.too_large)
    return sbx__make_error(err, EFBIG, SBX_E_TOO_LARGE, "response from %s exceeds %zu bytes",
                           req->url, req->max_body);
  if (x.sink_stopped)
    return sbx__make_error(err, ECANCELED, SBX_E_TOO_LARGE, "transfer from %s stopped", req->url);
  if (rc == CURLE_ABORTED_BY_CALLBACK)
    return sbx__make_error(err, ETIMEDOUT, SBX_E_TIMEOUT, "transfer from %s stopped: deadline",
                           req->url);
  if (rc == CURLE_OPERATION_TIMEDOUT)
    return sbx__make_error(err, ETIMEDOUT, SBX_E_TIMEOUT, "%s %s: %s", req->method, req->url,
                           cu.easy_strerror(rc));
  return sbx__make_error(err, ECONNRESET, SBX_E_BACKEND, "%s %s: %s", req->method, req->url,
                         cu.easy_strerror(rc));
}

void osb_http_resp_free(struct osb_http_resp *resp)
{
  sbx__buf_free(&resp->body);
  free(resp->request_id);
  resp->request_id = NULL;
}

/* Ours rather than curl_easy_escape: the same RFC 3986 rule, and a URL can be built (and
 * tested) without loading libcurl. */
char *osb_url_escape(const char *s)
{
  static const char hex[] = "0123456789ABCDEF";
  sbx_buf_t b = {0};
  for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
    if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
        *p == '-' || *p == '_' || *p == '.' || *p == '~') {
      sbx__buf_putc(&b, (char) *p);
    } else {
      char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
      sbx__buf_append(&b, e, 3);
    }
  }
  return sbx__buf_steal(&b);
}

void osb_multipart_head(sbx_buf_t *body, const char *boundary, const char *name,
                        const char *filename, const char *content_type)
{
  sbx__buf_printf(body, "--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"",
                  boundary, name);
  /* the HTML standard's multipart/form-data escapes: nothing in a name ends the parameter */
  for (const char *p = filename; *p; p++) {
    if (*p == '"')
      sbx__buf_puts(body, "%22");
    else if (*p == '\r')
      sbx__buf_puts(body, "%0D");
    else if (*p == '\n')
      sbx__buf_puts(body, "%0A");
    else
      sbx__buf_putc(body, *p);
  }
  sbx__buf_printf(body, "\"\r\nContent-Type: %s\r\n\r\n", content_type);
}

void osb_multipart_append(sbx_buf_t *body, const char *boundary, const char *name,
                          const char *filename, const char *content_type, const void *data,
                          size_t len)
{
  osb_multipart_head(body, boundary, name, filename, content_type);
  sbx__buf_append(body, data, len);
  sbx__buf_puts(body, "\r\n");
}

void osb_multipart_end(sbx_buf_t *body, const char *boundary)
{
  sbx__buf_printf(body, "--%s--\r\n", boundary);
}
