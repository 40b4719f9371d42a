/* The contract over sbx-init's protocol (proto.h), used by every backend whose sandboxes run
 * sbx-init locally. One connection per operation: connecting costs microseconds and keeps
 * concurrent operations on one sandbox independent. A broken or silent channel is a terminal
 * (SBX_E_BACKEND) error: the caller evicts the sandbox; nothing is retried. Every operation is
 * request() (connect, deadline, the request frame) then read_answer() (its frames up to OK). */
#include "agent_client.h"
#include "proto.h"
#include "text.h"

#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#define OP_TIMEOUT_MS (600 * 1000)   /* file and search operations */
#define START_TIMEOUT_MS (30 * 1000) /* from an exec request to its STARTED frame */

static int channel_error(int e, const char *what, sbx_error_t *err)
{
  if (e == EAGAIN || e == ETIMEDOUT)
    return sbx__make_error(err, ETIMEDOUT, SBX_E_TIMEOUT, "sandbox did not answer (%s)", what);
  return sbx__make_error(err, e, SBX_E_BACKEND, "sandbox channel broken (%s)", what);
}

static int agent_connect(const char *dir, sbx_error_t *err)
{
  cleanup_close int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "sandbox state `%s` is gone", dir);
  cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "socket");
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/ctl.sock", dfd);
  if (TEMP_FAILURE_RETRY(connect(fd, (struct sockaddr *) &sa, sizeof sa)) < 0)
    return sbx__make_error(err, errno, SBX_E_BACKEND, "sandbox is not running (sbx-init at `%s`)",
                           dir);
  return steal_fd(&fd);
}

static void set_timeout(int fd, int timeout_ms)
{
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

/* Receives the next frame; protocol violations and EOF become SBX_E_BACKEND. */
static int recv_frame(int fd, sbx_frame_hdr_t *hdr, char **payload, const char *what,
                      sbx_error_t *err)
{
  if (sbx__frame_recv(fd, hdr, payload, SBX_PROTO_MAX_PAYLOAD) < 0)
    return channel_error(errno, what, err);
  if (hdr->type == SBX_MSG_ERR)
    return sbx__error_from_frame(*payload, hdr->len, err);
  return 0;
}

static int unexpected(uint16_t type, const char *what, sbx_error_t *err)
{
  return sbx__make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent an unexpected frame %u (%s)",
                         type, what);
}

/* Connects to the sandbox's sbx-init, sets the receive timeout and sends one request frame: the
 * one way every operation starts. Returns the connection. */
static int request(const char *dir, uint16_t type, const void *req, size_t len, int timeout_ms,
                   const char *what, sbx_error_t *err)
{
  cleanup_close int fd = agent_connect(dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, timeout_ms);
  if (sbx__frame_send(fd, type, 1, req, len) < 0)
    return channel_error(errno, what, err);
  return steal_fd(&fd);
}

static int request_tlv(const char *dir, uint16_t type, sbx_tlv_writer_t *w, int timeout_ms,
                       const char *what, sbx_error_t *err)
{
  int fd = request(dir, type, w->buf.data, w->buf.len, timeout_ms, what, err);
  sbx__tlv_free(w);
  return fd;
}

/* An answer's frames before its OK go to fn: it returns 0 to read on, 1 when its frame ended the
 * answer, < 0 on an error it set. NULL fn: nothing but OK is expected. */
typedef int (*frame_fn)(void *arg, int fd, const sbx_frame_hdr_t *hdr, const char *p,
                        sbx_error_t *err);

/* The one frame loop: reads fd's frames up to the OK that ends the answer (0; its payload to
 * *ok if ok is set) or a frame fn says ends it (1). ERR frames, a broken channel and, when
 * deadline_ms is set, that time passing are errors. */
static int read_answer(int fd, const char *what, frame_fn fn, void *arg, uint64_t deadline_ms,
                       char **ok, size_t *ok_len, sbx_error_t *err)
{
  for (;;) {
    if (deadline_ms) {
      uint64_t now = sbx__now_ms();
      if (now >= deadline_ms)
        return sbx__make_error(err, ETIMEDOUT, SBX_E_TIMEOUT, "%s timed out", what);
      set_timeout(fd, (int) (deadline_ms - now));
    }
    sbx_frame_hdr_t hdr;
    cleanup_free char *p = NULL;
    if (recv_frame(fd, &hdr, &p, what, err) < 0)
      return -1;
    if (hdr.type == SBX_MSG_OK) {
      if (ok) {
        *ok = steal_pointer(&p);
        if (ok_len)
          *ok_len = hdr.len;
      }
      return 0;
    }
    int r = fn ? fn(arg, fd, &hdr, p, err) : unexpected(hdr.type, what, err);
    if (r != 0)
      return r;
  }
}

