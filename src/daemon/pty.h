/* execd's interactive PTY sessions (pty.c): POST /pty, GET and DELETE /pty/{id}, and the
 * session's WebSocket, GET /pty/{id}/ws (components/execd/PTY.md in OpenSandbox). */
#ifndef SBXD_PTY_H
#define SBXD_PTY_H

#include "http.h"

enum MHD_Result h_pty_create(struct req *r);
enum MHD_Result h_pty_status(struct req *r);
enum MHD_Result h_pty_delete(struct req *r);
enum MHD_Result h_pty_ws(struct req *r);
/* At shutdown, before the listener stops: closes every WebSocket (1001) and waits for them. */
void sbxd_pty_stop(void);

#endif
