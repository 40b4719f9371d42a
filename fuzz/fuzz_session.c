/* libFuzzer target for the frames of an interactive command (SBX_EXEC_STDIN / SBX_EXEC_PTY), on
 * both ends:
 *
 * - sbx-init's side (src/agent/exec.c client_frame, src/agent/pty.c agent_input_*): the input's
 *   first half is the client's byte stream during an exec, framed as conn_main frames it; each
 *   frame goes through client_frame with the command's stdin a real pipe. Oracles: the bytes
 *   that come out of the pipe are exactly the STDIN payloads accepted before STDIN_EOF, in
 *   order; after EOF the pipe is closed (the reader sees end of file); nothing leaks. SIGNAL
 *   frames are decoded but not delivered (no process group to send them to here).
 * - libsbx's side (src/backends/linux/host/session.c, sbx_session_read): the second half is
 *   what sbx-init would send; events are read until an error or EXIT. Oracles: an OUTPUT event
 *   is a STDOUT/STDERR frame's payload, and nothing is read after EXIT.
 *
 * Input: u16 split (little endian), then the two streams. */
#include "../src/agent/reply.c"
#include "../src/agent/exec.c"
#include "../src/agent/pty.c"
#include "../src/backends/linux/host/session.c"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* session.c's start needs a sandbox: never reached here */
int sbx__agent_exec_start(struct sbx_instance *in, const char *command,
                          const struct sbx_exec_opts *o, bool tty, unsigned rows, unsigned cols,
                          char id[65], sbx_error_t *err)
{
  (void) in, (void) command, (void) o, (void) tty, (void) rows, (void) cols, (void) id;
  return sbx__make_error(err, 0, SBX_E_UNSUPPORTED, "no sandbox in the fuzzer");
}

#define MAX_STREAM (100u << 10) /* fits a socket buffer: one write each */

static void drain(int fd, sbx_buf_t *got)
{
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    sbx__buf_append(got, buf, (size_t) n);
}

static void agent_half(const uint8_t *p, size_t n)
{
  int sp[2], pp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0 || pipe2(pp, O_CLOEXEC) < 0)
    abort();
  fcntl(pp[0], F_SETFL, O_NONBLOCK);
  fcntl(pp[1], F_SETFL, O_NONBLOCK);
  if (n && write(sp[1], p, n) != (ssize_t) n)
    abort();
  close(sp[1]);
  struct agent_input in = {.fd = pp[1], .own = true};
  sbx_buf_t want = {0}, got = {0};
  bool eof = false;
  for (;;) {
    sbx_frame_hdr_t hdr;
    char *payload = NULL;
    if (sbx__frame_recv(sp[0], &hdr, &payload, SBX_STDIN_MAX_FRAME) < 0)
      break;
    bool ok = true;
    if (hdr.type == SBX_MSG_SIGNAL) {
      uint64_t sig = 0;
      ok = sbx__tlv_get_u64(payload, hdr.len, SBX_T_SIGNO, SIGTERM, &sig) >= 0;
    } else {
      if (hdr.type == SBX_MSG_STDIN && !eof && in.fd >= 0)
        sbx__buf_append(&want, payload, hdr.len);
      if (hdr.type == SBX_MSG_STDIN_EOF)
        eof = true;
      ok = client_frame(&hdr, payload, 0, -1, &in);
    }
    free(payload);
    if (!ok)
      break;
    /* the command reads: what was queued goes through */
    while (agent_input_pending(&in)) {
      drain(pp[0], &got);
      agent_input_flush(&in);
    }
  }
  drain(pp[0], &got);
  if (got.len != want.len || (want.len && memcmp(got.data, want.data, want.len) != 0))
    abort();
  bool closed = in.fd < 0;
  if (eof != closed)
    abort(); /* EOF closes the pipe, and nothing else does (a pipe that is read never fails) */
  agent_input_free(&in);
  char c;
  if (read(pp[0], &c, 1) != 0)
    abort(); /* every write end is gone: the reader sees end of file */
  close(pp[0]);
  close(sp[0]);
  sbx__buf_free(&want);
  sbx__buf_free(&got);
}

static void client_half(const uint8_t *p, size_t n)
{
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
    abort();
  if (n && write(sp[1], p, n) != (ssize_t) n)
    abort();
  close(sp[1]);
  sbx_session_t *s = xzalloc(sizeof *s);
  s->fd = sp[0];
  for (;;) {
    struct sbx_session_event ev;
    sbx_error_t err = NULL;
    if (sbx_session_read(s, &ev, &err) < 0) {
      if (err == NULL)
        abort(); /* every failure says why */
      sbx_error_release(&err);
      break;
    }
    if (ev.type == SBX_SESSION_OUTPUT && (ev.stream < 1 || ev.stream > 2 || ev.len > n))
      abort();
    if (ev.type == SBX_SESSION_EXIT) {
      if (sbx_session_read(s, &ev, &err) == 0)
        abort(); /* nothing after EXIT */
      sbx_error_release(&err);
      break;
    }
  }
  sbx_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 2 || size > 2 * MAX_STREAM)
    return 0;
  size_t split = (size_t) (data[0] | data[1] << 8);
  data += 2;
  size -= 2;
  if (split > size)
    split = size;
  if (split > MAX_STREAM || size - split > MAX_STREAM)
    return 0;
  agent_half(data, split);
  client_half(data + split, size - split);
  return 0;
}