int sbx__agent_simple(const char *dir, uint16_t type, const void *req, size_t len, char **reply,
                      size_t *reply_len, sbx_error_t *err)
{
  cleanup_close int fd = request(dir, type, req, len, OP_TIMEOUT_MS, "send", err);
  if (fd < 0)
    return -1;
  return read_answer(fd, "reply", NULL, NULL, 0, reply, reply_len, err);
}

int sbx__agent_ping(const char *dir, int timeout_ms, sbx_error_t *err)
{
  cleanup_close int fd = request(dir, SBX_MSG_PING, NULL, 0, timeout_ms, "ping", err);
  if (fd < 0)
    return -1;
  return read_answer(fd, "ping", NULL, NULL, 0, NULL, NULL, err);
}

int sbx__agent_set_idle(const char *dir, uint64_t idle_ms, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_TIMEOUT_MS, idle_ms);
  cleanup_close int fd = request_tlv(dir, SBX_MSG_SET_IDLE, &w, 10000, "set the idle expiry", err);
  if (fd < 0)
    return -1;
  return read_answer(fd, "set the idle expiry", NULL, NULL, 0, NULL, NULL, err);
}

/* The health check's EXIT (other frames of its `true` are read past). */
static int health_frame(void *arg, int fd, const sbx_frame_hdr_t *hdr, const char *p,
                        sbx_error_t *err)
{
  (void) arg;
  (void) fd;
  if (hdr->type != SBX_MSG_EXIT)
    return 0;
  int64_t code = -1;
  sbx__tlv_get_i64(p, hdr->len, SBX_T_CODE, -1, &code);
  return code == 0 ? 1
                   : sbx__make_error(err, 0, SBX_E_BACKEND, "health check exited with %lld",
                                     (long long) code);
}

int sbx__agent_health(const char *dir, int timeout_ms, sbx_error_t *err)
{
  uint64_t deadline = sbx__now_ms() + (uint64_t) timeout_ms;
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_ARG, "true");
  sbx__tlv_put_u64(&w, SBX_T_FLAGS, SBX_EXEC_ARGV | SBX_EXEC_KILL_ON_DISCONNECT);
  sbx__tlv_put_u64(&w, SBX_T_TIMEOUT_MS, (uint64_t) timeout_ms);
  cleanup_close int fd = request_tlv(dir, SBX_MSG_EXEC, &w, timeout_ms, "health check", err);
  if (fd < 0)
    return -1;
  int r = read_answer(fd, "health check", health_frame, NULL, deadline, NULL, NULL, err);
  return r == 0 ? unexpected(SBX_MSG_OK, "health check", err) : r < 0 ? -1 : 0;
}

static int deliver(const struct sbx_exec_opts *o, int stream, const char *data, size_t len,
                   bool *stop)
{
  if (o && o->on_output && !*stop && o->on_output(o->arg, stream, data, len) != 0)
    *stop = true;
  return 0;
}

/* One exec's answer as it arrives: STARTED, output, then EXIT (or OK: started in background). */
struct exec_state {
  const struct sbx_exec_opts *o;
  struct sbx_exec_result *res;
  sbx_buf_t out, errb;
  bool keep, stop, no_timeout;
  uint64_t wait_ms;
};

static int exec_frame(void *arg, int fd, const sbx_frame_hdr_t *hdr, const char *p,
                      sbx_error_t *err)
{
  struct exec_state *x = arg;
  const struct sbx_exec_opts *o = x->o;
  struct sbx_exec_result *res = x->res;
  switch (hdr->type) {
  case SBX_MSG_STARTED: {
    set_timeout(fd, x->no_timeout ? 0 : x->wait_ms > INT32_MAX ? INT32_MAX : (int) x->wait_ms);
    cleanup_free char *id = NULL;
    sbx__tlv_get_str(p, hdr->len, SBX_T_ID, &id);
    if (o && o->id_out)
      snprintf(o->id_out, 65, "%s", id ? id : "");
    if (o && o->on_start && !x->stop && o->on_start(o->arg, id ? id : "") != 0)
      x->stop = true;
    return 0;
  }
  case SBX_MSG_STDOUT:
  case SBX_MSG_STDERR: {
    int stream = hdr->type == SBX_MSG_STDOUT ? 1 : 2;
    if (x->keep)
      sbx__buf_append(stream == 1 ? &x->out : &x->errb, p, hdr->len);
    deliver(o, stream, p, hdr->len, &x->stop);
    /* the caller's output has nowhere to go (a closed pipe): a command bound to its caller
     * ends here, as it would had the caller died (the connection closes, sbx-init kills it) */
    if (x->stop && o && o->kill_on_disconnect)
      return sbx__make_error(err, EPIPE, SBX_E_IO,
                             "the command's output could not be delivered: command killed");
    return 0;
  }
  case SBX_MSG_EXIT: {
    int64_t code = 0;
    uint64_t to = 0, sig = 0, dur = 0;
    sbx__tlv_get_i64(p, hdr->len, SBX_T_CODE, 0, &code);
    sbx__tlv_get_u64(p, hdr->len, SBX_T_TIMED_OUT, 0, &to);
    sbx__tlv_get_u64(p, hdr->len, SBX_T_SIGNALED, 0, &sig);
    sbx__tlv_get_u64(p, hdr->len, SBX_T_OUT_TOTAL, 0, &res->out_total);
    sbx__tlv_get_u64(p, hdr->len, SBX_T_ERR_TOTAL, 0, &res->err_total);
    sbx__tlv_get_u64(p, hdr->len, SBX_T_DURATION_MS, 0, &dur);
    res->exit_code = (int) code;
    res->timed_out = to != 0;
    res->signaled = sig != 0;
    res->duration_ms = dur;
    res->out_len = x->out.len;
    res->err_len = x->errb.len;
    return 1;
  }
  default:
    return unexpected(hdr->type, "exec", err);
  }
}

