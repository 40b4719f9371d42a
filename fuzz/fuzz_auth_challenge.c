/* libFuzzer target for the registry's authentication inputs (src/lib/image/auth.c): a
 * WWW-Authenticate value, a token server's JSON answer and base64 (the auths file's `auth`).
 * Each parses or fails with a one-line error; a Bearer challenge always has an http(s) realm,
 * a token has only header-safe characters, and base64 round-trips. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base64.h"
#include "image/auth.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_err(int r, sbx_error_t *err)
{
  if (r < 0) {
    if (*err == NULL || strchr((*err)->msg, '\n'))
      abort();
    sbx_error_release(err);
  } else if (*err != NULL) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  const char *s = (const char *) data;
  sbx_error_t err = NULL;
  struct sbx_auth_challenge c;
  int r = sbx__auth_challenge_parse(s, size, &c, &err);
  check_err(r, &err);
  if (r == 0) {
    if (c.scheme == SBX_AUTH_NONE)
      abort();
    if (c.scheme == SBX_AUTH_BEARER && (c.realm == NULL || (strncmp(c.realm, "http://", 7) != 0 &&
                                                            strncmp(c.realm, "https://", 8) != 0)))
      abort();
    sbx__auth_challenge_free(&c);
  }
  char *tok;
  long exp;
  r = sbx__auth_token_parse(s, size, &tok, &exp, &err);
  check_err(r, &err);
  if (r == 0) {
    for (const char *p = tok; *p; p++)
      if ((unsigned char) *p < 0x21 || (unsigned char) *p > 0x7e)
        abort();
    if (exp <= 0 || exp > 86400)
      abort();
    free(tok);
  }
  size_t n;
  char *dec = (char *) sbx__base64_decode(s, size, &n);
  if (dec) {
    char *enc = sbx__base64_encode(dec, n);
    size_t m;
    char *back = (char *) sbx__base64_decode(enc, strlen(enc), &m);
    if (back == NULL || m != n || memcmp(back, dec, n) != 0)
      abort();
    free(back);
    free(enc);
    free(dec);
  }
  return 0;
}
