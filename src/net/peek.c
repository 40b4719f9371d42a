/* Host and SNI from the first bytes of a connection (see peek.h). */
#include "peek.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- names ---- */

/* A DNS name into out, lowercased, one trailing dot dropped: letters, digits, '-', '_' and
 * non-empty labels only (so no IP literal with a colon, no space, no NUL). */
static bool put_name(const uint8_t *s, size_t n, char *out)
{
  if (n > 0 && s[n - 1] == '.')
    n--;
  if (n == 0 || n > SBX_PEEK_NAME_MAX || s[n - 1] == '.')
    return false; /* "name.." is an empty label, not a trailing dot */
  for (size_t i = 0; i < n; i++) {
    uint8_t c = s[i];
    if (c >= 'A' && c <= 'Z')
      c = (uint8_t) (c - 'A' + 'a');
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              (c == '.' && i > 0 && s[i - 1] != '.');
    if (!ok)
      return false;
    out[i] = (char) c;
  }
  out[n] = '\0';
  return true;
}

/* ---- TLS ---- */

struct cur {
  const uint8_t *p;
  size_t n;
};

static bool take(struct cur *c, size_t len, struct cur *out)
{
  if (c->n < len)
    return false;
  if (out)
    *out = (struct cur){c->p, len};
  c->p += len;
  c->n -= len;
  return true;
}

static bool u8(struct cur *c, size_t *v)
{
  if (c->n < 1)
    return false;
  *v = c->p[0];
  return take(c, 1, NULL);
}

static bool u16(struct cur *c, size_t *v)
{
  if (c->n < 2)
    return false;
  *v = (size_t) c->p[0] << 8 | c->p[1];
  return take(c, 2, NULL);
}

/* a length-prefixed vector (prefix of 1 or 2 bytes) */
static bool vec(struct cur *c, int prefix, struct cur *out)
{
  size_t len;
  if (!(prefix == 1 ? u8(c, &len) : u16(c, &len)))
    return false;
  return take(c, len, out);
}

#define EXT_SERVER_NAME 0x0000
#define EXT_ECH 0xfe0d

static enum sbx_peek_result server_name(struct cur ext, char *name)
{
  struct cur list;
  if (!vec(&ext, 2, &list) || ext.n != 0 || list.n == 0)
    return SBX_PEEK_MALFORMED;
  bool got = false;
  while (list.n > 0) {
    size_t type;
    struct cur host;
    if (!u8(&list, &type) || !vec(&list, 2, &host))
      return SBX_PEEK_MALFORMED;
    if (type != 0)
      continue; /* other name types: none is defined; a server ignores them */
    if (got || !put_name(host.p, host.n, name))
      return SBX_PEEK_MALFORMED; /* one host_name (RFC 6066), a valid one */
    got = true;
  }
  return got ? SBX_PEEK_NAME : SBX_PEEK_NO_NAME;
}

static enum sbx_peek_result client_hello(struct cur b, char *name)
{
  struct cur x;
  size_t v;
  if (!take(&b, 2 + 32, NULL))
    return SBX_PEEK_MALFORMED;
  if (!vec(&b, 1, &x) || x.n > 32)
    return SBX_PEEK_MALFORMED; /* session id */
  if (!vec(&b, 2, &x) || x.n < 2 || x.n % 2 != 0)
    return SBX_PEEK_MALFORMED; /* cipher suites */
  if (!vec(&b, 1, &x) || x.n < 1)
    return SBX_PEEK_MALFORMED; /* compression methods */
  if (b.n == 0)
    return SBX_PEEK_NO_NAME; /* no extensions at all */
  struct cur exts;
  if (!vec(&b, 2, &exts) || b.n != 0)
    return SBX_PEEK_MALFORMED;
  uint64_t seen[65536 / 64];
  memset(seen, 0, sizeof seen);
  enum sbx_peek_result r = SBX_PEEK_NO_NAME;
  bool ech = false;
  while (exts.n > 0) {
    struct cur data;
    if (!u16(&exts, &v) || !vec(&exts, 2, &data))
      return SBX_PEEK_MALFORMED;
    if (seen[v / 64] & (1ull << (v % 64)))
      return SBX_PEEK_MALFORMED; /* an extension twice (RFC 8446 4.2) */
    seen[v / 64] |= 1ull << (v % 64);
    if (v == EXT_ECH)
      ech = true;
    else if (v == EXT_SERVER_NAME && (r = server_name(data, name)) == SBX_PEEK_MALFORMED)
      return r;
  }
  if (ech) {
    name[0] = '\0';
    return SBX_PEEK_ECH;
  }
  return r;
}

