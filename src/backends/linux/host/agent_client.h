/* The linux backend's transport: the contract over sbx-init's protocol (src/common/proto.h) on
 * the sandbox's control socket <dir>/ctl.sock. */
#ifndef SBX_LINUX_AGENT_CLIENT_H
#define SBX_LINUX_AGENT_CLIENT_H

#include "backend.h"

int sbx__agent_ping(const char *dir, int timeout_ms, sbx_error_t *err);
/* Changes the sandbox's idle expiry (sbx-init's own; 0: never). */
int sbx__agent_set_idle(const char *dir, uint64_t idle_ms, sbx_error_t *err);
int sbx__agent_exec(struct sbx_instance *in, const char *command, const struct sbx_exec_opts *o,
                    struct sbx_exec_result *res, sbx_error_t *err);
/* Starts an interactive command (stdin fed by STDIN frames; tty: on a new terminal of rows x
 * cols): returns the connection once sbx-init sent STARTED (the command's id into id), for the
 * session (session.c) to carry on. */
int sbx__agent_exec_start(struct sbx_instance *in, const char *command,
                          const struct sbx_exec_opts *o, bool tty, unsigned rows, unsigned cols,
                          char id[65], sbx_error_t *err);
/* Runs `true` within timeout_ms in all (connect, spawn, answer): the reclaim health check. */
int sbx__agent_health(const char *dir, int timeout_ms, sbx_error_t *err);
int sbx__agent_signal(struct sbx_instance *in, const char *cmd_id, int signo, sbx_error_t *err);
int sbx__agent_read_text(struct sbx_instance *in, const char *path, int64_t start, int64_t end,
                         char **text, size_t *len, sbx_error_t *err);
int sbx__agent_read_to_fd(struct sbx_instance *in, const char *path, uint64_t max, int fd,
                          sbx_error_t *err);
int sbx__agent_read_to_buf(struct sbx_instance *in, const char *path, uint64_t max, void **data,
                           size_t *len, sbx_error_t *err);
int sbx__agent_write(struct sbx_instance *in, const char *path, const void *data, size_t len,
                     int fd, bool append, sbx_error_t *err);
int sbx__agent_write_ex(struct sbx_instance *in, const char *path, const void *data, size_t len,
                        int fd, bool append, unsigned mode, sbx_error_t *err);
int sbx__agent_list_dir(struct sbx_instance *in, const char *path, int depth, sbx_strv_t *out,
                        sbx_error_t *err);
int sbx__agent_glob(struct sbx_instance *in, const char *path, const char *pattern,
                    bool include_dirs, size_t max, sbx_strv_t *out, bool *truncated,
                    sbx_error_t *err);
int sbx__agent_grep(struct sbx_instance *in, const char *path, const char *pattern,
                    const struct sbx_grep_opts *o, struct sbx_grep_match **m, size_t *n,
                    bool *truncated, sbx_error_t *err);
int sbx__agent_stat(struct sbx_instance *in, const char *path, struct sbx_file_info *info,
                    sbx_error_t *err);
int sbx__agent_mkdir(struct sbx_instance *in, const char *path, unsigned mode, bool *created,
                     sbx_error_t *err);
int sbx__agent_remove(struct sbx_instance *in, const char *path, int flags, sbx_error_t *err);
int sbx__agent_rename(struct sbx_instance *in, const char *src, const char *dst, sbx_error_t *err);
int sbx__agent_chmod(struct sbx_instance *in, const char *path, unsigned mode, const char *owner,
                     const char *group, sbx_error_t *err);
int sbx__agent_readdir(struct sbx_instance *in, const char *path, int depth, bool find,
                       const char *pattern, struct sbx_file_info **v, size_t *n, sbx_error_t *err);
int sbx__agent_replace(struct sbx_instance *in, const char *path, const void *old, size_t old_len,
                       const void *new_, size_t new_len, uint64_t *count, sbx_error_t *err);
int sbx__agent_read_range(struct sbx_instance *in, const char *path, uint64_t offset,
                          uint64_t limit, int fd, int (*on_size)(void *, uint64_t), void *arg,
                          sbx_error_t *err);
int sbx__agent_write_mode(struct sbx_instance *in, const char *path, const void *data, size_t len,
                          int fd, unsigned mode, sbx_error_t *err);
int sbx__agent_cmd_status(struct sbx_instance *in, const char *id, struct sbx_command_status *st,
                          sbx_error_t *err);
int sbx__agent_cmd_logs(struct sbx_instance *in, const char *id, uint64_t cursor, int fd,
                        uint64_t *next, sbx_error_t *err);
int sbx__agent_connect_port(struct sbx_instance *in, int port, sbx_error_t *err);
/* session.c: the session_start operation */
sbx_session_t *sbx__linux_session_start(struct sbx_instance *in, const char *command,
                                        const struct sbx_exec_opts *o,
                                        const struct sbx_session_opts *so, sbx_error_t *err);

/* Generic request on a fresh connection; the reply's payload is returned for OK. */
int sbx__agent_simple(const char *dir, uint16_t type, const void *req, size_t len, char **reply,
                      size_t *reply_len, sbx_error_t *err);

#endif
