/* Docker's image reference grammar (distribution/reference): [DOMAIN/]PATH[:TAG][@DIGEST].
 * `python:3.12-slim` is docker.io/library/python:3.12-slim; the first component is a domain
 * when it has a `.` or a `:`, or is `localhost`. A pure parser (fuzz/fuzz_ref.c). */
#ifndef SBX_IMAGE_REF_H
#define SBX_IMAGE_REF_H

#include "error.h"

#define SBX_REF_NAME_MAX 255 /* DOMAIN/PATH, as Docker bounds it */

struct sbx_ref {
  char *domain; /* "docker.io", "127.0.0.1:5000" */
  char *path;   /* "library/python" */
  char *tag;    /* NULL when only a digest is given; "latest" when neither is */
  char *digest; /* "sha256:<64 hex>" or NULL */
};

/* SBX_E_INVALID naming what is wrong; *out is untouched on error. */
int sbx__ref_parse(const char *s, struct sbx_ref *out, sbx_error_t *err);
/* The name the store keeps: DOMAIN/PATH:TAG or DOMAIN/PATH@DIGEST (the store then drops
 * docker.io/library/). A tag and a digest: the digest wins (it is what is pulled). */
char *sbx__ref_store_name(const struct sbx_ref *r);
/* The tag or the digest: what GET /v2/PATH/manifests/ takes. */
const char *sbx__ref_reference(const struct sbx_ref *r);
void sbx__ref_free(struct sbx_ref *r);

#endif
