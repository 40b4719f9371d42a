/* Response bodies produced by other threads.
 *
 * An event stream is a queue between a worker (running a command in the sandbox) and MHD's
 * connection thread (the content reader). The worker never blocks on the client: a client that
 * reads too slowly loses events beyond SBXD_STREAM_QUEUE bytes (counted and reported), and one
 * that vanished (MHD frees the response) makes the worker drop everything. Readers wait at most a
 * second at a time so that MHD_stop_daemon, which joins connection threads, never hangs. */
#include "stream.h"
#include "ctx.h"
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

struct stream {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  sbx_buf_t q;
  size_t off;
  bool finished, detached, ping;
  int refs;
  uint64_t dropped;
  uint64_t last_sent; /* monotonic ms of the last bytes handed to MHD */
  int start_state;    /* 0 waiting, 1 started, -1 failed */
  sbx_error_t start_err;
};

static void deadline_in(struct timespec *ts, uint64_t ms)
{
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += (time_t) (ms / 1000);
  ts->tv_nsec += (long) (ms % 1000) * 1000000;
  if (ts->tv_nsec >= 1000000000) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000;
  }
}

struct stream *stream_new(void)
{
  struct stream *s = xzalloc(sizeof *s);
  pthread_mutex_init(&s->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&s->cond, &ca);
  pthread_condattr_destroy(&ca);
  s->refs = 1;
  s->last_sent = sbx__now_ms();
  return s;
}

