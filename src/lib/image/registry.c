/* The registry transport (docs/images.md, "Pull"): the OCI distribution API over libcurl
 * (dlopen'd on first use, like the opensandbox backend's), writing an OCI layout that
 * sbx__image_import then checks and stores. Blobs are verified here too, while they stream, so a
 * corrupted or truncated one is an error naming it before anything is imported; verified blobs
 * wait in tmp/pull-cache/ (under a per-blob flock: two pulls fetch a blob once) until the import
 * has them, so a pull killed at any point is resumed by the next one. */
#include "base64.h"
#include "registry.h"
#include "auth.h"
#include "ref.h"
#include "../log.h"
#include "../state.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

static struct {
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
  CURLcode (*easy_perform)(CURL *);
  CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
  void (*easy_cleanup)(CURL *);
  const char *(*easy_strerror)(CURLcode);
  struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
  void (*slist_free_all)(struct curl_slist *);
  char *(*easy_escape)(CURL *, const char *, int);
  void (*free)(void *);
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
  if ((*(void **) (&cu.field) = dlsym(h, name)) == NULL) {                                         \
    snprintf(cu.error, sizeof cu.error, "libcurl lacks %s", name);                                 \
    return;                                                                                        \
  }
  SYM(easy_init, "curl_easy_init");
  SYM(easy_setopt, "curl_easy_setopt");
  SYM(easy_perform, "curl_easy_perform");
  SYM(easy_getinfo, "curl_easy_getinfo");
  SYM(easy_cleanup, "curl_easy_cleanup");
  SYM(easy_strerror, "curl_easy_strerror");
  SYM(slist_append, "curl_slist_append");
  SYM(slist_free_all, "curl_slist_free_all");
  SYM(easy_escape, "curl_easy_escape");
  SYM(free, "curl_free");
  SYM(global_init, "curl_global_init");
#undef SYM
  if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(cu.error, sizeof cu.error, "curl_global_init failed");
    return;
  }
  cu.ok = true;
}

/* ---- one registry endpoint (the origin or a mirror) ---- */

struct endpoint {
  char *domain; /* as the reference names it: errors and credentials */
  char *base;   /* "https://registry-1.docker.io" */
  char *repo;
  char *user, *pass;
  pthread_mutex_t mu; /* the token */
  char *token;
  time_t token_exp;
  bool basic; /* the registry asked for Basic */
};

struct pull {
  const char *home;
  const struct sbx_pull_opts *o;
  char *store; /* $home/images */
  char *work;  /* tmp/pull-XXXX: the OCI layout */
  char *cache; /* tmp/pull-cache */
  struct endpoint *ep;
  struct sbx_desc *blobs;
  size_t n_blobs;
  atomic_size_t next;
  atomic_bool failed;
  pthread_mutex_t err_mu, prog_mu;
  sbx_error_t first_err;
};

static bool loopback(const char *domain)
{
  return strncmp(domain, "127.", 4) == 0 || strncmp(domain, "localhost", 9) == 0 ||
         strncmp(domain, "[::1]", 5) == 0;
}

static bool listed(const char *const *v, size_t n, const char *s)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp(v[i], s) == 0)
      return true;
  return false;
}

static const struct sbx_registry *configured(const struct sbx_pull_opts *o, const char *domain)
{
  for (size_t i = 0; o && i < o->n_registries; i++)
    if (strcmp(o->registries[i].host, domain) == 0)
      return &o->registries[i];
  return NULL;
}

void sbx__pull_opts_from_config(const struct sbx_config *cfg, struct sbx_pull_opts *o)
{
  o->registries = cfg->registries;
  o->n_registries = cfg->n_registries;
  o->mirrors = (const char *const *) cfg->registry_mirrors;
  o->n_mirrors = cfg->n_registry_mirrors;
  sbx__image_limits_from_config(cfg, &o->limits);
}

static void endpoint_init(struct endpoint *ep, const struct sbx_pull_opts *o, const char *domain,
                          const char *repo)
{
  memset(ep, 0, sizeof *ep);
  pthread_mutex_init(&ep->mu, NULL);
  ep->domain = xstrdup(domain);
  ep->repo = xstrdup(repo);
  const char *host = strcmp(domain, "docker.io") == 0 ? "registry-1.docker.io" : domain;
  const struct sbx_registry *cr = configured(o, domain);
  bool http =
      loopback(domain) || (o && listed(o->insecure, o->n_insecure, domain)) || (cr && cr->insecure);
  ep->base = xasprintf("%s://%s", http ? "http" : "https", host);
}

static void endpoint_free(struct endpoint *ep)
{
  free(ep->domain);
  free(ep->base);
  free(ep->repo);
  if (ep->pass)
    explicit_bzero(ep->pass, strlen(ep->pass));
  free(ep->user);
  free(ep->pass);
  if (ep->token)
    explicit_bzero(ep->token, strlen(ep->token));
  free(ep->token);
  pthread_mutex_destroy(&ep->mu);
}

/* ---- one HTTP GET ---- */

struct resp {
  long status;
  char *ctype, *www_auth;
  sbx_buf_t body; /* a document, or an error answer's first bytes */
  size_t max;
  bool too_large;
  /* a blob: streamed to fd through sha, bounded by limit */
  int fd;
  sbx_sha256_ctx **sha;
  uint64_t *written, limit, range_from;
  bool restarted, write_failed;
  struct pull *p;
  const char *digest;
};

static char *header_value(const char *line, size_t n, const char *name)
{
  size_t k = strlen(name);
  if (n <= k || strncasecmp(line, name, k) != 0 || line[k] != ':')
    return NULL;
  const char *v = line + k + 1, *end = line + n;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
    end--;
  return xstrndup(v, (size_t) (end - v));
}

