/* The backends this library has, by name (registry.c). */
#ifndef SBX_LIB_REGISTRY_H
#define SBX_LIB_REGISTRY_H

#include "backend.h"

extern const struct sbx_backend_ops sbx__backend_linux;
extern const struct sbx_backend_ops sbx__backend_opensandbox;
/* NULL name: the default (linux); NULL if there is no backend of that name. */
const struct sbx_backend_ops *sbx__backend_find(const char *name);
/* Adds a backend under ops->name (not thread-safe: before any provider exists). -1 if full. */
int sbx__backend_register(const struct sbx_backend_ops *ops);

#endif
