/* Creates that answered before their sandbox exists (pending.c): a pull in progress shows as
 * Pending with a reason, a failed one as Failed (kept an hour, as OpenSandbox's server does). */
#ifndef SBXD_PENDING_H
#define SBXD_PENDING_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct pending_info {
  char id[17];
  json_t *extra; /* what the box's extra will be (createdAt, image, metadata...) */
  char state[16];
  char *reason, *message;
  int64_t trans_ms;
};
void pending_info_free(struct pending_info *pi);

/* A new record in Pending (with a copy of extra). */
void pending_add(const char *id, json_t *extra, const char *reason, const char *message);
void pending_set(const char *id, const char *state, const char *reason, const char *message);
/* A copy of the record; false if there is none (or it was deleted). */
bool pending_get(const char *id, struct pending_info *out);
/* Every record, oldest first; free each with pending_info_free, then the array. */
size_t pending_list(struct pending_info **out);
/* The create ended: made (the record goes: the box answers now) or failed (Failed,
 * PROVISIONING_ERROR, msg). True if the record was deleted meanwhile (the sandbox must go). */
bool pending_done(const char *id, bool failed, const char *msg);
/* DELETE of a pending create: false if there is no such record. */
bool pending_delete(const char *id);

#endif
