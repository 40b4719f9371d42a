/* The server context: the few things every part of sbxd reads (the providers, the
 * configuration, the listen address, the stop flag) and the count of worker threads still
 * running. main.c (or the request fuzzer) fills it before anything starts and frees it after
 * everything stopped; while sbxd serves, only `stopping` and `workers` change (atomics).
 * Everything else is the state of the one module that uses it: the box table (registry.c), the
 * listener (server.c), the spares thread (spares.c). See docs/design/sbxd.md. */
#ifndef SBXD_CTX_H
#define SBXD_CTX_H

#include <sbx/sbx.h>
#include <stdatomic.h>
#include <stdbool.h>

#define SBXD_EXECD_PORT 44772
#define SBXD_TOKEN_HEADER "X-EXECD-ACCESS-TOKEN"
#define SBXD_API_KEY_HEADER "OPEN-SANDBOX-API-KEY"

struct sbxd_ctx {
  sbx_provider_t *p;     /* holds every sandbox sbxd serves */
  sbx_provider_t *admin; /* destroys sandboxes (never holds any) */
  struct sbx_config *cfg;
  char *home;
  char *api_key;     /* NULL: no lifecycle auth */
  char *listen;      /* as configured, then as bound */
  const char *shell; /* "bash" if the image has it, else "sh" */
  atomic_bool stopping;
  atomic_int workers; /* detached worker threads still running */
};
extern struct sbxd_ctx srv;

/* Worker bookkeeping for shutdown: a detached thread counts itself in before it is started
 * and out when it ends (main waits for the count to reach 0). */
void sbxd_worker_start(void);
void sbxd_worker_done(void);
/* Starts a detached thread (small stack). 0, or -1 when it could not. */
int sbxd_spawn(void *(*fn)(void *), void *arg);

#endif
