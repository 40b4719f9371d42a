/* execd's PTY sessions over WebSocket, as OpenSandbox's components/execd/PTY.md and execd's
 * pty_controller.go / pty_ws.go define them.
 *
 * POST /pty makes a session; its shell starts on the first WebSocket (PTY mode, or pipe mode
 * with ?pty=0), as in execd. Each session has a thread that owns its sbx_session (the command
 * in the sandbox): it applies what WebSocket threads queue (input, resize, signals), appends the
 * command's output to the session's ring buffer (sbxd.pty_buffer bytes, addressed by absolute
 * byte offsets so ?since= can replay) and wakes the connected WebSocket. A WebSocket thread
 * owns its socket (handed over by libmicrohttpd after the 101) and sends from the ring. One
 * WebSocket per session: another gets 409 unless it asks ?takeover=1 (the holder is closed with
 * 4001). A session without a WebSocket for sbxd.pty_grace seconds is killed and forgotten. */
#include "pty.h"
#include "ctx.h"
#include "registry.h"
#include "ws.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define PTY_CHUNK (32u << 10)    /* output bytes per binary frame */
#define PTY_INPUT_MAX (1u << 20) /* queued input before the WebSocket stops reading */
#define PTY_MARKS_MAX 4096       /* pipe mode: stream changes remembered */
#define WS_PING_MS 30000         /* as execd */
#define WS_IDLE_MS 90000         /* nothing from the client for this long: it is gone */
#define WS_SEND_MS 10000         /* a client that takes no bytes for this long is dropped */

struct mark {
  uint64_t at; /* output offset where this stream's bytes start */
  int stream;
};

struct pty {
  char id[37];
  struct box *box;
  int refs; /* under reg_lock */
  /* fixed at creation */
  sbx_strv_t argv, env;
  char *cwd;
  unsigned rows, cols;
  int kick; /* eventfd: wakes the session thread */

  pthread_mutex_t lock; /* everything below */
  int mode;             /* requested by the first WebSocket: 1 pty, 2 pipe */
  bool started, running, exited, failed, ending;
  char start_err[256];
  int exit_code;
  sbx_buf_t input;
  bool resize;
  unsigned want_rows, want_cols;
  int signals[8];
  size_t n_signals;
  /* the WebSocket holding the session */
  bool attached;
  int pending; /* handshakes answered, not yet attached (they count as attached) */
  uint64_t gen;
  int ws_efd; /* its eventfd (output, exit, takeover) */
  uint64_t idle_since;
  /* output: the last cap bytes of total */
  char *ring;
  size_t cap;
  uint64_t total;
  struct mark marks[PTY_MARKS_MAX];
  size_t n_marks;

