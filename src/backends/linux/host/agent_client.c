/* The contract over sbx-init's protocol (proto.h), used by every backend whose sandboxes run
 * sbx-init locally. One connection per operation: connecting costs microseconds and keeps
 * concurrent operations on one sandbox independent. A broken or silent channel is a terminal
 * (SBX_E_BACKEND) error: the caller evicts the sandbox; nothing is retried. */
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
    return sbx_make_error(err, ETIMEDOUT, SBX_E_TIMEOUT, "sandbox did not answer (%s)", what);
  return sbx_make_error(err, e, SBX_E_BACKEND, "sandbox channel broken (%s)", what);
}

int sbx__agent_connect(const char *dir, sbx_error_t *err)
{
  cleanup_close int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return sbx_make_error(err, errno, SBX_E_BACKEND, "sandbox state `%s` is gone", dir);
  cleanup_close int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return sbx_make_error(err, errno, SBX_E_INTERNAL, "socket");
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "/proc/self/fd/%d/ctl.sock", dfd);
  if (TEMP_FAILURE_RETRY(connect(fd, (struct sockaddr *) &sa, sizeof sa)) < 0)
    return sbx_make_error(err, errno, SBX_E_BACKEND, "sandbox is not running (sbx-init at `%s`)",
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
  if (sbx_frame_recv(fd, hdr, payload, SBX_PROTO_MAX_PAYLOAD) < 0)
    return channel_error(errno, what, err);
  if (hdr->type == SBX_MSG_ERR)
    return sbx_error_from_frame(*payload, hdr->len, err);
  return 0;
}

static int unexpected(uint16_t type, const char *what, sbx_error_t *err)
{
  return sbx_make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent an unexpected frame %u (%s)",
                        type, what);
}

static int send_req(int fd, uint16_t type, const sbx_tlv_writer_t *w, const char *what,
                    sbx_error_t *err)
{
  if (sbx_frame_send_tlv(fd, type, 1, w) < 0)
    return channel_error(errno, what, err);
  return 0;
}

int sbx__agent_simple(const char *dir, uint16_t type, const void *req, size_t len, char **reply,
                      size_t *reply_len, sbx_error_t *err)
{
  cleanup_close int fd = sbx__agent_connect(dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, OP_TIMEOUT_MS);
  if (sbx_frame_send(fd, type, 1, req, len) < 0)
    return channel_error(errno, "send", err);
  sbx_frame_hdr_t hdr;
  char *payload = NULL;
  if (recv_frame(fd, &hdr, &payload, "reply", err) < 0) {
    free(payload);
    return -1;
  }
  if (hdr.type != SBX_MSG_OK) {
    free(payload);
    return unexpected(hdr.type, "reply", err);
  }
  if (reply) {
    *reply = payload;
    if (reply_len)
      *reply_len = hdr.len;
  } else {
    free(payload);
  }
  return 0;
}

int sbx__agent_ping(const char *dir, int timeout_ms, sbx_error_t *err)
{
  cleanup_close int fd = sbx__agent_connect(dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, timeout_ms);
  if (sbx_frame_send(fd, SBX_MSG_PING, 1, NULL, 0) < 0)
    return channel_error(errno, "ping", err);
  sbx_frame_hdr_t hdr;
  cleanup_free char *payload = NULL;
  if (recv_frame(fd, &hdr, &payload, "ping", err) < 0)
    return -1;
  return hdr.type == SBX_MSG_OK ? 0 : unexpected(hdr.type, "ping", err);
}