/* The EXEC request for command (or o->argv) with the configured and sandbox environment. */
static void exec_request(struct sbx_instance *in, const char *command,
                         const struct sbx_exec_opts *o, uint64_t flags, sbx_tlv_writer_t *w,
                         uint64_t *timeout_ms_out, bool *no_timeout_out)
{
  const struct sbx_config *cfg = in->cfg;
  double timeout = o && o->timeout > 0 ? o->timeout : cfg->bash_command_timeout;
  uint64_t cap = o && o->out_cap ? o->out_cap : cfg->output_max_bytes;
  if (o && o->kill_on_disconnect)
    flags |= SBX_EXEC_KILL_ON_DISCONNECT;
  if (o && o->background)
    flags |= SBX_EXEC_BACKGROUND;
  if (o && o->merge_output)
    flags |= SBX_EXEC_MERGE_OUTPUT;
  if (o && o->argv) {
    flags |= SBX_EXEC_ARGV;
    for (const char *const *a = o->argv; *a; a++)
      sbx__tlv_put_str(w, SBX_T_ARG, *a);
  } else {
    sbx__tlv_put_str(w, SBX_T_CMD, command);
  }
  for (size_t i = 0; i < cfg->n_environment; i++) {
    cleanup_free char *kv = xasprintf("%s=%s", cfg->environment[i].key, cfg->environment[i].value);
    sbx__tlv_put_str(w, SBX_T_ENV, kv);
  }
  for (size_t i = 0; i < in->meta.env.n; i++)
    sbx__tlv_put_str(w, SBX_T_ENV, in->meta.env.v[i]);
  for (size_t i = 0; o && i < o->n_env; i++)
    sbx__tlv_put_str(w, SBX_T_ENV, o->env[i]);
  if (o && o->cwd)
    sbx__tlv_put_str(w, SBX_T_CWD, o->cwd);
  if (o && o->id)
    sbx__tlv_put_str(w, SBX_T_ID, o->id);
  uint64_t timeout_ms = (uint64_t) (timeout * 1000.0 + 0.5);
  bool no_timeout = o && (o->no_timeout || o->background);
  if (!no_timeout)
    sbx__tlv_put_u64(w, SBX_T_TIMEOUT_MS, timeout_ms ? timeout_ms : 1);
  sbx__tlv_put_u64(w, SBX_T_OUT_CAP, cap);
  sbx__tlv_put_u64(w, SBX_T_ERR_CAP, cap);
  sbx__tlv_put_u64(w, SBX_T_FLAGS, flags);
  *timeout_ms_out = timeout_ms;
  *no_timeout_out = no_timeout;
}

int sbx__agent_exec_start(struct sbx_instance *in, const char *command,
                          const struct sbx_exec_opts *o, bool tty, unsigned rows, unsigned cols,
                          char id[65], sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  uint64_t timeout_ms = 0;
  bool no_timeout = false;
  if (tty) {
    sbx__tlv_put_u64(&w, SBX_T_ROWS, rows ? rows : 24);
    sbx__tlv_put_u64(&w, SBX_T_COLS, cols ? cols : 80);
  }
  exec_request(in, command, o, tty ? SBX_EXEC_PTY : SBX_EXEC_STDIN, &w, &timeout_ms, &no_timeout);
  cleanup_close int fd = request_tlv(in->dir, SBX_MSG_EXEC, &w, START_TIMEOUT_MS, "exec", err);
  if (fd < 0)
    return -1;
  sbx_frame_hdr_t hdr;
  cleanup_free char *p = NULL;
  if (recv_frame(fd, &hdr, &p, "exec", err) < 0)
    return -1;
  if (hdr.type != SBX_MSG_STARTED)
    return unexpected(hdr.type, "exec", err);
  cleanup_free char *got = NULL;
  sbx__tlv_get_str(p, hdr.len, SBX_T_ID, &got);
  snprintf(id, 65, "%s", got ? got : "");
  set_timeout(fd, 0); /* sbx-init enforces the command's deadline; a person may type slowly */
  return steal_fd(&fd);
}