  struct pty *next; /* the table's */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pty *table;
static atomic_int ws_live;

static char *uuid4(void)
{
  char h[33];
  sbx__random_hex(h, 32);
  h[12] = '4';
  h[16] = "89ab"[(h[16] >= 'a' ? h[16] - 'a' + 10 : h[16] - '0') & 3];
  return xasprintf("%.8s-%.4s-%.4s-%.4s-%.12s", h, h + 8, h + 12, h + 16, h + 20);
}

static void kick(int fd)
{
  uint64_t one = 1;
  if (fd >= 0 && write(fd, &one, sizeof one) < 0 && errno != EAGAIN)
    sbxd_log(SBXD_DEBUG, "pty: eventfd write: %s", strerror(errno));
}

static void drain(int fd)
{
  uint64_t v;
  while (read(fd, &v, sizeof v) > 0) {
  }
}

/* ---- the table ---- */

static struct pty *pty_find(const struct box *b, const char *id)
{
  pthread_mutex_lock(&reg_lock);
  struct pty *p = table;
  while (p && !(p->box == b && strcmp(p->id, id) == 0))
    p = p->next;
  if (p)
    p->refs++;
  pthread_mutex_unlock(&reg_lock);
  return p;
}

static void pty_unref(struct pty *p)
{
  pthread_mutex_lock(&reg_lock);
  bool last = --p->refs == 0;
  pthread_mutex_unlock(&reg_lock);
  if (!last)
    return;
  box_put(p->box);
  sbx__strv_free(&p->argv);
  sbx__strv_free(&p->env);
  free(p->cwd);
  close(p->kick);
  sbx__buf_free(&p->input);
  free(p->ring);
  pthread_mutex_destroy(&p->lock);
  free(p);
}

static void pty_unlink(struct pty *p)
{
  pthread_mutex_lock(&reg_lock);
  for (struct pty **pp = &table; *pp; pp = &(*pp)->next)
    if (*pp == p) {
      *pp = p->next;
      break;
    }
  pthread_mutex_unlock(&reg_lock);
}

/* ---- the ring ---- */

static void ring_put(struct pty *p, int stream, const char *d, size_t n)
{
  if (p->mode == 2 && (p->n_marks == 0 || p->marks[p->n_marks - 1].stream != stream)) {
    if (p->n_marks == PTY_MARKS_MAX) {
      memmove(p->marks, p->marks + 1, (PTY_MARKS_MAX - 1) * sizeof *p->marks);
      p->n_marks--;
    }
    p->marks[p->n_marks++] = (struct mark){p->total, stream};
  }
  if (n > p->cap) {
    p->total += n - p->cap;
    d += n - p->cap;
    n = p->cap;
  }
  size_t at = (size_t) (p->total % p->cap), first = p->cap - at < n ? p->cap - at : n;
  memcpy(p->ring + at, d, first);
  memcpy(p->ring, d + first, n - first);
  p->total += n;
}

static uint64_t ring_oldest(const struct pty *p)
{
  return p->total > p->cap ? p->total - p->cap : 0;
}

/* Copies [from, from + n) (n within what is kept) into out. */
static void ring_get(const struct pty *p, uint64_t from, size_t n, sbx_buf_t *out)
{
  size_t at = (size_t) (from % p->cap), first = p->cap - at < n ? p->cap - at : n;
  sbx__buf_append(out, p->ring + at, first);
  sbx__buf_append(out, p->ring, n - first);
}

/* Pipe mode: the stream of the byte at off, and how many bytes from there are in it. */
static int ring_stream(const struct pty *p, uint64_t off, uint64_t *run)
{
  *run = p->total - off;
  if (p->mode != 2)
    return 1;
  for (size_t i = p->n_marks; i-- > 0;)
    if (p->marks[i].at <= off) {
      if (i + 1 < p->n_marks)
        *run = p->marks[i + 1].at - off;
      return p->marks[i].stream;
    }
  if (p->n_marks) /* before the oldest mark remembered: stop at it */
    *run = p->marks[0].at - off;
  return 1;
}

/* ---- the session thread ---- */

static void start_locked(struct pty *p, sbx_session_t **s)
{
  bool tty = p->mode == 1;
  pthread_mutex_unlock(&p->lock);
  struct sbx_exec_opts o = {.env = (const char *const *) p->env.v,
                            .n_env = p->env.n,
                            .cwd = p->cwd,
                            .no_timeout = true,
                            .argv = (const char *const *) p->argv.v,
                            .kill_on_disconnect = true,
                            .out_cap = UINT64_MAX};
  struct sbx_session_opts so = {.tty = tty, .rows = p->rows, .cols = p->cols};
  sbx_error_t err = NULL;
  *s = sbx_session_start(p->box->sb, NULL, &o, &so, &err);
  pthread_mutex_lock(&p->lock);
  p->started = true;
  if (*s) {
    p->running = true;
  } else {
    p->failed = true;
    p->exited = true;
    snprintf(p->start_err, sizeof p->start_err, "%s", err ? err->msg : "unknown error");
    sbx_error_release(&err);
  }
  kick(p->ws_efd);
}

static void exited_locked(struct pty *p, int code, bool signaled)
{
  p->running = false;
  p->exited = true;
  /* execd reports Go's ProcessState.ExitCode(): -1 for a command killed by a signal */
  p->exit_code = signaled || code < 0 ? -1 : code;
  kick(p->ws_efd);
}

static void *pty_main(void *arg)
{
  struct pty *p = arg;
  sbx_session_t *s = NULL;
  uint64_t grace_ms = (uint64_t) (srv.cfg->pty_grace * 1000);
  sbx_buf_t in = {0};
  pthread_mutex_lock(&p->lock);
  for (;;) {
    if (atomic_load(&srv.stopping))
      p->ending = true;
    if (!p->attached && !p->pending && sbx__now_ms() - p->idle_since > grace_ms) {
      if (!p->ending)
        sbxd_log(SBXD_INFO, "pty session %s: no client for %.0f s, killed", p->id,
                 srv.cfg->pty_grace);
      p->ending = true;
    }
    if (p->ending)
      break;
    if (!p->started && p->mode)
      start_locked(p, &s);
    /* what the WebSocket asked for (kept until the command runs) */
    bool running = s && p->running;
    size_t room = running && sbx_session_pending(s) < SBX_SESSION_QUEUE_MAX / 2
                      ? SBX_SESSION_QUEUE_MAX / 2 - sbx_session_pending(s)
                      : 0;
    size_t take = p->input.len < room ? p->input.len : room;
    in.len = 0;
    if (take) {
      sbx__buf_append(&in, p->input.data, take);
      memmove(p->input.data, p->input.data + take, p->input.len - take);
      p->input.len -= take;
    }
    bool resize = running && p->resize;
    unsigned rows = p->want_rows, cols = p->want_cols;
    int sigs[8];
    size_t n_sigs = running ? p->n_signals : 0;
    memcpy(sigs, p->signals, sizeof sigs);
    if (running) {
      p->resize = false;
      p->n_signals = 0;
    }
    pthread_mutex_unlock(&p->lock);

    sbx_error_t err = NULL;
    if (running) {
      if (in.len && sbx_session_write(s, in.data, in.len, &err) < 0)
        sbx_error_release(&err);
      if (resize && sbx_session_resize(s, rows, cols, &err) < 0)
        sbx_error_release(&err);
      for (size_t i = 0; i < n_sigs; i++)
        if (sbx_session_signal(s, sigs[i], &err) < 0)
          sbx_error_release(&err);
    }
    struct pollfd fds[2] = {{p->kick, POLLIN, 0}, {-1, 0, 0}};
    if (running)
      fds[1] = (struct pollfd){sbx_session_fd(s),
                               (short) (POLLIN | (sbx_session_pending(s) ? POLLOUT : 0)), 0};
    int n = poll(fds, 2, 500);
    if (n > 0 && fds[0].revents)
      drain(p->kick);
    if (n > 0 && (fds[1].revents & POLLOUT) && sbx_session_flush(s, &err) < 0)
      sbx_error_release(&err);
    struct sbx_session_event ev = {0};
    int got = 0;
    if (n > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      got = sbx_session_read(s, &ev, &err) < 0 ? -1 : 1;
      sbx_error_release(&err);
    }
    pthread_mutex_lock(&p->lock);
    if (got == 1 && ev.type == SBX_SESSION_OUTPUT && ev.len) {
      ring_put(p, ev.stream, ev.data, ev.len);
      kick(p->ws_efd);
    } else if (got == 1 && ev.type == SBX_SESSION_EXIT) {
      exited_locked(p, ev.exit_code, ev.signaled);
    } else if (got < 0) {
      exited_locked(p, -1, true); /* the channel broke: the sandbox is gone */
    }
    if (p->exited && s) {
      pthread_mutex_unlock(&p->lock);
      sbx_session_free(s);
      s = NULL;
      pthread_mutex_lock(&p->lock);
    }
  }
  if (!p->exited)
    exited_locked(p, -1, true);
  pthread_mutex_unlock(&p->lock);
  pty_unlink(p);
  if (s)
    sbx_session_free(s); /* kill_on_disconnect: the command dies with it */
  sbx__buf_free(&in);
  pty_unref(p);
  sbxd_worker_done();
  return NULL;
}

/* ---- REST ---- */

static enum MHD_Result bad(struct req *r, const char *msg)
{
  return sbxd_error(r, 400, "INVALID_REQUEST_BODY", "error parsing request: %s", msg);
}

static bool dim_ok(json_t *v, unsigned *out)
{
  if (v == NULL || json_is_null(v))
    return true;
  if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > SBX_TTY_MAX_DIM)
    return false;
  *out = (unsigned) json_integer_value(v);
  return true;
}