int sbx__agent_set_idle(const char *dir, uint64_t idle_ms, sbx_error_t *err)
{
  cleanup_close int fd = sbx__agent_connect(dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, 10000);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_u64(&w, SBX_T_TIMEOUT_MS, idle_ms);
  int r = send_req(fd, SBX_MSG_SET_IDLE, &w, "set the idle expiry", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;
  sbx_frame_hdr_t hdr;
  cleanup_free char *payload = NULL;
  if (recv_frame(fd, &hdr, &payload, "set the idle expiry", err) < 0)
    return -1;
  return hdr.type == SBX_MSG_OK ? 0 : unexpected(hdr.type, "set the idle expiry", err);
}

int sbx__agent_health(const char *dir, int timeout_ms, sbx_error_t *err)
{
  uint64_t deadline = sbx_now_ms() + (uint64_t) timeout_ms;
  cleanup_close int fd = sbx__agent_connect(dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, timeout_ms);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_ARG, "true");
  sbx_tlv_put_u64(&w, SBX_T_FLAGS, SBX_EXEC_ARGV | SBX_EXEC_KILL_ON_DISCONNECT);
  sbx_tlv_put_u64(&w, SBX_T_TIMEOUT_MS, (uint64_t) timeout_ms);
  int r = send_req(fd, SBX_MSG_EXEC, &w, "health check", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;
  for (;;) {
    uint64_t now = sbx_now_ms();
    if (now >= deadline)
      return sbx_make_error(err, ETIMEDOUT, SBX_E_TIMEOUT, "health check timed out");
    set_timeout(fd, (int) (deadline - now));
    sbx_frame_hdr_t hdr;
    cleanup_free char *p = NULL;
    if (recv_frame(fd, &hdr, &p, "health check", err) < 0)
      return -1;
    if (hdr.type == SBX_MSG_EXIT) {
      int64_t code = -1;
      sbx_tlv_get_i64(p, hdr.len, SBX_T_CODE, -1, &code);
      return code == 0 ? 0
                       : sbx_make_error(err, 0, SBX_E_BACKEND, "health check exited with %lld",
                                        (long long) code);
    }
  }
}

static int deliver(const struct sbx_exec_opts *o, int stream, const char *data, size_t len,
                   bool *stop)
{
  if (o && o->on_output && !*stop && o->on_output(o->arg, stream, data, len) != 0)
    *stop = true;
  return 0;
}

int sbx__agent_exec(struct sbx_instance *in, const char *command, const struct sbx_exec_opts *o,
                    struct sbx_exec_result *res, sbx_error_t *err)
{
  const struct sbx_config *cfg = in->cfg;
  double timeout = o && o->timeout > 0 ? o->timeout : cfg->bash_command_timeout;
  uint64_t cap = o && o->out_cap ? o->out_cap : cfg->output_max_bytes;
  uint64_t flags = 0;
  if (o && o->kill_on_disconnect)
    flags |= SBX_EXEC_KILL_ON_DISCONNECT;
  if (o && o->background)
    flags |= SBX_EXEC_BACKGROUND;
  if (o && o->merge_output)
    flags |= SBX_EXEC_MERGE_OUTPUT;
  sbx_tlv_writer_t w = {0};
  if (o && o->argv) {
    flags |= SBX_EXEC_ARGV;
    for (const char *const *a = o->argv; *a; a++)
      sbx_tlv_put_str(&w, SBX_T_ARG, *a);
  } else {
    sbx_tlv_put_str(&w, SBX_T_CMD, command);
  }
  for (size_t i = 0; i < cfg->n_environment; i++) {
    cleanup_free char *kv = xasprintf("%s=%s", cfg->environment[i].key, cfg->environment[i].value);
    sbx_tlv_put_str(&w, SBX_T_ENV, kv);
  }
  for (size_t i = 0; i < in->meta.env.n; i++)
    sbx_tlv_put_str(&w, SBX_T_ENV, in->meta.env.v[i]);
  for (size_t i = 0; o && i < o->n_env; i++)
    sbx_tlv_put_str(&w, SBX_T_ENV, o->env[i]);
  if (o && o->cwd)
    sbx_tlv_put_str(&w, SBX_T_CWD, o->cwd);
  if (o && o->id)
    sbx_tlv_put_str(&w, SBX_T_ID, o->id);
  uint64_t timeout_ms = (uint64_t) (timeout * 1000.0 + 0.5);
  bool no_timeout = o && (o->no_timeout || o->background);
  if (!no_timeout)
    sbx_tlv_put_u64(&w, SBX_T_TIMEOUT_MS, timeout_ms ? timeout_ms : 1);
  sbx_tlv_put_u64(&w, SBX_T_OUT_CAP, cap);
  sbx_tlv_put_u64(&w, SBX_T_ERR_CAP, cap);
  sbx_tlv_put_u64(&w, SBX_T_FLAGS, flags);

  cleanup_close int fd = sbx__agent_connect(in->dir, err);
  if (fd < 0) {
    sbx_tlv_free(&w);
    return -1;
  }
  /* Starting is quick: a sandbox silent for 30 s before the command started (frozen, stuck) is
   * an error even for a command without a deadline. After that, sbx-init enforces the command's
   * timeout, and a channel silent well past it is broken. */
  uint64_t wait_ms = timeout_ms + 30000;
  set_timeout(fd, START_TIMEOUT_MS);
  int r = send_req(fd, SBX_MSG_EXEC, &w, "exec", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;

  memset(res, 0, sizeof *res);
  sbx_buf_t out = {0}, errb = {0};
  bool keep = !(o && o->discard_output), stop = false;
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *p = NULL;
    if (recv_frame(fd, &hdr, &p, "exec", err) < 0)
      goto fail;
    switch (hdr.type) {
    case SBX_MSG_STARTED: {
      set_timeout(fd, no_timeout ? 0 : wait_ms > INT32_MAX ? INT32_MAX : (int) wait_ms);
      cleanup_free char *id = NULL;
      sbx_tlv_get_str(p, hdr.len, SBX_T_ID, &id);
      if (o && o->id_out)
        snprintf(o->id_out, 65, "%s", id ? id : "");
      if (o && o->on_start && !stop && o->on_start(o->arg, id ? id : "") != 0)
        stop = true;
      break;
    }
    case SBX_MSG_STDOUT:
    case SBX_MSG_STDERR: {
      int stream = hdr.type == SBX_MSG_STDOUT ? 1 : 2;
      if (keep)
        sbx_buf_append(stream == 1 ? &out : &errb, p, hdr.len);
      deliver(o, stream, p, hdr.len, &stop);
      break;
    }
    case SBX_MSG_OK: /* background: started */
      res->out = sbx_buf_steal(&out);
      res->err = sbx_buf_steal(&errb);
      return 0;
    case SBX_MSG_EXIT: {
      int64_t code = 0;
      uint64_t to = 0, sig = 0, dur = 0;
      sbx_tlv_get_i64(p, hdr.len, SBX_T_CODE, 0, &code);
      sbx_tlv_get_u64(p, hdr.len, SBX_T_TIMED_OUT, 0, &to);
      sbx_tlv_get_u64(p, hdr.len, SBX_T_SIGNALED, 0, &sig);
      sbx_tlv_get_u64(p, hdr.len, SBX_T_OUT_TOTAL, 0, &res->out_total);
      sbx_tlv_get_u64(p, hdr.len, SBX_T_ERR_TOTAL, 0, &res->err_total);
      sbx_tlv_get_u64(p, hdr.len, SBX_T_DURATION_MS, 0, &dur);
      res->exit_code = (int) code;
      res->timed_out = to != 0;
      res->signaled = sig != 0;
      res->duration_ms = dur;
      res->out_len = out.len;
      res->err_len = errb.len;
      res->out = sbx_buf_steal(&out);
      res->err = sbx_buf_steal(&errb);
      return 0; /* the contract layer renders res->output */
    }
    default:
      unexpected(hdr.type, "exec", err);
      goto fail;
    }
  }
fail:
  sbx_buf_free(&out);
  sbx_buf_free(&errb);
  return -1;
}

int sbx__agent_signal(struct sbx_instance *in, const char *cmd_id, int signo, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_ID, cmd_id);
  sbx_tlv_put_u64(&w, SBX_T_SIGNO, (uint64_t) signo);
  int r = sbx__agent_simple(in->dir, SBX_MSG_SIGNAL, w.buf.data, w.buf.len, NULL, NULL, err);
  sbx_tlv_free(&w);
  return r;
}

