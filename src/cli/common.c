#include "cli.h"

#include "text.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GC_INTERVAL_S 10

static void log_to_stderr(int level, const char *msg, void *arg)
{
  (void) arg;
  if (level <= SBX_LOG_WARNING)
    fprintf(stderr, "sbx: %s: %s\n", level == SBX_LOG_ERROR ? "error" : "warning", msg);
  else if (getenv("SBX_DEBUG"))
    fprintf(stderr, "sbx: %s\n", msg);
}

/* The reaper runs without a daemon: a pass from a CLI call at most every GC_INTERVAL_S. */
static void maybe_gc(struct cli *c)
{
  if (c->cfg->idle_timeout <= 0)
    return;
  cleanup_free char *stamp = xasprintf("%s/locks/gc-stamp", sbx_provider_home(c->provider));
  struct stat st;
  time_t now = time(NULL);
  if (stat(stamp, &st) == 0 && now - st.st_mtime < GC_INTERVAL_S)
    return;
  FILE *f = fopen(stamp, "we");
  if (f)
    fclose(f);
  sbx_gc(c->provider, NULL);
}

void cli_refill_spares(struct cli *c, bool missing)
{
  if (!missing)
    return;
  /* made here, before the fork: a `down` started after this CLI returns outranks its filler */
  sbx_provider_t *p = sbx_provider_new(c->home, c->cfg, NULL);
  if (p == NULL)
    return;
  fflush(NULL);
  /* not waited for: the CLI exits right after, and init (or a subreaper) reaps the filler */
  if (fork() != 0) {
    sbx_provider_free(p);
    return;
  }
  /* a session of its own (a ^C meant for the CLI does not stop it half-way) holding none of
   * our descriptors: whoever reads the CLI's output sees EOF when the CLI exits */
  setsid();
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
    _exit(1);
  close_range(3, ~0u, 0);
  sbx_set_log_handler(NULL, NULL);
  sbx_spares_fill(p, NULL);
  sbx_provider_free(p);
  _exit(0);
}

int cli_open(struct cli *c)
{
  sbx_set_log_handler(log_to_stderr, NULL);
  sbx_error_t err = NULL;
  if (c->cfg == NULL) {
    cleanup_free char *def = xasprintf("%s/config.yaml", c->home);
    const char *path = c->config_path;
    if (path == NULL && access(def, F_OK) == 0)
      path = def;
    c->cfg = path ? sbx_config_load(path, &err) : sbx_config_new_default();
    if (c->cfg == NULL)
      return cli_fail(&err);
  }
  if (c->provider == NULL) {
    c->provider = sbx_provider_new(c->home, c->cfg, &err);
    if (c->provider == NULL)
      return cli_fail(&err);
    maybe_gc(c);
  }
  return 0;
}

int cli_open_existing(struct cli *c)
{
  struct stat st;
  if (stat(c->home, &st) == 0 || errno != ENOENT)
    return cli_open(c);
  /* nothing to read and nothing to make: the configuration only (ps counts configured spares) */
  sbx_set_log_handler(log_to_stderr, NULL);
  sbx_error_t err = NULL;
  if (c->cfg == NULL) {
    c->cfg = c->config_path ? sbx_config_load(c->config_path, &err) : sbx_config_new_default();
    if (c->cfg == NULL)
      return cli_fail(&err);
  }
  return CLI_NO_HOME;
}

int cli_fail(sbx_error_t *err)
{
  fprintf(stderr, "sbx: %s\n", err && *err ? (*err)->msg : "unknown error");
  sbx_error_release(err);
  return EXIT_OP_ERROR;
}

int cli_usage_error(struct cli *c, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sbx %s: ", c->verb);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'sbx %s --help'.\n", c->verb);
  return EXIT_USAGE;
}

bool cli_parse_long(const char *s, long long *out)
{
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end != '\0')
    return false;
  *out = v;
  return true;
}

bool cli_parse_seconds(const char *s, double *out)
{
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !isfinite(v) || v <= 0)
    return false;
  *out = v;
  return true;
}

