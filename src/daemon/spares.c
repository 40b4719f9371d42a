/* Keeps the configured spares ready (sandbox.spares): woken after each create, else once a
 * second, which also replaces a spare that died or expired; ten seconds after a failure. */
#include "spares.h"
#include "ctx.h"
#include "http.h"

#include <pthread.h>
#include <time.h>

static pthread_mutex_t spares_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t spares_cond = PTHREAD_COND_INITIALIZER;
static bool spares_kicked;
static pthread_t spares_thread;
static bool spares_running;

void sbxd_spares_kick(void)
{
  pthread_mutex_lock(&spares_lock);
  spares_kicked = true;
  pthread_cond_signal(&spares_cond);
  pthread_mutex_unlock(&spares_lock);
}

static void *spares_main(void *arg)
{
  (void) arg;
  while (!atomic_load(&srv.stopping)) {
    sbx_error_t err = NULL;
    int wait_s = 1;
    if (sbx_spares_fill(srv.admin, &err) < 0) {
      sbxd_log(SBXD_WARN, "making spares: %s", err ? err->msg : "failed");
      sbx_error_release(&err);
      wait_s = 10;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_s;
    pthread_mutex_lock(&spares_lock);
    while (!spares_kicked && !atomic_load(&srv.stopping))
      if (pthread_cond_timedwait(&spares_cond, &spares_lock, &until) != 0)
        break;
    spares_kicked = false;
    pthread_mutex_unlock(&spares_lock);
  }
  return NULL;
}

int sbxd_spares_start(void)
{
  if (srv.cfg->spares <= 0)
    return 0;
  if (pthread_create(&spares_thread, NULL, spares_main, NULL) != 0)
    return -1;
  spares_running = true;
  return 0;
}

void sbxd_spares_stop(void)
{
  if (!spares_running)
    return;
  sbxd_spares_kick();
  pthread_join(spares_thread, NULL);
  spares_running = false;
}