int sbx__agent_exec(struct sbx_instance *in, const char *command, const struct sbx_exec_opts *o,
                    struct sbx_exec_result *res, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  uint64_t timeout_ms = 0;
  bool no_timeout = false;
  exec_request(in, command, o, 0, &w, &timeout_ms, &no_timeout);

  /* Starting is quick: a sandbox silent for 30 s before the command started (frozen, stuck) is
   * an error even for a command without a deadline. After that, sbx-init enforces the command's
   * timeout, and a channel silent well past it is broken. */
  cleanup_close int fd = request_tlv(in->dir, SBX_MSG_EXEC, &w, START_TIMEOUT_MS, "exec", err);
  if (fd < 0)
    return -1;

  memset(res, 0, sizeof *res);
  struct exec_state x = {.o = o,
                         .res = res,
                         .keep = !(o && o->discard_output),
                         .no_timeout = no_timeout,
                         .wait_ms = timeout_ms + 30000};
  /* OK: a background command started; EXIT: the command finished */
  if (read_answer(fd, "exec", exec_frame, &x, 0, NULL, NULL, err) < 0) {
    sbx__buf_free(&x.out);
    sbx__buf_free(&x.errb);
    return -1;
  }
  res->out = sbx__buf_steal(&x.out);
  res->err = sbx__buf_steal(&x.errb);
  return 0; /* the contract layer renders res->output */
}

int sbx__agent_signal(struct sbx_instance *in, const char *cmd_id, int signo, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_ID, cmd_id);
  sbx__tlv_put_u64(&w, SBX_T_SIGNO, (uint64_t) signo);
  int r = sbx__agent_simple(in->dir, SBX_MSG_SIGNAL, w.buf.data, w.buf.len, NULL, NULL, err);
  sbx__tlv_free(&w);
  return r;
}

/* DATA frames to fd, or into out; more than max bytes (0: no cap) is the error "File exceeds
 * maximum <what> size". */
struct data_sink {
  int fd;
  sbx_buf_t *out;
  uint64_t max, total;
  const char *what;
};

static int data_frame(void *arg, int sock, const sbx_frame_hdr_t *hdr, const char *p,
                      sbx_error_t *err)
{
  struct data_sink *d = arg;
  (void) sock;
  if (hdr->type == SBX_MSG_STARTED) {
    /* The size announced ahead: size the buffer once (never past max; sbx-init is not
     * trusted, so what it sends is still counted below). */
    uint64_t size = 0;
    if (d->out && d->max && sbx__tlv_get_u64(p, hdr->len, SBX_T_SIZE, 0, &size) == 0 && size > 0)
      sbx__buf_reserve(d->out, (size_t) (size > d->max ? d->max : size));
    return 0;
  }
  if (hdr->type != SBX_MSG_DATA)
    return unexpected(hdr->type, d->what, err);
  d->total += hdr->len;
  if (d->max && d->total > d->max)
    return sbx__make_error(err, EFBIG, SBX_E_TOO_LARGE,
                           "File exceeds maximum %s size of %llu bytes", d->what,
                           (unsigned long long) d->max);
  if (d->fd >= 0) {
    if (sbx__write_all(d->fd, p, hdr->len) < 0)
      return sbx__make_error(err, errno, SBX_E_IO, "write the downloaded data");
  } else {
    sbx__buf_append(d->out, p, hdr->len);
  }
  return 0;
}

static int collect_data(int sock, int fd, sbx_buf_t *out, uint64_t max, const char *what,
                        sbx_error_t *err)
{
  struct data_sink d = {.fd = fd, .out = out, .max = max, .what = what};
  return read_answer(sock, what, data_frame, &d, 0, NULL, NULL, err);
}

int sbx__agent_read_text(struct sbx_instance *in, const char *path, int64_t start, int64_t end,
                         char **text, size_t *len, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  if (start != SBX_LINE_NONE)
    sbx__tlv_put_i64(&w, SBX_T_START, start);
  if (end != SBX_LINE_NONE)
    sbx__tlv_put_i64(&w, SBX_T_END, end);
  cleanup_close int fd =
      request_tlv(in->dir, SBX_MSG_READ_TEXT, &w, OP_TIMEOUT_MS, "read_file", err);
  if (fd < 0)
    return -1;
  sbx_buf_t b = {0};
  if (collect_data(fd, -1, &b, SBX_READ_TEXT_MAX, "read", err) < 0) {
    sbx__buf_free(&b);
    return -1;
  }
  if (len)
    *len = b.len;
  *text = sbx__buf_steal(&b);
  return 0;
}

static int read_request(struct sbx_instance *in, const char *path, uint64_t max, int *out_fd,
                        sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_u64(&w, SBX_T_MAX, max);
  *out_fd = request_tlv(in->dir, SBX_MSG_READ, &w, OP_TIMEOUT_MS, "download", err);
  return *out_fd < 0 ? -1 : 0;
}

