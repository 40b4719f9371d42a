/* sbx mcp: an MCP server over stdio (one JSON-RPC message a line on stdin and stdout) whose
 * tools are the contract's operations on one scope's sandbox. */
#include "cli.h"

#include "../lib/image/image.h"
#include "mcp.h"
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "Usage: sbx mcp [-t THREAD] [-u USER] [--image IMAGE]\n"
    "\n"
    "Serves the Model Context Protocol over stdio, for agents that take tools over MCP (Claude\n"
    "Code, Codex, Cursor...): tools execute_command, read_file, write_file, update_file,\n"
    "download_file, list_dir, glob, grep, release_sandbox, reset_sandbox and list_images (the\n"
    "image store), and the files of /mnt/user-data/outputs as resources. All act on the\n"
    "sandbox of one scope: (USER, THREAD) if -t is given (the same sandbox `sbx exec -t THREAD`\n"
    "uses), else a thread of this session's own (\"mcp-\" + random hex). It is created on the\n"
    "first tool call and parked warm when stdin closes (once every request read before the end\n"
    "of input is answered) or on SIGTERM/SIGINT (commands still running are killed). Logs go\n"
    "to stderr; stdout carries only MCP messages. See docs/mcp.md.\n"
    "\n"
    "  -t, --thread THREAD   scope thread id (^[A-Za-z0-9_-]{1,64}$, not starting\n"
    "                        with -)\n"
    "  -u, --user USER       scope user id (default \"default\")\n"
    "      --image IMAGE     make the session's sandbox from this image when it is created\n"
    "                        (default: sandbox.image; `host` or an image of `sbx images`); a\n"
    "                        scope's existing sandbox keeps its image until reset_sandbox\n";

/* Readers take turns on stdin (read_lock): the thread that reads a tool call runs it itself
 * (no hand-off to another thread on the call's path) after making sure another reader is
 * waiting, so cancellations and other calls are read meanwhile. */
struct stdio {
  struct cli *c;
  struct mcp_session *s;
  pthread_mutex_t out_lock;
  pthread_mutex_t read_lock;
  pthread_mutex_t lock; /* the fields below */
  pthread_cond_t cond;
  int threads; /* readers besides the main thread */
  int idle;    /* readers waiting for read_lock */
  int busy;    /* readers handling a message */
  bool eof;
};

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

static void *reader_thread(void *arg);
static void drain(struct stdio *io, bool all_threads, bool cancel);

/* Another reader, unless one is already waiting for stdin. */
static void ensure_reader(struct stdio *io)
{
  pthread_mutex_lock(&io->lock);
  bool need = io->idle == 0 && !io->eof;
  if (need)
    io->threads++;
  pthread_mutex_unlock(&io->lock);
  pthread_t t;
  if (need && pthread_create(&t, NULL, reader_thread, io) != 0) {
    pthread_mutex_lock(&io->lock);
    io->threads--; /* this call runs anyway; the next line waits for a reader to be free */
    pthread_mutex_unlock(&io->lock);
  } else if (need) {
    pthread_detach(t);
  }
}

static void reader(struct stdio *io)
{
  char *line = NULL;
  size_t cap = 0;
  for (;;) {
    pthread_mutex_lock(&io->lock);
    io->idle++;
    pthread_mutex_unlock(&io->lock);
    pthread_mutex_lock(&io->read_lock);
    pthread_mutex_lock(&io->lock);
    io->idle--;
    bool eof = io->eof;
    pthread_mutex_unlock(&io->lock);
    ssize_t n = eof ? -1 : getline(&line, &cap, stdin);
    if (n < 0) {
      pthread_mutex_lock(&io->lock);
      io->eof = true;
      pthread_cond_broadcast(&io->cond);
      pthread_mutex_unlock(&io->lock);
      pthread_mutex_unlock(&io->read_lock);
      /* the calls already read are still answered; meanwhile, whoever saw the end of input
       * watches for the client going away (the main thread may be the one running a call) */
      drain(io, false, false);
      pthread_mutex_unlock(&io->lock);
      break;
    }
    pthread_mutex_unlock(&io->read_lock);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
      n--;
    if (n == 0)
      continue;
    struct mcp_msg m;
    mcp_msg_parse(line, (size_t) n, &m);
    if (mcp_msg_slow(&m))
      ensure_reader(io);
    pthread_mutex_lock(&io->lock);
    io->busy++;
    pthread_mutex_unlock(&io->lock);
    mcp_handle(io->s, &m, send_line, io);
    pthread_mutex_lock(&io->lock);
    io->busy--;
    pthread_cond_broadcast(&io->cond);
    pthread_mutex_unlock(&io->lock);
  }
  free(line);
}

static void *reader_thread(void *arg)
{
  struct stdio *io = arg;
  reader(io);
  pthread_mutex_lock(&io->lock);
  io->threads--;
  pthread_cond_broadcast(&io->cond);
  pthread_mutex_unlock(&io->lock);
  return NULL;
}

