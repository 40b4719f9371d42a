/* sbxd: OpenSandbox's HTTP APIs over libsbx. Options, configuration, startup (adopting the
 * sandboxes a previous sbxd left running), and an orderly stop on SIGINT/SIGTERM. */
#include "ctx.h"
#include "http.h"
#include "netlog.h"
#include "registry.h"
#include "server.h"
#include "spares.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
  fputs("Usage: sbxd [--listen ADDR:PORT] [--home DIR] [--config FILE] [--api-key KEY]\n"
        "\n"
        "Serves OpenSandbox's lifecycle and execd HTTP APIs (and DeerFlow's sandbox contract as\n"
        "JSON) on top of libsbx, so the official OpenSandbox SDKs and DeerFlow's OpenSandbox\n"
        "provider work against sbx unchanged; and DeerFlow's provisioner API (/api/sandboxes)\n"
        "with each sandbox's AIO sandbox API, for DeerFlow's default AioSandboxProvider.\n"
        "Logs are JSON lines on stderr.\n"
        "\n"
        "Options:\n"
        "  --listen ADDR:PORT  address to listen on (default sbxd.listen, 127.0.0.1:8080; ADDR\n"
        "                      an IP address or localhost, which is 127.0.0.1); port 0 picks\n"
        "                      a free port (the 'listening' log line has it)\n"
        "  --home DIR          state directory (default $SBX_HOME, else " SBX_ROOT_HOME
        " as root,\n"
        "                      $XDG_STATE_HOME/sbx (~/.local/state/sbx) as a user)\n"
        "  --config FILE       configuration (default $SBX_HOME/config.yaml if present)\n"
        "  --api-key KEY       key clients must send as OPEN-SANDBOX-API-KEY (default\n"
        "                      sbxd.api_key, else $OPEN_SANDBOX_API_KEY); without a key sbxd\n"
        "                      only listens on a loopback address\n"
        "  --help              this help\n"
        "  --version           print the version\n"
        "\n"
        "One sbxd serves a home: a second on the same home is refused (HOME/sbxd.pid holds the\n"
        "first's pid, under a lock). Exit status: 0 after SIGINT/SIGTERM, 1 when it cannot start,\n"
        "2 for a usage error (an option, the configuration, the listen address).\n"
        "\n"
        "Environment (the provisioner API, as DeerFlow's docker/provisioner/app.py):\n"
        "  PROVISIONER_API_KEY      the X-API-Key of /api/ (unset: every /api/ request is 401)\n"
        "  THREADS_HOST_PATH        /mnt/user-data is THREADS_HOST_PATH/<thread>/user-data\n"
        "                           (unset: the (user, thread) folder in the home)\n"
        "  DEER_FLOW_HOST_BASE_DIR  skills and extra mounts come from below it\n"
        "\n"
        "See docs/sbxd.md for the routes and docs/configuration.md for the `sbxd:` block.\n",
        f);
}

static void raise_nofile(void)
{
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

struct options {
  const char *listen, *home, *config, *key;
};

/* -1: go on; else the exit status (help, version, a bad option). */
static int parse_options(int argc, char **argv, struct options *o)
{
  static const struct option opts[] = {{"listen", required_argument, NULL, 'l'},
                                       {"home", required_argument, NULL, 'H'},
                                       {"config", required_argument, NULL, 'c'},
                                       {"api-key", required_argument, NULL, 'k'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"version", no_argument, NULL, 'V'},
                                       {NULL, 0, NULL, 0}};
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (ch) {
    case 'l':
      o->listen = optarg;
      break;
    case 'H':
      o->home = optarg;
      break;
    case 'c':
      o->config = optarg;
      break;
    case 'k':
      o->key = optarg;
      break;
    case 'h':
      usage(stdout);
      return 0;
    case 'V':
      printf("sbxd %s\n", SBX_VERSION);
      return 0;
    default:
      fprintf(stderr, "sbxd: bad option '%s'\nTry 'sbxd --help'.\n", argv[optind - 1]);
      return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "sbxd: unexpected argument '%s'\nTry 'sbxd --help'.\n", argv[optind]);
    return 2;
  }
  return -1;
}

/* The configuration, listen address and API key into srv; the exit status on failure, else -1. */
static int configure(struct options *o)
{
  if (o->home == NULL || *o->home == '\0')
    o->home = getenv("SBX_HOME");
  if (o->home == NULL || *o->home == '\0')
    o->home = sbx__default_home();
  sbx_error_t err = NULL;
  cleanup_free char *def_config = xasprintf("%s/config.yaml", o->home);
  const char *config = o->config;
  if (config == NULL && access(def_config, F_OK) == 0)
    config = def_config;
  srv.cfg = config ? sbx_config_load(config, &err) : sbx_config_new_default();
  if (srv.cfg == NULL) {
    sbxd_log(SBXD_ERROR, "%s", err->msg);
    sbx_error_release(&err);
    return 2;
  }
  if (srv.cfg->use && strcmp(srv.cfg->use, "opensandbox") == 0) {
    /* sbxd *is* an OpenSandbox server: backing it with the opensandbox backend would make it a
     * client of itself (a DeerFlow config.yaml names the OpenSandbox provider) */
    sbxd_log(SBXD_ERROR,
             "%s: sandbox.use is 'opensandbox'; sbxd serves sandboxes of a local backend "
             "(give it its own configuration with sandbox.use: linux, or none)",
             srv.cfg->path ? srv.cfg->path : "configuration");
    return 2;
  }
  srv.listen = xstrdup(o->listen ? o->listen : srv.cfg->listen);
  const char *key = o->key;
  if (key == NULL || *key == '\0')
    key = srv.cfg->server_api_key;
  if (key == NULL || *key == '\0')
    key = getenv("OPEN_SANDBOX_API_KEY");
  srv.api_key = key && *key ? xstrdup(key) : NULL;
  if (!sbxd_listen_valid(srv.listen)) {
    sbxd_log(SBXD_ERROR,
             "invalid listen address '%s' (expected HOST:PORT or [V6]:PORT, HOST an IP "
             "address or localhost, PORT 0-65535)",
             srv.listen);
    return 2;
  }
  if (srv.api_key == NULL && !sbxd_listen_is_loopback(srv.listen)) {
    sbxd_log(SBXD_ERROR,
             "refusing to listen on %s without an API key: pass --api-key, set "
             "OPEN_SANDBOX_API_KEY or sbxd.api_key, or listen on a loopback address",
             srv.listen);
    return 2;
  }
  return -1;
}