/* Collects DATA frames until OK. If fd >= 0 the data goes there, else into out. */
/* DATA frames to fd, or into out; more than max bytes (0: no cap) is the error "File exceeds
 * maximum <what> size". */
static int collect_data(int sock, int fd, sbx_buf_t *out, uint64_t max, const char *what,
                        sbx_error_t *err)
{
  uint64_t total = 0;
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *p = NULL;
    if (recv_frame(sock, &hdr, &p, what, err) < 0)
      return -1;
    if (hdr.type == SBX_MSG_OK)
      return 0;
    if (hdr.type == SBX_MSG_STARTED) {
      /* The size announced ahead: size the buffer once (never past max; sbx-init is not
       * trusted, so what it sends is still counted below). */
      uint64_t size = 0;
      if (out && max && sbx_tlv_get_u64(p, hdr.len, SBX_T_SIZE, 0, &size) == 0 && size > 0)
        sbx_buf_reserve(out, (size_t) (size > max ? max : size));
      continue;
    }
    if (hdr.type != SBX_MSG_DATA)
      return unexpected(hdr.type, what, err);
    total += hdr.len;
    if (max && total > max)
      return sbx_make_error(err, EFBIG, SBX_E_TOO_LARGE,
                            "File exceeds maximum %s size of %llu bytes", what,
                            (unsigned long long) max);
    if (fd >= 0) {
      if (sbx_write_all(fd, p, hdr.len) < 0)
        return sbx_make_error(err, errno, SBX_E_IO, "write the downloaded data");
    } else {
      sbx_buf_append(out, p, hdr.len);
    }
  }
}