enum MHD_Result h_pty_create(struct req *r)
{
  json_auto_t *body = NULL;
  if (r->body.len > 0) {
    enum MHD_Result ret;
    body = sbxd_body_json(r, SBXD_JSON_EXECD, SBXD_WANT_OBJECT, &ret);
    if (body == NULL)
      return ret;
  } else {
    body = json_object(); /* execd: an empty body is the defaults */
  }
  json_t *cwd = json_object_get(body, "cwd"), *cmd = json_object_get(body, "command");
  json_t *env = json_object_get(body, "env");
  struct pty *p = xzalloc(sizeof *p);
  p->kick = -1;
  p->ws_efd = -1;
  const char *why = NULL;
  if (cwd && !json_is_null(cwd) && !json_is_string(cwd))
    why = "cwd must be a string";
  else if (cmd && !json_is_null(cmd) && !json_is_string(cmd))
    why = "command must be a string";
  else if (!dim_ok(json_object_get(body, "cols"), &p->cols))
    why = "cols must be an integer from 1 to 4096";
  else if (!dim_ok(json_object_get(body, "rows"), &p->rows))
    why = "rows must be an integer from 1 to 4096";
  else if (env && !json_is_null(env) && !json_is_object(env))
    why = "env must be an object of strings";
  const char *k;
  json_t *v;
  if (why == NULL && json_is_object(env))
    json_object_foreach(env, k, v)
    {
      if (!json_is_string(v)) {
        why = "env values must be strings";
        break;
      }
      sbx__strv_push_owned(&p->env, xasprintf("%s=%s", k, json_string_value(v)));
    }
  if (why) {
    sbx__strv_free(&p->env);
    free(p);
    return bad(r, why);
  }
  const char *c = json_string_value(cwd);
  if (c && *c)
    p->cwd = sbxd_path_clean(c);
  /* execd runs `bash --norc --noprofile [-c command]`; an image without bash gets its sh */
  const char *command = json_string_value(cmd);
  sbx__strv_push(&p->argv, "sh");
  sbx__strv_push(&p->argv, "-c");
  sbx__strv_push(&p->argv, "command -v bash >/dev/null 2>&1 && exec bash --norc --noprofile "
                           "\"$@\"; exec sh \"$@\"");
  sbx__strv_push(&p->argv, "sh");
  if (command && *command) {
    sbx__strv_push(&p->argv, "-c");
    sbx__strv_push(&p->argv, command);
  }
  p->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  p->cap = (size_t) srv.cfg->pty_buffer;
  p->ring = xmalloc(p->cap);
  pthread_mutex_init(&p->lock, NULL);
  p->idle_since = sbx__now_ms();
  p->refs = 2; /* the table's (the thread's) and ours */
  p->box = box_ref(r->box);
  cleanup_free char *id = uuid4();
  snprintf(p->id, sizeof p->id, "%s", id);