static enum sbx_peek_result tls(const uint8_t *buf, size_t n, int full, char *name)
{
  /* the handshake message may span records: their payloads, joined */
  uint8_t hs[SBX_PEEK_MAX];
  size_t hs_len = 0, off = 0;
  for (;;) {
    if (n - off < 5)
      return full ? SBX_PEEK_MALFORMED : SBX_PEEK_MORE;
    const uint8_t *rec = buf + off;
    size_t len = (size_t) rec[3] << 8 | rec[4];
    if (rec[0] != 0x16 || rec[1] != 3 || len == 0 || len > 16384)
      return SBX_PEEK_MALFORMED;
    if (n - off - 5 < len)
      return full ? (n >= SBX_PEEK_MAX ? SBX_PEEK_TOO_LONG : SBX_PEEK_MALFORMED) : SBX_PEEK_MORE;
    if (len > sizeof hs - hs_len)
      return SBX_PEEK_TOO_LONG;
    memcpy(hs + hs_len, rec + 5, len);
    hs_len += len;
    off += 5 + len;
    if (hs[0] != 1)
      return SBX_PEEK_MALFORMED; /* not a ClientHello */
    if (hs_len < 4)
      continue;
    size_t body = (size_t) hs[1] << 16 | (size_t) hs[2] << 8 | hs[3];
    if (body > sizeof hs - 4)
      return SBX_PEEK_TOO_LONG;
    if (hs_len - 4 >= body)
      return client_hello((struct cur){hs + 4, body}, name);
  }
}

/* ---- HTTP/1.x ---- */

static bool is_tchar(uint8_t c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool eq_nocase(const uint8_t *a, size_t n, const char *b)
{
  if (strlen(b) != n)
    return false;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = a[i];
    if (c >= 'A' && c <= 'Z')
      c = (uint8_t) (c - 'A' + 'a');
    if (c != (uint8_t) b[i])
      return false;
  }
  return true;
}

/* host[:port] (an authority without userinfo) into out; an empty one is "" */
static bool authority(const uint8_t *s, size_t n, char *out)
{
  out[0] = '\0';
  if (n == 0)
    return true;
  size_t host = n;
  for (size_t i = n; i > 0; i--)
    if (s[i - 1] == ':') {
      host = i - 1;
      break;
    }
  for (size_t i = host + 1; i < n; i++)
    if (s[i] < '0' || s[i] > '9')
      return false;
  if (host < n && n - host > 6)
    return false;
  return put_name(s, host, out); /* an IP literal in brackets fails here: not a name */
}