void stream_unref(struct stream *s)
{
  pthread_mutex_lock(&s->lock);
  bool last = --s->refs == 0;
  pthread_mutex_unlock(&s->lock);
  if (!last)
    return;
  sbx__buf_free(&s->q);
  sbx_error_release(&s->start_err);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

static void enqueue_locked(struct stream *s, const char *data, size_t len)
{
  if (s->detached || s->finished)
    return;
  if (s->q.len - s->off + len > SBXD_STREAM_QUEUE) {
    s->dropped += len;
    return;
  }
  if (s->off > 0 && s->off == s->q.len) {
    s->q.len = 0;
    s->off = 0;
  }
  sbx__buf_append(&s->q, data, len);
  pthread_cond_broadcast(&s->cond);
}

static char *event_text(const char *type, json_t *fields)
{
  json_t *ev = json_object();
  json_object_set_new(ev, "type", json_string(type));
  static const char *const first[] = {"text", "execution_count", "execution_time"};
  for (size_t i = 0; i < ARRAY_SIZE(first); i++) {
    json_t *v = fields ? json_object_get(fields, first[i]) : NULL;
    if (v)
      json_object_set(ev, first[i], v);
  }
  json_object_set_new(ev, "timestamp", json_integer((json_int_t) sbxd_now_ms()));
  const char *k;
  json_t *v;
  if (fields)
    json_object_foreach(fields, k, v)
    {
      if (!json_object_get(ev, k))
        json_object_set(ev, k, v);
    }
  json_decref(fields);
  char *s = json_dumps(ev, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(ev);
  return s;
}

void stream_event(struct stream *s, const char *type, json_t *fields)
{
  char *text = event_text(type, fields);
  if (text == NULL)
    return;
  size_t n = strlen(text);
  text = xrealloc(text, n + 3);
  memcpy(text + n, "\n\n", 3);
  pthread_mutex_lock(&s->lock);
  enqueue_locked(s, text, n + 2);
  pthread_mutex_unlock(&s->lock);
  free(text);
}

void stream_raw(struct stream *s, const char *data, size_t len)
{
  pthread_mutex_lock(&s->lock);
  enqueue_locked(s, data, len);
  pthread_mutex_unlock(&s->lock);
}

void stream_finish(struct stream *s)
{
  pthread_mutex_lock(&s->lock);
  if (s->dropped && !s->detached && !s->finished) {
    char note[160];
    snprintf(note, sizeof note,
             "[sbxd: %llu bytes of output were dropped because the client read too slowly]",
             (unsigned long long) s->dropped);
    json_t *f = json_pack("{s:s}", "text", note);
    char *t = event_text("stderr", f);
    if (t) {
      s->q.len = s->off = 0; /* make room: the note must get through */
      sbx__buf_append(&s->q, t, strlen(t));
      sbx__buf_append(&s->q, "\n\n", 2);
      free(t);
    }
  }
  s->finished = true;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

bool stream_detached(struct stream *s)
{
  pthread_mutex_lock(&s->lock);
  bool d = s->detached;
  pthread_mutex_unlock(&s->lock);
  return d;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
  struct stream *s = cls;
  (void) pos;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    if (s->q.len > s->off) {
      size_t n = s->q.len - s->off < max ? s->q.len - s->off : max;
      memcpy(buf, s->q.data + s->off, n);
      s->off += n;
      if (s->off == s->q.len)
        s->q.len = s->off = 0;
      s->last_sent = sbx__now_ms();
      pthread_mutex_unlock(&s->lock);
      return (ssize_t) n;
    }
    if (s->finished) {
      pthread_mutex_unlock(&s->lock);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (atomic_load(&srv.stopping)) {
      pthread_mutex_unlock(&s->lock);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    uint64_t now = sbx__now_ms();
    if (s->ping && now - s->last_sent >= SBXD_PING_INTERVAL_MS) {
      char *t = event_text("ping", json_pack("{s:s}", "text", "pong"));
      if (t) {
        sbx__buf_append(&s->q, t, strlen(t));
        sbx__buf_append(&s->q, "\n\n", 2);
        free(t);
      }
      continue;
    }
    uint64_t wait = 1000;
    if (s->ping && SBXD_PING_INTERVAL_MS - (now - s->last_sent) < wait)
      wait = SBXD_PING_INTERVAL_MS - (now - s->last_sent);
    struct timespec ts;
    deadline_in(&ts, wait);
    pthread_cond_timedwait(&s->cond, &s->lock, &ts);
  }
}

static void stream_free_cb(void *cls)
{
  struct stream *s = cls;
  pthread_mutex_lock(&s->lock);
  s->detached = true;
  sbx__buf_free(&s->q);
  s->off = 0;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  stream_unref(s);
}

struct MHD_Response *stream_response(struct stream *s, bool ping)
{
  pthread_mutex_lock(&s->lock);
  s->refs++;
  s->ping = ping;
  pthread_mutex_unlock(&s->lock);
  struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024,
                                                                stream_read, s, stream_free_cb);
  if (resp == NULL) {
    stream_free_cb(s);
    return NULL;
  }
  MHD_add_response_header(resp, "Content-Type", "text/event-stream");
  MHD_add_response_header(resp, "Cache-Control", "no-cache");
  MHD_add_response_header(resp, "X-Accel-Buffering", "no");
  return resp;
}

void stream_started(struct stream *s)
{
  pthread_mutex_lock(&s->lock);
  if (s->start_state == 0)
    s->start_state = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
}

void stream_failed(struct stream *s, sbx_error_t *err)
{
  pthread_mutex_lock(&s->lock);
  if (s->start_state == 0) {
    s->start_state = -1;
    s->start_err = *err;
    *err = NULL;
  }
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  sbx_error_release(err);
}

int stream_wait_start(struct stream *s, sbx_error_t *err)
{
  /* bounded: a sandbox that never answers (frozen, overloaded) must not hold this connection
   * thread (and MHD_stop_daemon, which joins it) forever; libsbx gives up on a silent start
   * within 30 s, this is the backstop */
  uint64_t give_up = sbx__now_ms() + 60000;
  pthread_mutex_lock(&s->lock);
  while (s->start_state == 0) {
    if (atomic_load(&srv.stopping) || sbx__now_ms() >= give_up) {
      s->start_state = -1;
      sbx__make_error(&s->start_err, ETIMEDOUT, SBX_E_TIMEOUT,
                      atomic_load(&srv.stopping) ? "sbxd is stopping"
                                                 : "the command did not start within 60 s");
      break;
    }
    struct timespec ts;
    deadline_in(&ts, 1000);
    pthread_cond_timedwait(&s->cond, &s->lock, &ts);
  }
  int r = s->start_state > 0 ? 0 : -1;
  if (r < 0) {
    *err = s->start_err;
    s->start_err = NULL;
  }
  pthread_mutex_unlock(&s->lock);
  return r;
}

/* ---- bodies read from a file descriptor ---- */

struct fd_body {
  int fd;
  uint64_t size;
};

static ssize_t fd_read(void *cls, uint64_t pos, char *buf, size_t max)
{
  struct fd_body *b = cls;
  for (;;) {
    struct pollfd p = {b->fd, POLLIN, 0};
    int n = poll(&p, 1, 1000);
    if (n < 0 && errno != EINTR)
      return MHD_CONTENT_READER_END_WITH_ERROR;
    if (n <= 0) {
      if (atomic_load(&srv.stopping))
        return MHD_CONTENT_READER_END_WITH_ERROR;
      continue;
    }
    ssize_t got = read(b->fd, buf, max);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (got < 0)
      return MHD_CONTENT_READER_END_WITH_ERROR;
    if (got == 0)
      return b->size != MHD_SIZE_UNKNOWN && pos < b->size ? MHD_CONTENT_READER_END_WITH_ERROR
                                                          : MHD_CONTENT_READER_END_OF_STREAM;
    return got;
  }
}

static void fd_free(void *cls)
{
  struct fd_body *b = cls;
  close(b->fd);
  free(b);
}

struct MHD_Response *fd_response(int fd, uint64_t size)
{
  struct fd_body *b = xzalloc(sizeof *b);
  b->fd = fd;
  b->size = size;
  struct MHD_Response *resp =
      MHD_create_response_from_callback(size, 64 * 1024, fd_read, b, fd_free);
  if (resp == NULL)
    fd_free(b);
  return resp;
}

/* ---- sockets ---- */

int sbxd_send_all(int fd, const char *d, size_t n, int timeout_ms)
{
  while (n > 0) {
    /* without a limit, a blocking send: it fails at once when the peer shuts its reading side
     * down (an upload's writer that gave up), where poll would wait for room forever */
    if (timeout_ms >= 0) {
      struct pollfd pf = {fd, POLLOUT, 0};
      int pr = poll(&pf, 1, timeout_ms);
      if (pr < 0 && errno == EINTR)
        continue;
      if (pr <= 0)
        return -1;
    }
    ssize_t w = send(fd, d, n, MSG_NOSIGNAL | (timeout_ms >= 0 ? MSG_DONTWAIT : 0));
    if (w < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (w < 0)
      return -1;
    d += w;
    n -= (size_t) w;
  }
  return 0;
}

/* ---- a foreground command's client ---- */

struct sbxd_watch {
  pthread_t thread;
  int fd;   /* our own reference to the client's socket (MHD may close its own meanwhile) */
  int stop; /* eventfd */
  pthread_mutex_t lock;
  sbx_sandbox_t *sb;
  char id[65]; /* the command, once started */
  bool gone;
  void (*on_gone)(void *arg);
  void *arg;
};

static void watch_kill_locked(struct sbxd_watch *w)
{
  if (w->sb && w->id[0])
    sbx_command_signal(w->sb, w->id, SIGKILL, NULL);
}

static void *watch_main(void *arg)
{
  struct sbxd_watch *w = arg;
  for (;;) {
    /* POLLRDHUP: the client closed its end (or vanished: POLLHUP, POLLERR); bytes it sends
     * meanwhile (a pipelined request) are not ours to read and are not asked for */
    struct pollfd p[2] = {{w->fd, POLLRDHUP, 0}, {w->stop, POLLIN, 0}};
    int n = poll(p, 2, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || p[1].revents)
      return NULL;
    if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR))
      break;
  }
  pthread_mutex_lock(&w->lock);
  w->gone = true;
  watch_kill_locked(w);
  if (w->on_gone)
    w->on_gone(w->arg);
  pthread_mutex_unlock(&w->lock);
  return NULL;
}

struct sbxd_watch *sbxd_watch_start(struct MHD_Connection *conn, sbx_sandbox_t *sb,
                                    void (*on_gone)(void *arg), void *arg)
{
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci == NULL)
    return NULL;
  struct sbxd_watch *w = xzalloc(sizeof *w);
  w->fd = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 3);
  w->stop = eventfd(0, EFD_CLOEXEC);
  w->sb = sb;
  w->on_gone = on_gone;
  w->arg = arg;
  pthread_mutex_init(&w->lock, NULL);
  if (w->fd < 0 || w->stop < 0 || pthread_create(&w->thread, NULL, watch_main, w) != 0) {
    if (w->fd >= 0)
      close(w->fd);
    if (w->stop >= 0)
      close(w->stop);
    pthread_mutex_destroy(&w->lock);
    free(w);
    return NULL; /* no watch: the command runs as before, to its end or its deadline */
  }
  return w;
}

int sbxd_watch_command(void *arg, const char *id)
{
  struct sbxd_watch *w = arg;
  if (w == NULL)
    return 0;
  pthread_mutex_lock(&w->lock);
  snprintf(w->id, sizeof w->id, "%s", id);
  if (w->gone) /* gone before the command started */
    watch_kill_locked(w);
  pthread_mutex_unlock(&w->lock);
  return 0;
}

bool sbxd_watch_stop(struct sbxd_watch *w)
{
  if (w == NULL)
    return false;
  uint64_t one = 1;
  (void) !write(w->stop, &one, sizeof one);
  pthread_join(w->thread, NULL);
  bool gone = w->gone;
  close(w->fd);
  close(w->stop);
  pthread_mutex_destroy(&w->lock);
  free(w);
  return gone;
}