  pthread_mutex_lock(&reg_lock);
  int64_t count = 0;
  for (struct pty *q = table; q; q = q->next)
    count += q->box == r->box;
  bool full = count >= srv.cfg->pty_max_sessions;
  if (!full) {
    p->next = table;
    table = p;
  }
  pthread_mutex_unlock(&reg_lock);
  if (full) {
    p->refs = 1;
    pty_unref(p);
    return sbxd_error(r, 429, "PTY_SESSION_LIMIT",
                      "sandbox %s already has %lld PTY sessions (sbxd.pty_max_sessions); delete "
                      "one first",
                      r->box->id, (long long) count);
  }
  sbxd_worker_start();
  if (p->kick < 0 || sbxd_spawn(pty_main, p) < 0) {
    sbxd_worker_done();
    pty_unlink(p);
    p->refs = 1;
    pty_unref(p);
    return sbxd_error(r, 500, "RUNTIME_ERROR", "error creating pty session: %s", strerror(errno));
  }
  json_t *j = json_pack("{s:s}", "session_id", p->id);
  pty_unref(p);
  return sbxd_json(r, 201, j);
}

static enum MHD_Result not_found(struct req *r, const char *id)
{
  return sbxd_error(r, 404, "CONTEXT_NOT_FOUND", "pty session %s not found", id);
}

enum MHD_Result h_pty_status(struct req *r)
{
  const char *id = sbxd_param(r, "id");
  struct pty *p = pty_find(r->box, id);
  if (p == NULL)
    return not_found(r, id);
  pthread_mutex_lock(&p->lock);
  json_t *j = json_pack("{s:s,s:b,s:I}", "session_id", p->id, "running", p->running,
                        "output_offset", (json_int_t) p->total);
  pthread_mutex_unlock(&p->lock);
  pty_unref(p);
  return sbxd_json(r, 200, j);
}

