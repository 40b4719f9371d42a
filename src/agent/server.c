/* sbx-init's main loop: accepts connections (a small detached thread each), reaps orphans, and
 * expires the sandbox when it has been unleased and idle for idle_timeout.
 *
 * As PID 1 of a pid namespace, signals sent from inside the sandbox with a default handler are
 * dropped by the kernel; SIGCHLD is taken through a signalfd. Commands are started as "clone
 * children" (exit signal 0) so that the waitpid(-1) here never steals the status a connection
 * thread or the background reaper is waiting for: they wait on the command's pidfd instead
 * (and the reaping here is limited to the main thread's own children, see below). */
#include "agent.h"
#include "exec.h"
#include "files.h"
#include "reply.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

#define CONN_STACK (256u << 10)

static atomic_int active_conns;
static _Atomic uint64_t last_activity_ms;
static _Atomic uint64_t idle_timeout_ms; /* 0: never expire; SET_IDLE changes it */

/* PING and HELLO: the protocol version (their payload is not looked at). */
static int hello(struct agent_conn *c, const char *payload, size_t len)
{
  (void) payload, (void) len;
  sbx_tlv_writer_t w = {0};
  sbx__tlv_put_u64(&w, SBX_T_VERSION, SBX_PROTO_VERSION);
  int r = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return r;
}

/* A spare taken as a sandbox without idle expiry (sbxd's) is told so. Lengthening the expiry of
 * a sandbox started without one is not possible (its timer was never armed): that is refused. */
static int set_idle(struct agent_conn *c, const char *payload, size_t len)
{
  uint64_t ms = 0;
  sbx_error_t err = NULL;
  if (sbx__tlv_get_u64(payload, len, SBX_T_TIMEOUT_MS, 0, &ms) <= 0)
    sbx__make_error(&err, 0, SBX_E_INVALID, "SET_IDLE needs a timeout");
  else if (ms > 0 && atomic_load(&idle_timeout_ms) == 0)
    sbx__make_error(&err, 0, SBX_E_UNSUPPORTED, "this sandbox was started without idle expiry");
  if (err)
    return agent_reply_error(c, &err);
  atomic_store(&idle_timeout_ms, ms);
  sbx_tlv_writer_t w = {0};
  int r = agent_reply_ok(c, &w);
  sbx__tlv_free(&w);
  return r;
}

/* A handler answers one request (reply.h) and returns 0, or -1 to drop the connection. */
typedef int (*handler_fn)(struct agent_conn *, const char *, size_t);

/* Every request type sbx-init serves, in one place. raw: the payload is not a TLV list (it is
 * not validated); every other payload is, before its handler sees it. */
static const struct {
  uint16_t type;
  bool raw;
  handler_fn fn;
} handlers[] = {
    {SBX_MSG_PING, true, hello},
    {SBX_MSG_HELLO, true, hello},
    {SBX_MSG_SET_IDLE, false, set_idle},
    {SBX_MSG_EXEC, false, agent_exec},
    {SBX_MSG_SIGNAL, false, agent_signal},
    {SBX_MSG_CMD_STATUS, false, agent_cmd_status},
    {SBX_MSG_CMD_LOGS, false, agent_cmd_logs},
    {SBX_MSG_READ_TEXT, false, agent_read_text},
    {SBX_MSG_READ, false, agent_read},
    {SBX_MSG_WRITE, false, agent_write},
    {SBX_MSG_LIST, false, agent_list},
    {SBX_MSG_GLOB, false, agent_glob},
    {SBX_MSG_GREP, false, agent_grep},
    {SBX_MSG_STAT, false, agent_stat},
    {SBX_MSG_MKDIR, false, agent_mkdir},
    {SBX_MSG_REMOVE, false, agent_remove},
    {SBX_MSG_RENAME, false, agent_rename},
    {SBX_MSG_CHMOD, false, agent_chmod},
    {SBX_MSG_CONNECT, false, agent_connect},
    {SBX_MSG_READDIR, false, agent_readdir},
    {SBX_MSG_FIND, false, agent_find},
    {SBX_MSG_REPLACE, false, agent_replace},
};

/* Serves one request: its handler, or an answer that the type is unknown. A payload that should
 * be a TLV list and is not drops the connection (-1). */