static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
  struct resp *r = arg;
  size_t len = size * n;
  char *v;
  if (len > 5 && strncmp(data, "HTTP/", 5) == 0) { /* a new response (after a redirect) */
    const char *sp = memchr(data, ' ', len);
    r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
    free(r->ctype);
    free(r->www_auth);
    r->ctype = r->www_auth = NULL;
  } else if ((v = header_value(data, len, "content-type"))) {
    free(r->ctype);
    r->ctype = v;
  } else if ((v = header_value(data, len, "www-authenticate"))) {
    free(r->www_auth);
    r->www_auth = v;
  }
  return len;
}

static void progress(struct pull *p, enum sbx_pull_state st, const char *digest, uint64_t done,
                     uint64_t total)
{
  if (p == NULL || p->o == NULL || p->o->progress == NULL)
    return;
  struct sbx_pull_event ev = {.state = st, .digest = digest, .done = done, .total = total};
  pthread_mutex_lock(&p->prog_mu);
  p->o->progress(p->o->progress_ctx, &ev);
  pthread_mutex_unlock(&p->prog_mu);
}

static size_t on_write(char *data, size_t size, size_t n, void *arg)
{
  struct resp *r = arg;
  size_t len = size * n;
  bool ok = r->status >= 200 && r->status < 300;
  if (r->fd < 0 || !ok) {
    size_t max = ok ? r->max : 4096; /* an error answer: enough for its message */
    if (r->body.len + len > max) {
      r->too_large = ok;
      if (ok)
        return 0;
      len = max > r->body.len ? max - r->body.len : 0;
    }
    sbx__buf_append(&r->body, data, len);
    return size * n;
  }
  if (r->status == 200 && r->range_from > 0 && !r->restarted) {
    /* the registry ignored the Range: start the file over */
    r->restarted = true;
    char junk[SBX_DIGEST_HEX + 1];
    sbx__sha256_final(*r->sha, junk);
    *r->sha = sbx__sha256_new();
    *r->written = 0;
    if (ftruncate(r->fd, 0) < 0 || lseek(r->fd, 0, SEEK_SET) < 0) {
      r->write_failed = true;
      return 0;
    }
  }
  if (*r->written + len > r->limit) {
    r->too_large = true;
    return 0;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = write(r->fd, data + off, len - off);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      r->write_failed = true;
      return 0;
    }
    off += (size_t) w;
  }
  sbx__sha256_update(*r->sha, data, len);
  *r->written += len;
  progress(r->p, SBX_PULL_BYTES, r->digest, *r->written, r->limit);
  return len;
}

static void resp_free(struct resp *r)
{
  free(r->ctype);
  free(r->www_auth);
  sbx__buf_free(&r->body);
}

/* The registry's own words from an error answer ({"errors":[{"code","message"}]}). */
static char *registry_says(const struct resp *r)
{
  json_t *j = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, NULL);
  json_t *e = json_array_get(json_object_get(j, "errors"), 0);
  const char *code = json_string_value(json_object_get(e, "code"));
  const char *msg = json_string_value(json_object_get(e, "message"));
  char *s = code || msg
                ? xasprintf(" (%s%s%s)", code ? code : "", code && msg ? ": " : "", msg ? msg : "")
                : xstrdup("");
  json_decref(j);
  return s;
}

static int http_error(const struct endpoint *ep, const char *what, const struct resp *r,
                      sbx_error_t *err)
{
  cleanup_free char *says = registry_says(r);
  const char *why;
  int kind;
  switch (r->status) {
  case 401:
    why = ep->user ? "the credentials were refused" : "authentication required (no credentials)";
    kind = SBX_E_DENIED;
    break;
  case 403:
    why = "access denied";
    kind = SBX_E_DENIED;
    break;
  case 404:
    why = "not found";
    kind = SBX_E_NOT_FOUND;
    break;
  case 429:
    why = "too many requests, try again later";
    kind = SBX_E_BUSY;
    break;
  default:
    why = r->status >= 500 ? "the registry failed" : "unexpected answer";
    kind = SBX_E_IO;
  }
  return sbx__make_error(err, 0, kind, "registry %s, repository %s: %s: %s (HTTP %ld)%s",
                         ep->domain, ep->repo, what, why, r->status, says);
}

static CURL *easy(const struct pull *p, const char *url, struct curl_slist *hdrs, struct resp *r)
{
  CURL *c = cu.easy_init();
  if (c == NULL)
    return NULL;
  long stall = p && p->o && p->o->stall_s > 0 ? p->o->stall_s : 60;
  cu.easy_setopt(c, CURLOPT_URL, url);
  cu.easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  cu.easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  /* blobs are often a redirect to the registry's storage: follow, over http(s) only */
  cu.easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  cu.easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  cu.easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  cu.easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  cu.easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  cu.easy_setopt(c, CURLOPT_LOW_SPEED_TIME, stall);
  cu.easy_setopt(c, CURLOPT_USERAGENT, "sbx");
  cu.easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  cu.easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  cu.easy_setopt(c, CURLOPT_HEADERDATA, r);
  cu.easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  cu.easy_setopt(c, CURLOPT_WRITEDATA, r);
  return c;
}

/* GET url with an optional Authorization value; a curl failure is returned as such (CURLcode),
 * the HTTP status is in r. */
