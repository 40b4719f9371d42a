/* sbx-init: PID 1 of every local sandbox. It reaps zombies, runs commands in their own process
 * groups, streams their output, and does file and search operations natively, serving many
 * clients at once (a thread per connection) over the framed protocol of proto.h. */
#ifndef SBX_AGENT_H
#define SBX_AGENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "proto.h"

struct sbx_agent_opts {
  int listen_fd;          /* a listening unix socket */
  int lease_fd;           /* the sandbox's lease file (flock'ed by active users), or -1 */
  int64_t idle_timeout_s; /* exit when unleased and idle this long; 0 = never */
  uint64_t cmd_nofile;    /* soft RLIMIT_NOFILE of every command; 0 = sbx-init's own */
};

int sbx_agent_serve(const struct sbx_agent_opts *o);

/* One client connection. */
struct agent_conn {
  int fd;
  uint32_t req; /* id of the request being served */
};

/* Sends an ERR frame for err and releases it. Returns 0 if the frame was sent. */
int agent_reply_error(struct agent_conn *c, sbx_error_t *err);
int agent_reply_ok(struct agent_conn *c, const sbx_tlv_writer_t *w);

/* exec.c */
void agent_exec_init(int epoll_fd, uint64_t cmd_nofile);
int agent_exec(struct agent_conn *c, const char *payload, size_t len);
int agent_signal(struct agent_conn *c, const char *payload, size_t len);
int agent_cmd_status(struct agent_conn *c, const char *payload, size_t len);
int agent_cmd_logs(struct agent_conn *c, const char *payload, size_t len);
/* Called by the main loop when a background command's pidfd becomes readable. */
void agent_exec_reap_background(void *cookie);

/* files.c */
void agent_files_init(void);
int agent_read_text(struct agent_conn *c, const char *payload, size_t len);
int agent_read(struct agent_conn *c, const char *payload, size_t len);
int agent_write(struct agent_conn *c, const char *payload, size_t len);
int agent_list(struct agent_conn *c, const char *payload, size_t len);
int agent_glob(struct agent_conn *c, const char *payload, size_t len);
int agent_grep(struct agent_conn *c, const char *payload, size_t len);
int agent_stat(struct agent_conn *c, const char *payload, size_t len);
int agent_mkdir(struct agent_conn *c, const char *payload, size_t len);
int agent_remove(struct agent_conn *c, const char *payload, size_t len);
int agent_rename(struct agent_conn *c, const char *payload, size_t len);
int agent_chmod(struct agent_conn *c, const char *payload, size_t len);
int agent_connect(struct agent_conn *c, const char *payload, size_t len);
int agent_readdir(struct agent_conn *c, const char *payload, size_t len);
int agent_find(struct agent_conn *c, const char *payload, size_t len);
int agent_replace(struct agent_conn *c, const char *payload, size_t len);

/* Opens path (absolute, inside the sandbox) without ever leaving the sandbox's root or
 * following magic links. */
int agent_open(const char *path, int flags, int mode, sbx_error_t *err);

#endif