int sbx__agent_read_to_fd(struct sbx_instance *in, const char *path, uint64_t max, int fd,
                          sbx_error_t *err)
{
  int sock;
  if (read_request(in, path, max, &sock, err) < 0)
    return -1;
  int r = collect_data(sock, fd, NULL, max, "download", err);
  close(sock);
  return r;
}

int sbx__agent_read_to_buf(struct sbx_instance *in, const char *path, uint64_t max, void **data,
                           size_t *len, sbx_error_t *err)
{
  int sock;
  if (read_request(in, path, max, &sock, err) < 0)
    return -1;
  sbx_buf_t b = {0};
  int r = collect_data(sock, -1, &b, max, "download", err);
  close(sock);
  if (r < 0) {
    sbx__buf_free(&b);
    return -1;
  }
  *len = b.len;
  *data = sbx__buf_steal(&b);
  return 0;
}

int sbx__agent_write(struct sbx_instance *in, const char *path, const void *data, size_t len,
                     int src_fd, bool append, sbx_error_t *err)
{
  return sbx__agent_write_ex(in, path, data, len, src_fd, append, 0, err);
}

int sbx__agent_write_ex(struct sbx_instance *in, const char *path, const void *data, size_t len,
                        int src_fd, bool append, unsigned mode, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_u64(&w, SBX_T_FLAGS,
                   SBX_WRITE_PARENTS | (append ? SBX_WRITE_APPEND : SBX_WRITE_ATOMIC));
  if (mode)
    sbx__tlv_put_u64(&w, SBX_T_MODE, mode);
  cleanup_close int fd = request_tlv(in->dir, SBX_MSG_WRITE, &w, OP_TIMEOUT_MS, "write", err);
  if (fd < 0)
    return -1;
  if (data) {
    for (size_t off = 0; off < len;) {
      size_t n = len - off < SBX_PROTO_CHUNK ? len - off : SBX_PROTO_CHUNK;
      if (sbx__frame_send(fd, SBX_MSG_DATA, 1, (const char *) data + off, n) < 0)
        return channel_error(errno, "write", err);
      off += n;
    }
  } else if (src_fd >= 0) {
    cleanup_free char *buf = xmalloc(SBX_PROTO_CHUNK);
    for (;;) {
      ssize_t n = read(src_fd, buf, SBX_PROTO_CHUNK);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        /* dropping the connection before DATA_END discards the partial file */
        return sbx__make_error(err, errno, SBX_E_IO, "read the input for %s", path);
      if (n == 0)
        break;
      if (sbx__frame_send(fd, SBX_MSG_DATA, 1, buf, (size_t) n) < 0)
        return channel_error(errno, "write", err);
    }
  }
  if (sbx__frame_send(fd, SBX_MSG_DATA_END, 1, NULL, 0) < 0)
    return channel_error(errno, "write", err);
  return read_answer(fd, "write", NULL, NULL, 0, NULL, NULL, err);
}

/* ITEMS frames, each item to fn. */
struct items_sink {
  int (*fn)(void *, const unsigned char *, size_t);
  void *arg;
  const char *what;
};

static int items_frame(void *arg, int fd, const sbx_frame_hdr_t *hdr, const char *p,
                       sbx_error_t *err)
{
  struct items_sink *it = arg;
  (void) fd;
  if (hdr->type != SBX_MSG_ITEMS)
    return unexpected(hdr->type, it->what, err);
  sbx_tlv_reader_t r;
  sbx_tlv_t f;
  sbx__tlv_reader_init(&r, p, hdr->len);
  int ret;
  while ((ret = sbx__tlv_next(&r, &f)) > 0)
    if (f.tag == SBX_T_ITEM && it->fn(it->arg, f.data, f.len) < 0)
      return sbx__make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent a malformed %s item",
                             it->what);
  if (ret < 0)
    return sbx__make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent a malformed %s frame",
                           it->what);
  return 0;
}

/* Runs a request whose answer is ITEMS frames then OK{TRUNCATED}; each item goes to fn. */
static int items_request(struct sbx_instance *in, uint16_t type, sbx_tlv_writer_t *w,
                         const char *what, int (*fn)(void *, const unsigned char *, size_t),
                         void *arg, bool *truncated, sbx_error_t *err)
{
  cleanup_close int fd = request(in->dir, type, w->buf.data, w->buf.len, OP_TIMEOUT_MS, what, err);
  if (fd < 0)
    return -1;
  struct items_sink it = {fn, arg, what};
  cleanup_free char *ok = NULL;
  size_t ok_len = 0;
  if (read_answer(fd, what, items_frame, &it, 0, &ok, &ok_len, err) < 0)
    return -1;
  uint64_t t = 0;
  sbx__tlv_get_u64(ok, ok_len, SBX_T_TRUNCATED, 0, &t);
  if (truncated)
    *truncated = t != 0;
  return 0;
}

