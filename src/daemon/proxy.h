/* A sandbox's other ports (proxy.c): the request forwarded to r->port on its loopback. */
#ifndef SBXD_PROXY_H
#define SBXD_PROXY_H

#include "http.h"

/* A streaming route: r->box and r->port are set, r->raw_sub is the target to send. */
enum MHD_Result sbxd_proxy_begin(struct req *r);

#endif
