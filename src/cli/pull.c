/* sbx pull REF: an image from a registry into the store (docs/images.md, "Pull"). */
#include "cli.h"

#include "../lib/image/registry.h"
#include "util.h"

#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage_pull[] =
    "Usage: sbx pull [--platform OS/ARCH[/VARIANT]] [--quiet] [--auth-file FILE]\n"
    "                [--username USER --password-stdin] [--mirror [DOMAIN=]HOST[:PORT]]...\n"
    "                [--insecure HOST[:PORT]]... [--max-size MIB] [--max-entries N] REF\n"
    "\n"
    "Fetches the image REF from its registry (the OCI distribution API) and imports it into the\n"
    "store, every blob checked against its digest as it arrives; layers the store already has\n"
    "are not fetched again. REF is Docker's: `python:3.12-slim` is\n"
    "docker.io/library/python:3.12-slim; `HOST:PORT/NAME:TAG`, `NAME@sha256:...`. Prints the\n"
    "name stored. `--image REF` and `sandbox.image: REF` pull the same way on first use.\n"
    "\n"
    "  --platform P         pick this platform of a manifest list (default: this host's)\n"
    "  --quiet, -q          print only the name stored\n"
    "  --auth-file FILE     a Docker-style {\"auths\": ...} file (default: $REGISTRY_AUTH_FILE,\n"
    "                       else $DOCKER_CONFIG/config.json, else ~/.docker/config.json)\n"
    "  --username USER      with --password-stdin: the password is read from stdin\n"
    "                       (else sandbox.registries.HOST.username/password, else the\n"
    "                       auths file)\n"
    "  --mirror M           try registry M first (for docker.io; DOMAIN=M for another);\n"
    "                       replaces sandbox.registry_mirrors\n"
    "  --insecure H         speak plain http to H (loopback registries always are; also\n"
    "                       sandbox.registries.H.insecure)\n"
    "  --max-size MIB       refuse an image or layer larger than this (default:\n"
    "                       sandbox.image_max_mib, 32768, for the whole image, and\n"
    "                       sandbox.image_layer_max_mib, 16384, for a layer)\n"
    "  --max-entries N      refuse a layer with more entries (default 1000000)\n"
    "\n"
    "On a terminal a progress bar per layer and in total; plain lines otherwise.\n";

#define MAX_BLOBS (SBX_PULL_LAYERS_MAX + 1)

struct prog {
  bool quiet, tty;
  struct {
    char digest[80];
    uint64_t done, total;
    enum sbx_pull_state state;
  } b[MAX_BLOBS];
  size_t n;
  double start, last;
  int drawn; /* lines of the last frame */
};

struct pull_args {
  struct sbx_pull_opts o;
  struct prog pg;
  const char *user;
  bool password_stdin;
  sbx_strv_t mirrors, insecure;
};

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void human(uint64_t n, char out[16])
{
  if (n >= 1000000000ull)
    snprintf(out, 16, "%.2fGB", (double) n / 1e9);
  else if (n >= 1000000)
    snprintf(out, 16, "%.1fMB", (double) n / 1e6);
  else
    snprintf(out, 16, "%.1fkB", (double) n / 1e3);
}

static void bar(char *out, size_t width, uint64_t done, uint64_t total)
{
  size_t fill = total ? (size_t) ((double) done / (double) total * (double) width) : width;
  if (fill > width)
    fill = width;
  for (size_t i = 0; i < width; i++)
    out[i] = i < fill ? '=' : i == fill ? '>' : ' ';
  out[width] = '\0';
}

static void draw(struct prog *pg, bool final)
{
  double t = now_s();
  if (!final && t - pg->last < 0.1)
    return;
  pg->last = t;
  uint64_t done = 0, total = 0;
  for (size_t i = 0; i < pg->n; i++) {
    done += pg->b[i].done;
    total += pg->b[i].total;
  }
  if (pg->drawn)
    fprintf(stderr, "\033[%dA", pg->drawn);
  for (size_t i = 0; i < pg->n; i++) {
    char d[16], tt[16], b[31];
    human(pg->b[i].done, d);
    human(pg->b[i].total, tt);
    bar(b, 30, pg->b[i].done, pg->b[i].total);
    const char *st = pg->b[i].state == SBX_PULL_CACHED  ? "Already exists"
                     : pg->b[i].state == SBX_PULL_DONE  ? "Pull complete"
                     : pg->b[i].state == SBX_PULL_BYTES ? "Downloading"
                                                        : "Waiting";
    fprintf(stderr, "\033[2K%.12s: %-14s [%s] %s/%s\n", pg->b[i].digest + 7, st, b, d, tt);
  }
  double el = t - pg->start;
  double rate = el > 0 ? (double) done / el : 0;
  double eta = rate > 0 && total > done ? (double) (total - done) / rate : 0;
  char d[16], tt[16], r[16], b[31];
  human(done, d);
  human(total, tt);
  human((uint64_t) rate, r);
  bar(b, 30, done, total);
  fprintf(stderr, "\033[2Ktotal        %-14s [%s] %s/%s %s/s ETA %.0fs\n", "", b, d, tt, r, eta);
  pg->drawn = (int) pg->n + 1;
}

