/* sbx-init's command handlers (exec.c): EXEC, SIGNAL, CMD_STATUS, CMD_LOGS. Each takes a
 * request's TLV payload and answers it through reply.h. */
#ifndef SBX_AGENT_EXEC_H
#define SBX_AGENT_EXEC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "reply.h"

/* Once, before any connection: the main loop's epoll (background commands' pidfds are watched
 * there) and the soft RLIMIT_NOFILE of every command (0 = sbx-init's own). */
void agent_exec_init(int epoll_fd, uint64_t cmd_nofile, int (*cmd_confine)(void));
int agent_exec(struct agent_conn *c, const char *payload, size_t len);
int agent_signal(struct agent_conn *c, const char *payload, size_t len);
int agent_cmd_status(struct agent_conn *c, const char *payload, size_t len);
int agent_cmd_logs(struct agent_conn *c, const char *payload, size_t len);
/* Called by the main loop when a background command's pidfd becomes readable. */
void agent_exec_reap_background(void *cookie);
/* PID 1's main thread reaped si's process: a background command's end goes to its record.
 * (A background command outlives the connection thread that started it; re-parented to the
 * main thread it is reaped there, and its pidfd then answers ECHILD.) */
void agent_exec_reaped(const siginfo_t *si);

#endif