static int push_string(void *arg, const unsigned char *data, size_t len)
{
  if (memchr(data, '\0', len))
    return -1;
  sbx__strv_push_owned(arg, xstrndup((const char *) data, len));
  return 0;
}

int sbx__agent_list_dir(struct sbx_instance *in, const char *path, int depth, sbx_strv_t *out,
                        sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_i64(&w, SBX_T_DEPTH, depth);
  int r = items_request(in, SBX_MSG_LIST, &w, "list_dir", push_string, out, NULL, err);
  sbx__tlv_free(&w);
  return r;
}

int sbx__agent_glob(struct sbx_instance *in, const char *path, const char *pattern,
                    bool include_dirs, size_t max, sbx_strv_t *out, bool *truncated,
                    sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_str(&w, SBX_T_PATTERN, pattern);
  sbx__tlv_put_u64(&w, SBX_T_MAX, max);
  sbx__tlv_put_u64(&w, SBX_T_FLAGS, include_dirs ? SBX_GLOB_DIRS : 0);
  sbx__tlv_put_u64(&w, SBX_T_TIMEOUT_MS, SBX_SEARCH_TIMEOUT * 1000);
  int r = items_request(in, SBX_MSG_GLOB, &w, "glob", push_string, out, truncated, err);
  sbx__tlv_free(&w);
  return r;
}

struct grep_acc {
  struct sbx_grep_match *v;
  size_t n;
};

static int push_match(void *arg, const unsigned char *data, size_t len)
{
  struct grep_acc *a = arg;
  char *path = NULL, *line = NULL;
  uint64_t no = 0;
  if (sbx__tlv_get_str(data, len, SBX_T_PATH, &path) <= 0 ||
      sbx__tlv_get_u64(data, len, SBX_T_LINE_NO, 0, &no) <= 0 ||
      sbx__tlv_get_str(data, len, SBX_T_TEXT, &line) < 0) {
    free(path);
    free(line);
    return -1;
  }
  a->v = xreallocarray(a->v, a->n + 1, sizeof *a->v);
  a->v[a->n++] = (struct sbx_grep_match){path, no, line ? line : xstrdup("")};
  return 0;
}

int sbx__agent_grep(struct sbx_instance *in, const char *path, const char *pattern,
                    const struct sbx_grep_opts *o, struct sbx_grep_match **m, size_t *n,
                    bool *truncated, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_str(&w, SBX_T_PATTERN, pattern);
  if (o->glob)
    sbx__tlv_put_str(&w, SBX_T_GLOB, o->glob);
  sbx__tlv_put_u64(&w, SBX_T_MAX, o->max_results);
  sbx__tlv_put_u64(&w, SBX_T_FLAGS,
                   (o->literal ? SBX_GREP_LITERAL : 0) | (o->case_sensitive ? SBX_GREP_CASE : 0));
  sbx__tlv_put_u64(&w, SBX_T_TIMEOUT_MS, (uint64_t) (o->timeout * 1000.0 + 0.5));
  struct grep_acc acc = {0};
  int r = items_request(in, SBX_MSG_GREP, &w, "grep", push_match, &acc, truncated, err);
  sbx__tlv_free(&w);
  if (r < 0) {
    sbx_grep_matches_free(acc.v, acc.n);
    return -1;
  }
  *m = acc.v;
  *n = acc.n;
  return 0;
}

/* ---- beyond the contract ---- */

static int simple_tlv(struct sbx_instance *in, uint16_t type, sbx_tlv_writer_t *w, char **reply,
                      size_t *reply_len, sbx_error_t *err)
{
  int r = sbx__agent_simple(in->dir, type, w->buf.data, w->buf.len, reply, reply_len, err);
  sbx__tlv_free(w);
  return r;
}

static int info_from_tlv(const void *p, size_t len, struct sbx_file_info *info)
{
  memset(info, 0, sizeof *info);
  sbx_tlv_t t;
  uint64_t v;
  if (sbx__tlv_find(p, len, SBX_T_TYPE, &t) <= 0 || t.len != 1)
    return -1;
  info->type = (char) t.data[0];
  sbx__tlv_get_u64(p, len, SBX_T_SIZE, 0, &info->size);
  sbx__tlv_get_u64(p, len, SBX_T_MODE, 0, &v);
  info->mode = (unsigned) v;
  sbx__tlv_get_u64(p, len, SBX_T_MTIME, 0, &v);
  info->mtime_ns = (int64_t) v;
  sbx__tlv_get_u64(p, len, SBX_T_CTIME, 0, &v);
  info->ctime_ns = (int64_t) v;
  sbx__tlv_get_u64(p, len, SBX_T_UID, 0, &v);
  info->uid = (unsigned) v;
  sbx__tlv_get_u64(p, len, SBX_T_GID, 0, &v);
  info->gid = (unsigned) v;
  return 0;
}

