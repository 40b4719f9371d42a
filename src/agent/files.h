/* sbx-init's file and search handlers (files.c). Each takes a request's TLV payload and answers
 * it through reply.h. */
#ifndef SBX_AGENT_FILES_H
#define SBX_AGENT_FILES_H

#include <stddef.h>

#include "error.h"
#include "reply.h"

/* Once, before any connection: opens the sandbox's root and points the search walkers at it. */
void agent_files_init(bool guard_ids, bool guard_nobody);
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