enum MHD_Result h_pty_delete(struct req *r)
{
  const char *id = sbxd_param(r, "id");
  struct pty *p = pty_find(r->box, id);
  if (p == NULL)
    return not_found(r, id);
  pty_unlink(p); /* gone for new requests at once; the thread kills the command */
  pthread_mutex_lock(&p->lock);
  p->ending = true;
  kick(p->ws_efd);
  pthread_mutex_unlock(&p->lock);
  kick(p->kick);
  pty_unref(p);
  return sbxd_empty(r, 200);
}

/* ---- the WebSocket ---- */

struct conn {
  struct pty *p;
  struct MHD_UpgradeResponseHandle *urh;
  int fd;
  int efd;
  uint64_t gen;
  uint64_t since, sent;
  bool evict; /* takeover: the holder to close */
  sbx_buf_t out;
  char *extra; /* bytes read past the handshake */
  size_t n_extra;
  struct ws_rx rx;
};

/* Sends c->out (blocking, at most WS_SEND_MS without progress). */
static int flush_out(struct conn *c)
{
  size_t off = 0;
  while (off < c->out.len) {
    ssize_t n = send(c->fd, c->out.data + off, c->out.len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += (size_t) n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      break;
    struct pollfd pf = {c->fd, POLLOUT, 0};
    if (poll(&pf, 1, WS_SEND_MS) <= 0 || (pf.revents & (POLLERR | POLLHUP)))
      break;
  }
  bool ok = off == c->out.len;
  c->out.len = 0;
  return ok ? 0 : -1;
}

static int send_json(struct conn *c, json_t *j)
{
  char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(j);
  sbxd_ws_frame(&c->out, WS_OP_TEXT, s, strlen(s));
  free(s);
  return flush_out(c);
}

static int send_error(struct conn *c, const char *code, const char *msg)
{
  return send_json(c, json_pack("{s:s,s:s,s:s}", "type", "error", "error", msg, "code", code));
}

static void send_close(struct conn *c, int code, const char *reason)
{
  sbxd_ws_close_frame(&c->out, code, reason);
  flush_out(c);
}

/* The output the client has not seen yet; 1 when the session ended and it saw everything. */
static int pump(struct conn *c)
{
  struct pty *p = c->p;
  for (;;) {
    pthread_mutex_lock(&p->lock);
    if (c->sent < ring_oldest(p))
      c->sent = ring_oldest(p); /* it fell behind by more than the buffer: skip */
    uint64_t run;
    int stream = ring_stream(p, c->sent, &run);
    size_t n = run < PTY_CHUNK ? (size_t) run : PTY_CHUNK;
    sbx_buf_t frame = {0};
    if (n) {
      sbx__buf_putc(&frame, (char) (stream == 2 ? 0x02 : 0x01));
      ring_get(p, c->sent, n, &frame);
      c->sent += n;
    }
    bool done = n == 0 && p->exited;
    bool failed = p->failed;
    int code = p->exit_code;
    cleanup_free char *why = failed ? xstrdup(p->start_err) : NULL;
    pthread_mutex_unlock(&p->lock);
    if (n) {
      sbxd_ws_frame(&c->out, WS_OP_BINARY, frame.data, frame.len);
      sbx__buf_free(&frame);
      if (flush_out(c) < 0)
        return -1;
      continue;
    }
    if (!done)
      return 0;
    if (failed) {
      send_error(c, "START_FAILED", why);
      send_close(c, WS_CLOSE_INTERNAL, "START_FAILED");
      return 1;
    }
    send_json(c, json_pack("{s:s,s:i}", "type", "exit", "exit_code", code));
    send_close(c, WS_CLOSE_NORMAL, "process exited");
    return 1;
  }
}

static int signal_named(const char *s)
{
  static const struct {
    const char *name;
    int sig;
  } names[] = {{"SIGINT", SIGINT},
               {"SIGTERM", SIGTERM},
               {"SIGKILL", SIGKILL},
               {"SIGQUIT", SIGQUIT},
               {"SIGHUP", SIGHUP}};
  for (size_t i = 0; s && i < ARRAY_SIZE(names); i++)
    if (strcmp(s, names[i].name) == 0)
      return names[i].sig;
  return 0;
}

static void queue_input(struct pty *p, const char *d, size_t n)
{
  pthread_mutex_lock(&p->lock);
  sbx__buf_append(&p->input, d, n);
  pthread_mutex_unlock(&p->lock);
  kick(p->kick);
}

/* A client's text frame (execd ignores one that is not JSON). -1: close the connection. */
static int on_text(struct conn *c, const char *d, size_t n)
{
  json_auto_t *j = json_loadb(d, n, 0, NULL);
  if (!json_is_object(j))
    return 0;
  const char *type = json_string_value(json_object_get(j, "type"));
  type = type ? type : "";
  struct pty *p = c->p;
  if (strcmp(type, "stdin") == 0) {
    const char *data = json_string_value(json_object_get(j, "data"));
    if (data)
      queue_input(p, data, strlen(data));
  } else if (strcmp(type, "signal") == 0) {
    int sig = signal_named(json_string_value(json_object_get(j, "signal")));
    pthread_mutex_lock(&p->lock);
    if (sig && p->n_signals < ARRAY_SIZE(p->signals))
      p->signals[p->n_signals++] = sig;
    pthread_mutex_unlock(&p->lock);
    kick(p->kick);
  } else if (strcmp(type, "resize") == 0) {
    json_int_t cols = json_integer_value(json_object_get(j, "cols"));
    json_int_t rows = json_integer_value(json_object_get(j, "rows"));
    if (cols > 0 && rows > 0 && cols <= SBX_TTY_MAX_DIM && rows <= SBX_TTY_MAX_DIM) {
      pthread_mutex_lock(&p->lock);
      p->resize = p->mode == 1;
      p->want_cols = (unsigned) cols;
      p->want_rows = (unsigned) rows;
      pthread_mutex_unlock(&p->lock);
      kick(p->kick);
    }
  } else if (strcmp(type, "ping") == 0) {
    return send_json(c, json_pack("{s:s}", "type", "pong"));
  } else {
    cleanup_free char *msg = xasprintf("unknown frame type \"%s\"", type);
    return send_error(c, "INVALID_FRAME", msg);
  }
  return 0;
}

/* The connection's frames; 1 when it is over. */
static int on_frames(struct conn *c)
{
  struct ws_rx *rx = &c->rx;
  struct ws_event ev;
  int r;
  while ((r = sbxd_ws_next(rx, &ev)) == 1) {
    switch (ev.op) {
    case WS_OP_BINARY:
      if (ev.len > 0 && ev.data[0] == 0x00)
        queue_input(c->p, ev.data + 1, ev.len - 1);
      break;
    case WS_OP_TEXT:
      if (on_text(c, ev.data, ev.len) < 0)
        return 1;
      break;
    case WS_OP_PING:
      sbxd_ws_frame(&c->out, WS_OP_PONG, ev.data, ev.len);
      if (flush_out(c) < 0)
        return 1;
      break;
    case WS_OP_CLOSE:
      send_close(c, ev.code == WS_CLOSE_NO_STATUS ? WS_CLOSE_NORMAL : ev.code, "");
      return 1;
    default: /* a pong */
      break;
    }
  }
  if (r < 0) {
    sbxd_log(SBXD_INFO, "pty session %s: closing its WebSocket (%d): %s", c->p->id, rx->close_code,
             rx->err);
    send_close(c, rx->close_code, rx->err);
    return 1;
  }
  return 0;
}

static void *ws_main(void *arg)
{
  struct conn *c = arg;
  struct pty *p = c->p;
  sbxd_ws_feed(&c->rx, c->extra, c->n_extra);
  free(c->extra);
  c->extra = NULL;

  /* attach: evict a holder, start the shell on the first connection */
  pthread_mutex_lock(&p->lock);
  if (p->attached)
    kick(p->ws_efd); /* (a takeover) the holder sees gen change and closes with 4001 */
  c->gen = ++p->gen;
  p->pending--;
  p->attached = true;
  p->ws_efd = c->efd;
  pthread_mutex_unlock(&p->lock);
  kick(p->kick);

  /* the replay, then "connected" (execd's order) */
  pthread_mutex_lock(&p->lock);
  uint64_t from = c->since > ring_oldest(p) ? c->since : ring_oldest(p);
  sbx_buf_t frame = {0};
  if (from < p->total) {
    uint8_t h[9] = {0x03};
    for (int i = 0; i < 8; i++)
      h[1 + i] = (uint8_t) (from >> (56 - 8 * i));
    sbx__buf_append(&frame, h, sizeof h);
    ring_get(p, from, (size_t) (p->total - from), &frame);
  }
  c->sent = p->total;
  const char *mode = p->mode == 2 ? "pipe" : "pty";
  pthread_mutex_unlock(&p->lock);
  int over = 0;
  if (frame.len) {
    sbxd_ws_frame(&c->out, WS_OP_BINARY, frame.data, frame.len);
    over = flush_out(c) < 0;
  }
  sbx__buf_free(&frame);
  if (!over)
    over = send_json(c, json_pack("{s:s,s:s,s:s}", "type", "connected", "session_id", p->id, "mode",
                                  mode)) < 0;

  uint64_t last_rx = sbx__now_ms(), last_ping = last_rx;
  char buf[65536];
  while (!over) {
    if (atomic_load(&srv.stopping)) {
      send_close(c, WS_CLOSE_GOING_AWAY, "sbxd is stopping");
      break;
    }
    pthread_mutex_lock(&p->lock);
    bool evicted = p->gen != c->gen, ending = p->ending; /* DELETE */
    bool full = p->input.len >= PTY_INPUT_MAX;
    pthread_mutex_unlock(&p->lock);
    if (evicted) {
      send_close(c, 4001, "TAKEN_OVER");
      break;
    }
    if (ending) {
      send_error(c, "SESSION_GONE", "the pty session was deleted");
      send_close(c, WS_CLOSE_NORMAL, "SESSION_GONE");
      break;
    }
    if ((over = pump(c)) != 0)
      break;
    struct pollfd fds[2] = {{c->fd, full ? 0 : POLLIN, 0}, {c->efd, POLLIN, 0}};
    int n = poll(fds, 2, 1000);
    uint64_t now = sbx__now_ms();
    if (n > 0 && fds[1].revents)
      drain(c->efd);
    if (n > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      ssize_t got = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR))
        break; /* the client vanished */
      if (got > 0) {
        last_rx = now;
        sbxd_ws_feed(&c->rx, buf, (size_t) got);
        if (on_frames(c))
          break;
      }
    }
    if (now - last_rx > WS_IDLE_MS) {
      send_close(c, WS_CLOSE_GOING_AWAY, "no pong");
      break;
    }
    if (now - last_ping >= WS_PING_MS) {
      last_ping = now;
      sbxd_ws_frame(&c->out, WS_OP_PING, NULL, 0);
      if (flush_out(c) < 0)
        break;
    }
  }

  /* detach: the grace period starts (unless another connection took over) */
  pthread_mutex_lock(&p->lock);
  if (p->gen == c->gen) {
    p->attached = false;
    p->ws_efd = -1;
    p->idle_since = sbx__now_ms();
  }
  pthread_mutex_unlock(&p->lock);
  kick(p->kick);
  MHD_upgrade_action(c->urh, MHD_UPGRADE_ACTION_CLOSE);
  close(c->efd);
  sbxd_ws_rx_free(&c->rx);
  sbx__buf_free(&c->out);
  pty_unref(p);
  free(c);
  atomic_fetch_sub(&ws_live, 1);
  sbxd_worker_done();
  return NULL;
}

