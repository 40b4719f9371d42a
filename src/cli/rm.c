/* sbx rm: destroy the scope's sandbox (and, with --data, its thread folder). */
#include "cli.h"

#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "Usage: sbx rm -t THREAD [-u USER] [--data]\n"
    "\n"
    "Destroys the scope's sandbox and every process in it. Its /mnt/user-data folder on the host\n"
    "($SBX_HOME/users/USER/threads/THREAD/user-data) is kept, unless --data is given: then the\n"
    "thread's folder is deleted too (what the thread wrote under /mnt/user-data is gone).\n"
    "\n"
    "A thread whose sandbox the pool evicted (replica cap, idle reaper: sbx ps lists them) has\n"
    "no sandbox left: rm says so, forgets the eviction and exits 0. A thread that has neither a\n"
    "sandbox nor (with --data) a folder is an error (exit 1).\n";

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c, (void) ch, (void) arg;
  *(bool *) ctx = true;
  return 0;
}

/* Deletes home/users/USER/threads/THREAD; 1 if there was none, -1 (said on stderr) if it
 * cannot be removed. */
static int remove_data(struct cli *c, const char *user, const char *thread)
{
  cleanup_free char *dir = xasprintf("%s/users/%s/threads", sbx_provider_home(c->provider), user);
  cleanup_close int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT)
    return 1;
  if (fd < 0)
    return fprintf(stderr, "sbx: open `%s`: %s\n", dir, strerror(errno)), -1;
  if (faccessat(fd, thread, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
    return 1;
  if (sbx__rm_rf_at(fd, thread) < 0)
    return fprintf(stderr, "sbx: remove thread folder `%s/%s`: %s\n", dir, thread, strerror(errno)),
           -1;
  return 0;
}

int cmd_rm(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"data", no_argument, NULL, 'D'}, {NULL, 0, NULL, 0}};
  struct cli_scope s = {0};
  bool data = false;
  int r = cli_parse(c, argc, argv, usage, &s, opts, "", on_opt, &data, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  if ((r = cli_open(c)) != 0)
    return r;
  char id[17];
  sbx_error_t err = NULL;
  if (sbx_scope_to_id(s.user, s.thread, id, &err) < 0)
    return cli_fail(&err);
  bool had_sandbox = true, evicted = false;
  if (sbx_destroy(c->provider, id, &err) < 0) {
    if (err->kind != SBX_E_NOT_FOUND)
      return cli_fail(&err);
    sbx_error_release(&err);
    had_sandbox = false;
  }
  struct sbx_eviction ev;
  if (sbx_eviction_take(c->provider, id, &ev, true) == 0) {
    evicted = true;
    if (!had_sandbox) {
      char when[32];
      time_t t = (time_t) ev.time;
      struct tm tm;
      gmtime_r(&t, &tm);
      strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
      fprintf(stderr, "sbx: thread %s (user %s) has no sandbox: it was evicted at %s (%s)\n",
              s.thread, s.user, when, ev.reason);
    }
    sbx_eviction_clear(&ev);
  }
  bool had_data = false;
  if (data) {
    int d = remove_data(c, s.user, s.thread);
    if (d < 0)
      return EXIT_OP_ERROR;
    had_data = d == 0;
  }
  if (!had_sandbox && !evicted && !had_data) {
    fprintf(stderr, "sbx: thread %s (user %s) has no sandbox%s\n", s.thread, s.user,
            data ? " and no folder" : "");
    return EXIT_OP_ERROR;
  }
  return 0;
}
