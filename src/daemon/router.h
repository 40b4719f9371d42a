/* Who answers which request: the route table (router.c) and the sandbox endpoint mounts. */
#ifndef SBXD_ROUTER_H
#define SBXD_ROUTER_H

#include "http.h"

/* Routes a request whose head has arrived: answers it at once (an error, a route that needs no
 * body), or sets r->done and r->body_max (and, for a streaming route, r->on_body) and returns
 * MHD_YES for server.c to collect the body. */
enum MHD_Result sbxd_route(struct req *r);

#endif
