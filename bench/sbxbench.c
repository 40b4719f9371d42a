/* sbxbench: the pool-level benchmark cases that tb's one-at-a-time loop cannot express.
 *
 *   sbxbench populate HOME CONFIG USER PREFIX FROM TO JOBS
 *       creates the scopes (USER, PREFIX<k>) for k in [FROM, TO) with acquire + release, in
 *       JOBS processes; prints how long it took.
 *   sbxbench scale HOME CONFIG USER PREFIX NSCOPES CLIENTS SECONDS MODE OUT [SBX [RATE]]
 *       CLIENTS processes, each looping for SECONDS: pick a scope k at random in [0, NSCOPES),
 *       run `true` in it and time the whole operation. With RATE (operations per second, all
 *       clients together), each client paces itself to RATE/CLIENTS (an operation starts at its
 *       scheduled time, or at once when late) instead of running flat out. MODE lib: acquire +
 * execute_command + release through libsbx (each client has its own provider, as separate front-end
 *       processes would); MODE cli: fork + exec `SBX --home HOME --config CONFIG exec -u USER -t
 *       PREFIX<k> -- true`. Appends every latency to OUT as TSV (scale MODE client ms status) and
 *       prints the throughput. */
#include <sbx/sbx.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void die_err(const char *what, sbx_error_t *err)
{
  fprintf(stderr, "sbxbench: %s: %s\n", what, err && *err ? (*err)->msg : "unknown error");
  exit(1);
}

static sbx_provider_t *open_provider(const char *home, const char *config, struct sbx_config **cfg)
{
  sbx_error_t err = NULL;
  *cfg = strcmp(config, "-") == 0 ? sbx_config_new_default() : sbx_config_load(config, &err);
  if (*cfg == NULL)
    die_err("load config", &err);
  sbx_provider_t *p = sbx_provider_new(home, *cfg, &err);
  if (p == NULL)
    die_err("open provider", &err);
  return p;
}

/* acquire + (optionally) run `true` + release. Returns 0 on success. */
static int touch_scope(sbx_provider_t *p, const char *user, const char *thread, int run_true)
{
  sbx_error_t err = NULL;
  sbx_sandbox_t *sb = sbx_acquire(p, user, thread, &err);
  if (sb == NULL) {
    fprintf(stderr, "sbxbench: acquire %s: %s\n", thread, err ? err->msg : "?");
    sbx_error_release(&err);
    return 1;
  }
  char id[17];
  snprintf(id, sizeof id, "%s", sbx_sandbox_id(sb));
  int r = 0;
  if (run_true) {
    struct sbx_exec_result res;
    if (sbx_execute_command(sb, "true", NULL, &res, &err) < 0) {
      fprintf(stderr, "sbxbench: exec in %s: %s\n", thread, err ? err->msg : "?");
      sbx_error_release(&err);
      r = 1;
    } else {
      r = res.exit_code != 0;
      sbx_exec_result_free(&res);
    }
  }
  if (sbx_release(p, id, &err) < 0) {
    fprintf(stderr, "sbxbench: release %s: %s\n", thread, err ? err->msg : "?");
    sbx_error_release(&err);
    r = 1;
  }
  return r;
}

static int wait_all(pid_t *pids, int n)
{
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int st;
    while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
      ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      bad++;
  }
  return bad;
}