static enum sbx_peek_result http(const uint8_t *buf, size_t n, int full, char *name)
{
  /* a method first (a token and a space), or it is not HTTP/1.x: told at once, not after the
   * deadline */
  for (size_t i = 0;; i++) {
    if (i == n)
      return full ? SBX_PEEK_UNKNOWN : SBX_PEEK_MORE;
    if (i > 0 && buf[i] == ' ')
      break;
    if (i >= 32 || !is_tchar(buf[i]))
      return SBX_PEEK_UNKNOWN;
  }
  /* the whole header block first: a Host further down must be seen */
  size_t end = 0;
  for (size_t i = 0; i < n; i++) {
    if (buf[i] == '\n' && (i == 0 || buf[i - 1] != '\r'))
      return SBX_PEEK_MALFORMED; /* a bare LF: servers differ on it */
    if (i >= 3 && memcmp(buf + i - 3, "\r\n\r\n", 4) == 0) {
      end = i + 1;
      break;
    }
  }
  if (end == 0)
    return !full ? SBX_PEEK_MORE : n >= SBX_PEEK_MAX ? SBX_PEEK_TOO_LONG : SBX_PEEK_MALFORMED;
  /* request line: METHOD SP target SP HTTP/1.x CRLF */
  size_t i = 0;
  while (i < end && is_tchar(buf[i]))
    i++;
  if (i == 0 || i >= end || buf[i] != ' ')
    return SBX_PEEK_UNKNOWN;
  bool connect = i == 7 && memcmp(buf, "CONNECT", 7) == 0;
  size_t t0 = ++i;
  while (i < end && buf[i] > ' ' && buf[i] < 0x7f)
    i++;
  size_t t1 = i;
  if (t1 == t0 || i + 11 > end || buf[i] != ' ' || memcmp(buf + i + 1, "HTTP/1.", 7) != 0 ||
      (buf[i + 8] != '0' && buf[i + 8] != '1') || buf[i + 9] != '\r')
    return memcmp(buf + t0, "* HTTP/2.0", 10 < end - t0 ? 10 : end - t0) == 0 ? SBX_PEEK_UNKNOWN
                                                                              : SBX_PEEK_MALFORMED;
  i += 11; /* past the CRLF */
  /* the target's authority, where it has one (absolute-form, or CONNECT's authority-form): a
   * server takes it over Host (RFC 9112 3.2.2), so it must name the same */
  char target[SBX_PEEK_NAME_MAX + 1] = "";
  bool has_target = false;
  const uint8_t *t = buf + t0;
  size_t tn = t1 - t0;
  if (connect) {
    has_target = true;
  } else if (t[0] != '/' && !(tn == 1 && t[0] == '*')) {
    size_t k = 0;
    while (k < tn && t[k] != ':')
      k++;
    if (k + 3 > tn || memcmp(t + k, "://", 3) != 0 ||
        !(eq_nocase(t, k, "http") || eq_nocase(t, k, "https")))
      return SBX_PEEK_MALFORMED;
    t += k + 3;
    tn -= k + 3;
    size_t a = 0;
    while (a < tn && t[a] != '/' && t[a] != '?' && t[a] != '#')
      a++;
    tn = a;
    has_target = true;
  }
  if (has_target) {
    if (memchr(t, '@', tn) || !authority(t, tn, target) || target[0] == '\0')
      return SBX_PEEK_MALFORMED;
  }
  /* header fields: NAME ":" OWS VALUE OWS CRLF */
  bool got = false;
  while (i + 2 <= end && !(buf[i] == '\r' && buf[i + 1] == '\n')) {
    size_t e = i;
    while (buf[e] != '\r')
      e++; /* the block ends with CRLF: e stays inside it */
    if (buf[e + 1] != '\n')
      return SBX_PEEK_MALFORMED; /* a bare CR */
    size_t k = i;
    while (k < e && is_tchar(buf[k]))
      k++;
    if (k == i || k >= e || buf[k] != ':')
      return SBX_PEEK_MALFORMED; /* no name, a space before the colon, an obs-fold */
    if (eq_nocase(buf + i, k - i, "host")) {
      size_t v0 = k + 1, v1 = e;
      while (v0 < v1 && (buf[v0] == ' ' || buf[v0] == '\t'))
        v0++;
      while (v1 > v0 && (buf[v1 - 1] == ' ' || buf[v1 - 1] == '\t'))
        v1--;
      if (got || !authority(buf + v0, v1 - v0, name))
        return SBX_PEEK_MALFORMED; /* two Hosts (RFC 9112 3.2), or not a name */
      got = true;
    }
    i = e + 2;
  }
  if (has_target) {
    if (got && name[0] != '\0' && strcmp(name, target) != 0) {
      name[0] = '\0';
      return SBX_PEEK_MALFORMED; /* the target and Host disagree */
    }
    memcpy(name, target, strlen(target) + 1);
    return SBX_PEEK_NAME;
  }
  return got && name[0] != '\0' ? SBX_PEEK_NAME : SBX_PEEK_NO_NAME;
}

enum sbx_peek_result sbx__peek_name(const uint8_t *buf, size_t n, int full, char *name)
{
  name[0] = '\0';
  if (n > SBX_PEEK_MAX) {
    n = SBX_PEEK_MAX;
    full = 1;
  }
  if (n == 0)
    return full ? SBX_PEEK_NO_NAME : SBX_PEEK_MORE;
  enum sbx_peek_result r = buf[0] == 0x16 ? tls(buf, n, full, name) : http(buf, n, full, name);
  if (r != SBX_PEEK_NAME)
    name[0] = '\0';
  return r;
}

const char *sbx__peek_result_str(enum sbx_peek_result r)
{
  switch (r) {
  case SBX_PEEK_MORE:
    return "incomplete";
  case SBX_PEEK_NAME:
    return "name";
  case SBX_PEEK_NO_NAME:
    return "no Host or SNI";
  case SBX_PEEK_ECH:
    return "encrypted ClientHello (its name cannot be checked)";
  case SBX_PEEK_UNKNOWN:
    return "neither HTTP/1.x nor TLS (no name to check)";
  case SBX_PEEK_MALFORMED:
    return "malformed or ambiguous HTTP request or ClientHello";
  case SBX_PEEK_TOO_LONG:
    return "no Host or SNI within the first 16384 bytes";
  default:
    return "?";
  }
}