/* The client is gone: nobody reads stdout any more (a pipe's reader closed it). */
static bool client_gone(void)
{
  struct pollfd p = {.fd = STDOUT_FILENO, .events = 0};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

/* Waits until every reader is done with its message; returns with io->lock held. With cancel
 * (a signal), what still runs is cancelled (its commands are killed); at the end of input the
 * calls read before it run to their answers, unless the client is gone. */
static void drain(struct stdio *io, bool all_threads, bool cancel)
{
  pthread_mutex_lock(&io->lock);
  while (io->busy > 0 || (all_threads && io->threads > 0)) {
    pthread_mutex_unlock(&io->lock);
    if (cancel || client_gone())
      mcp_cancel_all(io->s);
    pthread_mutex_lock(&io->lock);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&io->cond, &io->lock, &ts);
  }
}

static pthread_mutex_t shutdown_lock = PTHREAD_MUTEX_INITIALIZER;

/* SIGTERM/SIGINT: readers may be blocked in read(2), so the sandbox is parked from here and the
 * process exits. Whoever shuts down first (this or end of input) holds shutdown_lock. */
static void *signal_thread(void *arg)
{
  struct stdio *io = arg;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig;
  while (sigwait(&set, &sig) != 0)
    ;
  pthread_mutex_lock(&shutdown_lock);
  pthread_mutex_lock(&io->lock);
  io->eof = true; /* no new message is started */
  pthread_mutex_unlock(&io->lock);
  drain(io, false, true);
  pthread_mutex_unlock(&io->lock);
  mcp_session_free(io->s);
  fflush(stdout);
  _exit(0);
}

/* The client gone: the read end of our stdout closed (poll says POLLERR on a pipe's write end;
 * a file or a terminal never does). Nobody will read an answer, so the session ends as on
 * SIGTERM (signal_thread): what runs is cancelled, its commands killed. */
static void *stdout_watch(void *arg)
{
  (void) arg;
  for (;;) {
    struct pollfd p = {1, 0, 0};
    int n = poll(&p, 1, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || (p.revents & POLLNVAL))
      return NULL;
    if (p.revents & (POLLERR | POLLHUP))
      break;
  }
  kill(getpid(), SIGTERM);
  return NULL;
}

struct mcp_args {
  struct cli_scope scope;
  const char *image;
};

static int on_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  (void) c;
  struct mcp_args *a = ctx;
  *(ch == 't' ? &a->scope.thread : ch == 'u' ? &a->scope.user : &a->image) = arg;
  return 0;
}

int cmd_mcp(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {{"thread", required_argument, NULL, 't'},
                                       {"user", required_argument, NULL, 'u'},
                                       {"image", required_argument, NULL, 'I'},
                                       {NULL, 0, NULL, 0}};
  struct mcp_args a = {0};
  int r = cli_parse(c, argc, argv, usage, NULL, opts, "t:u:", on_opt, &a, 0);
  struct cli_scope scope = a.scope;
  if (r != 0)
    return r == CLI_DONE ? 0 : r;
  /* a bad scope is a usage error now, not a failure at the first tool call */
  if ((r = cli_scope_names_check(c, scope.user, scope.thread)) != 0)
    return r;
  sbx_error_t err = NULL;
  if ((r = cli_open(c)) != 0)
    return r;
  /* an image that is not there is a usage error now, not a failure at the first tool call */
  if (a.image && strcmp(a.image, "host") != 0) {
    struct sbx_image_rootfs img;
    if (sbx__image_resolve(c->home, a.image, &img, &err) < 0) {
      r = cli_usage_error(c, "--image: %s", err->msg);
      sbx_error_release(&err);
      return r;
    }
    sbx__image_rootfs_free(&img);
  }
  /* for this process's sandboxes only (the spares refilled after it are the configured
   * image's); set before any thread starts, so no lock is needed */
  char *configured_image = NULL;
  if (a.image) {
    configured_image = c->cfg->image;
    c->cfg->image = xstrdup(a.image);
  }
  /* signals go to signal_thread only (every thread inherits this mask) */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  struct mcp_host host = {.acquire = host_acquire,
                          .release = host_release,
                          .ctx = c,
                          .home = c->home,
                          .image = c->cfg->image,
                          .bash_output_max_chars = c->cfg->bash_output_max_chars,
                          .read_file_output_max_chars = c->cfg->read_file_output_max_chars,
                          .ls_output_max_chars = c->cfg->ls_output_max_chars};
  static struct stdio io; /* signal_thread may still use it as the process exits */
  io.c = c;
  pthread_mutex_init(&io.out_lock, NULL);
  pthread_mutex_init(&io.read_lock, NULL);
  pthread_mutex_init(&io.lock, NULL);
  pthread_cond_init(&io.cond, NULL);
  io.s = mcp_session_new(&host, scope.user, scope.thread);
  pthread_t sig;
  if (pthread_create(&sig, NULL, signal_thread, &io) == 0)
    pthread_detach(sig);
  pthread_t out;
  if (pthread_create(&out, NULL, stdout_watch, NULL) == 0)
    pthread_detach(out);

  reader(&io);
  /* end of input: every request read before it is answered, then the sandbox parked */
  pthread_mutex_lock(&shutdown_lock);
  drain(&io, true, false);
  pthread_mutex_unlock(&io.lock);
  mcp_session_free(io.s);
  if (configured_image) {
    free(c->cfg->image);
    c->cfg->image = configured_image;
  }
  return 0;
}