static int cmd_populate(int argc, char **argv)
{
  if (argc != 7) {
    fprintf(stderr, "usage: sbxbench populate HOME CONFIG USER PREFIX FROM TO JOBS\n");
    return 2;
  }
  const char *home = argv[0], *config = argv[1], *user = argv[2], *prefix = argv[3];
  long from = atol(argv[4]), to = atol(argv[5]), jobs = atol(argv[6]);
  if (jobs < 1 || to < from)
    return 2;
  double t0 = now_s();
  pid_t pids[64];
  int n = 0;
  for (long j = 0; j < jobs && j < 64; j++) {
    pid_t pid = fork();
    if (pid == 0) {
      struct sbx_config *cfg;
      sbx_provider_t *p = open_provider(home, config, &cfg);
      int bad = 0;
      for (long k = from + j; k < to; k += jobs) {
        char thread[128];
        snprintf(thread, sizeof thread, "%s%ld", prefix, k);
        bad += touch_scope(p, user, thread, 0);
      }
      sbx_provider_free(p);
      sbx_config_free(cfg);
      _exit(bad ? 1 : 0);
    }
    if (pid > 0)
      pids[n++] = pid;
  }
  int bad = wait_all(pids, n);
  double dt = now_s() - t0;
  printf("populate\t%ld\t%.3f\t%.3f\n", to - from, dt,
         to > from ? dt * 1000 / (double) (to - from) : 0);
  return bad ? 1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static int cli_op(const char *sbx, const char *home, const char *config, const char *user,
                  const char *thread)
{
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open("/dev/null", O_RDWR);
    dup2(fd, 0), dup2(fd, 1);
    if (strcmp(config, "-") == 0)
      execl(sbx, sbx, "--home", home, "exec", "-u", user, "-t", thread, "--", "true",
            (char *) NULL);
    else
      execl(sbx, sbx, "--home", home, "--config", config, "exec", "-u", user, "-t", thread, "--",
            "true", (char *) NULL);
    _exit(127);
  }
  if (pid < 0)
    return 1;
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int cmd_scale(int argc, char **argv)
{
  if (argc < 9) {
    fprintf(stderr, "usage: sbxbench scale HOME CONFIG USER PREFIX NSCOPES CLIENTS SECONDS "
                    "lib|cli OUT [SBX [RATE]]\n");
    return 2;
  }
  const char *home = argv[0], *config = argv[1], *user = argv[2], *prefix = argv[3];
  long nscopes = atol(argv[4]), clients = atol(argv[5]);
  double seconds = atof(argv[6]);
  const char *mode = argv[7], *outp = argv[8], *sbx = argc > 9 ? argv[9] : "sbx";
  double rate = argc > 10 ? atof(argv[10]) : 0;
  int lib = strcmp(mode, "lib") == 0;
  char label[64];
  if (rate > 0)
    snprintf(label, sizeof label, "%s@%.0f/s", mode, rate);
  else
    snprintf(label, sizeof label, "%s", mode);
  if (nscopes < 1 || clients < 1 || clients > 64 || seconds <= 0)
    return 2;
  int go[2];
  if (pipe(go) < 0)
    return 1;
  pid_t pids[64];
  int rfd[64];
  for (long c = 0; c < clients; c++) {
    int res[2];
    if (pipe(res) < 0)
      return 1;
    pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      close(res[0]);
      struct sbx_config *cfg = NULL;
      sbx_provider_t *p = lib ? open_provider(home, config, &cfg) : NULL;
      unsigned seed = (unsigned) (c * 7919 + 17);
      char b;
      if (read(go[0], &b, 1) < 0) /* start together: the parent closes the pipe */
        _exit(1);
      double start = now_s(), end = start + seconds, last = start;
      double period = rate > 0 ? (double) clients / rate : 0;
      double next = start + period * (double) c / (double) clients; /* staggered */
      size_t n = 0, cap = 0;
      double *ms = NULL;
      int *bad = NULL;
      while ((last = now_s()) < end) {
        if (period > 0) {
          if (next > last) {
            usleep((useconds_t) ((next - last) * 1e6));
            last = now_s();
          }
          next += period;
        }
        long k = (long) (rand_r(&seed) % (unsigned) nscopes);
        char thread[128];
        snprintf(thread, sizeof thread, "%s%ld", prefix, k);
        if (n == cap) {
          cap = cap ? cap * 2 : 1024;
          ms = realloc(ms, cap * sizeof *ms);
          bad = realloc(bad, cap * sizeof *bad);
          if (ms == NULL || bad == NULL)
            abort();
        }
        bad[n] = lib ? touch_scope(p, user, thread, 1) : cli_op(sbx, home, config, user, thread);
        ms[n] = (now_s() - last) * 1000;
        n++;
      }
      /* results after the loop, so a slow reader never stalls the measurement */
      FILE *f = fdopen(res[1], "w");
      fprintf(f, "#end\t%.6f\n", last);
      for (size_t i = 0; i < n; i++)
        fprintf(f, "%.4f\t%s\n", ms[i], bad[i] ? "fail:1" : "ok");
      fclose(f);
      if (p)
        sbx_provider_free(p);
      sbx_config_free(cfg);
      _exit(0);
    }
    close(res[1]);
    pids[c] = pid;
    rfd[c] = res[0];
  }
  close(go[0]);
  usleep(200000); /* let every client open its provider */
  double t0 = now_s();
  close(go[1]);
  FILE *out = fopen(outp, "ae");
  if (out == NULL) {
    perror(outp);
    return 1;
  }
  size_t n = 0, cap = 0, fails = 0;
  double *lat = NULL, t_end = t0;
  for (long c = 0; c < clients; c++) {
    FILE *f = fdopen(rfd[c], "r");
    char line[128];
    while (f && fgets(line, sizeof line, f)) {
      if (strncmp(line, "#end\t", 5) == 0) {
        double e = atof(line + 5);
        if (e > t_end)
          t_end = e;
        continue;
      }
      double ms = atof(line);
      const char *st = strchr(line, '\t');
      st = st ? st + 1 : "ok\n";
      fprintf(out, "scale\t%s\t%ld\t%.4f\t%s", label, c, ms, st);
      if (strncmp(st, "ok", 2) != 0) {
        fails++;
        continue;
      }
      if (n == cap) {
        cap = cap ? cap * 2 : 1024;
        lat = realloc(lat, cap * sizeof *lat);
        if (lat == NULL)
          abort();
      }
      lat[n++] = ms;
    }
    if (f)
      fclose(f);
  }
  int bad = wait_all(pids, (int) clients);
  double wall = t_end - t0; /* from the start signal to the end of the last operation */
  fclose(out);
  qsort(lat, n, sizeof *lat, cmp_double);
  printf("scale\t%s\tclients=%ld\tscopes=%ld\tops=%zu\tfails=%zu\twall=%.2fs\tops/s=%.1f\t"
         "p50=%.2fms\tp99=%.2fms\n",
         label, clients, nscopes, n, fails, wall, (double) n / wall,
         n ? lat[(size_t) ((double) (n - 1) * .5)] : 0,
         n ? lat[(size_t) ((double) (n - 1) * .99)] : 0);
  free(lat);
  return bad || fails ? 1 : 0;
}

int main(int argc, char **argv)
{
  signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && strcmp(argv[1], "populate") == 0)
    return cmd_populate(argc - 2, argv + 2);
  if (argc >= 2 && strcmp(argv[1], "scale") == 0)
    return cmd_scale(argc - 2, argv + 2);
  fprintf(stderr,
          "usage: sbxbench populate|scale ... (see the comment at the top of sbxbench.c)\n");
  return 2;
}