int sbx__agent_stat(struct sbx_instance *in, const char *path, struct sbx_file_info *info,
                    sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_STAT, &w, &reply, &len, err) < 0)
    return -1;
  if (info_from_tlv(reply, len, info) < 0)
    return sbx__make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent a malformed stat reply");
  info->path = xstrdup(path);
  return 0;
}

int sbx__agent_mkdir(struct sbx_instance *in, const char *path, unsigned mode, bool *created,
                     sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_u64(&w, SBX_T_MODE, mode);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_MKDIR, &w, &reply, &len, err) < 0)
    return -1;
  uint64_t c = 0;
  sbx__tlv_get_u64(reply, len, SBX_T_COUNT, 0, &c);
  if (created)
    *created = c != 0;
  return 0;
}

int sbx__agent_remove(struct sbx_instance *in, const char *path, int flags, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_u64(&w, SBX_T_FLAGS,
                   ((flags & SBX_RM_DIR) ? SBX_REMOVE_DIR : 0) |
                       ((flags & SBX_RM_RECURSIVE) ? SBX_REMOVE_RECURSIVE : 0));
  return simple_tlv(in, SBX_MSG_REMOVE, &w, NULL, NULL, err);
}

int sbx__agent_rename(struct sbx_instance *in, const char *src, const char *dst, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, src);
  sbx__tlv_put_str(&w, SBX_T_DEST, dst);
  return simple_tlv(in, SBX_MSG_RENAME, &w, NULL, NULL, err);
}

int sbx__agent_chmod(struct sbx_instance *in, const char *path, unsigned mode, const char *owner,
                     const char *group, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_u64(&w, SBX_T_MODE, mode);
  sbx__tlv_put_str(&w, SBX_T_OWNER, owner);
  sbx__tlv_put_str(&w, SBX_T_GROUP, group);
  return simple_tlv(in, SBX_MSG_CHMOD, &w, NULL, NULL, err);
}

struct info_acc {
  struct sbx_file_info *v;
  size_t n;
};

static int push_info(void *arg, const unsigned char *data, size_t len)
{
  struct info_acc *a = arg;
  struct sbx_file_info info;
  char *path = NULL;
  if (sbx__tlv_get_str(data, len, SBX_T_PATH, &path) <= 0 || info_from_tlv(data, len, &info) < 0) {
    free(path);
    return -1;
  }
  info.path = path;
  a->v = xreallocarray(a->v, a->n + 1, sizeof *a->v);
  a->v[a->n++] = info;
  return 0;
}

void sbx_file_infos_free(struct sbx_file_info *v, size_t n)
{
  for (size_t i = 0; i < n; i++)
    free(v[i].path);
  free(v);
}

int sbx__agent_readdir(struct sbx_instance *in, const char *path, int depth, bool find,
                       const char *pattern, struct sbx_file_info **v, size_t *n, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  if (find)
    sbx__tlv_put_str(&w, SBX_T_PATTERN, pattern);
  else
    sbx__tlv_put_i64(&w, SBX_T_DEPTH, depth);
  struct info_acc acc = {0};
  int r = items_request(in, find ? SBX_MSG_FIND : SBX_MSG_READDIR, &w, find ? "find" : "readdir",
                        push_info, &acc, NULL, err);
  sbx__tlv_free(&w);
  if (r < 0) {
    sbx_file_infos_free(acc.v, acc.n);
    return -1;
  }
  *v = acc.v;
  *n = acc.n;
  return 0;
}

int sbx__agent_replace(struct sbx_instance *in, const char *path, const void *old, size_t old_len,
                       const void *new_, size_t new_len, uint64_t *count, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put(&w, SBX_T_OLD, old, old_len);
  sbx__tlv_put(&w, SBX_T_NEW, new_, new_len);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_REPLACE, &w, &reply, &len, err) < 0)
    return -1;
  sbx__tlv_get_u64(reply, len, SBX_T_COUNT, 0, count);
  return 0;
}

struct range_sink {
  int fd;
  int (*on_size)(void *, uint64_t);
  void *arg;
  const char *path;
};