static void on_progress(void *ctx, const struct sbx_pull_event *ev)
{
  struct prog *pg = ctx;
  if (pg->quiet)
    return;
  if (ev->state == SBX_PULL_RESOLVED) {
    fprintf(stderr, "manifest %s\n", ev->digest);
    pg->n = 0;
    pg->drawn = 0;
    pg->start = now_s();
    return;
  }
  if (ev->state == SBX_PULL_IMPORT) {
    if (pg->tty)
      draw(pg, true);
    fprintf(stderr, "importing (extracting the layers)\n");
    return;
  }
  size_t i = 0;
  while (i < pg->n && strcmp(pg->b[i].digest, ev->digest) != 0)
    i++;
  if (i == pg->n) {
    if (pg->n == MAX_BLOBS)
      return;
    snprintf(pg->b[i].digest, sizeof pg->b[i].digest, "%s", ev->digest);
    pg->n++;
  }
  pg->b[i].state = ev->state;
  pg->b[i].done = ev->done;
  pg->b[i].total = ev->total;
  if (pg->tty) {
    draw(pg, ev->state == SBX_PULL_DONE || ev->state == SBX_PULL_CACHED);
    return;
  }
  char s[16];
  human(ev->total, s);
  if (ev->state == SBX_PULL_CACHED)
    fprintf(stderr, "%s: already in the store\n", ev->digest);
  else if (ev->state == SBX_PULL_DONE)
    fprintf(stderr, "%s: fetched %s, verified\n", ev->digest, s);
}

static int pull_opt(struct cli *c, int ch, const char *arg, void *ctx)
{
  struct pull_args *a = ctx;
  long long v;
  switch (ch) {
  case 'p':
    a->o.platform = arg;
    return 0;
  case 'q':
    a->pg.quiet = true;
    return 0;
  case 'A':
    a->o.auth_file = arg;
    return 0;
  case 'U':
    a->user = arg;
    return 0;
  case 'P':
    a->password_stdin = true;
    return 0;
  case 'M':
    sbx__strv_push(&a->mirrors, arg);
    return 0;
  case 'I':
    sbx__strv_push(&a->insecure, arg);
    return 0;
  case 's':
    if (!cli_parse_long(arg, &v) || v <= 0)
      return cli_usage_error(c, "--max-size needs a positive number of MiB, got '%s'", arg);
    a->o.limits.max_bytes = (uint64_t) v << 20;
    return 0;
  default:
    if (!cli_parse_long(arg, &v) || v <= 0)
      return cli_usage_error(c, "--max-entries needs a positive number, got '%s'", arg);
    a->o.limits.max_entries = (uint64_t) v;
    return 0;
  }
}

static char *read_password(void)
{
  sbx_buf_t b = {0};
  char buf[256];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, stdin)) > 0 && b.len < 4096)
    sbx__buf_append(&b, buf, n);
  explicit_bzero(buf, sizeof buf);
  while (b.len > 0 && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r'))
    b.data[--b.len] = '\0';
  return sbx__buf_steal(&b);
}

int cmd_pull(struct cli *c, int argc, char **argv)
{
  static const struct option opts[] = {
      {"platform", required_argument, NULL, 'p'},    {"quiet", no_argument, NULL, 'q'},
      {"auth-file", required_argument, NULL, 'A'},   {"username", required_argument, NULL, 'U'},
      {"password-stdin", no_argument, NULL, 'P'},    {"mirror", required_argument, NULL, 'M'},
      {"insecure", required_argument, NULL, 'I'},    {"max-size", required_argument, NULL, 's'},
      {"max-entries", required_argument, NULL, 'E'}, {NULL, 0, NULL, 0}};
  struct pull_args *a = xzalloc(sizeof *a);
  int r = cli_parse(c, argc, argv, usage_pull, NULL, opts, "q", pull_opt, a, 1);
  if (r == 0 && (a->user != NULL) != a->password_stdin)
    r = cli_usage_error(c, "--username and --password-stdin go together");
  if (r == 0)
    r = cli_open(c);
  char *password = NULL;
  if (r == 0) {
    struct sbx_pull_opts conf = {0};
    sbx__pull_opts_from_config(c->cfg, &conf);
    a->o.registries = conf.registries;
    a->o.n_registries = conf.n_registries;
    /* --max-size caps the layer and the whole image for this pull */
    uint64_t size = a->o.limits.max_bytes, entries = a->o.limits.max_entries;
    a->o.limits = conf.limits;
    if (size)
      a->o.limits.max_bytes = a->o.limits.max_image_bytes = size;
    if (entries)
      a->o.limits.max_entries = entries;
    bool given = a->mirrors.n > 0; /* --mirror replaces the configured ones */
    for (size_t i = 0; !given && i < conf.n_mirrors; i++)
      sbx__strv_push(&a->mirrors, conf.mirrors[i]);
    if (a->user) {
      password = read_password();
      a->o.username = a->user;
      a->o.password = password;
    }
    a->o.mirrors = (const char *const *) a->mirrors.v;
    a->o.n_mirrors = a->mirrors.n;
    a->o.insecure = (const char *const *) a->insecure.v;
    a->o.n_insecure = a->insecure.n;
    a->pg.tty = isatty(STDERR_FILENO);
    a->o.progress = on_progress;
    a->o.progress_ctx = &a->pg;
    char *name = NULL;
    sbx_error_t err = NULL;
    if (sbx__image_pull(c->home, argv[optind], &a->o, &name, &err) < 0)
      r = cli_fail(&err);
    else
      printf("%s\n", name);
    free(name);
  }
  if (password) {
    explicit_bzero(password, strlen(password));
    free(password);
  }
  sbx__strv_free(&a->mirrors);
  sbx__strv_free(&a->insecure);
  free(a);
  return r == CLI_DONE ? 0 : r;
}
