/* libarchive and libcrypto, loaded with dlopen on the first import (the opensandbox backend
 * loads libcurl the same way): every other use of libsbx, and every `host` sandbox, starts
 * without mapping them. */
#include "image.h"
#include "dl.h"

#include <dlfcn.h>
#include <openssl/evp.h>
#include <pthread.h>

static struct sbx_archive_api ar;
static struct {
  __typeof__(EVP_MD_CTX_new) *ctx_new;
  __typeof__(EVP_MD_CTX_free) *ctx_free;
  __typeof__(EVP_sha256) *sha256;
  __typeof__(EVP_DigestInit_ex) *init;
  __typeof__(EVP_DigestUpdate) *update;
  __typeof__(EVP_DigestFinal_ex) *final;
} cr;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *missing; /* what could not be loaded */

static void load(void)
{
  void *h = dlopen("libarchive.so.13", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    missing = "libarchive.so.13 (apt-get install libarchive13)";
    return;
  }
#define SBX_AR_LOAD(f)                                                                             \
  if ((*(void **) &ar.f = dlsym(h, #f)) == NULL) {                                                 \
    missing = "libarchive.so.13: " #f;                                                             \
    return;                                                                                        \
  }
  SBX_AR_FUNCS(SBX_AR_LOAD)
#undef SBX_AR_LOAD
  void *c = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
  if (c == NULL) {
    missing = "libcrypto.so.3 (apt-get install libssl3)";
    return;
  }
  if ((*(void **) &cr.ctx_new = dlsym(c, "EVP_MD_CTX_new")) == NULL ||
      (*(void **) &cr.ctx_free = dlsym(c, "EVP_MD_CTX_free")) == NULL ||
      (*(void **) &cr.sha256 = dlsym(c, "EVP_sha256")) == NULL ||
      (*(void **) &cr.init = dlsym(c, "EVP_DigestInit_ex")) == NULL ||
      (*(void **) &cr.update = dlsym(c, "EVP_DigestUpdate")) == NULL ||
      (*(void **) &cr.final = dlsym(c, "EVP_DigestFinal_ex")) == NULL)
    missing = "libcrypto.so.3: EVP digest functions";
}

int sbx__image_dl(sbx_error_t *err)
{
  pthread_once(&once, load);
  if (missing)
    return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "images need %s", missing);
  return 0;
}

const struct sbx_archive_api *sbx__archive_api(void)
{
  return &ar;
}

struct sbx_sha256_ctx {
  EVP_MD_CTX *md;
};

sbx_sha256_ctx *sbx__sha256_new(void)
{
  sbx_sha256_ctx *c = xmalloc(sizeof *c);
  c->md = cr.ctx_new();
  if (c->md == NULL || cr.init(c->md, cr.sha256(), NULL) != 1)
    abort(); /* allocation failure: the one condition that aborts */
  return c;
}

void sbx__sha256_update(sbx_sha256_ctx *c, const void *p, size_t n)
{
  cr.update(c->md, p, n);
}

void sbx__sha256_final(sbx_sha256_ctx *c, char out[SBX_DIGEST_HEX + 1])
{
  static const char hex[] = "0123456789abcdef";
  unsigned char d[32];
  unsigned int n = 0;
  cr.final(c->md, d, &n);
  for (int i = 0; i < 32; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[64] = '\0';
  cr.ctx_free(c->md);
  free(c);
}