int cli_scope_names_check(struct cli *c, const char *user, const char *thread)
{
  /* "-t -rf": getopt took an option-looking word as the value; a name never starts so */
  if (thread && thread[0] == '-')
    return cli_usage_error(c,
                           "invalid thread '%s': a thread id does not start with '-' (a "
                           "missing value after -t?)",
                           thread);
  if (user && user[0] == '-')
    return cli_usage_error(c,
                           "invalid user '%s': a user id does not start with '-' (a "
                           "missing value after -u?)",
                           user);
  char id[17];
  sbx_error_t err = NULL;
  if (sbx_scope_to_id(user ? user : "default", thread ? thread : "x", id, &err) < 0) {
    int r = cli_usage_error(c, "%s", err->msg);
    sbx_error_release(&err);
    return r;
  }
  return 0;
}

int cli_scope_check(struct cli *c, struct cli_scope *s)
{
  if (s->thread == NULL)
    return cli_usage_error(c, "-t/--thread THREAD is required");
  if (s->user == NULL)
    s->user = "default";
  return cli_scope_names_check(c, s->user, s->thread);
}

sbx_sandbox_t *cli_acquire(struct cli *c, struct cli_scope *s, sbx_error_t *err)
{
  return sbx_acquire(c->provider, s->user, s->thread, err);
}

json_t *cli_json_string(const char *s, size_t len)
{
  size_t n;
  cleanup_free char *clean = sbx__utf8_sanitize(s, len, &n);
  return json_stringn(clean, n);
}

int cli_print_json(json_t *j)
{
  char *s = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII * 0);
  json_decref(j);
  if (s == NULL)
    return EXIT_OP_ERROR;
  fputs(s, stdout);
  fputc('\n', stdout);
  free(s);
  return fflush(stdout) == 0 ? 0 : EXIT_OP_ERROR;
}

char *cli_join(int argc, char **argv, int from)
{
  sbx_buf_t b = {0};
  for (int i = from; i < argc; i++) {
    if (i > from)
      sbx__buf_putc(&b, ' ');
    sbx__buf_puts(&b, argv[i]);
  }
  return sbx__buf_steal(&b);
}

int cli_with_sandbox(struct cli *c, struct cli_scope *s, int (*fn)(sbx_sandbox_t *, void *),
                     void *arg)
{
  int r = cli_open(c);
  if (r != 0)
    return r;
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = cli_acquire(c, s, &err);
  if (sb == NULL)
    return cli_fail(&err);
  cleanup_free char *id = xstrdup(sbx_sandbox_id(sb));
  r = fn(sb, arg);
  if (sbx_release(c->provider, id, &err) < 0 && r == 0)
    r = cli_fail(&err);
  sbx_error_release(&err);
  return r;
}

