/* The provider (provider.c): DeerFlow's SandboxProvider policy (scopes, the replica cap,
 * reclaim, gc) over one pool of the instance layer, with its spare pool. */
#ifndef SBX_LIB_PROVIDER_H
#define SBX_LIB_PROVIDER_H

#include <pthread.h>

#include "instance.h"
#include "spares.h"

struct sbx_provider_s {
  struct sbx_pool pool;
  struct sbx_config *owned_cfg;
  pthread_mutex_t lock;
  struct sbx_sandbox_s *held;
  bool shut_down;
  struct sbx_spares *spares; /* over $home/spare */
};

/* Called by the contract layer when an operation hit a terminal error. */
void sbx__sandbox_broken(sbx_sandbox_t *sb);

#endif
