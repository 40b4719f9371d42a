/* The server context (ctx.h) and the worker threads' bookkeeping. */
#include "ctx.h"

#include <pthread.h>

struct sbxd_ctx srv;

void sbxd_worker_start(void)
{
  atomic_fetch_add(&srv.workers, 1);
}

void sbxd_worker_done(void)
{
  atomic_fetch_sub(&srv.workers, 1);
}

int sbxd_spawn(void *(*fn)(void *), void *arg)
{
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t t;
  int r = pthread_create(&t, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return r == 0 ? 0 : -1;
}
