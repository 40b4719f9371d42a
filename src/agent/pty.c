/* Terminals and input for interactive commands (pty.h). */
#include "pty.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

static atomic_int open_ptys;

int agent_pty_open(unsigned rows, unsigned cols, int *slave, sbx_error_t *err)
{
  if (rows == 0 || cols == 0 || rows > SBX_PTY_MAX_DIM || cols > SBX_PTY_MAX_DIM)
    return sbx__make_error(err, 0, SBX_E_INVALID, "terminal size must be 1-%d rows and columns",
                           SBX_PTY_MAX_DIM);
  if (atomic_fetch_add(&open_ptys, 1) >= AGENT_MAX_PTYS) {
    atomic_fetch_sub(&open_ptys, 1);
    return sbx__make_error(err, 0, SBX_E_BUSY, "too many terminals open in this sandbox (%d)",
                           AGENT_MAX_PTYS);
  }
  cleanup_close int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  char name[64];
  if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof name) != 0) {
    atomic_fetch_sub(&open_ptys, 1);
    return sbx__make_error(err, errno, SBX_E_IO, "allocate a terminal");
  }
  int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (s < 0) {
    atomic_fetch_sub(&open_ptys, 1);
    return sbx__make_error(err, errno, SBX_E_IO, "open the terminal %s", name);
  }
  agent_pty_resize(m, rows, cols);
  fcntl(m, F_SETFL, O_NONBLOCK);
  *slave = s;
  return steal_fd(&m);
}

void agent_pty_close(int master)
{
  if (master >= 0) {
    close(master);
    atomic_fetch_sub(&open_ptys, 1);
  }
}

int agent_pty_resize(int master, unsigned rows, unsigned cols)
{
  if (rows == 0 || cols == 0 || rows > SBX_PTY_MAX_DIM || cols > SBX_PTY_MAX_DIM)
    return -1;
  struct winsize ws = {.ws_row = (unsigned short) rows, .ws_col = (unsigned short) cols};
  return ioctl(master, TIOCSWINSZ, &ws);
}

int agent_pty_foreground(int master)
{
  pid_t pg = tcgetpgrp(master);
  return pg > 0 ? pg : 0;
}

bool agent_input_pending(const struct agent_input *in)
{
  return in->fd >= 0 && (in->off < in->buf.len || in->eof);
}

static void input_close(struct agent_input *in)
{
  if (in->own && in->fd >= 0)
    close(in->fd);
  in->fd = -1;
  in->buf.len = in->off = 0;
  in->eof = false;
}

void agent_input_flush(struct agent_input *in)
{
  while (in->fd >= 0 && in->off < in->buf.len) {
    ssize_t n = write(in->fd, in->buf.data + in->off, in->buf.len - in->off);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN)
        input_close(in); /* EPIPE: the command closed its stdin; EIO: the terminal is gone */
      return;
    }
    in->off += (size_t) n;
  }
  if (in->fd < 0)
    return;
  in->buf.len = in->off = 0;
  if (in->eof) {
    if (in->pty) {
      /* the terminal's EOF character (VEOF, normally ^D) ends a read in canonical mode */
      struct termios t;
      unsigned char c = tcgetattr(in->fd, &t) == 0 ? t.c_cc[VEOF] : 4;
      in->eof = false;
      agent_input_push(in, &c, 1);
    } else {
      input_close(in);
    }
  }
}

void agent_input_push(struct agent_input *in, const void *data, size_t len)
{
  if (in->fd < 0)
    return; /* the command no longer reads: input is dropped */
  sbx__buf_append(&in->buf, data, len);
  agent_input_flush(in);
}

void agent_input_eof(struct agent_input *in)
{
  if (in->fd < 0)
    return;
  in->eof = true;
  agent_input_flush(in);
}

void agent_input_free(struct agent_input *in)
{
  input_close(in);
  sbx__buf_free(&in->buf);
}
