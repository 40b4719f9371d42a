/* DeerFlow's provisioner API (provisioner.c, docs/deerflow.md). */
#ifndef SBXD_PROVISIONER_H
#define SBXD_PROVISIONER_H

#include "http.h"

enum MHD_Result h_prov_capabilities(struct req *r);
enum MHD_Result h_prov_create(struct req *r);
enum MHD_Result h_prov_get(struct req *r);
enum MHD_Result h_prov_list(struct req *r);
enum MHD_Result h_prov_delete(struct req *r);
enum MHD_Result h_prov_other(struct req *r);

#endif
