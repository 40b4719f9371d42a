/* execd's commands (commands.c): run one (its output as an event stream), interrupt it, its
 * status, a background command's logs; and ping. */
#ifndef SBXD_COMMANDS_H
#define SBXD_COMMANDS_H

#include "http.h"

enum MHD_Result h_ping(struct req *r);
enum MHD_Result h_command(struct req *r);
enum MHD_Result h_command_interrupt(struct req *r);
enum MHD_Result h_command_status(struct req *r);
enum MHD_Result h_command_logs(struct req *r);

#endif