static CURLcode get_once(struct pull *p, const char *url, const char *accept, const char *authz,
                         uint64_t range_from, struct resp *r)
{
  struct curl_slist *h = NULL;
  cleanup_free char *acc = accept ? xasprintf("Accept: %s", accept) : NULL;
  cleanup_free char *az = authz ? xasprintf("Authorization: %s", authz) : NULL;
  cleanup_free char *rg =
      range_from ? xasprintf("Range: bytes=%llu-", (unsigned long long) range_from) : NULL;
  if (acc)
    h = cu.slist_append(h, acc);
  if (az)
    h = cu.slist_append(h, az);
  if (rg)
    h = cu.slist_append(h, rg);
  r->status = 0;
  r->range_from = range_from;
  CURL *c = easy(p, url, h, r);
  CURLcode rc = c ? cu.easy_perform(c) : CURLE_OUT_OF_MEMORY;
  if (c)
    cu.easy_cleanup(c);
  cu.slist_free_all(h);
  if (az)
    explicit_bzero(az, strlen(az));
  return rc;
}

static char *basic_value(const char *user, const char *pass)
{
  cleanup_free char *up = xasprintf("%s:%s", user, pass);
  char *b = sbx__base64_encode(up, strlen(up));
  char *v = xasprintf("Basic %s", b);
  explicit_bzero(up, strlen(up));
  explicit_bzero(b, strlen(b));
  free(b);
  return v;
}

/* The token server of a Bearer challenge: GET realm?service=&scope=, with the credentials as
 * Basic when there are some (anonymous otherwise). */
static int fetch_token(struct pull *p, struct endpoint *ep, const struct sbx_auth_challenge *ch,
                       sbx_error_t *err)
{
  CURL *esc = cu.easy_init();
  if (esc == NULL)
    return sbx__make_error(err, ENOMEM, SBX_E_INTERNAL, "curl_easy_init");
  cleanup_free char *scope_def = xasprintf("repository:%s:pull", ep->repo);
  char *svc = ch->service ? cu.easy_escape(esc, ch->service, 0) : NULL;
  char *scope = cu.easy_escape(esc, ch->scope ? ch->scope : scope_def, 0);
  cleanup_free char *url =
      xasprintf("%s%sscope=%s%s%s", ch->realm, strchr(ch->realm, '?') ? "&" : "?", scope,
                svc ? "&service=" : "", svc ? svc : "");
  if (svc)
    cu.free(svc);
  cu.free(scope);
  cu.easy_cleanup(esc);
  cleanup_free char *authz = ep->user ? basic_value(ep->user, ep->pass) : NULL;
  struct resp r = {.fd = -1, .max = SBX_AUTH_TOKEN_MAX};
  CURLcode rc = get_once(p, url, "application/json", authz, 0, &r);
  if (authz)
    explicit_bzero(authz, strlen(authz));
  int ret = 0;
  if (rc != CURLE_OK)
    ret = sbx__make_error(err, 0, SBX_E_IO, "registry %s: token server %s: %s", ep->domain,
                          ch->realm, cu.easy_strerror(rc));
  else if (r.status != 200)
    ret = sbx__make_error(err, 0, r.status == 401 || r.status == 403 ? SBX_E_DENIED : SBX_E_IO,
                          "registry %s, repository %s: the token server %s refused %s (HTTP %ld)",
                          ep->domain, ep->repo, ch->realm,
                          ep->user ? "the credentials" : "an anonymous pull", r.status);
  else {
    char *tok;
    long exp;
    if (sbx__auth_token_parse(r.body.data, r.body.len, &tok, &exp, err) < 0)
      ret = sbx__error_wrap(err, "registry %s: token server %s", ep->domain, ch->realm);
    else {
      pthread_mutex_lock(&ep->mu);
      free(ep->token);
      ep->token = tok;
      /* renewed a little before it lapses */
      ep->token_exp = time(NULL) + (exp > 20 ? exp - 10 : exp);
      pthread_mutex_unlock(&ep->mu);
    }
  }
  if (r.body.data)
    explicit_bzero(r.body.data, r.body.len);
  resp_free(&r);
  return ret;
}

static char *authz_value(struct endpoint *ep)
{
  char *v = NULL;
  pthread_mutex_lock(&ep->mu);
  if (ep->token && time(NULL) < ep->token_exp)
    v = xasprintf("Bearer %s", ep->token);
  else if (ep->basic && ep->user)
    v = basic_value(ep->user, ep->pass);
  pthread_mutex_unlock(&ep->mu);
  return v;
}

/* GET /v2/<path> with authentication: on a 401, answers the challenge once and retries. */
static CURLcode api_get(struct pull *p, struct endpoint *ep, const char *path, const char *accept,
                        uint64_t range_from, struct resp *r, sbx_error_t *err, int *failed)
{
  cleanup_free char *url = xasprintf("%s/v2/%s", ep->base, path);
  *failed = 0;
  for (int round = 0;; round++) {
    cleanup_free char *authz = authz_value(ep);
    free(r->www_auth);
    r->www_auth = NULL;
    sbx__buf_free(&r->body);
    CURLcode rc = get_once(p, url, accept, authz, range_from, r);
    if (authz)
      explicit_bzero(authz, strlen(authz));
    if (rc != CURLE_OK || r->status != 401 || round > 0 || r->www_auth == NULL)
      return rc;
    struct sbx_auth_challenge ch;
    if (sbx__auth_challenge_parse(r->www_auth, strlen(r->www_auth), &ch, err) < 0) {
      *failed = sbx__error_wrap(err, "registry %s", ep->domain);
      return CURLE_OK;
    }
    int ret = 0;
    if (ch.scheme == SBX_AUTH_BEARER)
      ret = fetch_token(p, ep, &ch, err);
    else if (ep->user == NULL)
      ret = sbx__make_error(err, 0, SBX_E_DENIED,
                            "registry %s, repository %s: the registry asks for a user name and "
                            "password (none configured)",
                            ep->domain, ep->repo);
    else {
      pthread_mutex_lock(&ep->mu);
      ep->basic = true;
      pthread_mutex_unlock(&ep->mu);
    }
    sbx__auth_challenge_free(&ch);
    if (ret < 0) {
      *failed = -1;
      return CURLE_OK;
    }
  }
}

