/* The backends this library has, by name: the one place that knows them all. A program may add
 * one of its own before making a provider (the unit tests' in-memory backend does). */
#include "registry.h"

#include <string.h>

static const struct sbx_backend_ops *added[4];

int sbx__backend_register(const struct sbx_backend_ops *ops)
{
  for (size_t i = 0; i < ARRAY_SIZE(added); i++)
    if (added[i] == NULL || added[i] == ops) {
      added[i] = ops;
      return 0;
    }
  return -1;
}

const struct sbx_backend_ops *sbx__backend_find(const char *name)
{
  if (name == NULL || strcmp(name, "linux") == 0)
    return &sbx__backend_linux;
  if (strcmp(name, "opensandbox") == 0)
    return &sbx__backend_opensandbox;
  for (size_t i = 0; i < ARRAY_SIZE(added) && added[i]; i++)
    if (strcmp(name, added[i]->name) == 0)
      return added[i];
  return NULL;
}
