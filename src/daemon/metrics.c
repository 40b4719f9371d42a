/* execd's /metrics and /metrics/watch: CPU use over the time since the box's last sample (or
 * over 250 ms when there is none recent), memory against the sandbox's limit. */
#include "metrics.h"
#include "ctx.h"
#include "registry.h"
#include "stream.h"

#include <string.h>
#include <time.h>

static json_t *metrics_json(struct box *b, sbx_error_t *err)
{
  struct sbx_metrics m;
  if (sbx_metrics(b->sb, &m, err) < 0)
    return NULL;
  uint64_t now = sbx__now_ms();
  pthread_mutex_lock(&b->lock);
  double prev = b->cpu_prev_s;
  uint64_t prev_at = b->cpu_prev_at;
  pthread_mutex_unlock(&b->lock);
  if (prev_at == 0 || now - prev_at < 200 || now - prev_at > 10000) {
    /* no recent sample: take one over 250 ms (execd samples for a second) */
    prev = m.cpu_usage_s;
    prev_at = now;
    struct timespec ts = {0, 250 * 1000000};
    nanosleep(&ts, NULL);
    if (sbx_metrics(b->sb, &m, err) < 0)
      return NULL;
    now = sbx__now_ms();
  }
  double elapsed = (double) (now - prev_at) / 1000.0;
  double pct =
      elapsed > 0 && m.cpu_count > 0 ? (m.cpu_usage_s - prev) / (elapsed * m.cpu_count) * 100.0 : 0;
  if (pct < 0)
    pct = 0;
  if (pct > 100)
    pct = 100;
  pthread_mutex_lock(&b->lock);
  b->cpu_prev_s = m.cpu_usage_s;
  b->cpu_prev_at = now;
  pthread_mutex_unlock(&b->lock);
  double total = (double) m.mem_limit / 1048576.0, used = (double) m.mem_used / 1048576.0;
  if (used > total)
    used = total;
  return json_pack("{s:f,s:f,s:f,s:f,s:I}", "cpu_count", m.cpu_count, "cpu_used_pct", pct,
                   "mem_total_mib", total, "mem_used_mib", used, "timestamp",
                   (json_int_t) sbxd_now_ms());
}

enum MHD_Result h_metrics(struct req *r)
{
  sbx_error_t err = NULL;
  json_t *j = metrics_json(r->box, &err);
  if (j == NULL) {
    enum MHD_Result ret = sbxd_error(r, 500, "RUNTIME_ERROR", "error reading metrics: %s",
                                     err ? err->msg : "unknown");
    sbx_error_release(&err);
    return ret;
  }
  return sbxd_json(r, 200, j);
}

struct watch {
  struct box *b;
  struct stream *s;
};

static void *watch_main(void *arg)
{
  struct watch *w = arg;
  while (!stream_detached(w->s) && !atomic_load(&srv.stopping)) {
    sbx_error_t err = NULL;
    json_t *j = metrics_json(w->b, &err);
    sbx_error_release(&err);
    if (j == NULL)
      break;
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (text) {
      stream_raw(w->s, text, strlen(text));
      stream_raw(w->s, "\n", 1);
      free(text);
    }
    for (int i = 0; i < 10 && !stream_detached(w->s) && !atomic_load(&srv.stopping); i++) {
      struct timespec ts = {0, 100 * 1000000};
      nanosleep(&ts, NULL);
    }
  }
  stream_finish(w->s);
  stream_unref(w->s);
  box_put(w->b);
  free(w);
  sbxd_worker_done();
  return NULL;
}

enum MHD_Result h_metrics_watch(struct req *r)
{
  struct watch *w = xzalloc(sizeof *w);
  w->b = box_ref(r->box);
  w->s = stream_new();
  struct MHD_Response *resp = stream_response(w->s, false);
  sbxd_worker_start();
  if (sbxd_spawn(watch_main, w) < 0) {
    sbxd_worker_done();
    MHD_destroy_response(resp);
    stream_unref(w->s);
    box_put(w->b);
    free(w);
    return sbxd_error(r, 500, "RUNTIME_ERROR", "cannot start a thread");
  }
  return sbxd_respond(r, 200, resp);
}
