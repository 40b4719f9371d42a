/* The volumes of a new sandbox (volumes.c). */
#ifndef SBXD_VOLUMES_H
#define SBXD_VOLUMES_H

#include <jansson.h>
#include <sbx/sbx.h>

#include "parse.h"

struct volumes {
  struct sbx_mount *m;
  int *fds; /* the directories to mount, held open until the sandbox is made */
  size_t n;
  json_t *info; /* what is kept in extra */
};

/* Why a request's volumes were refused: the HTTP status, OpenSandbox's code, a message
 * (malloc'ed, the caller's). */
struct volume_error {
  unsigned status;
  const char *code;
  char *msg;
};

/* Validates the request's "volumes" (a list whose items' shape the caller checked; NULL for
 * none), makes the named volumes' folders and holds every folder open; -1 with *e on error.
 * Free out with volumes_free either way. */
int volumes_build(json_t *vols, struct volumes *out, struct volume_error *e);
/* After the sandbox with that id was made: each mount is the folder volumes_build holds. */
int volumes_verify(const char *id, const struct volumes *vs, char **why);
void volumes_free(struct volumes *v);

#endif
