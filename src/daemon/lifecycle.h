/* OpenSandbox's lifecycle API (lifecycle.c; a new sandbox's volumes are volumes.c). */
#ifndef SBXD_LIFECYCLE_H
#define SBXD_LIFECYCLE_H

#include "http.h"

enum MHD_Result h_sandbox_list(struct req *r);
enum MHD_Result h_sandbox_create(struct req *r);
enum MHD_Result h_sandbox_get(struct req *r);
enum MHD_Result h_sandbox_delete(struct req *r);
enum MHD_Result h_sandbox_metadata(struct req *r);
enum MHD_Result h_sandbox_pause(struct req *r);
enum MHD_Result h_sandbox_resume(struct req *r);
enum MHD_Result h_sandbox_renew(struct req *r);
enum MHD_Result h_sandbox_endpoint(struct req *r);
enum MHD_Result h_metrics_events(struct req *r);

#endif