/* The reservation of a handshake whose upgrade never happened (the client left first). */
static void conn_drop(struct conn *c)
{
  pthread_mutex_lock(&c->p->lock);
  c->p->pending--;
  c->p->idle_since = sbx__now_ms();
  pthread_mutex_unlock(&c->p->lock);
  if (c->efd >= 0)
    close(c->efd);
  pty_unref(c->p);
  free(c);
}

/* (MHD calls it after on_upgrade, on the same thread, when there was one) */
static void on_request_close(struct req *r, bool completed)
{
  (void) completed;
  if (r->ctx)
    conn_drop(r->ctx);
  r->ctx = NULL;
}

static void on_upgrade(void *cls, struct MHD_Connection *connection, void *req_cls,
                       const char *extra_in, size_t extra_in_size, MHD_socket sock,
                       struct MHD_UpgradeResponseHandle *urh)
{
  (void) connection;
  struct conn *c = cls;
  ((struct req *) req_cls)->ctx = NULL; /* the WebSocket thread owns c now */
  c->urh = urh;
  c->fd = sock;
  c->extra = xmalloc(extra_in_size + 1);
  memcpy(c->extra, extra_in, extra_in_size);
  c->n_extra = extra_in_size;
  atomic_fetch_add(&ws_live, 1);
  sbxd_worker_start();
  if (sbxd_spawn(ws_main, c) < 0) {
    sbxd_worker_done();
    atomic_fetch_sub(&ws_live, 1);
    MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
    free(c->extra);
    conn_drop(c);
  }
}

