/* Pull from a registry (the OCI distribution API over libcurl, loaded on first use): resolve a
 * reference, fetch its manifest (an index picks the platform), config and layers into an OCI
 * layout under the store's tmp/, every blob checked against its digest while it streams, then
 * hand the layout to sbx__image_import, which does every check the store relies on. */
#ifndef SBX_IMAGE_REGISTRY_H
#define SBX_IMAGE_REGISTRY_H

#include <stdbool.h>
#include <stdint.h>

#include "image.h"
#include <sbx/config.h>

#define SBX_PULL_MANIFEST_MAX (4u << 20)
#define SBX_PULL_LAYERS_MAX 256
#define SBX_PULL_PARALLEL 4

enum sbx_pull_state {
  SBX_PULL_RESOLVED, /* the manifest is known: digest is the manifest's, total its blobs' sum */
  SBX_PULL_WAITING,  /* a blob is queued */
  SBX_PULL_BYTES,    /* done bytes of total arrived */
  SBX_PULL_CACHED,   /* in the store (or verified by an earlier pull): not fetched */
  SBX_PULL_DONE,     /* fetched and verified */
  SBX_PULL_IMPORT,   /* every blob is here: the import (layer extraction) starts */
};
struct sbx_pull_event {
  enum sbx_pull_state state;
  const char *digest;
  uint64_t done, total;
};

struct sbx_pull_opts {
  const char *platform; /* "os/arch[/variant]"; NULL: this host's */
  struct sbx_layer_limits limits;
  const char *username, *password; /* NULL: the auths file (auth_file, else Docker's) */
  const char *auth_file;
  /* registries (host[:port]) tried before docker.io, like daemon.json's registry-mirrors;
   * "DOMAIN=MIRROR" mirrors another registry */
  const char *const *mirrors;
  size_t n_mirrors;
  /* registries spoken to over plain http (loopback ones always are) */
  const char *const *insecure;
  size_t n_insecure;
  /* sandbox.registries: credentials (when username is NULL) and plain http per registry */
  const struct sbx_registry *registries;
  size_t n_registries;
  long stall_s; /* a transfer with no byte for this long fails (and is retried); 0: 60 */
  /* called from the transfer threads, one call at a time */
  void (*progress)(void *ctx, const struct sbx_pull_event *ev);
  void *progress_ctx;
};

struct sbx_config;
/* o from the configuration: registries, registry_mirrors, the layer limits. */
void sbx__pull_opts_from_config(const struct sbx_config *cfg, struct sbx_pull_opts *o);

/* Pulls ref (Docker's grammar) into the store under its normalised name, which *name gets. */
int sbx__image_pull(const char *home, const char *ref, const struct sbx_pull_opts *o, char **name,
                    sbx_error_t *err);
/* Whether sbx__image_ensure would pull name: not in the store, a reference, SBX_PULL allows. */
bool sbx__image_pull_needed(const char *home, const char *name);
/* What a sandbox start calls: 0 if name is `host` or in the store; otherwise, if it is a
 * reference, pulls it (SBX_E_NOT_FOUND from the store when it is not one). */
int sbx__image_ensure(const char *home, const char *name, const struct sbx_pull_opts *o,
                      sbx_error_t *err);

#endif