static bool retryable(CURLcode rc, long status)
{
  if (rc != CURLE_OK)
    return rc != CURLE_UNSUPPORTED_PROTOCOL && rc != CURLE_URL_MALFORMAT &&
           rc != CURLE_TOO_MANY_REDIRECTS && rc != CURLE_WRITE_ERROR &&
           rc != CURLE_COULDNT_RESOLVE_HOST;
  return status == 429 || status >= 500;
}

static void backoff(int attempt)
{
  struct timespec ts = {.tv_sec = 0, .tv_nsec = 200000000L << (attempt < 3 ? attempt : 3)};
  while (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  nanosleep(&ts, NULL);
}

#define ATTEMPTS 5

/* ---- manifests ---- */

static const char ACCEPT_MANIFEST[] = "application/vnd.oci.image.index.v1+json, "
                                      "application/vnd.docker.distribution.manifest.list.v2+json, "
                                      "application/vnd.oci.image.manifest.v1+json, "
                                      "application/vnd.docker.distribution.manifest.v2+json";

static char *sha256_hex(const void *p, size_t n)
{
  char hex[SBX_DIGEST_HEX + 1];
  sbx_sha256_ctx *c = sbx__sha256_new();
  sbx__sha256_update(c, p, n);
  sbx__sha256_final(c, hex);
  return xasprintf("sha256:%s", hex);
}

/* GET manifests/<reference>: the body, its media type and digest (checked against want). */
static int get_manifest(struct pull *p, struct endpoint *ep, const char *reference,
                        const char *want, char **body, size_t *len, char **media, char **digest,
                        sbx_error_t *err)
{
  cleanup_free char *path = xasprintf("%s/manifests/%s", ep->repo, reference);
  cleanup_free char *what = xasprintf("manifest `%s`", reference);
  struct resp r = {.fd = -1, .max = SBX_PULL_MANIFEST_MAX};
  int ret = 0;
  for (int attempt = 0;; attempt++) {
    int failed;
    CURLcode rc = api_get(p, ep, path, ACCEPT_MANIFEST, 0, &r, err, &failed);
    if (failed) {
      ret = -1;
      break;
    }
    if (r.too_large) {
      ret = sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                            "registry %s, repository %s: %s is larger than %u bytes", ep->domain,
                            ep->repo, what, SBX_PULL_MANIFEST_MAX);
      break;
    }
    if (rc == CURLE_OK && r.status == 200)
      break;
    if (attempt + 1 < ATTEMPTS && retryable(rc, r.status)) {
      backoff(attempt);
      continue;
    }
    if (rc != CURLE_OK)
      ret = sbx__make_error(err, 0, SBX_E_IO, "registry %s, repository %s: %s: %s", ep->domain,
                            ep->repo, what, cu.easy_strerror(rc));
    else
      ret = http_error(ep, what, &r, err);
    break;
  }
  if (ret == 0) {
    *digest = sha256_hex(r.body.data ? r.body.data : "", r.body.len);
    if (want && strcmp(want, *digest) != 0) {
      ret = sbx__make_error(err, 0, SBX_E_INVALID,
                            "registry %s, repository %s: %s has digest %s, not the %s asked for",
                            ep->domain, ep->repo, what, *digest, want);
      free(*digest);
      *digest = NULL;
    }
  }
  if (ret == 0) {
    /* the Content-Type, else the document's own mediaType */
    char *mt = r.ctype ? xstrndup(r.ctype, strcspn(r.ctype, "; ")) : NULL;
    if (mt == NULL || sbx__media_kind(mt) == SBX_MEDIA_UNKNOWN) {
      json_t *j = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, NULL);
      const char *m = json_string_value(json_object_get(j, "mediaType"));
      if (m) {
        free(mt);
        mt = xstrdup(m);
      }
      json_decref(j);
    }
    *media = mt ? mt : xstrdup("");
    *len = r.body.len;
    *body = sbx__buf_steal(&r.body);
  }
  resp_free(&r);
  return ret;
}

/* ---- blobs ---- */