/* One sbxd a home: two would each keep a table of the home's sandboxes and disagree (one
 * expiring or deleting what the other serves). A POSIX record lock on HOME/sbxd.pid, held for
 * the process's life: the kernel drops it when sbxd dies however it dies (kill -9 too), and,
 * unlike flock, a child that outlives sbxd does not inherit it. The file holds the pid. */
static int lock_home(const char *home)
{
  cleanup_free char *path = xasprintf("%s/sbxd.pid", home);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    sbxd_log(SBXD_ERROR, "cannot open `%s`: %s", path, strerror(errno));
    return -1;
  }
  struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(fd, F_SETLK, &l) < 0) {
    int e = errno;
    struct flock who = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if ((e == EAGAIN || e == EACCES) && fcntl(fd, F_GETLK, &who) == 0 && who.l_type != F_UNLCK)
      sbxd_log(SBXD_ERROR,
               "another sbxd (pid %ld) serves the home `%s`; stop it first, or give this one "
               "another --home",
               (long) who.l_pid, home);
    else
      sbxd_log(SBXD_ERROR, "cannot lock `%s`: %s", path, strerror(e));
    close(fd);
    return -1;
  }
  char pid[24];
  int n = snprintf(pid, sizeof pid, "%ld\n", (long) getpid());
  if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t) n, 0) != n)
    sbxd_log(SBXD_WARN, "cannot write `%s`: %s", path, strerror(errno));
  return fd; /* kept open (and so locked) until the process ends */
}

/* The providers, the box table, the listener and the spares thread; the exit status on
 * failure, else -1. */
static int start(const char *home)
{
  sbx_error_t err = NULL;
  srv.p = sbx_provider_new(home, srv.cfg, &err);
  if (srv.p)
    srv.admin = sbx_provider_new(home, srv.cfg, &err);
  if (srv.p == NULL || srv.admin == NULL) {
    sbxd_log(SBXD_ERROR, "%s", err->msg);
    sbx_error_release(&err);
    return 1;
  }
  srv.home = xstrdup(sbx_provider_home(srv.p));
  if (lock_home(srv.home) < 0)
    return 1;
  srv.shell = access("/usr/bin/bash", X_OK) == 0 || access("/bin/bash", X_OK) == 0 ? "bash" : "sh";
  if (sbxd_registry_start() < 0)
    return 1;
  sbxd_netlog_start();
  if (sbxd_server_start() < 0) {
    atomic_store(&srv.stopping, true);
    sbxd_netlog_stop();
    sbxd_registry_stop(true);
    return 1;
  }
  if (sbxd_spares_start() < 0)
    sbxd_log(SBXD_WARN, "cannot start the thread that keeps spares ready");
  sbxd_log_json(SBXD_INFO, "listening",
                json_pack("{s:s,s:s,s:s,s:b}", "address", srv.listen, "home", srv.home, "version",
                          SBX_VERSION, "auth", srv.api_key != NULL));
  return -1;
}

/* After the stop signal: the spares thread, the listener, the workers (five seconds), the
 * table, the context. */
static int stop(void)
{
  atomic_store(&srv.stopping, true);
  sbxd_spares_stop();
  sbxd_server_stop();
  for (int i = 0; i < 50 && atomic_load(&srv.workers) > 0; i++) {
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
  }
  int busy = atomic_load(&srv.workers);
  sbxd_netlog_stop();
  sbxd_registry_stop(busy == 0);
  if (busy > 0) {
    /* commands still running hold handles: leave them to the process exit (they keep running
     * in their sandboxes, which the next sbxd adopts) */
    sbxd_log(SBXD_INFO, "stopped with %d command(s) still running in their sandboxes", busy);
    return 0;
  }
  sbx_provider_free(srv.admin);
  sbx_provider_free(srv.p);
  sbx_config_free(srv.cfg);
  free(srv.home);
  free(srv.api_key);
  free(srv.listen);
  sbxd_log(SBXD_INFO, "stopped");
  return 0;
}

int main(int argc, char **argv)
{
  struct options o = {0};
  int rc = parse_options(argc, argv, &o);
  if (rc >= 0)
    return rc;
  signal(SIGPIPE, SIG_IGN);
  json_object_seed(0);
  sbx_set_log_handler(sbxd_lib_log, NULL);
  if ((rc = configure(&o)) >= 0)
    return rc;

  /* Signals are taken by sigwait below; every thread created from here on has them blocked. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  raise_nofile();
  if ((rc = start(o.home)) >= 0)
    return rc;

  int sig = 0;
  sigwait(&sigs, &sig);
  sbxd_log(SBXD_INFO, "stopping (signal %d)", sig);
  return stop();
}
