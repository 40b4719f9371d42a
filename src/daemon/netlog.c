/* The denied-log follower (see netlog.h). One offset per sandbox; a sandbox whose state folder
 * is gone is forgotten. Only whole lines are taken (one write each: O_APPEND), at most
 * MAX_LINES per sandbox and pass, so a flood from one sandbox neither stalls the thread nor
 * hides the others. */
#include "netlog.h"
#include "ctx.h"
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../lib/state.h"
#include "../net/store.h"

#define MAX_LINES 256
#define CHUNK (64u << 10)

struct followed {
  char *id;
  off_t off;
  ino_t ino;
  bool seen; /* in this pass's listing */
};

static pthread_t thread;
static bool running;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static bool stopping;

static void log_line(const char *line, size_t len)
{
  json_t *j = json_loadb(line, len, 0, NULL);
  if (!json_is_object(j)) {
    json_decref(j);
    return;
  }
  json_t *f = json_object();
  static const char *const keys[][2] = {{"sandbox", "sandbox_id"}, {"kind", "kind"},
                                        {"target", "target"},      {"rule", "rule"},
                                        {"name", "name"},          {"pinned", "pinned"}};
  for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
    json_t *v = json_object_get(j, keys[i][0]);
    if (v)
      json_object_set(f, keys[i][1], v);
  }
  json_decref(j);
  sbxd_log_json(SBXD_INFO, "egress denied", f);
}

/* New whole lines of one sandbox's log, from f->off. */
static void follow(struct followed *f)
{
  cleanup_free char *dir = sbx__state_dir(sbx_provider_home(srv.p), f->id);
  cleanup_free char *path = xasprintf("%s/%s", dir, SBX_NET_DENIED_LOG);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0)
    return;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return;
  }
  if (st.st_ino != f->ino || st.st_size < f->off) {
    if (f->ino != 0)
      f->off = 0; /* another file (or cut): from its start */
    f->ino = st.st_ino;
  }
  cleanup_free char *buf = xmalloc(CHUNK);
  size_t lines = 0;
  while (lines < MAX_LINES && f->off < st.st_size) {
    ssize_t n = pread(fd, buf, CHUNK, f->off);
    if (n <= 0)
      break;
    size_t used = 0;
    for (char *p = buf, *nl; lines < MAX_LINES && (nl = memchr(p, '\n', (size_t) (buf + n - p)));
         p = nl + 1) {
      log_line(p, (size_t) (nl - p));
      lines++;
      used = (size_t) (nl + 1 - buf);
    }
    if (used == 0) {
      if ((size_t) n == CHUNK)
        used = CHUNK; /* a line longer than a chunk: not one of ours, skipped */
      else
        break; /* a line being written */
    }
    f->off += (off_t) used;
  }
  close(fd);
}

static struct followed *fs; /* the thread's (the first scan is start's, before it) */
static size_t n_fs;

/* first: the sandboxes there now start at their logs' ends (history, or what an earlier sbxd
 * logged); later ones at their start */
static void scan(bool first)
{
  sbx_strv_t ids = {0};
  sbx_error_t err = NULL;
  if (sbx__state_list_ids(sbx_provider_home(srv.p), &ids, &err) < 0)
    sbx_error_release(&err);
  for (size_t i = 0; i < n_fs; i++)
    fs[i].seen = false;
  for (size_t i = 0; i < ids.n; i++) {
    struct followed *f = NULL;
    for (size_t k = 0; k < n_fs && !f; k++)
      if (strcmp(fs[k].id, ids.v[i]) == 0)
        f = &fs[k];
    if (f == NULL) {
      fs = xreallocarray(fs, n_fs + 1, sizeof *fs);
      f = &fs[n_fs++];
      *f = (struct followed){.id = xstrdup(ids.v[i])};
      if (first) {
        cleanup_free char *dir = sbx__state_dir(sbx_provider_home(srv.p), f->id);
        cleanup_free char *path = xasprintf("%s/%s", dir, SBX_NET_DENIED_LOG);
        struct stat st;
        if (stat(path, &st) == 0) {
          f->off = st.st_size;
          f->ino = st.st_ino;
        }
      }
    }
    f->seen = true;
    if (!first)
      follow(f);
  }
  sbx__strv_free(&ids);
  size_t k = 0;
  for (size_t i = 0; i < n_fs; i++) {
    if (fs[i].seen)
      fs[k++] = fs[i];
    else
      free(fs[i].id);
  }
  n_fs = k;
}

static void *netlog_main(void *arg)
{
  (void) arg;
  pthread_mutex_lock(&lock);
  while (!stopping) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += SBXD_NETLOG_POLL_MS * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&cond, &lock, &ts);
    if (stopping)
      break;
    pthread_mutex_unlock(&lock);
    scan(false);
    pthread_mutex_lock(&lock);
  }
  pthread_mutex_unlock(&lock);
  scan(false); /* the last lines before the stop */
  for (size_t i = 0; i < n_fs; i++)
    free(fs[i].id);
  free(fs);
  fs = NULL;
  n_fs = 0;
  return NULL;
}

int sbxd_netlog_start(void)
{
  stopping = false;
  scan(true);
  if (pthread_create(&thread, NULL, netlog_main, NULL) != 0) {
    sbxd_log(SBXD_WARN, "cannot start the thread that follows the egress denied logs: %s",
             strerror(errno));
    return -1;
  }
  running = true;
  return 0;
}

void sbxd_netlog_stop(void)
{
  if (!running)
    return;
  pthread_mutex_lock(&lock);
  stopping = true;
  pthread_cond_broadcast(&cond);
  pthread_mutex_unlock(&lock);
  pthread_join(thread, NULL);
  running = false;
}
