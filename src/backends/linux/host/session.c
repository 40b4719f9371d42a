/* Interactive commands over sbx-init's protocol (include/sbx/sbx.h, sbx_session_*): the EXEC
 * connection stays open; the caller's input goes out as STDIN frames (and STDIN_EOF, RESIZE,
 * SIGNAL), the command's output and its EXIT come back. Writes never block: frames are queued
 * in a bounded buffer and sent as the socket takes them, so a caller that also reads the
 * output can never deadlock with a command that is not reading its input. */
#include "agent_client.h"
#include "proto.h"

#include <string.h>
#include <sys/socket.h>

struct sbx_session_s {
  int fd;
  char id[65];
  bool ended;
  bool input_gone; /* the connection no longer takes input */
  sbx_buf_t out;   /* encoded frames not yet sent */
  size_t out_off;
  char *last; /* the payload of the last frame read */
};

sbx_session_t *sbx__linux_session_start(struct sbx_instance *in, const char *command,
                                        const struct sbx_exec_opts *o,
                                        const struct sbx_session_opts *so, sbx_error_t *err)
{
  char id[65] = "";
  int fd = sbx__agent_exec_start(in, command, o, so && so->tty, so ? so->rows : 0,
                                 so ? so->cols : 0, id, err);
  if (fd < 0)
    return NULL;
  sbx_session_t *s = xzalloc(sizeof *s);
  s->fd = fd;
  memcpy(s->id, id, sizeof id);
  return s;
}

const char *sbx_session_id(const sbx_session_t *s)
{
  return s ? s->id : "";
}

int sbx_session_fd(const sbx_session_t *s)
{
  return s ? s->fd : -1;
}

size_t sbx_session_pending(const sbx_session_t *s)
{
  return s ? s->out.len - s->out_off : 0;
}

int sbx_session_flush(sbx_session_t *s, sbx_error_t *err)
{
  while (s->out_off < s->out.len) {
    ssize_t n =
        send(s->fd, s->out.data + s->out_off, s->out.len - s->out_off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN)
        return 0;
      if (errno == EPIPE || errno == ECONNRESET) {
        /* sbx-init stopped reading: the command ended (its EXIT is still to be read) or the
         * channel broke (the next read says so). Input from now on is dropped. */
        s->input_gone = true;
        break;
      }
      return sbx__make_error(err, errno, SBX_E_BACKEND, "sandbox channel broken (session input)");
    }
    s->out_off += (size_t) n;
  }
  s->out.len = s->out_off = 0;
  return 0;
}

static int queue(sbx_session_t *s, uint16_t type, const void *p, size_t len, sbx_error_t *err)
{
  if (s == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "no session");
  if (s->ended)
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "the command has ended");
  if (s->input_gone)
    return 0;
  if (sbx_session_pending(s) + len > SBX_SESSION_QUEUE_MAX)
    return sbx__make_error(err, EAGAIN, SBX_E_BUSY, "session input queue is full");
  unsigned char h[SBX_PROTO_HDR];
  sbx_frame_hdr_t hdr = {.len = (uint32_t) len, .type = type, .flags = 0, .req = 1};
  sbx__frame_hdr_encode(h, &hdr);
  sbx__buf_append(&s->out, h, sizeof h);
  sbx__buf_append(&s->out, p, len);
  return sbx_session_flush(s, err);
}

int sbx_session_write(sbx_session_t *s, const void *data, size_t len, sbx_error_t *err)
{
  const char *d = data;
  while (len > 0) {
    size_t n = len < SBX_STDIN_MAX_FRAME ? len : SBX_STDIN_MAX_FRAME;
    if (queue(s, SBX_MSG_STDIN, d, n, err) < 0)
      return -1;
    d += n;
    len -= n;
  }
  return 0;
}

int sbx_session_close_stdin(sbx_session_t *s, sbx_error_t *err)
{
  return queue(s, SBX_MSG_STDIN_EOF, NULL, 0, err);
}

int sbx_session_resize(sbx_session_t *s, unsigned rows, unsigned cols, sbx_error_t *err)
{
  if (rows == 0 || cols == 0 || rows > SBX_TTY_MAX_DIM || cols > SBX_TTY_MAX_DIM)
    return sbx__make_error(err, 0, SBX_E_INVALID, "terminal size must be 1-%d rows and columns",
                           SBX_TTY_MAX_DIM);
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_ROWS, rows);
  sbx__tlv_put_u64(&w, SBX_T_COLS, cols);
  int r = queue(s, SBX_MSG_RESIZE, w.buf.data, w.buf.len, err);
  sbx__tlv_free(&w);
  return r;
}

int sbx_session_signal(sbx_session_t *s, int signo, sbx_error_t *err)
{
  if (signo <= 0 || signo > 64)
    return sbx__make_error(err, 0, SBX_E_INVALID, "signal number must be 1-64, got %d", signo);
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_SIGNO, (uint64_t) signo);
  int r = queue(s, SBX_MSG_SIGNAL, w.buf.data, w.buf.len, err);
  sbx__tlv_free(&w);
  return r;
}

int sbx_session_read(sbx_session_t *s, struct sbx_session_event *ev, sbx_error_t *err)
{
  memset(ev, 0, sizeof *ev);
  if (s == NULL)
    return sbx__make_error(err, 0, SBX_E_INVALID, "no session");
  if (s->ended)
    return sbx__make_error(err, 0, SBX_E_NOT_FOUND, "the command has ended");
  free(s->last);
  s->last = NULL;
  sbx_frame_hdr_t hdr;
  if (sbx__frame_recv(s->fd, &hdr, &s->last, SBX_PROTO_MAX_PAYLOAD) < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "sandbox channel broken (session)");
  const char *p = s->last;
  switch (hdr.type) {
  case SBX_MSG_STDOUT:
  case SBX_MSG_STDERR:
    ev->type = SBX_SESSION_OUTPUT;
    ev->stream = hdr.type == SBX_MSG_STDOUT ? 1 : 2;
    ev->data = p;
    ev->len = hdr.len;
    return 0;
  case SBX_MSG_EXIT: {
    int64_t code = 0;
    uint64_t to = 0, sig = 0;
    sbx__tlv_get_i64(p, hdr.len, SBX_T_CODE, 0, &code);
    sbx__tlv_get_u64(p, hdr.len, SBX_T_TIMED_OUT, 0, &to);
    sbx__tlv_get_u64(p, hdr.len, SBX_T_SIGNALED, 0, &sig);
    ev->type = SBX_SESSION_EXIT;
    ev->exit_code = (int) code;
    ev->timed_out = to != 0;
    ev->signaled = sig != 0;
    s->ended = true;
    return 0;
  }
  case SBX_MSG_ERR:
    s->ended = true;
    return sbx__error_from_frame(p, hdr.len, err);
  default:
    return sbx__make_error(err, EPROTO, SBX_E_BACKEND,
                           "sbx-init sent an unexpected frame %u (session)", hdr.type);
  }
}

void sbx_session_free(sbx_session_t *s)
{
  if (s == NULL)
    return;
  close(s->fd);
  sbx__buf_free(&s->out);
  free(s->last);
  free(s);
}
