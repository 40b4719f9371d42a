/* libFuzzer target for Docker's reference grammar (src/lib/image/ref.c): any input parses or
 * fails with a one-line error; what parses has a domain, a path of valid components, a tag or a
 * digest, and its store name parses again to the same parts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/ref.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (memchr(data, '\0', size))
    return 0;
  char *s = xstrndup((const char *) data, size);
  sbx_error_t err = NULL;
  struct sbx_ref r;
  if (sbx__ref_parse(s, &r, &err) < 0) {
    if (err == NULL || strchr(err->msg, '\n'))
      abort();
    sbx_error_release(&err);
    free(s);
    return 0;
  }
  if (err || !r.domain || !*r.domain || !r.path || !*r.path || (!r.tag && !r.digest) ||
      strstr(r.path, "..") || r.path[0] == '/')
    abort();
  char *name = sbx__ref_store_name(&r);
  struct sbx_ref again;
  if (sbx__ref_parse(name, &again, NULL) < 0 || strcmp(again.domain, r.domain) != 0 ||
      strcmp(again.path, r.path) != 0 || strcmp(sbx__ref_reference(&again), sbx__ref_reference(&r)))
    abort();
  sbx__ref_free(&again);
  free(name);
  sbx__ref_free(&r);
  free(s);
  return 0;
}
