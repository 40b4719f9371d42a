/* libFuzzer target for the image documents (src/lib/image/manifest.c): an image index /
 * manifest list, a manifest, an image config and docker save's manifest.json. Any input must
 * parse or fail with one one-line error, leak nothing, and what parses must hold only checked
 * digests. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

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
  struct sbx_index ix;
  int r = sbx__index_parse(s, size, &ix, &err);
  check_err(r, &err);
  if (r == 0) {
    for (size_t i = 0; i < ix.n; i++)
      if (!sbx__digest_valid(ix.v[i].digest) || ix.v[i].size < 0)
        abort();
    size_t pick;
    check_err(sbx__index_pick(&ix, NULL, &pick, &err), &err);
    check_err(sbx__index_pick(&ix, "linux/arm64/v8", &pick, &err), &err);
    (void) sbx__media_kind(ix.n ? ix.v[0].media_type : NULL);
    sbx__index_free(&ix);
  }
  struct sbx_manifest m;
  r = sbx__manifest_parse(s, size, &m, &err);
  check_err(r, &err);
  if (r == 0) {
    if (!sbx__digest_valid(m.config.digest))
      abort();
    for (size_t i = 0; i < m.n_layers; i++)
      if (!sbx__digest_valid(m.layers[i].digest))
        abort();
    sbx__manifest_free(&m);
  }
  struct sbx_image_config c;
  r = sbx__image_config_parse(s, size, &c, &err);
  check_err(r, &err);
  if (r == 0) {
    for (size_t i = 0; i < c.diff_ids.n; i++)
      if (!sbx__digest_valid(c.diff_ids.v[i]))
        abort();
    sbx__image_config_free(&c);
  }
  struct sbx_docker_manifest dm;
  r = sbx__docker_manifest_parse(s, size, &dm, &err);
  check_err(r, &err);
  if (r == 0) {
    for (size_t i = 0; i < dm.n; i++)
      if (dm.v[i].config == NULL)
        abort();
    sbx__docker_manifest_free(&dm);
  }
  cleanup_free char *name = strndup(s, size);
  if (name && strlen(name) == size) {
    cleanup_free char *n = sbx__image_normalize(name);
    if (n == NULL)
      abort();
  }
  return 0;
}