static int link_into(int from_dir, const char *from, const char *to_dir_path, const char *name)
{
  cleanup_close int to = open(to_dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (to < 0)
    return -1;
  if (linkat(from_dir, from, to, name, 0) == 0 || errno == EEXIST)
    return 0;
  return -1;
}

static int hash_existing(int fd, sbx_sha256_ctx *sha, uint64_t *n)
{
  char buf[1 << 16];
  *n = 0;
  if (lseek(fd, 0, SEEK_SET) < 0)
    return -1;
  for (;;) {
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -1;
    if (r == 0)
      return 0;
    sbx__sha256_update(sha, buf, (size_t) r);
    *n += (uint64_t) r;
  }
}

static int fetch_blob(struct pull *p, const struct sbx_desc *d, sbx_error_t *err)
{
  struct endpoint *ep = p->ep;
  const char *hex = d->digest + 7;
  cleanup_free char *lay = xasprintf("%s/blobs/sha256", p->work);
  cleanup_free char *sblobs = xasprintf("%s/blobs/sha256", p->store);
  cleanup_close int sfd = open(sblobs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  /* in the store already: the import re-checks it, nothing is fetched */
  if (sfd >= 0 && link_into(sfd, hex, lay, hex) == 0) {
    progress(p, SBX_PULL_CACHED, d->digest, (uint64_t) d->size, (uint64_t) d->size);
    return 0;
  }
  cleanup_close int cfd = open(p->cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cfd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "open `%s`", p->cache);
  cleanup_free char *lockname = xasprintf("%s.lock", hex);
  cleanup_close int lk = openat(cfd, lockname, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lk < 0 || TEMP_FAILURE_RETRY(flock(lk, LOCK_EX)) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "lock `%s/%s`", p->cache, lockname);
  /* another pull may have fetched it while this one waited */
  if ((sfd >= 0 && link_into(sfd, hex, lay, hex) == 0) || link_into(cfd, hex, lay, hex) == 0) {
    progress(p, SBX_PULL_CACHED, d->digest, (uint64_t) d->size, (uint64_t) d->size);
    return 0;
  }
  cleanup_free char *partname = xasprintf("%s.part", hex);
  cleanup_close int fd = openat(cfd, partname, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s/%s`", p->cache, partname);
  /* what a killed pull left: kept when it is a prefix, checked with the rest at the end */
  sbx_sha256_ctx *sha = sbx__sha256_new();
  uint64_t written = 0;
  if (hash_existing(fd, sha, &written) < 0) {
    char junk[SBX_DIGEST_HEX + 1];
    sbx__sha256_final(sha, junk);
    return sbx__make_error(err, errno, SBX_E_IO, "read `%s/%s`", p->cache, partname);
  }
  if (written > (uint64_t) d->size) {
    char junk[SBX_DIGEST_HEX + 1];
    sbx__sha256_final(sha, junk);
    sha = sbx__sha256_new();
    written = 0;
    if (ftruncate(fd, 0) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "truncate `%s/%s`", p->cache, partname);
  }
  cleanup_free char *path = xasprintf("%s/blobs/%s", ep->repo, d->digest);
  cleanup_free char *what = xasprintf("blob %s", d->digest);
  int ret = 0;
  for (int attempt = 0;; attempt++) {
    if (atomic_load(&p->failed)) {
      ret = sbx__make_error(err, 0, SBX_E_IO, "stopped");
      break;
    }
    if (written == (uint64_t) d->size)
      break;
    if (lseek(fd, 0, SEEK_END) < 0) {
      ret = sbx__make_error(err, errno, SBX_E_IO, "seek `%s/%s`", p->cache, partname);
      break;
    }
    struct resp r = {.fd = fd,
                     .sha = &sha,
                     .written = &written,
                     .limit = (uint64_t) d->size,
                     .p = p,
                     .digest = d->digest};
    int failed;
    uint64_t before = written;
    CURLcode rc = api_get(p, ep, path, NULL, written, &r, err, &failed);
    long status = r.status;
    if (failed)
      ret = -1;
    else if (r.too_large)
      ret = sbx__make_error(err, 0, SBX_E_INVALID,
                            "registry %s, repository %s: %s is larger than its descriptor says "
                            "(%lld bytes)",
                            ep->domain, ep->repo, what, (long long) d->size);
    else if (r.write_failed)
      ret = sbx__make_error(err, errno, SBX_E_IO, "write `%s/%s`", p->cache, partname);
    else if (rc == CURLE_OK && status == 416 && written == (uint64_t) d->size)
      ret = 0;
    else if (rc == CURLE_OK && (status == 200 || status == 206) && written == (uint64_t) d->size)
      ret = 0;
    else if (rc == CURLE_OK && (status == 200 || status == 206)) {
      /* the answer ended early: try again from where it stopped */
      if (attempt + 1 < ATTEMPTS || written > before) {
        resp_free(&r);
        if (written == before)
          backoff(attempt);
        else
          attempt = -1;
        continue;
      }
      ret = sbx__make_error(
          err, 0, SBX_E_IO, "registry %s, repository %s: %s ended after %llu of %lld bytes",
          ep->domain, ep->repo, what, (unsigned long long) written, (long long) d->size);
    } else if (retryable(rc, status) && attempt + 1 < ATTEMPTS) {
      resp_free(&r);
      if (written == before)
        backoff(attempt);
      else
        attempt = -1; /* progress was made: a fresh set of attempts */
      continue;
    } else if (rc != CURLE_OK)
      ret = sbx__make_error(err, 0, SBX_E_IO, "registry %s, repository %s: %s: %s", ep->domain,
                            ep->repo, what, cu.easy_strerror(rc));
    else
      ret = http_error(ep, what, &r, err);
    resp_free(&r);
    break;
  }
  char got[SBX_DIGEST_HEX + 1];
  sbx__sha256_final(sha, got);
  if (ret < 0)
    return -1;
  if (strcmp(got, hex) != 0) {
    unlinkat(cfd, partname, 0); /* a bad copy: the next pull starts over */
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "registry %s, repository %s: %s does not match its digest (got "
                           "sha256:%s): corrupted in the registry or on the way",
                           ep->domain, ep->repo, what, got);
  }
  if (fsync(fd) < 0 || renameat(cfd, partname, cfd, hex) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "store `%s/%s`", p->cache, hex);
  if (link_into(cfd, hex, lay, hex) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "link `%s` into `%s`", hex, lay);
  progress(p, SBX_PULL_DONE, d->digest, (uint64_t) d->size, (uint64_t) d->size);
  return 0;
}

static void *worker(void *arg)
{
  struct pull *p = arg;
  for (;;) {
    size_t i = atomic_fetch_add(&p->next, 1);
    if (i >= p->n_blobs || atomic_load(&p->failed))
      return NULL;
    sbx_error_t e = NULL;
    if (fetch_blob(p, &p->blobs[i], &e) < 0) {
      pthread_mutex_lock(&p->err_mu);
      if (!atomic_exchange(&p->failed, true))
        p->first_err = e;
      else
        sbx_error_release(&e);
      pthread_mutex_unlock(&p->err_mu);
    }
  }
}

static int fetch_blobs(struct pull *p, sbx_error_t *err)
{
  size_t n = p->n_blobs < SBX_PULL_PARALLEL ? p->n_blobs : SBX_PULL_PARALLEL;
  pthread_t th[SBX_PULL_PARALLEL];
  size_t started = 0;
  for (size_t i = 1; i < n; i++)
    if (pthread_create(&th[started], NULL, worker, p) == 0)
      started++;
  worker(p);
  for (size_t i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  if (p->first_err) {
    if (err && *err == NULL)
      *err = p->first_err;
    else
      sbx_error_release(&p->first_err);
    p->first_err = NULL;
    return -1;
  }
  return 0;
}

/* ---- the pull ---- */

static int write_at(const char *dir, const char *name, const void *data, size_t len,
                    sbx_error_t *err)
{
  cleanup_free char *path = xasprintf("%s/%s", dir, name);
  if (sbx__write_file_at(AT_FDCWD, path, data, len, 0644, false) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write `%s`", path);
  return 0;
}

static int mkdir_ok(const char *path, sbx_error_t *err)
{
  if (mkdir(path, 0755) < 0 && errno != EEXIST)
    return sbx__make_error(err, errno, SBX_E_IO, "create `%s`", path);
  return 0;
}

/* Resolves the reference on ep to one image manifest, written into the layout. */
static int resolve(struct pull *p, const struct sbx_ref *ref, struct sbx_manifest *m,
                   sbx_error_t *err)
{
  cleanup_free char *body = NULL, *media = NULL, *digest = NULL;
  size_t len = 0;
  if (get_manifest(p, p->ep, sbx__ref_reference(ref), ref->digest, &body, &len, &media, &digest,
                   err) < 0)
    return -1;
  int kind = sbx__media_kind(media);
  if (kind == SBX_MEDIA_INDEX) {
    struct sbx_index ix;
    if (sbx__index_parse(body, len, &ix, err) < 0)
      return sbx__error_wrap(err, "registry %s, repository %s: manifest list", p->ep->domain,
                             p->ep->repo);
    size_t pick = 0;
    int r = sbx__index_pick(&ix, p->o ? p->o->platform : NULL, &pick, err);
    char *want = r == 0 ? xstrdup(ix.v[pick].digest) : NULL;
    int64_t want_size = r == 0 ? ix.v[pick].size : 0;
    sbx__index_free(&ix);
    if (r < 0)
      return sbx__error_wrap(err, "registry %s, repository %s", p->ep->domain, p->ep->repo);
    free(body);
    free(media);
    free(digest);
    body = media = digest = NULL;
    r = get_manifest(p, p->ep, want, want, &body, &len, &media, &digest, err);
    free(want);
    if (r < 0)
      return -1;
    if ((int64_t) len != want_size)
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "registry %s, repository %s: manifest %s has %zu bytes, the list "
                             "says %lld",
                             p->ep->domain, p->ep->repo, digest, len, (long long) want_size);
    kind = sbx__media_kind(media);
  }
  if (kind != SBX_MEDIA_MANIFEST)
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "registry %s, repository %s: unsupported manifest type `%s` (OCI and "
                           "Docker schema 2 are)",
                           p->ep->domain, p->ep->repo, media);
  if (sbx__manifest_parse(body, len, m, err) < 0)
    return sbx__error_wrap(err, "registry %s, repository %s: manifest %s", p->ep->domain,
                           p->ep->repo, digest);
  cleanup_free char *blobs = xasprintf("%s/blobs/sha256", p->work);
  if (write_at(blobs, digest + 7, body, len, err) < 0)
    return -1;
  json_t *ix = json_pack("{s:i, s:[{s:s, s:s, s:I}]}", "schemaVersion", 2, "manifests", "mediaType",
                         media, "digest", digest, "size", (json_int_t) len);
  cleanup_free char *s = json_dumps(ix, JSON_COMPACT);
  json_decref(ix);
  static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
  if (write_at(p->work, "oci-layout", layout, sizeof layout - 1, err) < 0 ||
      write_at(p->work, "index.json", s, strlen(s), err) < 0)
    return -1;
  progress(p, SBX_PULL_RESOLVED, digest, 0, 0);
  return 0;
}

static int check_bounds(struct pull *p, const struct sbx_manifest *m, sbx_error_t *err)
{
  if (m->n_layers > SBX_PULL_LAYERS_MAX)
    return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                           "registry %s, repository %s: %zu layers (at most %d)", p->ep->domain,
                           p->ep->repo, m->n_layers, SBX_PULL_LAYERS_MAX);
  uint64_t max = p->o && p->o->limits.max_image_bytes ? p->o->limits.max_image_bytes
                                                      : SBX_IMAGE_MAX_BYTES_DEFAULT;
  uint64_t total = 0;
  const struct sbx_desc *all[SBX_PULL_LAYERS_MAX + 1];
  all[0] = &m->config;
  for (size_t i = 0; i < m->n_layers; i++)
    all[i + 1] = &m->layers[i];
  for (size_t i = 0; i <= m->n_layers; i++) {
    if (!sbx__digest_valid(all[i]->digest) || all[i]->size < 0)
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "registry %s, repository %s: a descriptor without a sha256 digest "
                             "and a size",
                             p->ep->domain, p->ep->repo);
    total += (uint64_t) all[i]->size;
  }
  if (m->config.size > (int64_t) SBX_PULL_MANIFEST_MAX)
    return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                           "registry %s, repository %s: the config is %lld bytes (at most %u)",
                           p->ep->domain, p->ep->repo, (long long) m->config.size,
                           SBX_PULL_MANIFEST_MAX);
  if (total > max)
    return sbx__make_error(err, 0, SBX_E_TOO_LARGE,
                           "registry %s, repository %s: the image is %llu MiB compressed, over "
                           "the image's budget of %llu MiB (sandbox.image_max_mib)",
                           p->ep->domain, p->ep->repo, (unsigned long long) (total >> 20),
                           (unsigned long long) (max >> 20));
  /* the config and each distinct layer once */
  p->blobs = xzalloc((m->n_layers + 1) * sizeof *p->blobs);
  for (size_t i = 0; i <= m->n_layers; i++) {
    bool dup = false;
    for (size_t j = 0; j < p->n_blobs; j++)
      dup = dup || strcmp(p->blobs[j].digest, all[i]->digest) == 0;
    if (!dup) {
      p->blobs[p->n_blobs].digest = all[i]->digest;
      p->blobs[p->n_blobs++].size = all[i]->size;
    }
  }
  for (size_t i = 0; i < p->n_blobs; i++)
    progress(p, SBX_PULL_WAITING, p->blobs[i].digest, 0, (uint64_t) p->blobs[i].size);
  return 0;
}

/* A mirror for domain: "MIRROR" entries stand for docker.io, "DOMAIN=MIRROR" for another. */
static const char *mirror_for(const struct sbx_pull_opts *o, const char *domain, size_t i)
{
  const char *m = o->mirrors[i];
  const char *eq = strchr(m, '=');
  if (eq == NULL)
    return strcmp(domain, "docker.io") == 0 ? m : NULL;
  size_t n = (size_t) (eq - m);
  return strlen(domain) == n && strncmp(m, domain, n) == 0 ? eq + 1 : NULL;
}

static int credentials(struct endpoint *ep, const struct sbx_pull_opts *o, sbx_error_t *err)
{
  if (o && o->username) {
    ep->user = xstrdup(o->username);
    ep->pass = xstrdup(o->password ? o->password : "");
    return 0;
  }
  const struct sbx_registry *cr = configured(o, ep->domain);
  if (cr && cr->username) {
    ep->user = xstrdup(cr->username);
    ep->pass = xstrdup(cr->password);
    return 0;
  }
  return sbx__auth_lookup(o ? o->auth_file : NULL, ep->domain, &ep->user, &ep->pass, err) < 0 ? -1
                                                                                              : 0;
}

/* One attempt on one endpoint: resolve and fetch every blob into the layout. */
static int pull_from(struct pull *p, const struct sbx_ref *ref, sbx_error_t *err)
{
  struct sbx_manifest m;
  memset(&m, 0, sizeof m);
  int r = resolve(p, ref, &m, err);
  if (r == 0)
    r = check_bounds(p, &m, err);
  if (r == 0)
    r = fetch_blobs(p, err);
  free(p->blobs);
  p->blobs = NULL;
  p->n_blobs = 0;
  atomic_store(&p->next, 0);
  atomic_store(&p->failed, false);
  sbx__manifest_free(&m);
  return r;
}

static void drop_cached(struct pull *p)
{
  /* every blob of the layout is in the store now: the cache's copies can go */
  cleanup_free char *lay = xasprintf("%s/blobs/sha256", p->work);
  cleanup_close int cfd = open(p->cache, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = cfd >= 0 ? opendir(lay) : NULL;
  if (d == NULL)
    return;
  struct dirent *de;
  while ((de = readdir(d)))
    if (de->d_name[0] != '.')
      unlinkat(cfd, de->d_name, 0);
  closedir(d);
}

int sbx__image_pull(const char *home, const char *refstr, const struct sbx_pull_opts *o,
                    char **name, sbx_error_t *err)
{
  if (name)
    *name = NULL;
  struct sbx_ref ref;
  if (sbx__ref_parse(refstr, &ref, err) < 0)
    return -1;
  pthread_once(&cu_once, cu_load);
  if (!cu.ok) {
    sbx__ref_free(&ref);
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "pull: %s (apt-get install libcurl4)",
                           cu.error);
  }
  if (sbx__image_dl(err) < 0) {
    sbx__ref_free(&ref);
    return -1;
  }
  struct pull p = {.home = home, .o = o};
  pthread_mutex_init(&p.err_mu, NULL);
  pthread_mutex_init(&p.prog_mu, NULL);
  p.store = sbx__image_dir(home);
  cleanup_free char *tmp = xasprintf("%s/tmp", p.store);
  cleanup_free char *blobs0 = xasprintf("%s/blobs", p.store);
  cleanup_free char *blobs1 = xasprintf("%s/blobs/sha256", p.store);
  p.cache = xasprintf("%s/pull-cache", tmp);
  char wname[] = "pull-XXXXXXXX";
  sbx__random_hex(wname + 5, 8);
  p.work = xasprintf("%s/%s", tmp, wname);
  cleanup_free char *wb0 = xasprintf("%s/blobs", p.work);
  cleanup_free char *wb1 = xasprintf("%s/blobs/sha256", p.work);
  int r = 0;
  /* shared, like an import: prune (exclusive) never sweeps tmp/ under a pull */
  cleanup_close int gc = -1;
  if (sbx__image_store_private(home, true, err) < 0 || mkdir_ok(tmp, err) < 0 ||
      mkdir_ok(blobs0, err) < 0 || mkdir_ok(blobs1, err) < 0)
    r = -1;
  if (r == 0 && (gc = sbx__image_lock(home, "image-gc", LOCK_SH, err)) < 0)
    r = -1;
  if (r == 0 && (mkdir_ok(p.cache, err) < 0 || mkdir_ok(p.work, err) < 0 ||
                 mkdir_ok(wb0, err) < 0 || mkdir_ok(wb1, err) < 0))
    r = -1;
  if (r == 0) {
    /* mirrors first; any failure there falls through to the origin */
    r = 1;
    for (size_t i = 0; o && i < o->n_mirrors && r != 0; i++) {
      const char *mir = mirror_for(o, ref.domain, i);
      if (mir == NULL)
        continue;
      struct endpoint ep;
      endpoint_init(&ep, o, mir, ref.path);
      p.ep = &ep;
      sbx_error_t e = NULL;
      r = credentials(&ep, o, &e) < 0 ? -1 : pull_from(&p, &ref, &e);
      if (r < 0)
        sbx__log(SBX_LOG_INFO, "pull %s: mirror %s: %s", refstr, mir, e ? e->msg : "failed");
      sbx_error_release(&e);
      endpoint_free(&ep);
      p.ep = NULL;
    }
    if (r != 0) {
      struct endpoint ep;
      endpoint_init(&ep, o, ref.domain, ref.path);
      p.ep = &ep;
      r = credentials(&ep, o, err) < 0 ? -1 : pull_from(&p, &ref, err);
      endpoint_free(&ep);
      p.ep = NULL;
    }
  }
  cleanup_free char *sname = sbx__ref_store_name(&ref);
  if (r == 0) {
    progress(&p, SBX_PULL_IMPORT, NULL, 0, 0);
    struct sbx_image_import_opts io = {.name = sname, .verified = true};
    if (o) {
      io.limits = o->limits;
      io.platform = o->platform; /* a single-manifest image is checked against it there */
    }
    sbx_strv_t names = {0};
    r = sbx__image_import(home, p.work, &io, &names, err);
    /* stored, or refused whole (over the image's budget, a layer that does not match): a retry
     * would not use the cache's copies, so they go either way */
    drop_cached(&p);
    if (r < 0)
      sbx__error_wrap(err, "pull %s", refstr);
    else {
      if (name)
        *name = names.n ? xstrdup(names.v[0]) : sbx__image_normalize(sname);
    }
    sbx__strv_free(&names);
  }
  cleanup_close int tfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (tfd >= 0)
    sbx__rm_rf_at(tfd, wname);
  free(p.store);
  free(p.work);
  free(p.cache);
  pthread_mutex_destroy(&p.err_mu);
  pthread_mutex_destroy(&p.prog_mu);
  sbx__ref_free(&ref);
  return r;
}

/* The implicit pull's progress, through the front-end's log handler (sbxd: its JSON log). */
static void log_progress(void *ctx, const struct sbx_pull_event *ev)
{
  const char *ref = ctx;
  switch (ev->state) {
  case SBX_PULL_RESOLVED:
    sbx__log(SBX_LOG_INFO, "pull %s: manifest %s", ref, ev->digest);
    break;
  case SBX_PULL_CACHED:
    sbx__log(SBX_LOG_INFO, "pull %s: %s already in the store", ref, ev->digest);
    break;
  case SBX_PULL_DONE:
    sbx__log(SBX_LOG_INFO, "pull %s: %s fetched (%llu bytes), verified", ref, ev->digest,
             (unsigned long long) ev->total);
    break;
  case SBX_PULL_IMPORT:
    sbx__log(SBX_LOG_INFO, "pull %s: importing", ref);
    break;
  default:
    break;
  }
}

bool sbx__image_pull_needed(const char *home, const char *name)
{
  if (name == NULL || strcmp(name, "host") == 0)
    return false;
  struct sbx_image_rootfs rf;
  if (sbx__image_resolve(home, name, &rf, NULL) == 0) {
    sbx__image_rootfs_free(&rf);
    return false;
  }
  struct sbx_ref ref;
  if (sbx__ref_parse(name, &ref, NULL) < 0)
    return false;
  sbx__ref_free(&ref);
  const char *pol = getenv("SBX_PULL");
  return pol == NULL || strcmp(pol, "never") != 0;
}

int sbx__image_ensure(const char *home, const char *name, const struct sbx_pull_opts *o,
                      sbx_error_t *err)
{
  if (name == NULL || strcmp(name, "host") == 0)
    return 0;
  struct sbx_image_rootfs rf;
  sbx_error_t e = NULL;
  if (sbx__image_resolve(home, name, &rf, &e) == 0) {
    sbx__image_rootfs_free(&rf);
    return 0;
  }
  struct sbx_ref ref;
  if (e->kind != SBX_E_NOT_FOUND || sbx__ref_parse(name, &ref, NULL) < 0) {
    if (err && *err == NULL)
      *err = e;
    else
      sbx_error_release(&e);
    return -1;
  }
  sbx__ref_free(&ref);
  /* SBX_PULL=never: the store only (offline hosts; the test suites, which never leave
   * loopback) */
  const char *pol = getenv("SBX_PULL");
  if (pol && strcmp(pol, "never") == 0) {
    if (err && *err == NULL)
      *err = e;
    else
      sbx_error_release(&e);
    return sbx__error_wrap(err, "SBX_PULL=never");
  }
  sbx_error_release(&e);
  sbx__log(SBX_LOG_INFO, "image %s is not in the store: pulling it", name);
  struct sbx_pull_opts lo = {0};
  if (o)
    lo = *o;
  if (lo.progress == NULL) {
    lo.progress = log_progress;
    lo.progress_ctx = (void *) name;
  }
  if (sbx__image_pull(home, name, &lo, NULL, err) < 0)
    return sbx__error_wrap(err, "image `%s` is not in the store, and pulling it failed", name);
  return 0;
}
