/* The backends this library has, by name: the one place that knows them all. */
#include "registry.h"

#include <string.h>

const struct sbx_backend_ops *sbx_backend_find(const char *name)
{
  if (name == NULL || strcmp(name, "linux") == 0)
    return &sbx_backend_linux;
  if (strcmp(name, "opensandbox") == 0)
    return &sbx_backend_opensandbox;
  return NULL;
}