int sbx__agent_read_text(struct sbx_instance *in, const char *path, int64_t start, int64_t end,
                         char **text, size_t *len, sbx_error_t *err)
{
  cleanup_close int fd = sbx__agent_connect(in->dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, OP_TIMEOUT_MS);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  if (start != SBX_LINE_NONE)
    sbx_tlv_put_i64(&w, SBX_T_START, start);
  if (end != SBX_LINE_NONE)
    sbx_tlv_put_i64(&w, SBX_T_END, end);
  int r = send_req(fd, SBX_MSG_READ_TEXT, &w, "read_file", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;
  sbx_buf_t b = {0};
  if (collect_data(fd, -1, &b, SBX_READ_TEXT_MAX, "read", err) < 0) {
    sbx_buf_free(&b);
    return -1;
  }
  if (len)
    *len = b.len;
  *text = sbx_buf_steal(&b);
  return 0;
}

static int read_request(struct sbx_instance *in, const char *path, uint64_t max, int *out_fd,
                        sbx_error_t *err)
{
  int fd = sbx__agent_connect(in->dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, OP_TIMEOUT_MS);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_u64(&w, SBX_T_MAX, max);
  int r = send_req(fd, SBX_MSG_READ, &w, "download", err);
  sbx_tlv_free(&w);
  if (r < 0) {
    close(fd);
    return -1;
  }
  *out_fd = fd;
  return 0;
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
    sbx_buf_free(&b);
    return -1;
  }
  *len = b.len;
  *data = sbx_buf_steal(&b);
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
  cleanup_close int fd = sbx__agent_connect(in->dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, OP_TIMEOUT_MS);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_u64(&w, SBX_T_FLAGS,
                  SBX_WRITE_PARENTS | (append ? SBX_WRITE_APPEND : SBX_WRITE_ATOMIC));
  if (mode)
    sbx_tlv_put_u64(&w, SBX_T_MODE, mode);
  int r = send_req(fd, SBX_MSG_WRITE, &w, "write", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;
  if (data) {
    for (size_t off = 0; off < len;) {
      size_t n = len - off < SBX_PROTO_CHUNK ? len - off : SBX_PROTO_CHUNK;
      if (sbx_frame_send(fd, SBX_MSG_DATA, 1, (const char *) data + off, n) < 0)
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
        return sbx_make_error(err, errno, SBX_E_IO, "read the input for %s", path);
      if (n == 0)
        break;
      if (sbx_frame_send(fd, SBX_MSG_DATA, 1, buf, (size_t) n) < 0)
        return channel_error(errno, "write", err);
    }
  }
  if (sbx_frame_send(fd, SBX_MSG_DATA_END, 1, NULL, 0) < 0)
    return channel_error(errno, "write", err);
  sbx_frame_hdr_t hdr;
  cleanup_free char *p = NULL;
  if (recv_frame(fd, &hdr, &p, "write", err) < 0)
    return -1;
  return hdr.type == SBX_MSG_OK ? 0 : unexpected(hdr.type, "write", err);
}

/* Runs a request whose answer is ITEMS frames then OK{TRUNCATED}; each item goes to fn. */
static int items_request(struct sbx_instance *in, uint16_t type, sbx_tlv_writer_t *w,
                         const char *what, int (*fn)(void *, const unsigned char *, size_t),
                         void *arg, bool *truncated, sbx_error_t *err)
{
  cleanup_close int fd = sbx__agent_connect(in->dir, err);
  if (fd < 0)
    return -1;
  set_timeout(fd, OP_TIMEOUT_MS);
  if (send_req(fd, type, w, what, err) < 0)
    return -1;
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *p = NULL;
    if (recv_frame(fd, &hdr, &p, what, err) < 0)
      return -1;
    if (hdr.type == SBX_MSG_OK) {
      uint64_t t = 0;
      sbx_tlv_get_u64(p, hdr.len, SBX_T_TRUNCATED, 0, &t);
      if (truncated)
        *truncated = t != 0;
      return 0;
    }
    if (hdr.type != SBX_MSG_ITEMS)
      return unexpected(hdr.type, what, err);
    sbx_tlv_reader_t r;
    sbx_tlv_t f;
    sbx_tlv_reader_init(&r, p, hdr.len);
    int ret;
    while ((ret = sbx_tlv_next(&r, &f)) > 0)
      if (f.tag == SBX_T_ITEM && fn(arg, f.data, f.len) < 0)
        return sbx_make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent a malformed %s item",
                              what);
    if (ret < 0)
      return sbx_make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent a malformed %s frame", what);
  }
}

