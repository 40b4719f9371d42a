/* Docker's reference grammar, as distribution/reference's regular expressions define it:
 *   path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )*
 *   domain         := host-component ( "." host-component )* [ ":" port ]  (or [IPv6])
 *   tag            := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
 *   digest         := "sha256:" 64 lower-case hex digits (the only algorithm the store has) */
#include "ref.h"
#include "image.h"

#include <ctype.h>
#include <string.h>

static bool alnum_lower(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool path_component(const char *s, size_t n)
{
  if (n == 0 || !alnum_lower(s[0]) || !alnum_lower(s[n - 1]))
    return false;
  for (size_t i = 0; i < n;) {
    if (alnum_lower(s[i])) {
      i++;
      continue;
    }
    /* a separator: ".", "_", "__" or one or more "-", always between alnums */
    size_t j = i;
    if (s[i] == '.')
      j++;
    else if (s[i] == '_')
      j += (i + 1 < n && s[i + 1] == '_') ? 2 : 1;
    else if (s[i] == '-')
      while (j < n && s[j] == '-')
        j++;
    else
      return false;
    if (j >= n || !alnum_lower(s[j]))
      return false;
    i = j;
  }
  return true;
}

static bool host_component(const char *s, size_t n)
{
  if (n == 0 || !isalnum((unsigned char) s[0]) || !isalnum((unsigned char) s[n - 1]))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char) s[i]) && s[i] != '-')
      return false;
  return true;
}

static bool domain_valid(const char *s, size_t n)
{
  const char *colon = NULL;
  size_t hostlen = n;
  if (n > 0 && s[0] == '[') { /* [IPv6]:port */
    const char *end = memchr(s, ']', n);
    if (end == NULL || end == s + 1)
      return false;
    for (const char *p = s + 1; p < end; p++)
      if (!isxdigit((unsigned char) *p) && *p != ':')
        return false;
    hostlen = (size_t) (end - s) + 1;
    if (hostlen < n && s[hostlen] != ':')
      return false;
  } else {
    colon = memchr(s, ':', n);
    if (colon)
      hostlen = (size_t) (colon - s);
    for (size_t i = 0; i < hostlen;) {
      const char *dot = memchr(s + i, '.', hostlen - i);
      size_t len = dot ? (size_t) (dot - (s + i)) : hostlen - i;
      if (!host_component(s + i, len))
        return false;
      i += len + (dot ? 1 : 0);
      if (dot && i == hostlen)
        return false;
    }
    if (hostlen == 0)
      return false;
  }
  if (hostlen < n) { /* ":port" */
    size_t plen = n - hostlen - 1;
    if (plen == 0 || plen > 5)
      return false;
    for (size_t i = hostlen + 1; i < n; i++)
      if (!isdigit((unsigned char) s[i]))
        return false;
  }
  return true;
}

static bool tag_valid(const char *t)
{
  size_t n = strlen(t);
  if (n == 0 || n > 128 || !(isalnum((unsigned char) t[0]) || t[0] == '_'))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!isalnum((unsigned char) t[i]) && t[i] != '_' && t[i] != '.' && t[i] != '-')
      return false;
  return true;
}

int sbx__ref_parse(const char *s, struct sbx_ref *out, sbx_error_t *err)
{
  if (s == NULL || *s == '\0')
    return sbx__make_error(err, 0, SBX_E_INVALID, "empty image reference");
  size_t len = strlen(s);
  for (const char *c = s; *c; c++)
    if ((unsigned char) *c <= 0x20 || (unsigned char) *c >= 0x7f)
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "image reference has a space, a control or a non-ASCII character");
  if (len > SBX_REF_NAME_MAX + 1 + 128 + 1 + 7 + SBX_DIGEST_HEX)
    return sbx__make_error(err, 0, SBX_E_INVALID, "image reference is too long (%zu bytes)", len);
  cleanup_free char *name = xstrdup(s);
  char *digest = NULL, *tag = NULL;
  char *at = strchr(name, '@');
  if (at) {
    *at = '\0';
    digest = at + 1;
    if (!sbx__digest_valid(digest))
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "image reference `%s`: the digest must be sha256: and 64 lower-case "
                             "hex digits",
                             s);
  }
  /* a tag is after the last ':' that follows the last '/' (host:port/name has one before) */
  char *slash = strrchr(name, '/');
  char *colon = strrchr(slash ? slash : name, ':');
  if (colon) {
    *colon = '\0';
    tag = colon + 1;
    if (!tag_valid(tag))
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "image reference `%s`: bad tag `%s` (letters, digits, _ . -, at most "
                             "128, not starting with . or -)",
                             s, tag);
  }
  if (strlen(name) > SBX_REF_NAME_MAX)
    return sbx__make_error(err, 0, SBX_E_INVALID, "image reference `%s`: name longer than %d", s,
                           SBX_REF_NAME_MAX);
  const char *path = name;
  cleanup_free char *domain = NULL;
  char *first = strchr(name, '/');
  if (first &&
      (memchr(name, '.', (size_t) (first - name)) || memchr(name, ':', (size_t) (first - name)) ||
       (first - name == 9 && strncmp(name, "localhost", 9) == 0) || (name[0] == '['))) {
    if (!domain_valid(name, (size_t) (first - name)))
      return sbx__make_error(err, 0, SBX_E_INVALID, "image reference `%s`: bad registry `%.*s`", s,
                             (int) (first - name), name);
    domain = xstrndup(name, (size_t) (first - name));
    path = first + 1;
  } else {
    domain = xstrdup("docker.io");
  }
  if (strcmp(domain, "index.docker.io") == 0) {
    free(domain);
    domain = xstrdup("docker.io");
  }
  for (const char *p = path;;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t) (e - p) : strlen(p);
    if (!path_component(p, n))
      return sbx__make_error(err, 0, SBX_E_INVALID,
                             "image reference `%s`: bad name component `%.*s` (lower-case letters "
                             "and digits, separated by . _ __ or -)",
                             s, (int) n, p);
    if (e == NULL)
      break;
    p = e + 1;
  }
  char *full = strcmp(domain, "docker.io") == 0 && strchr(path, '/') == NULL
                   ? xasprintf("library/%s", path)
                   : xstrdup(path);
  if (strlen(domain) + 1 + strlen(full) > SBX_REF_NAME_MAX) {
    free(full);
    return sbx__make_error(err, 0, SBX_E_INVALID,
                           "image reference `%s`: the name with its registry is longer than %d", s,
                           SBX_REF_NAME_MAX);
  }
  out->path = full;
  out->domain = domain;
  domain = NULL;
  out->tag = tag ? xstrdup(tag) : digest ? NULL : xstrdup("latest");
  out->digest = digest ? xstrdup(digest) : NULL;
  return 0;
}

char *sbx__ref_store_name(const struct sbx_ref *r)
{
  if (r->digest)
    return xasprintf("%s/%s@%s", r->domain, r->path, r->digest);
  return xasprintf("%s/%s:%s", r->domain, r->path, r->tag);
}

const char *sbx__ref_reference(const struct sbx_ref *r)
{
  return r->digest ? r->digest : r->tag;
}

void sbx__ref_free(struct sbx_ref *r)
{
  free(r->domain);
  free(r->path);
  free(r->tag);
  free(r->digest);
  memset(r, 0, sizeof *r);
}