int cli_parse(struct cli *c, int argc, char **argv, const char *usage, struct cli_scope *s,
              const struct option *extra, const char *extra_short,
              int (*on_opt)(struct cli *c, int ch, const char *arg, void *ctx), void *ctx,
              int n_pos)
{
  struct option opts[32];
  size_t n = 0;
  opts[n++] = (struct option){"help", no_argument, NULL, 'h'};
  if (s) {
    opts[n++] = (struct option){"thread", required_argument, NULL, 't'};
    opts[n++] = (struct option){"user", required_argument, NULL, 'u'};
  }
  for (const struct option *o = extra; o && o->name && n < 31; o++)
    opts[n++] = *o;
  opts[n] = (struct option){NULL, 0, NULL, 0};
  cleanup_free char *shorts =
      xasprintf("%sh%s%s", n_pos == -1 ? "+" : "", s ? "t:u:" : "", extra_short ? extra_short : "");
  optind = 0;
  opterr = 0;
  int ch;
  while ((ch = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
    if (ch == 'h') {
      fputs(usage, stdout);
      return CLI_DONE;
    } else if (ch == 't' && s) {
      s->thread = optarg;
    } else if (ch == 'u' && s) {
      s->user = optarg;
    } else if (ch == '?' || ch == ':') {
      if (optopt)
        return cli_usage_error(c, "bad option '-%c'", optopt);
      return cli_usage_error(c, "bad option '%s'", argv[optind - 1]);
    } else {
      int r = on_opt ? on_opt(c, ch, optarg, ctx) : cli_usage_error(c, "bad option");
      if (r != 0)
        return r;
    }
  }
  if (s && cli_scope_check(c, s) != 0)
    return EXIT_USAGE;
  int left = argc - optind;
  if (n_pos >= 0 && left != n_pos)
    return cli_usage_error(c, "expected %d argument%s, got %d", n_pos, n_pos == 1 ? "" : "s", left);
  if (n_pos == -1 && left < 1) {
    const char *v = c->verb ? c->verb : "";
    return cli_usage_error(c, "%s",
                           strcmp(v, "net") == 0   ? "missing the command (show, allow, deny, rm "
                                                     "or log)"
                           : strcmp(v, "rmi") == 0 ? "missing IMAGE (one or more)"
                                                   : "missing COMMAND (after --)");
  }
  return 0;
}

struct target_ctx {
  struct cli_scope *s;
  int (*on_opt)(struct cli *c, int ch, const char *arg, void *ctx);
  void *ctx;
};

static int target_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct target_ctx *t = ctx;
  if (ch == 't')
    t->s->thread = arg;
  else if (ch == 'u')
    t->s->user = arg;
  else
    return t->on_opt ? t->on_opt(c, ch, arg, t->ctx) : cli_usage_error(c, "bad option");
  return 0;
}

int cli_parse_target(struct cli *c, int argc, char **argv, const char *usage,
                     const struct option *extra, const char *extra_short,
                     int (*on_opt)(struct cli *c, int ch, const char *arg, void *ctx), void *ctx,
                     struct cli_scope *s, char id[17])
{
  struct option opts[24];
  size_t n = 0;
  for (const struct option *o = extra; o && o->name && n < 21; o++)
    opts[n++] = *o;
  opts[n++] = (struct option){"thread", required_argument, NULL, 't'};
  opts[n++] = (struct option){"user", required_argument, NULL, 'u'};
  opts[n] = (struct option){NULL, 0, NULL, 0};
  cleanup_free char *shorts = xasprintf("t:u:%s", extra_short ? extra_short : "");
  struct target_ctx t = {s, on_opt, ctx};
  int r = cli_parse(c, argc, argv, usage, NULL, opts, shorts, target_opt, &t, -2);
  if (r != 0)
    return r;
  int left = argc - optind;
  if (s->thread && left == 0) {
    if (s->user == NULL)
      s->user = "default";
    sbx_error_t err = NULL;
    if (sbx_scope_to_id(s->user, s->thread, id, &err) < 0)
      return cli_fail(&err);
    return 0;
  }
  if (s->thread || s->user || left != 1)
    return cli_usage_error(c, "give the sandbox as -t THREAD [-u USER] or as its ID");
  const char *a = argv[optind];
  size_t len = strlen(a);
  if (len != 16 || strspn(a, "0123456789abcdef") != 16)
    return cli_usage_error(c, "not a sandbox id (16 hex digits): '%s'", a);
  memcpy(id, a, 17);
  return 0;
}

int cli_no_sandbox(struct cli *c, const struct cli_scope *s, const char *id, const char *what,
                   bool take)
{
  struct sbx_eviction ev;
  if (c->provider && sbx_eviction_take(c->provider, id, &ev, take) == 0) {
    char when[32];
    time_t t = (time_t) ev.time;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "sbx: thread %s (user %s) has no %ssandbox: it was evicted at %s (%s)\n",
            ev.thread, ev.user, what, when, ev.reason);
    sbx_eviction_clear(&ev);
  } else if (s->thread) {
    fprintf(stderr, "sbx: thread %s (user %s) has no %ssandbox\n", s->thread, s->user, what);
  } else {
    fprintf(stderr, "sbx: no %ssandbox %s\n", what, id);
  }
  return EXIT_OP_ERROR;
}
