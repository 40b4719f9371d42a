/* Interactive commands: the terminals sbx-init allocates in the sandbox's own devpts, and the
 * input (STDIN frames) that a command with SBX_EXEC_STDIN or SBX_EXEC_PTY is fed. Used by
 * exec.c's foreground loop; depends on the protocol and src/common only. */
#ifndef SBX_AGENT_PTY_H
#define SBX_AGENT_PTY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "proto.h"
#include "util.h"

#define AGENT_MAX_PTYS 32 /* terminals open at once in one sandbox */

/* Opens a new terminal of rows x cols (/dev/ptmx of the sandbox's devpts): returns its master
 * (non-blocking, close-on-exec) and *slave (close-on-exec, not our controlling terminal). At most
 * AGENT_MAX_PTYS at once (SBX_E_BUSY past that); each success is paired with agent_pty_close. */
int agent_pty_open(unsigned rows, unsigned cols, int *slave, sbx_error_t *err);
void agent_pty_close(int master);
/* New window size: the kernel sends SIGWINCH to the terminal's foreground process group. */
int agent_pty_resize(int master, unsigned rows, unsigned cols);
/* The terminal's foreground process group (0 if none). */
int agent_pty_foreground(int master);

/* What the client sent and the command has not read yet. At most one STDIN frame is pending:
 * while it is, the connection is not read (the client's writes wait), so memory stays bounded. */
struct agent_input {
  int fd;   /* the stdin pipe's write end or the terminal's master; -1 once closed */
  bool pty; /* EOF is the terminal's EOF character, not a close */
  bool own; /* fd is ours to close (the pipe) */
  bool eof; /* EOF asked for: done once buf is written */
  sbx_buf_t buf;
  size_t off;
};

bool agent_input_pending(const struct agent_input *in);
/* Queues data (or EOF) and writes what the command takes without blocking. */
void agent_input_push(struct agent_input *in, const void *data, size_t len);
void agent_input_eof(struct agent_input *in);
/* Writes more of what is queued (call when fd is writable). A command that closed its stdin
 * (EPIPE) drops what is queued. */
void agent_input_flush(struct agent_input *in);
void agent_input_free(struct agent_input *in);

#endif
