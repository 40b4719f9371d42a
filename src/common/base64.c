#include "base64.h"
#include "util.h"

#include <stdint.h>
#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *sbx__base64_encode(const void *data, size_t n)
{
  const unsigned char *d = data;
  char *out = xmalloc(((n + 2) / 3) * 4 + 1);
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t) d[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t) d[i + 1] << 8;
    if (i + 2 < n)
      v |= d[i + 2];
    out[o++] = alphabet[(v >> 18) & 63];
    out[o++] = alphabet[(v >> 12) & 63];
    out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
  }
  out[o] = '\0';
  return out;
}

unsigned char *sbx__base64_decode(const char *s, size_t n, size_t *len)
{
  unsigned char *out = xmalloc(n / 4 * 3 + 4);
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0, pad = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
      continue;
    if (c == '=') {
      pad++;
      continue;
    }
    const char *p = c ? strchr(alphabet, c) : NULL;
    if (p == NULL || pad) {
      free(out);
      return NULL;
    }
    acc = (acc << 6) | (uint32_t) (p - alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (unsigned char) (acc >> bits);
    }
  }
  if (pad > 2 || bits >= 6) {
    free(out);
    return NULL;
  }
  out[o] = '\0';
  *len = o;
  return out;
}
