/* The registry's WWW-Authenticate challenge, the token answer, and the auths file. */
#include "auth.h"
#include "base64.h"

#include <ctype.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"

#define AUTHS_FILE_MAX (1u << 20)

static bool tchar(char c)
{
  return isalnum((unsigned char) c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static void skip_ws(const char **p, const char *end)
{
  while (*p < end && (**p == ' ' || **p == '\t'))
    (*p)++;
}

/* token "=" ( token | quoted-string ); *val is malloc'd. 0 ok, -1 malformed. */
static int param(const char **p, const char *end, char **key, char **val)
{
  const char *k = *p;
  while (*p < end && tchar(**p))
    (*p)++;
  if (*p == k)
    return -1;
  size_t klen = (size_t) (*p - k);
  skip_ws(p, end);
  if (*p >= end || **p != '=')
    return -1;
  (*p)++;
  skip_ws(p, end);
  sbx_buf_t v = {0};
  if (*p < end && **p == '"') {
    (*p)++;
    for (;;) {
      if (*p >= end) {
        sbx__buf_free(&v);
        return -1;
      }
      char c = *(*p)++;
      if (c == '"')
        break;
      if (c == '\\') {
        if (*p >= end) {
          sbx__buf_free(&v);
          return -1;
        }
        c = *(*p)++;
      }
      if ((unsigned char) c < 0x20 && c != '\t') {
        sbx__buf_free(&v);
        return -1;
      }
      sbx__buf_append(&v, &c, 1);
    }
  } else {
    const char *s = *p;
    while (*p < end && (tchar(**p) || **p == '/' || **p == ':'))
      (*p)++;
    if (*p == s)
      return -1;
    sbx__buf_append(&v, s, (size_t) (*p - s));
  }
  sbx__buf_append(&v, "", 1);
  *key = xstrndup(k, klen);
  *val = sbx__buf_steal(&v);
  return 0;
}

void sbx__auth_challenge_free(struct sbx_auth_challenge *c)
{
  free(c->realm);
  free(c->service);
  free(c->scope);
  memset(c, 0, sizeof *c);
}

int sbx__auth_challenge_parse(const char *hdr, size_t len, struct sbx_auth_challenge *out,
                              sbx_error_t *err)
{
  memset(out, 0, sizeof *out);
  if (len > SBX_AUTH_HEADER_MAX)
    return sbx__make_error(err, 0, SBX_E_INVALID, "WWW-Authenticate header too long (%zu bytes)",
                           len);
  const char *p = hdr, *end = hdr + len;
  while (p < end) {
    skip_ws(&p, end);
    while (p < end && (*p == ',' || *p == ' '))
      p++;
    const char *s = p;
    while (p < end && tchar(*p))
      p++;
    if (p == s)
      break;
    size_t slen = (size_t) (p - s);
    enum sbx_auth_scheme sch = SBX_AUTH_NONE;
    if (slen == 6 && strncasecmp(s, "bearer", 6) == 0)
      sch = SBX_AUTH_BEARER;
    else if (slen == 5 && strncasecmp(s, "basic", 5) == 0)
      sch = SBX_AUTH_BASIC;
    struct sbx_auth_challenge c = {.scheme = sch};
    bool bad = false;
    /* the parameters of this challenge: until a token not followed by '=' (the next scheme) */
    for (;;) {
      skip_ws(&p, end);
      const char *save = p;
      const char *q = p;
      while (q < end && tchar(*q))
        q++;
      const char *r = q;
      skip_ws(&r, end);
      if (q == p || r >= end || *r != '=') {
        p = save;
        break;
      }
      char *k = NULL, *v = NULL;
      if (param(&p, end, &k, &v) < 0) {
        bad = true;
        break;
      }
      char **slot = strcasecmp(k, "realm") == 0     ? &c.realm
                    : strcasecmp(k, "service") == 0 ? &c.service
                    : strcasecmp(k, "scope") == 0   ? &c.scope
                                                    : NULL;
      if (slot && *slot == NULL)
        *slot = v;
      else
        free(v);
      free(k);
      skip_ws(&p, end);
      if (p < end && *p == ',')
        p++;
    }
    if (bad) {
      sbx__auth_challenge_free(&c);
      return sbx__make_error(err, 0, SBX_E_INVALID, "malformed WWW-Authenticate header");
    }
    if (sch == SBX_AUTH_BEARER && (c.realm == NULL || (strncmp(c.realm, "https://", 8) != 0 &&
                                                       strncmp(c.realm, "http://", 7) != 0))) {
      sbx__auth_challenge_free(&c);
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "WWW-Authenticate: a Bearer challenge without an http(s) realm");
    }
    if (sch != SBX_AUTH_NONE) {
      *out = c;
      return 0;
    }
    sbx__auth_challenge_free(&c);
  }
  return sbx__make_error(err, 0, SBX_E_INVALID,
                         "WWW-Authenticate names neither a Basic nor a Bearer challenge");
}

int sbx__auth_token_parse(const char *json, size_t len, char **token, long *expires_in,
                          sbx_error_t *err)
{
  *token = NULL;
  *expires_in = 60;
  if (len > SBX_AUTH_TOKEN_MAX)
    return sbx__make_error(err, 0, SBX_E_INVALID, "token answer too large (%zu bytes)", len);
  json_error_t je;
  json_t *j = json_loadb(json, len, 0, &je);
  if (!json_is_object(j)) {
    json_decref(j);
    return sbx__make_error(err, 0, SBX_E_INVALID, "token answer is not a JSON object");
  }
  const char *t = json_string_value(json_object_get(j, "token"));
  if (t == NULL || *t == '\0')
    t = json_string_value(json_object_get(j, "access_token"));
  json_t *ex = json_object_get(j, "expires_in");
  int r = 0;
  if (t == NULL || *t == '\0')
    r = sbx__make_error(err, 0, SBX_E_INVALID, "token answer has no token");
  else {
    for (const char *c = t; *c; c++)
      if ((unsigned char) *c < 0x21 || (unsigned char) *c > 0x7e) {
        r = sbx__make_error(err, 0, SBX_E_INVALID, "token has a character not allowed in a header");
        break;
      }
  }
  if (r == 0) {
    *token = xstrdup(t);
    if (json_is_integer(ex) && json_integer_value(ex) > 0)
      *expires_in = json_integer_value(ex) > 86400 ? 86400 : (long) json_integer_value(ex);
  }
  json_decref(j);
  return r;
}

static json_t *auths_entry(json_t *auths, const char *domain)
{
  json_t *e = json_object_get(auths, domain);
  if (e)
    return e;
  cleanup_free char *h = xasprintf("https://%s", domain);
  if ((e = json_object_get(auths, h)))
    return e;
  cleanup_free char *h2 = xasprintf("http://%s", domain);
  if ((e = json_object_get(auths, h2)))
    return e;
  if (strcmp(domain, "docker.io") == 0) {
    if ((e = json_object_get(auths, "https://index.docker.io/v1/")))
      return e;
    return json_object_get(auths, "registry-1.docker.io");
  }
  return NULL;
}

int sbx__auth_lookup(const char *path, const char *domain, char **user, char **pass,
                     sbx_error_t *err)
{
  *user = *pass = NULL;
  cleanup_free char *p = NULL;
  const char *e;
  if (path)
    p = xstrdup(path);
  else if ((e = getenv("REGISTRY_AUTH_FILE")) && *e)
    p = xstrdup(e);
  else if ((e = getenv("DOCKER_CONFIG")) && *e)
    p = xasprintf("%s/config.json", e);
  else if ((e = getenv("HOME")) && *e)
    p = xasprintf("%s/.docker/config.json", e);
  else
    return 0;
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (sbx__read_file_at(AT_FDCWD, p, AUTHS_FILE_MAX, &data, &len) < 0) {
    if (errno == ENOENT && path == NULL)
      return 0;
    return sbx__make_error(err, errno, SBX_E_CONFIG, "read the registry credentials `%s`", p);
  }
  json_error_t je;
  json_t *j = json_loadb(data, len, 0, &je);
  if (!json_is_object(j)) {
    json_decref(j);
    return sbx__make_error(err, 0, SBX_E_CONFIG, "`%s` is not a JSON object (line %d: %s)", p,
                           je.line, je.text);
  }
  json_t *ent = auths_entry(json_object_get(j, "auths"), domain);
  int r = 0;
  const char *a = json_string_value(json_object_get(ent, "auth"));
  const char *u = json_string_value(json_object_get(ent, "username"));
  const char *pw = json_string_value(json_object_get(ent, "password"));
  if (a && *a) {
    size_t n;
    char *dec = (char *) sbx__base64_decode(a, strlen(a), &n);
    char *colon = dec ? memchr(dec, ':', n) : NULL;
    if (colon == NULL || memchr(dec, '\0', n)) {
      r = sbx__make_error(err, 0, SBX_E_CONFIG,
                          "`%s`: the auth of `%s` is not base64 of user:password", p, domain);
    } else {
      *colon = '\0';
      *user = xstrdup(dec);
      *pass = xstrdup(colon + 1);
      r = 1;
    }
    if (dec)
      explicit_bzero(dec, n);
    free(dec);
  } else if (u && pw) {
    *user = xstrdup(u);
    *pass = xstrdup(pw);
    r = 1;
  }
  explicit_bzero(data, len);
  json_decref(j);
  return r;
}
