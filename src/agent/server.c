/* sbx-init's main loop: accepts connections (a small detached thread each), reaps orphans, and
 * expires the sandbox when it has been unleased and idle for idle_timeout.
 *
 * As PID 1 of a pid namespace, signals sent from inside the sandbox with a default handler are
 * dropped by the kernel; SIGCHLD is taken through a signalfd. Commands are started as "clone
 * children" (exit signal 0) so that the waitpid(-1) here never steals the status a connection
 * thread or the background reaper is waiting for: they wait on the command's pidfd instead
 * (and the reaping here is limited to the main thread's own children, see below). */
#include "agent.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

#define CONN_STACK (256u << 10)

static atomic_int active_conns;
static _Atomic uint64_t last_activity_ms;
static _Atomic uint64_t idle_timeout_ms; /* 0: never expire; SET_IDLE changes it */

int agent_reply_error(struct agent_conn *c, sbx_error_t *err)
{
  int r = -1;
  if (err && *err) {
    r = sbx_frame_send_error(c->fd, c->req, (*err)->kind, (*err)->status, (*err)->msg);
    sbx_error_release(err);
  }
  return r;
}

int agent_reply_ok(struct agent_conn *c, const sbx_tlv_writer_t *w)
{
  if (w)
    return sbx_frame_send_tlv(c->fd, SBX_MSG_OK, c->req, w);
  return sbx_frame_send(c->fd, SBX_MSG_OK, c->req, NULL, 0);
}

typedef int (*handler_fn)(struct agent_conn *, const char *, size_t);

static handler_fn handler_for(uint16_t type)
{
  switch (type) {
  case SBX_MSG_EXEC:
    return agent_exec;
  case SBX_MSG_SIGNAL:
    return agent_signal;
  case SBX_MSG_CMD_STATUS:
    return agent_cmd_status;
  case SBX_MSG_CMD_LOGS:
    return agent_cmd_logs;
  case SBX_MSG_READ_TEXT:
    return agent_read_text;
  case SBX_MSG_READ:
    return agent_read;
  case SBX_MSG_WRITE:
    return agent_write;
  case SBX_MSG_LIST:
    return agent_list;
  case SBX_MSG_GLOB:
    return agent_glob;
  case SBX_MSG_GREP:
    return agent_grep;
  case SBX_MSG_STAT:
    return agent_stat;
  case SBX_MSG_MKDIR:
    return agent_mkdir;
  case SBX_MSG_REMOVE:
    return agent_remove;
  case SBX_MSG_RENAME:
    return agent_rename;
  case SBX_MSG_CHMOD:
    return agent_chmod;
  case SBX_MSG_CONNECT:
    return agent_connect;
  case SBX_MSG_READDIR:
    return agent_readdir;
  case SBX_MSG_FIND:
    return agent_find;
  case SBX_MSG_REPLACE:
    return agent_replace;
  default:
    return NULL;
  }
}

/* Runs the handler of a request type, or answers that the type is unknown. */
static int dispatch(struct agent_conn *c, uint16_t type, const char *payload, size_t len)
{
  handler_fn h = handler_for(type);
  if (h == NULL) {
    sbx_error_t err = NULL;
    sbx_make_error(&err, 0, SBX_E_UNSUPPORTED, "unknown request type %u", type);
    return agent_reply_error(c, &err);
  }
  return h(c, payload, len);
}

/* A spare taken as a sandbox without idle expiry (sbxd's) is told so. Lengthening the expiry of
 * a sandbox started without one is not possible (its timer was never armed): that is refused. */
static int set_idle(struct agent_conn *c, const char *payload, size_t len)
{
  uint64_t ms = 0;
  sbx_error_t err = NULL;
  if (sbx_tlv_get_u64(payload, len, SBX_T_TIMEOUT_MS, 0, &ms) <= 0)
    sbx_make_error(&err, 0, SBX_E_INVALID, "SET_IDLE needs a timeout");
  else if (ms > 0 && atomic_load(&idle_timeout_ms) == 0)
    sbx_make_error(&err, 0, SBX_E_UNSUPPORTED, "this sandbox was started without idle expiry");
  if (err)
    return agent_reply_error(c, &err);
  atomic_store(&idle_timeout_ms, ms);
  sbx_tlv_writer_t w = {0};
  int r = agent_reply_ok(c, &w);
  sbx_tlv_free(&w);
  return r;
}

