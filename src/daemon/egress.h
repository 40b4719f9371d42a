/* OpenSandbox's egress API for a sandbox (below its endpoint for SBXD_EGRESS_PORT) and sbxd's
 * /metrics of the egress enforcers' counters (egress.c). */
#ifndef SBXD_EGRESS_H
#define SBXD_EGRESS_H

#include "http.h"

#define SBXD_EGRESS_PORT 18080 /* the SDK's DEFAULT_EGRESS_PORT */
#define SBXD_EGRESS_AUTH_HEADER "OPENSANDBOX-EGRESS-AUTH"
#define SBXD_BODY_EGRESS (1u << 20) /* the sidecar reads at most 1 MiB of a /policy body */

enum MHD_Result h_egress_get(struct req *r);
enum MHD_Result h_egress_patch(struct req *r);
enum MHD_Result h_egress_delete(struct req *r);
enum MHD_Result h_egress_method(struct req *r);
enum MHD_Result h_egress_not_found(struct req *r);
enum MHD_Result h_net_metrics(struct req *r);

#endif
