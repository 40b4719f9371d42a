/* Built against an installed libsbx with `pkg-config --cflags --libs sbx` (tests/install/run.sh):
 * only calls that need no sandbox, each with an answer the script checks. */
#include <sbx/sbx.h>

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
  char id[17];
  sbx_error_t err = NULL;
  if (sbx_scope_to_id("alice", "t1", id, &err) < 0) {
    fprintf(stderr, "sbx_scope_to_id: %s\n", err ? err->msg : "?");
    return 1;
  }
  /* Bad input: an error naming it, nothing else. */
  sbx_error_t bad = NULL;
  char id2[17];
  int r = sbx_scope_to_id("", "t1", id2, &bad);
  struct sbx_config *cfg = sbx_config_new_default();
  char *yaml = cfg ? sbx_config_dump(cfg) : NULL;
  printf("id %s\nbad %d %s\nkind %s\nconfig %s\n", id, r,
         bad ? sbx_error_kind_name(bad->kind) : "none", sbx_error_kind_name(SBX_E_NOT_FOUND),
         yaml && *yaml ? "dumped" : "empty");
  free(yaml);
  sbx_config_free(cfg);
  sbx_error_release(&bad);
  return 0;
}
