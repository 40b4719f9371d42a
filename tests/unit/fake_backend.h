/* An in-memory backend for the provider's unit tests: its "sandboxes" are entries in a table
 * (keyed by the pid it hands out), so cap, reclaim, gc and spares run without root, namespaces
 * or sbx-init. The tests make one die or fail its health check, and count what was called. */
#ifndef SBX_TEST_FAKE_BACKEND_H
#define SBX_TEST_FAKE_BACKEND_H

#include <stdbool.h>

#include "../../src/lib/backend.h"

#define FAKE_MAX 64

struct fake_box {
  long pid;
  bool alive, healthy;
  char id[SBX_ID_LEN + 1]; /* as last named (create, adopt) */
  char user_data[256];
};

struct fake_stats {
  int creates, destroys, adopts, healths, pings, sweeps, execs;
  bool fail_adopt; /* the next adopts fail */
  struct fake_box box[FAKE_MAX];
  int n;
};

extern struct fake_stats fake;
extern struct sbx_backend_ops fake_backend; /* name "fake" */

/* Registers the backend (once) and clears the table and counters. */
void fake_reset(void);
/* The box of the sandbox with this id (by its meta's pid), or NULL. */
struct fake_box *fake_box_of(const char *home, const char *id);
/* Boxes alive now. */
int fake_alive_count(void);

#endif
