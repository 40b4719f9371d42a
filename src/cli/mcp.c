/* sbx mcp: an MCP server over stdio (one JSON-RPC message a line on stdin and stdout) whose
 * tools are the contract's operations on one scope's sandbox. */
#include "cli.h"

#include "mcp.h"
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "Usage: sbx mcp [-t THREAD] [-u USER]\n"
    "\n"
    "Serves the Model Context Protocol over stdio, for agents that take tools over MCP (Claude\n"
    "Code, Codex, Cursor...): tools execute_command, read_file, write_file, update_file,\n"
    "download_file, list_dir, glob, grep, release_sandbox and reset_sandbox, and the files of\n"
    "/mnt/user-data/outputs as resources. All act on the sandbox of one scope: (USER, THREAD)\n"
    "if -t is given (the same sandbox `sbx exec -t THREAD` uses), else a thread of this session's\n"
    "own (\"mcp-\" + random hex). It is created on the first tool call and parked warm when\n"
    "stdin closes. Logs go to stderr; stdout carries only MCP messages.\n"
    "\n"
    "  -t, --thread THREAD   scope thread id (^[A-Za-z0-9_-]{1,64}$)\n"
    "  -u, --user USER       scope user id (default \"default\")\n";

struct stdio {
  struct cli *c;
  struct mcp_session *s;
  pthread_mutex_t out_lock;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int workers;
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
  (void) sig;
  stop = 1;
}

static void send_line(void *arg, const char *json, size_t len)
{
  struct stdio *io = arg;
  pthread_mutex_lock(&io->out_lock);
  fwrite(json, 1, len, stdout);
  fputc('\n', stdout);
  fflush(stdout);
  pthread_mutex_unlock(&io->out_lock);
}

static sbx_sandbox_t *host_acquire(void *ctx, const char *user, const char *thread,
                                   sbx_error_t *err)
{
  struct cli *c = ctx;
  return sbx_acquire(c->provider, user, thread, err);
}

static void host_release(void *ctx, sbx_sandbox_t *sb, bool destroy)
{
  struct cli *c = ctx;
  cleanup_free char *id = xstrdup(sbx_sandbox_id(sb));
  sbx_error_t err = NULL;
  if ((destroy ? sbx_destroy(c->provider, id, &err) : sbx_release(c->provider, id, &err)) < 0)
    fprintf(stderr, "sbx mcp: %s\n", err->msg);
  sbx_error_release(&err);
}

struct job {
  struct stdio *io;
  struct mcp_msg m;
};

static void *worker(void *arg)
{
  struct job *j = arg;
  struct stdio *io = j->io;
  mcp_handle(io->s, &j->m, send_line, io);
  free(j);
  pthread_mutex_lock(&io->lock);
  io->workers--;
  pthread_cond_broadcast(&io->cond);
  pthread_mutex_unlock(&io->lock);
  return NULL;
}

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c;
  struct cli_scope *s = ctx;
  *(ch == 't' ? &s->thread : &s->user) = arg;
  return 0;
}

int cmd_mcp(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"thread", required_argument, NULL, 't'},
                                       {"user", required_argument, NULL, 'u'},
                                       {NULL, 0, NULL, 0}};
  struct cli_scope scope = {0};
  int r = cli_parse(c, argc, argv, usage, NULL, opts, "t:u:", on_opt, &scope, 0);
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  /* a bad scope is a usage error now, not a failure at the first tool call */
  char id[17];
  sbx_error_t err = NULL;
  if (sbx_scope_to_id(scope.user ? scope.user : "default", scope.thread ? scope.thread : "x", id,
                      &err) < 0) {
    r = cli_usage_error(c, "%s", err->msg);
    sbx_error_release(&err);
    return r;
  }
  if ((r = cli_open(c)) != 0)
    return r;
  /* SIGTERM/SIGINT end the read below (no SA_RESTART): the sandbox is still parked */
  struct sigaction sa = {.sa_handler = on_signal};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  struct mcp_host host = {.acquire = host_acquire, .release = host_release, .ctx = c};
  struct stdio io = {.c = c};
  pthread_mutex_init(&io.out_lock, NULL);
  pthread_mutex_init(&io.lock, NULL);
  pthread_cond_init(&io.cond, NULL);
  io.s = mcp_session_new(&host, scope.user, scope.thread);

  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  while (!stop && (n = getline(&line, &cap, stdin)) >= 0) {
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
      n--;
    if (n == 0)
      continue;
    struct job *j = xzalloc(sizeof *j);
    j->io = &io;
    mcp_msg_parse(line, (size_t) n, &j->m);
    if (!mcp_msg_slow(&j->m)) {
      mcp_handle(io.s, &j->m, send_line, &io);
      free(j);
      continue;
    }
    /* a tool call runs on its own thread: cancellations and other calls are read meanwhile */
    pthread_mutex_lock(&io.lock);
    io.workers++;
    pthread_mutex_unlock(&io.lock);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, j) != 0) {
      worker(j);
      continue;
    }
    pthread_detach(t);
  }
  free(line);
  /* stdin closed: what still runs is cancelled (its commands killed), then the sandbox parked */
  pthread_mutex_lock(&io.lock);
  while (io.workers > 0) {
    pthread_mutex_unlock(&io.lock);
    mcp_cancel_all(io.s);
    pthread_mutex_lock(&io.lock);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&io.cond, &io.lock, &ts);
  }
  pthread_mutex_unlock(&io.lock);
  mcp_session_free(io.s);
  pthread_cond_destroy(&io.cond);
  pthread_mutex_destroy(&io.lock);
  pthread_mutex_destroy(&io.out_lock);
  return 0;
}