static void *conn_main(void *arg)
{
  struct agent_conn c = {.fd = (int) (intptr_t) arg};
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *payload = NULL;
    if (sbx_frame_recv(c.fd, &hdr, &payload, SBX_PROTO_MAX_PAYLOAD) < 0)
      break;
    atomic_store(&last_activity_ms, sbx_now_ms());
    c.req = hdr.req;
    int r;
    if (hdr.type == SBX_MSG_PING || hdr.type == SBX_MSG_HELLO) {
      sbx_tlv_writer_t w = {0};
      sbx_tlv_put_u64(&w, SBX_T_VERSION, SBX_PROTO_VERSION);
      r = agent_reply_ok(&c, &w);
      sbx_tlv_free(&w);
    } else if (!sbx_tlv_valid(payload, hdr.len)) {
      break; /* malformed: drop the connection */
    } else if (hdr.type == SBX_MSG_SET_IDLE) {
      r = set_idle(&c, payload, hdr.len);
    } else {
      r = dispatch(&c, hdr.type, payload, hdr.len);
    }
    if (r < 0)
      break;
  }
  close(c.fd);
  atomic_store(&last_activity_ms, sbx_now_ms());
  atomic_fetch_sub(&active_conns, 1);
  return NULL;
}

static void spawn_conn(int fd)
{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, CONN_STACK);
  pthread_t t;
  atomic_fetch_add(&active_conns, 1);
  if (pthread_create(&t, &attr, conn_main, (void *) (intptr_t) fd) != 0) {
    atomic_fetch_sub(&active_conns, 1);
    close(fd);
  }
  pthread_attr_destroy(&attr);
}

/* True when the sandbox may expire: no client connected, idle long enough, and nobody holds a
 * lease (a shared flock taken by every front-end that has the sandbox active). */
static bool expired(const struct sbx_agent_opts *o)
{
  uint64_t limit = atomic_load(&idle_timeout_ms);
  if (limit == 0 || atomic_load(&active_conns) > 0)
    return false;
  uint64_t idle = sbx_now_ms() - atomic_load(&last_activity_ms);
  if (idle <= limit)
    return false;
  if (o->lease_fd < 0)
    return true;
  if (flock(o->lease_fd, LOCK_EX | LOCK_NB) < 0)
    return false;
  return true; /* keep the lock: we are about to exit */
}

int sbx_agent_serve(const struct sbx_agent_opts *o)
{
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &mask, NULL);
  signal(SIGPIPE, SIG_IGN);
  int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (sfd < 0 || ep < 0)
    return 1;
  atomic_store(&last_activity_ms, sbx_now_ms());
  atomic_store(&idle_timeout_ms, o->idle_timeout_s > 0 ? (uint64_t) o->idle_timeout_s * 1000u : 0);
  agent_files_init();
  agent_exec_init(ep, o->cmd_nofile);

  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ev};
  struct epoll_event ev_sig = {.events = EPOLLIN, .data.ptr = &ev_sig};
  struct epoll_event ev_timer = {.events = EPOLLIN, .data.ptr = &ev_timer};
  epoll_ctl(ep, EPOLL_CTL_ADD, o->listen_fd, &ev);
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev_sig);
  int tfd = -1;
  if (o->idle_timeout_s > 0) {
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    time_t period = o->idle_timeout_s < 10 ? 1 : o->idle_timeout_s / 10;
    if (period > 30)
      period = 30;
    struct itimerspec its = {.it_interval = {period, 0}, .it_value = {period, 0}};
    if (tfd >= 0 && timerfd_settime(tfd, 0, &its, NULL) == 0)
      epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev_timer);
  }
  for (;;) {
    struct epoll_event events[16];
    int n = epoll_wait(ep, events, 16, -1);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return 1;
    }
    for (int i = 0; i < n; i++) {
      void *p = events[i].data.ptr;
      if (p == &ev) {
        int fd = accept4(o->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
          atomic_store(&last_activity_ms, sbx_now_ms());
          spawn_conn(fd);
        }
      } else if (p == &ev_sig) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == sizeof si)
          ;
        /* __WNOTHREAD: only the main thread's own children (orphans re-parented to PID 1).
         * Without it a waitpid(-1) here was seen to reap the clone children that connection
         * threads wait for through their pidfds. */
        while (waitpid(-1, NULL, WNOHANG | __WNOTHREAD) > 0)
          ;
      } else if (p == &ev_timer) {
        uint64_t ticks;
        (void) !read(tfd, &ticks, sizeof ticks);
        if (expired(o))
          return 0; /* PID 1 exiting takes every process of the sandbox with it */
      } else {
        agent_exec_reap_background(p);
      }
    }
  }
}
