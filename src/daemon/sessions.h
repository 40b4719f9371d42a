/* execd's bash sessions (sessions.c): create, run a command in one, delete. */
#ifndef SBXD_SESSIONS_H
#define SBXD_SESSIONS_H

#include "http.h"

enum MHD_Result h_session_create(struct req *r);
enum MHD_Result h_session_run(struct req *r);
enum MHD_Result h_session_delete(struct req *r);

#endif
