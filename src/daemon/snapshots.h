/* OpenSandbox's snapshot API (snapshots.c): a sandbox's root committed as an image of the store,
 * listed, fetched, deleted, and restored by a create with snapshotId. */
#ifndef SBXD_SNAPSHOTS_H
#define SBXD_SNAPSHOTS_H

#include "http.h"

enum MHD_Result h_snapshot_create(struct req *r);
enum MHD_Result h_snapshot_list(struct req *r);
enum MHD_Result h_snapshot_get(struct req *r);
enum MHD_Result h_snapshot_delete(struct req *r);
/* The image a create with snapshotId starts from (malloc'ed), or -1 with the answer's status,
 * code and message (malloc'ed): not found, not Ready, its image gone. */
int snapshots_restore_image(const char *id, char **image, unsigned *status, const char **code,
                            char **msg);

#endif