static int push_string(void *arg, const unsigned char *data, size_t len)
{
  if (memchr(data, '\0', len))
    return -1;
  sbx_strv_push_owned(arg, xstrndup((const char *) data, len));
  return 0;
}

int sbx__agent_list_dir(struct sbx_instance *in, const char *path, int depth, sbx_strv_t *out,
                        sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_i64(&w, SBX_T_DEPTH, depth);
  int r = items_request(in, SBX_MSG_LIST, &w, "list_dir", push_string, out, NULL, err);
  sbx_tlv_free(&w);
  return r;
}

int sbx__agent_glob(struct sbx_instance *in, const char *path, const char *pattern,
                    bool include_dirs, size_t max, sbx_strv_t *out, bool *truncated,
                    sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_str(&w, SBX_T_PATTERN, pattern);
  sbx_tlv_put_u64(&w, SBX_T_MAX, max);
  sbx_tlv_put_u64(&w, SBX_T_FLAGS, include_dirs ? SBX_GLOB_DIRS : 0);
  int r = items_request(in, SBX_MSG_GLOB, &w, "glob", push_string, out, truncated, err);
  sbx_tlv_free(&w);
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
  if (sbx_tlv_get_str(data, len, SBX_T_PATH, &path) <= 0 ||
      sbx_tlv_get_u64(data, len, SBX_T_LINE_NO, 0, &no) <= 0 ||
      sbx_tlv_get_str(data, len, SBX_T_TEXT, &line) < 0) {
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
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_str(&w, SBX_T_PATTERN, pattern);
  if (o->glob)
    sbx_tlv_put_str(&w, SBX_T_GLOB, o->glob);
  sbx_tlv_put_u64(&w, SBX_T_MAX, o->max_results);
  sbx_tlv_put_u64(&w, SBX_T_FLAGS,
                  (o->literal ? SBX_GREP_LITERAL : 0) | (o->case_sensitive ? SBX_GREP_CASE : 0));
  struct grep_acc acc = {0};
  int r = items_request(in, SBX_MSG_GREP, &w, "grep", push_match, &acc, truncated, err);
  sbx_tlv_free(&w);
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
  sbx_tlv_free(w);
  return r;
}

static int info_from_tlv(const void *p, size_t len, struct sbx_file_info *info)
{
  memset(info, 0, sizeof *info);
  sbx_tlv_t t;
  uint64_t v;
  if (sbx_tlv_find(p, len, SBX_T_TYPE, &t) <= 0 || t.len != 1)
    return -1;
  info->type = (char) t.data[0];
  sbx_tlv_get_u64(p, len, SBX_T_SIZE, 0, &info->size);
  sbx_tlv_get_u64(p, len, SBX_T_MODE, 0, &v);
  info->mode = (unsigned) v;
  sbx_tlv_get_u64(p, len, SBX_T_MTIME, 0, &v);
  info->mtime_ns = (int64_t) v;
  sbx_tlv_get_u64(p, len, SBX_T_CTIME, 0, &v);
  info->ctime_ns = (int64_t) v;
  sbx_tlv_get_u64(p, len, SBX_T_UID, 0, &v);
  info->uid = (unsigned) v;
  sbx_tlv_get_u64(p, len, SBX_T_GID, 0, &v);
  info->gid = (unsigned) v;
  return 0;
}

int sbx__agent_stat(struct sbx_instance *in, const char *path, struct sbx_file_info *info,
                    sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_STAT, &w, &reply, &len, err) < 0)
    return -1;
  if (info_from_tlv(reply, len, info) < 0)
    return sbx_make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init sent a malformed stat reply");
  info->path = xstrdup(path);
  return 0;
}

