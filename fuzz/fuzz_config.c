/* libFuzzer target for the configuration loader: any input must either load or fail with one
 * error, leak nothing, and a successful load must dump to YAML that loads again. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sbx/config.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  sbx_error_t err = NULL;
  struct sbx_config *cfg = sbx_config_load_string("fuzz.yaml", (const char *) data, size, &err);
  if (cfg == NULL) {
    if (err == NULL || err->msg == NULL || strchr(err->msg, '\n') != NULL)
      abort(); /* every failure carries a one-line message */
    sbx_error_release(&err);
    return 0;
  }
  if (err != NULL)
    abort();

  char *dump = sbx_config_dump(cfg);
  if (dump == NULL)
    abort();
  struct sbx_config *again = sbx_config_load_string("dump.yaml", dump, strlen(dump), &err);
  /* The dump is loadable unless a resolved value itself starts with '$' (documented). */
  if (again == NULL && (err == NULL || strstr(err->msg, "Environment variable") == NULL)) {
    fprintf(stderr, "dump does not load: %s\n%s\n", err ? err->msg : "(no error)", dump);
    abort();
  }
  sbx_error_release(&err);
  sbx_config_free(again);
  free(dump);
  sbx_config_free(cfg);
  return 0;
}
