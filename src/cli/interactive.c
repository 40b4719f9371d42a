/* sbx exec -i / --tty and sbx shell: a command fed from our stdin, optionally on a terminal in
 * the sandbox (docker exec -i / -it). With a terminal our own tty is put in raw mode (every key,
 * ^C included, goes to the sandbox's terminal, whose line discipline turns it into a signal for
 * the foreground job there), SIGWINCH is forwarded as a resize, and the tty's settings are put
 * back whatever happens: when the command exits or is killed, when the sandbox goes away, and
 * when we are told to stop (SIGTERM, SIGHUP). */
#include "cli.h"

#include "util.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

static struct termios saved_tty;
static bool tty_raw;

static void tty_restore(void)
{
  if (tty_raw) {
    tcsetattr(0, TCSADRAIN, &saved_tty);
    tty_raw = false;
  }
}

static bool tty_make_raw(void)
{
  if (!isatty(0) || tcgetattr(0, &saved_tty) < 0)
    return false;
  struct termios t = saved_tty;
  cfmakeraw(&t);
  if (tcsetattr(0, TCSADRAIN, &t) < 0)
    return false;
  tty_raw = true;
  atexit(tty_restore);
  return true;
}

static void window_size(unsigned *rows, unsigned *cols)
{
  struct winsize ws = {0};
  if ((ioctl(0, TIOCGWINSZ, &ws) == 0 || ioctl(1, TIOCGWINSZ, &ws) == 0) && ws.ws_row &&
      ws.ws_col) {
    *rows = ws.ws_row;
    *cols = ws.ws_col;
  } else {
    *rows = 24;
    *cols = 80;
  }
}

int cli_run_interactive(struct cli *c, sbx_sandbox_t *sb, const char *command,
                        const char *const *argv, const char *const *env, size_t n_env,
                        double timeout, bool tty)
{
  (void) c;
  sigset_t mask, old;
  sigemptyset(&mask);
  sigaddset(&mask, SIGWINCH);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGQUIT);
  sigprocmask(SIG_BLOCK, &mask, &old);
  cleanup_close int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  struct sbx_exec_opts o = {.env = env,
                            .n_env = n_env,
                            .timeout = timeout,
                            .no_timeout = timeout <= 0,
                            .argv = argv,
                            .kill_on_disconnect = true,
                            .out_cap = UINT64_MAX};
  struct sbx_session_opts so = {.tty = tty};
  if (tty)
    window_size(&so.rows, &so.cols);
  sbx_error_t err = NULL;
  sbx_session_t *s = sbx_session_start(sb, command, &o, &so, &err);
  if (s == NULL) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    return cli_fail(&err);
  }
  if (tty)
    tty_make_raw();

  int ret = EXIT_OP_ERROR;
  bool stdin_open = true, done = false;
  /* A SIGTERM or SIGHUP ends the session whatever the command does with it (an interactive
   * shell ignores SIGTERM): passed on, then, if the command has not ended 2 s later or on a
   * second one, the connection is closed, which kills the command's process group. */
  int ending = 0;
  uint64_t end_at = 0;
  char buf[16384];
  while (!done) {
    if (ending && sbx__now_ms() >= end_at) {
      ret = 128 + ending;
      break;
    }
    bool room = sbx_session_pending(s) < SBX_SESSION_QUEUE_MAX / 2;
    struct pollfd fds[3] = {
        {stdin_open && room ? 0 : -1, POLLIN, 0},
        {sbx_session_fd(s), (short) (POLLIN | (sbx_session_pending(s) ? POLLOUT : 0)), 0},
        {sfd, POLLIN, 0}};
    int wait_ms = ending ? (int) (end_at - sbx__now_ms()) : -1;
    if (poll(fds, 3, ending && wait_ms < 0 ? 0 : wait_ms) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (fds[1].revents & POLLOUT && sbx_session_flush(s, &err) < 0)
      break;
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      struct sbx_session_event ev;
      if (sbx_session_read(s, &ev, &err) < 0)
        break;
      if (ev.type == SBX_SESSION_OUTPUT) {
        if (sbx__write_all(ev.stream == 2 ? 2 : 1, ev.data, ev.len) < 0)
          break;
      } else if (ev.type == SBX_SESSION_EXIT) {
        ret = ev.timed_out ? 124 : ev.exit_code < 0 ? 128 - ev.exit_code : ev.exit_code & 0xff;
        done = true;
      }
    }
    if (done)
      break; /* what is still in our stdin was not for this command */
    if (fds[0].revents) {
      ssize_t n = read(0, buf, sizeof buf);
      if (n > 0) {
        if (sbx_session_write(s, buf, (size_t) n, &err) < 0)
          break;
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        stdin_open = false;
        if (sbx_session_close_stdin(s, &err) < 0)
          break;
      }
    }
    if (fds[2].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
        int r = 0;
        if (si.ssi_signo == SIGWINCH) {
          unsigned rows, cols;
          window_size(&rows, &cols);
          if (tty)
            r = sbx_session_resize(s, rows, cols, &err);
        } else {
          /* signals sent to us (kill, or ^C when our stdin is not in raw mode) go to the
           * command; SIGTERM and SIGHUP also end the session (above) */
          bool end = si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP;
          if (end && ending) {
            ret = 128 + ending;
            goto out;
          }
          if (end) {
            ending = (int) si.ssi_signo;
            end_at = sbx__now_ms() + 2000;
          }
          r = sbx_session_signal(s, (int) si.ssi_signo, &err);
        }
        if (r < 0 && err && err->kind != SBX_E_BUSY)
          goto out;
        sbx_error_release(&err);
      }
    }
  }
out:
  tty_restore();
  sbx_session_free(s);
  sigprocmask(SIG_SETMASK, &old, NULL);
  if (err)
    return cli_fail(&err);
  return ret;
}

/* (for sbx attach) */
bool cli_tty_make_raw(void)
{
  return tty_make_raw();
}

void cli_tty_restore(void)
{
  tty_restore();
}

void cli_window_size(unsigned *rows, unsigned *cols)
{
  window_size(rows, cols);
}