int sbx__agent_mkdir(struct sbx_instance *in, const char *path, unsigned mode, bool *created,
                     sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_u64(&w, SBX_T_MODE, mode);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_MKDIR, &w, &reply, &len, err) < 0)
    return -1;
  uint64_t c = 0;
  sbx_tlv_get_u64(reply, len, SBX_T_COUNT, 0, &c);
  if (created)
    *created = c != 0;
  return 0;
}

int sbx__agent_remove(struct sbx_instance *in, const char *path, int flags, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_u64(&w, SBX_T_FLAGS,
                  ((flags & SBX_RM_DIR) ? SBX_REMOVE_DIR : 0) |
                      ((flags & SBX_RM_RECURSIVE) ? SBX_REMOVE_RECURSIVE : 0));
  return simple_tlv(in, SBX_MSG_REMOVE, &w, NULL, NULL, err);
}

int sbx__agent_rename(struct sbx_instance *in, const char *src, const char *dst, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, src);
  sbx_tlv_put_str(&w, SBX_T_DEST, dst);
  return simple_tlv(in, SBX_MSG_RENAME, &w, NULL, NULL, err);
}

int sbx__agent_chmod(struct sbx_instance *in, const char *path, unsigned mode, const char *owner,
                     const char *group, sbx_error_t *err)
{
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_u64(&w, SBX_T_MODE, mode);
  sbx_tlv_put_str(&w, SBX_T_OWNER, owner);
  sbx_tlv_put_str(&w, SBX_T_GROUP, group);
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
  if (sbx_tlv_get_str(data, len, SBX_T_PATH, &path) <= 0 || info_from_tlv(data, len, &info) < 0) {
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
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  if (find)
    sbx_tlv_put_str(&w, SBX_T_PATTERN, pattern);
  else
    sbx_tlv_put_i64(&w, SBX_T_DEPTH, depth);
  struct info_acc acc = {0};
  int r = items_request(in, find ? SBX_MSG_FIND : SBX_MSG_READDIR, &w, find ? "find" : "readdir",
                        push_info, &acc, NULL, err);
  sbx_tlv_free(&w);
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
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put(&w, SBX_T_OLD, old, old_len);
  sbx_tlv_put(&w, SBX_T_NEW, new_, new_len);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_REPLACE, &w, &reply, &len, err) < 0)
    return -1;
  sbx_tlv_get_u64(reply, len, SBX_T_COUNT, 0, count);
  return 0;
}