static int dispatch(struct agent_conn *c, uint16_t type, const char *payload, size_t len)
{
  size_t i = 0;
  while (i < sizeof handlers / sizeof handlers[0] && handlers[i].type != type)
    i++;
  bool known = i < sizeof handlers / sizeof handlers[0];
  if (!(known && handlers[i].raw) && !sbx__tlv_valid(payload, len))
    return -1;
  if (!known) {
    sbx_error_t err = NULL;
    sbx__make_error(&err, 0, SBX_E_UNSUPPORTED, "unknown request type %u", type);
    return agent_reply_error(c, &err);
  }
  return handlers[i].fn(c, payload, len);
}

static void *conn_main(void *arg)
{
  struct agent_conn c = {.fd = (int) (intptr_t) arg};
  for (;;) {
    sbx_frame_hdr_t hdr;
    cleanup_free char *payload = NULL;
    if (sbx__frame_recv(c.fd, &hdr, &payload, SBX_PROTO_MAX_PAYLOAD) < 0)
      break;
    atomic_store(&last_activity_ms, sbx__now_ms());
    c.req = hdr.req;
    if (dispatch(&c, hdr.type, payload, hdr.len) < 0)
      break;
  }
  close(c.fd);
  atomic_store(&last_activity_ms, sbx__now_ms());
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
  uint64_t idle = sbx__now_ms() - atomic_load(&last_activity_ms);
  if (idle <= limit)
    return false;
  if (o->lease_fd < 0)
    return true;
  if (flock(o->lease_fd, LOCK_EX | LOCK_NB) < 0)
    return false;
  return true; /* keep the lock: we are about to exit */
}

/* True when the sandbox's state folder is gone (deleted by hand, or a test's temporary home):
 * no front-end can find, list or destroy the sandbox any more, so it ends itself. The lease
 * file is in that folder; once unlinked its link count is 0 (a rename, a spare's adoption,
 * keeps it). */
static bool orphaned(const struct sbx_agent_opts *o)
{
  struct stat st;
  return o->lease_fd >= 0 && fstat(o->lease_fd, &st) == 0 && st.st_nlink == 0;
}

int sbx__agent_serve(const struct sbx_agent_opts *o)
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
  atomic_store(&last_activity_ms, sbx__now_ms());
  atomic_store(&idle_timeout_ms, o->idle_timeout_s > 0 ? (uint64_t) o->idle_timeout_s * 1000u : 0);
  agent_files_init(o->guard_ids, o->guard_nobody);
  agent_exec_init(ep, o->cmd_nofile, o->cmd_confine);

  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ev};
  struct epoll_event ev_sig = {.events = EPOLLIN, .data.ptr = &ev_sig};
  struct epoll_event ev_timer = {.events = EPOLLIN, .data.ptr = &ev_timer};
  epoll_ctl(ep, EPOLL_CTL_ADD, o->listen_fd, &ev);
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev_sig);
  int tfd = -1;
  {
    /* the expiry's period, and at most 2 s for orphaned() */
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    time_t period = o->idle_timeout_s > 0 && o->idle_timeout_s < 10 ? 1 : 2;
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
          atomic_store(&last_activity_ms, sbx__now_ms());
          spawn_conn(fd);
        }
      } else if (p == &ev_sig) {
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == sizeof si)
          ;
        /* __WNOTHREAD: only the main thread's own children (orphans re-parented to PID 1, and
         * background commands whose connection thread has ended: their end goes to their
         * record). Without it a wait here was seen to reap the clone children that connection
         * threads wait for through their pidfds. */
        for (;;) {
          siginfo_t chld = {0};
          if (waitid(P_ALL, 0, &chld, WEXITED | WNOHANG | __WNOTHREAD) < 0 || chld.si_pid == 0)
            break;
          agent_exec_reaped(&chld);
        }
      } else if (p == &ev_timer) {
        uint64_t ticks;
        (void) !read(tfd, &ticks, sizeof ticks);
        if (expired(o) || orphaned(o))
          return 0; /* PID 1 exiting takes every process of the sandbox with it */
      } else {
        agent_exec_reap_background(p);
      }
    }
  }
}
