/* The host's namespace socket maker (hostsock.h). The request and the answer go over a
 * SOCK_SEQPACKET pair (one message each, never split): {family, type} in, {fd, errno} out. The
 * thread runs until the process exits; it holds no state but its end of the pair. */
#include "hostsock.h"

#include "error.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

struct sbx_hostsock {
  int fd; /* the caller's end */
};

static void *maker(void *arg)
{
  int fd = (int) (intptr_t) arg;
  int req[2];
  while (TEMP_FAILURE_RETRY(recv(fd, req, sizeof req, 0)) == (ssize_t) sizeof req) {
    int ans[2] = {socket(req[0], req[1] | SOCK_CLOEXEC, 0), 0};
    ans[1] = ans[0] < 0 ? errno : 0;
    if (TEMP_FAILURE_RETRY(send(fd, ans, sizeof ans, MSG_NOSIGNAL)) != (ssize_t) sizeof ans) {
      if (ans[0] >= 0)
        close(ans[0]);
      break;
    }
  }
  close(fd);
  return NULL;
}

struct sbx_hostsock *sbx__hostsock_start(sbx_error_t *err)
{
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    sbx__make_error(err, errno, SBX_E_BACKEND, "socketpair");
    return NULL;
  }
  pthread_t t;
  int r = pthread_create(&t, NULL, maker, (void *) (intptr_t) sv[1]);
  if (r != 0) {
    close(sv[0]);
    close(sv[1]);
    sbx__make_error(err, r, SBX_E_BACKEND, "start the host socket thread");
    return NULL;
  }
  pthread_detach(t);
  struct sbx_hostsock *h = xzalloc(sizeof *h);
  h->fd = sv[0];
  return h;
}

int sbx__hostsock_socket(struct sbx_hostsock *h, int family, int type)
{
  int req[2] = {family, type}, ans[2];
  if (TEMP_FAILURE_RETRY(send(h->fd, req, sizeof req, MSG_NOSIGNAL)) != (ssize_t) sizeof req ||
      TEMP_FAILURE_RETRY(recv(h->fd, ans, sizeof ans, 0)) != (ssize_t) sizeof ans)
    return -1;
  errno = ans[1];
  return ans[0];
}
