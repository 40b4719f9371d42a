/* The store's user namespace (docs/hosts.md, "Rootless images"). An ordinary user's store is
 * written by a child in a user namespace mapped like the user's image sandboxes: 0 the user,
 * 1..65535 the store slice of its /etc/subuid and /etc/subgid ranges (ids.c, through
 * newuidmap/newgidmap), or without one the user alone. So the layers on disk carry the ids
 * those sandboxes see, with no idmapped mount (which an ordinary user cannot make), and only
 * that namespace's root (the user, in a namespace of its own) can remove them again. Root's
 * store is written in place.
 *
 * The child is forked, not spawned: it runs the caller's function on the caller's memory. It
 * does no logging of its own (a log handler may hold a lock of a thread that is not there): its
 * output goes back over a pipe, and the caller logs. */
#include "image.h"
#include "linux.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define OUT_MAX (16u << 20)

static void child(sbx_store_fn fn, void *arg, bool sub, int go, int back)
{
  sbx_buf_t msg = {0};
  sbx_error_t e = NULL;
  char c;
  int r = -1;
  if (unshare(CLONE_NEWUSER) < 0) {
    sbx__make_error(&e, errno, SBX_E_UNSUPPORTED,
                    "unshare a user namespace for the image store (as an ordinary user: run "
                    "`sbx doctor`)");
  } else if (write(back, "U", 1) != 1 || read(go, &c, 1) != 1 || c != 'M') {
    _exit(3);
  } else if (setresgid(0, 0, 0) < 0 || (sub && setgroups(0, NULL) < 0) || setresuid(0, 0, 0) < 0) {
    sbx__make_error(&e, errno, SBX_E_INTERNAL, "become root of the image store's namespace");
  } else {
    sbx_buf_t out = {0};
    r = fn(arg, &out, &e);
    if (r == 0) {
      sbx__buf_putc(&msg, 'O');
      if (out.len)
        sbx__buf_append(&msg, out.data, out.len);
    }
    sbx__buf_free(&out);
  }
  if (r < 0)
    sbx__buf_printf(&msg, "E%d %d %s", e ? e->kind : SBX_E_INTERNAL, e ? e->status : 0,
                    e ? e->msg : "the image store's child failed");
  _exit(sbx__write_all(back, msg.data, msg.len) < 0 || r < 0 ? 1 : 0);
}

int sbx__store_run(sbx_store_fn fn, void *arg, sbx_buf_t *out, sbx_error_t *err)
{
  if (geteuid() == 0)
    return fn(arg, out, err);
  struct passwd pwd, *pw = NULL;
  char pwbuf[4096];
  const char *user =
      getpwuid_r(geteuid(), &pwd, pwbuf, sizeof pwbuf, &pw) == 0 && pw ? pw->pw_name : NULL;
  uint32_t sub_uid = 0, sub_gid = 0;
  bool sub = sbx__ids_store_slice(user, &sub_uid, &sub_gid);
  /* go: a socket, so a child gone before it reads its 'M' is an error, not our SIGPIPE */
  int go[2], back[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, go) < 0)
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create a socket pair");
  if (pipe2(back, O_CLOEXEC) < 0) {
    close(go[0]);
    close(go[1]);
    return sbx__make_error(err, errno, SBX_E_INTERNAL, "create a pipe");
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    close(back[0]);
    child(fn, arg, sub, go[0], back[1]);
  }
  int saved = errno;
  close(go[0]);
  close(back[1]);
  cleanup_close int wr = go[1];
  cleanup_close int rd = back[0];
  if (pid < 0)
    return sbx__make_error(err, saved, SBX_E_INTERNAL, "fork the image store's child");
  char c = 0;
  sbx_buf_t msg = {0};
  int r = 0;
  ssize_t n = TEMP_FAILURE_RETRY(read(rd, &c, 1));
  if (n == 1 && c == 'U') {
    if (sbx__ids_map_sub(pid, sub ? SBX_UID_COUNT : 1, sub_uid, sub_gid, err) < 0 ||
        send(wr, "M", 1, MSG_NOSIGNAL) != 1)
      r = -1;
  } else if (n == 1) {
    sbx__buf_putc(&msg, c); /* the child's error, before it had a namespace */
  }
  if (r == 0) {
    char buf[4096];
    while ((n = TEMP_FAILURE_RETRY(read(rd, buf, sizeof buf))) > 0 && msg.len < OUT_MAX)
      sbx__buf_append(&msg, buf, (size_t) n);
  }
  if (r < 0)
    kill(pid, SIGKILL);
  int status = 0;
  TEMP_FAILURE_RETRY(waitpid(pid, &status, 0));
  if (r < 0) {
    sbx__buf_free(&msg);
    return -1;
  }
  int kind = 0, st = 0, at = 0;
  if (msg.len > 0 && msg.data[0] == 'O' && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    sbx__buf_append(out, msg.data + 1, msg.len - 1);
  } else if (msg.len > 0 && msg.data[0] == 'E' &&
             sscanf(msg.data + 1, "%d %d %n", &kind, &st, &at) >= 2 && at > 0 && kind >= 1 &&
             kind < SBX_E_KIND_MAX) {
    r = sbx__error_set(err, st, kind, msg.data + 1 + at);
  } else {
    r = sbx__make_error(err, 0, SBX_E_INTERNAL, "the image store's child died (status %d)", status);
  }
  sbx__buf_free(&msg);
  return r < 0 ? -1 : 0;
}