int sbx__agent_read_range(struct sbx_instance *in, const char *path, uint64_t offset,
                          uint64_t limit, int fd, int (*on_size)(void *, uint64_t), void *arg,
                          sbx_error_t *err)
{
  cleanup_close int sock = sbx__agent_connect(in->dir, err);
  if (sock < 0)
    return -1;
  set_timeout(sock, OP_TIMEOUT_MS);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_PATH, path);
  sbx_tlv_put_u64(&w, SBX_T_OFFSET, offset);
  sbx_tlv_put_u64(&w, SBX_T_LIMIT, limit);
  int r = send_req(sock, SBX_MSG_READ, &w, "read", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *p = NULL;
    if (recv_frame(sock, &hdr, &p, "read", err) < 0)
      return -1;
    if (hdr.type == SBX_MSG_OK)
      return 0;
    if (hdr.type == SBX_MSG_STARTED) {
      uint64_t size = 0;
      sbx_tlv_get_u64(p, hdr.len, SBX_T_SIZE, 0, &size);
      if (on_size && on_size(arg, size) != 0)
        return sbx_make_error(err, ECANCELED, SBX_E_INVALID, "read cancelled");
      continue;
    }
    if (hdr.type != SBX_MSG_DATA)
      return unexpected(hdr.type, "read", err);
    if (sbx_write_all(fd, p, hdr.len) < 0)
      return sbx_make_error(err, errno, SBX_E_IO, "write the data read from %s", path);
  }
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
  sbx_tlv_put_str(&w, SBX_T_ID, id);
  cleanup_free char *reply = NULL;
  size_t len = 0;
  if (simple_tlv(in, SBX_MSG_CMD_STATUS, &w, &reply, &len, err) < 0)
    return -1;
  memset(st, 0, sizeof *st);
  cleanup_free char *rid = NULL;
  uint64_t running = 0, flags = 0, pid = 0, to = 0;
  int64_t code = 0;
  sbx_tlv_get_str(reply, len, SBX_T_ID, &rid);
  snprintf(st->id, sizeof st->id, "%s", rid ? rid : id);
  sbx_tlv_get_u64(reply, len, SBX_T_RUNNING, 0, &running);
  sbx_tlv_get_u64(reply, len, SBX_T_FLAGS, 0, &flags);
  sbx_tlv_get_u64(reply, len, SBX_T_PID, 0, &pid);
  sbx_tlv_get_u64(reply, len, SBX_T_TIMED_OUT, 0, &to);
  sbx_tlv_get_i64(reply, len, SBX_T_CODE, 0, &code);
  sbx_tlv_get_u64(reply, len, SBX_T_STARTED_MS, 0, &st->started_ms);
  sbx_tlv_get_u64(reply, len, SBX_T_FINISHED_MS, 0, &st->finished_ms);
  st->running = running != 0;
  st->background = (flags & SBX_EXEC_BACKGROUND) != 0;
  st->timed_out = to != 0;
  st->exit_code = (int) code;
  st->pid = (long) pid;
  return 0;
}

int sbx__agent_cmd_logs(struct sbx_instance *in, const char *id, uint64_t cursor, int fd,
                        uint64_t *next, sbx_error_t *err)
{
  cleanup_close int sock = sbx__agent_connect(in->dir, err);
  if (sock < 0)
    return -1;
  set_timeout(sock, OP_TIMEOUT_MS);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_str(&w, SBX_T_ID, id);
  sbx_tlv_put_u64(&w, SBX_T_CURSOR, cursor);
  int r = send_req(sock, SBX_MSG_CMD_LOGS, &w, "logs", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *p = NULL;
    if (recv_frame(sock, &hdr, &p, "logs", err) < 0)
      return -1;
    if (hdr.type == SBX_MSG_OK) {
      sbx_tlv_get_u64(p, hdr.len, SBX_T_CURSOR, cursor, next);
      return 0;
    }
    if (hdr.type != SBX_MSG_DATA)
      return unexpected(hdr.type, "logs", err);
    if (sbx_write_all(fd, p, hdr.len) < 0)
      return sbx_make_error(err, errno, SBX_E_IO, "write the logs");
  }
}

int sbx__agent_connect_port(struct sbx_instance *in, int port, sbx_error_t *err)
{
  cleanup_close int sock = sbx__agent_connect(in->dir, err);
  if (sock < 0)
    return -1;
  set_timeout(sock, 30000);
  sbx_tlv_writer_t w = {0};
  sbx_tlv_put_u64(&w, SBX_T_PORT, (uint64_t) port);
  int r = send_req(sock, SBX_MSG_CONNECT, &w, "connect", err);
  sbx_tlv_free(&w);
  if (r < 0)
    return -1;
  sbx_frame_hdr_t hdr;
  cleanup_free char *p = NULL;
  int passed = -1;
  if (sbx_frame_recv_fd(sock, &hdr, &p, SBX_PROTO_MAX_PAYLOAD, &passed) < 0)
    return channel_error(errno, "connect", err);
  if (hdr.type == SBX_MSG_ERR) {
    if (passed >= 0)
      close(passed);
    return sbx_error_from_frame(p, hdr.len, err);
  }
  /* only ever accept a socket from the sandbox */
  struct stat st;
  if (hdr.type != SBX_MSG_OK || passed < 0 || fstat(passed, &st) < 0 || !S_ISSOCK(st.st_mode)) {
    if (passed >= 0)
      close(passed);
    return sbx_make_error(err, EPROTO, SBX_E_BACKEND, "sbx-init did not pass a socket");
  }
  return passed;
}