static int range_frame(void *arg, int sock, const sbx_frame_hdr_t *hdr, const char *p,
                       sbx_error_t *err)
{
  struct range_sink *rs = arg;
  (void) sock;
  if (hdr->type == SBX_MSG_STARTED) {
    uint64_t size = 0;
    sbx__tlv_get_u64(p, hdr->len, SBX_T_SIZE, 0, &size);
    if (rs->on_size && rs->on_size(rs->arg, size) != 0)
      return sbx__make_error(err, ECANCELED, SBX_E_INVALID, "read cancelled");
    return 0;
  }
  if (hdr->type != SBX_MSG_DATA)
    return unexpected(hdr->type, "read", err);
  if (sbx__write_all(rs->fd, p, hdr->len) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write the data read from %s", rs->path);
  return 0;
}

int sbx__agent_read_range(struct sbx_instance *in, const char *path, uint64_t offset,
                          uint64_t limit, int fd, int (*on_size)(void *, uint64_t), void *arg,
                          sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_PATH, path);
  sbx__tlv_put_u64(&w, SBX_T_OFFSET, offset);
  sbx__tlv_put_u64(&w, SBX_T_LIMIT, limit);
  cleanup_close int sock = request_tlv(in->dir, SBX_MSG_READ, &w, OP_TIMEOUT_MS, "read", err);
  if (sock < 0)
    return -1;
  struct range_sink rs = {fd, on_size, arg, path};
  return read_answer(sock, "read", range_frame, &rs, 0, NULL, NULL, err);
}

int sbx__agent_write_mode(struct sbx_instance *in, const char *path, const void *data, size_t len,
                          int src_fd, unsigned mode, sbx_error_t *err)
{
  return sbx__agent_write_ex(in, path, data, len, src_fd, false, mode, err);
}

int sbx__agent_cmd_status(struct sbx_instance *in, const char *id, struct sbx_command_status *st,
                          sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_ID, id);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_CMD_STATUS, &w, &reply, &len, err) < 0)
    return -1;
  memset(st, 0, sizeof *st);
  cleanup_free char *rid = NULL;
  uint64_t running = 0, flags = 0, pid = 0, to = 0;
  int64_t code = 0;
  sbx__tlv_get_str(reply, len, SBX_T_ID, &rid);
  snprintf(st->id, sizeof st->id, "%s", rid ? rid : id);
  sbx__tlv_get_u64(reply, len, SBX_T_RUNNING, 0, &running);
  sbx__tlv_get_u64(reply, len, SBX_T_FLAGS, 0, &flags);
  sbx__tlv_get_u64(reply, len, SBX_T_PID, 0, &pid);
  sbx__tlv_get_u64(reply, len, SBX_T_TIMED_OUT, 0, &to);
  sbx__tlv_get_i64(reply, len, SBX_T_CODE, 0, &code);
  sbx__tlv_get_u64(reply, len, SBX_T_STARTED_MS, 0, &st->started_ms);
  sbx__tlv_get_u64(reply, len, SBX_T_FINISHED_MS, 0, &st->finished_ms);
  st->running = running != 0;
  st->background = (flags & SBX_EXEC_BACKGROUND) != 0;
  st->timed_out = to != 0;
  st->exit_code = (int) code;
  st->pid = (long) pid;
  return 0;
}

static int logs_frame(void *arg, int sock, const sbx_frame_hdr_t *hdr, const char *p,
                      sbx_error_t *err)
{
  (void) sock;
  if (hdr->type != SBX_MSG_DATA)
    return unexpected(hdr->type, "logs", err);
  if (sbx__write_all(*(int *) arg, p, hdr->len) < 0)
    return sbx__make_error(err, errno, SBX_E_IO, "write the logs");
  return 0;
}

int sbx__agent_cmd_logs(struct sbx_instance *in, const char *id, uint64_t cursor, int fd,
                        uint64_t *next, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_str(&w, SBX_T_ID, id);
  sbx__tlv_put_u64(&w, SBX_T_CURSOR, cursor);
  cleanup_close int sock = request_tlv(in->dir, SBX_MSG_CMD_LOGS, &w, OP_TIMEOUT_MS, "logs", err);
  if (sock < 0)
    return -1;
  cleanup_free char *ok = NULL;
  size_t ok_len = 0;
  if (read_answer(sock, "logs", logs_frame, &fd, 0, &ok, &ok_len, err) < 0)
    return -1;
  sbx__tlv_get_u64(ok, ok_len, SBX_T_CURSOR, cursor, next);
  return 0;
}

int sbx__agent_connect_port(struct sbx_instance *in, int port, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_PORT, (uint64_t) port);
  cleanup_close int sock = request_tlv(in->dir, SBX_MSG_CONNECT, &w, 30000, "connect", err);
  if (sock < 0)
    return -1;
  sbx_frame_hdr_t hdr;
  cleanup_free char *p = NULL;
  int passed = -1;
  if (sbx__frame_recv_fd(sock, &hdr, &p, SBX_PROTO_MAX_PAYLOAD, &passed) < 0)
    return channel_error(errno, "connect", err);
  if (hdr.type == SBX_MSG_ERR) {
    if (passed >= 0)
      close(passed);
    return sbx__error_from_frame(p, hdr.len, err);
  }
  /* only ever accept a socket from the sandbox */
  struct stat st;
  if (hdr.type != SBX_MSG_OK || passed < 0 || fstat(passed, &st) < 0 || !S_ISSOCK(st.st_mode)) {
    if (passed >= 0)
      close(passed);
    return sbx__make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init did not pass a socket");
  }
  return passed;
}