/* A comma-separated header value contains token (case-insensitive). */
static bool header_has(const char *v, const char *token)
{
  size_t n = strlen(token);
  while (v && *v) {
    v += strspn(v, " \t,");
    size_t len = strcspn(v, ",");
    size_t e = len;
    while (e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'))
      e--;
    if (e == n && strncasecmp(v, token, n) == 0)
      return true;
    v += len;
  }
  return false;
}

enum MHD_Result h_pty_ws(struct req *r)
{
  const char *id = sbxd_param(r, "id");
  struct pty *p = pty_find(r->box, id);
  if (p == NULL)
    return not_found(r, id);
  const char *up = sbxd_header(r, "Upgrade"), *conn = sbxd_header(r, "Connection");
  const char *ver = sbxd_header(r, "Sec-WebSocket-Version");
  const char *key = sbxd_header(r, "Sec-WebSocket-Key");
  char accept[29];
  enum MHD_Result ret;
  if (!header_has(up, "websocket") || !header_has(conn, "upgrade")) {
    ret = sbxd_error(r, 400, "INVALID_REQUEST",
                     "GET /pty/%s/ws is a WebSocket: send Upgrade: websocket and "
                     "Connection: Upgrade",
                     id);
    goto out;
  }
  if (ver == NULL || strcmp(ver, "13") != 0) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *) "", MHD_RESPMEM_PERSISTENT);
    MHD_add_response_header(resp, "Sec-WebSocket-Version", "13");
    ret = sbxd_respond(r, 426, resp);
    goto out;
  }
  if (!sbxd_ws_accept(key, accept)) {
    ret = sbxd_error(r, 400, "INVALID_REQUEST",
                     "Sec-WebSocket-Key must be 16 bytes in base64 (24 characters)");
    goto out;
  }
  const char *since_s = sbxd_query(r, "since");
  int64_t since = 0;
  if (since_s && *since_s && (!sbxd_parse_i64(since_s, &since) || since < 0))
    since = 0; /* execd: a bad value is the default */
  const char *pty_q = sbxd_query(r, "pty"), *take_q = sbxd_query(r, "takeover");
  bool takeover = take_q && strcmp(take_q, "1") == 0;
  pthread_mutex_lock(&p->lock);
  bool busy = (p->attached || p->pending) && !takeover, gone = p->ending;
  if (!busy && !gone) {
    p->pending++;
    if (!p->mode)
      p->mode = pty_q && strcmp(pty_q, "0") == 0 ? 2 : 1;
  }
  pthread_mutex_unlock(&p->lock);
  if (gone) {
    ret = not_found(r, id);
    goto out;
  }
  if (busy) {
    ret = sbxd_error(r, 409, "ALREADY_CONNECTED",
                     "another client is already connected to pty session %s", id);
    goto out;
  }
  struct conn *c = xzalloc(sizeof *c);
  c->p = p;
  c->since = (uint64_t) since;
  c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, c);
  if (c->efd < 0 || resp == NULL) {
    if (resp)
      MHD_destroy_response(resp);
    conn_drop(c); /* (takes our reference to p) */
    return sbxd_error(r, 500, "RUNTIME_ERROR", "cannot upgrade the connection");
  }
  MHD_add_response_header(resp, "Upgrade", "websocket");
  MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
  /* c (and our reference to p) go to on_upgrade, or back to on_request_close */
  r->ctx = c;
  r->on_close = on_request_close;
  return sbxd_respond(r, 101, resp);
out:
  pty_unref(p);
  return ret;
}

void sbxd_pty_stop(void)
{
  /* the WebSocket threads see srv.stopping within a second and close with 1001 */
  for (int i = 0; i < 30 && atomic_load(&ws_live) > 0; i++) {
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
  }
}
