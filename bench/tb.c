/* tb: time commands, interleaved round-robin, and print every sample.
 *
 *   tb [options] -- NAME [@opt=VALUE]... CMD [ARG...] [--- NAME [@opt=VALUE]... CMD [ARG...]]...
 *
 * Each measured round runs every case once (A B C, then B C A, then C A B: the starting case
 * rotates so no case always follows the same one). A process case is timed from just before
 * fork() to just after waitpid() returns (CLOCK_MONOTONIC), stdin from /dev/null (or
 * @stdin=FILE), stdout to /dev/null, stderr captured (and shown for the first failures). A case
 * whose CMD starts with '@' is an in-process builtin (see tb_builtins.c) timed around one call.
 * "%N" in any argument is replaced by the run's index (unique per case), e.g. a fresh thread
 * name per run.
 *
 * Samples go to -o FILE as TSV: group, case, index, milliseconds, status (ok, fail:N,
 * timeout). A run that times out is killed (its whole process group) and recorded with the
 * timeout as its value and status timeout (a censored sample: the real value is larger). */
#include "tb.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CASES 32
#define SHOW_FAILURES 3

struct tcase {
  const char *name;
  char **argv; /* process case: the command (with %N unexpanded) */
  int argc;
  const struct tb_builtin *bi;
  void *st;
  const char *stdin_path;
  const char *after; /* shell command run after each run, untimed (%N expanded) */
  unsigned long runs;
  double *samples;
  size_t n, cap;
  unsigned fails, timeouts, shown, timeouts_in_a_row;
  int errfd;
  int dropped; /* after 3 timeouts in a row: not run any more */
};

static struct {
  long rounds, warmup;
  double budget_s, timeout_s, pause_ms;
  const char *out_path, *group, *cmds_path;
  int private_mnt;
  int quiet;
} opt = {.rounds = 100, .warmup = 5, .budget_s = 0, .timeout_s = 60, .group = "-"};

static FILE *out;
double tb_run_timeout_s = 60;

double tb_now_ms(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

char *tb_fmt(const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  int r = vasprintf(&s, fmt, ap);
  va_end(ap);
  if (r < 0) {
    perror("tb: vasprintf");
    abort();
  }
  return s;
}

static void *xrealloc(void *p, size_t n)
{
  void *q = realloc(p, n);
  if (q == NULL) {
    perror("tb: realloc");
    abort();
  }
  return q;
}

/* s with every "%N" replaced by idx. */
static char *expand(const char *s, unsigned long idx)
{
  char num[24];
  snprintf(num, sizeof num, "%lu", idx);
  size_t len = strlen(s), nl = strlen(num), outlen = 0;
  char *r = xrealloc(NULL, len * (nl + 1) + 1);
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '%' && s[i + 1] == 'N') {
      memcpy(r + outlen, num, nl);
      outlen += nl;
      i++;
    } else {
      r[outlen++] = s[i];
    }
  }
  r[outlen] = '\0';
  return r;
}

/* Writes s for a shell: bare if it is made of safe characters, else single-quoted. */
static void put_quoted(FILE *f, const char *s, int space)
{
  if (space)
    fputc(' ', f);
  if (*s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=@%+,-") ==
                strlen(s)) {
    fputs(s, f);
    return;
  }
  fputc('\'', f);
  for (; *s; s++)
    if (*s == '\'')
      fputs("'\\''", f);
    else
      fputc(*s, f);
  fputc('\'', f);
}

static void usage(FILE *f)
{
  fputs("Usage: tb [-n ROUNDS] [-w WARMUP] [-T BUDGET_S] [-t TIMEOUT_S] [-o FILE] [-g GROUP] [-P]\n"
        "          -- NAME [@stdin=FILE] [@after=SHELL] CMD [ARG...] [--- NAME ... ]...\n"
        "\n"
        "  -n ROUNDS    measured rounds (default 100); every case runs once per round\n"
        "  -w WARMUP    warm-up rounds, not recorded (default 5)\n"
        "  -T BUDGET_S  stop after the round that crosses this many seconds (0 = no budget)\n"
        "  -t TIMEOUT_S per-run timeout; the run is killed and recorded as censored (default 60)\n"
        "  -s PAUSE_MS  sleep this long before every run (untimed): the machine is idle between\n"
        "               runs, as between an agent's calls\n"
        "  -o FILE      append samples as TSV (group case index ms status)\n"
        "  -g GROUP     group name written in each sample\n"
        "  -c FILE      append each case's command as TSV (group case command)\n"
        "  -P           run in a private mount namespace without /sys/fs/cgroup/unified\n"
        "               (crun refuses hybrid cgroup hosts otherwise)\n"
        "  -q           no summary on stdout\n"
        "\n"
        "Builtins (in-process cases):\n",
        f);
  tb_builtins_usage();
}

static int private_mount_ns(void)
{
  if (unshare(CLONE_NEWNS) < 0) {
    perror("tb: unshare(CLONE_NEWNS)");
    return -1;
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
    perror("tb: make / private");
    return -1;
  }
  if (umount2("/sys/fs/cgroup/unified", MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT) {
    perror("tb: umount /sys/fs/cgroup/unified");
    return -1;
  }
  return 0;
}

static void record(struct tcase *c, unsigned long idx, double ms, const char *status)
{
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 256;
    c->samples = xrealloc(c->samples, c->cap * sizeof *c->samples);
  }
  c->samples[c->n++] = ms;
  if (out)
    fprintf(out, "%s\t%s\t%lu\t%.4f\t%s\n", opt.group, c->name, idx, ms, status);
}

static void show_failure(struct tcase *c, const char *what, const char *msg)
{
  if (c->shown >= SHOW_FAILURES)
    return;
  c->shown++;
  fprintf(stderr, "tb: %s: %s\n", c->name, what);
  if (msg && *msg)
    fprintf(stderr, "    %s\n", msg);
  if (c->errfd >= 0) {
    char buf[2048];
    ssize_t r = pread(c->errfd, buf, sizeof buf - 1, 0);
    if (r > 0) {
      buf[r] = '\0';
      fprintf(stderr, "    stderr: %s%s", buf, buf[r - 1] == '\n' ? "" : "\n");
    }
  }
}

static void run_after(struct tcase *c, unsigned long idx)
{
  if (c->bi && c->bi->after)
    c->bi->after(c->st, idx);
  if (c->after) {
    char *cmd = expand(c->after, idx);
    pid_t pid = fork();
    if (pid == 0) {
      int fd = open("/dev/null", O_RDWR);
      dup2(fd, 0), dup2(fd, 1), dup2(fd, 2);
      execl("/bin/sh", "sh", "-c", cmd, (char *) NULL);
      _exit(127);
    }
    if (pid > 0)
      while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    free(cmd);
  }
}

/* One run of a process case. Returns 0 ok, >0 exit code, -1 timeout, -2 setup error. */
static int run_process(struct tcase *c, unsigned long idx, double *ms)
{
  char **argv = xrealloc(NULL, (size_t) (c->argc + 1) * sizeof *argv);
  for (int i = 0; i < c->argc; i++)
    argv[i] = expand(c->argv[i], idx);
  argv[c->argc] = NULL;
  int in = open(c->stdin_path ? c->stdin_path : "/dev/null", O_RDONLY | O_CLOEXEC);
  int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (c->errfd >= 0 && (lseek(c->errfd, 0, SEEK_SET) < 0 || ftruncate(c->errfd, 0) < 0))
    perror("tb: reset stderr capture");
  int ret = -2;
  if (in < 0 || null < 0) {
    perror("tb: open stdin");
    goto done;
  }

  double t0 = tb_now_ms();
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(in, 0);
    dup2(null, 1);
    dup2(c->errfd >= 0 ? c->errfd : null, 2);
    execvp(argv[0], argv);
    _exit(127);
  }
  if (pid < 0) {
    perror("tb: fork");
    goto done;
  }
  int pfd = (int) syscall(SYS_pidfd_open, pid, 0);
  int timed_out = 0;
  if (pfd >= 0) {
    struct pollfd p = {.fd = pfd, .events = POLLIN};
    int r;
    do
      r = poll(&p, 1, (int) (opt.timeout_s * 1000));
    while (r < 0 && errno == EINTR);
    if (r == 0) {
      timed_out = 1;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
    }
    close(pfd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  double t1 = tb_now_ms();
  if (timed_out) {
    *ms = opt.timeout_s * 1000;
    ret = -1;
    kill(-pid, SIGKILL); /* anything left in its group */
  } else {
    *ms = t1 - t0;
    ret = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
done:
  if (in >= 0)
    close(in);
  if (null >= 0)
    close(null);
  for (int i = 0; i < c->argc; i++)
    free(argv[i]);
  free(argv);
  return ret;
}

static void run_one(struct tcase *c, int measured)
{
  if (c->dropped)
    return;
  if (opt.pause_ms > 0) {
    struct timespec ts = {(time_t) (opt.pause_ms / 1000), (long) (fmod(opt.pause_ms, 1000) * 1e6)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
      ;
  }
  unsigned long idx = c->runs++;
  double ms = 0;
  char *msg = NULL;
  int r;
  if (c->bi) {
    double t0 = tb_now_ms();
    r = c->bi->run(c->st, idx, &msg);
    ms = tb_now_ms() - t0;
  } else {
    r = run_process(c, idx, &ms);
  }
  if (r != -1)
    c->timeouts_in_a_row = 0;
  if (r == 0) {
    if (measured)
      record(c, idx, ms, "ok");
  } else if (r == -1) {
    c->timeouts++;
    show_failure(c, "timed out (censored sample)", msg);
    if (measured)
      record(c, idx, ms, "timeout");
    if (++c->timeouts_in_a_row >= 3) {
      c->dropped = 1;
      fprintf(stderr, "tb: %s: 3 timeouts in a row; dropped from the remaining rounds\n", c->name);
    }
  } else {
    c->fails++;
    char what[64];
    snprintf(what, sizeof what, "failed (status %d)", r);
    show_failure(c, what, msg);
    if (measured) {
      char st[32];
      snprintf(st, sizeof st, "fail:%d", r);
      record(c, idx, ms, st);
    }
  }
  free(msg);
  run_after(c, idx);
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/* Linear interpolation between closest ranks (R type 7), on a sorted array. */
static double pct(const double *v, size_t n, double p)
{
  if (n == 0)
    return NAN;
  double h = (double) (n - 1) * p;
  size_t lo = (size_t) floor(h);
  size_t hi = lo + 1 < n ? lo + 1 : lo;
  return v[lo] + (h - (double) lo) * (v[hi] - v[lo]);
}

static int parse_cases(int argc, char **argv, struct tcase *cases, int *ncases)
{
  int i = 0, n = 0;
  while (i < argc) {
    if (n == MAX_CASES) {
      fprintf(stderr, "tb: at most %d cases\n", MAX_CASES);
      return -1;
    }
    struct tcase *c = &cases[n];
    memset(c, 0, sizeof *c);
    c->errfd = -1;
    c->name = argv[i++];
    while (i < argc &&
           (strncmp(argv[i], "@stdin=", 7) == 0 || strncmp(argv[i], "@after=", 7) == 0)) {
      if (argv[i][1] == 's')
        c->stdin_path = argv[i] + 7;
      else
        c->after = argv[i] + 7;
      i++;
    }
    int start = i;
    while (i < argc && strcmp(argv[i], "---") != 0)
      i++;
    if (i == start) {
      fprintf(stderr, "tb: case '%s' has no command\n", c->name);
      return -1;
    }
    c->argv = argv + start;
    c->argc = i - start;
    if (c->argv[0][0] == '@') {
      c->bi = tb_builtin_find(c->argv[0]);
      if (c->bi == NULL) {
        fprintf(stderr, "tb: unknown builtin '%s'\n", c->argv[0]);
        return -1;
      }
      if (c->argc - 1 < c->bi->min_args) {
        fprintf(stderr, "tb: %s needs: %s %s\n", c->name, c->bi->name, c->bi->usage);
        return -1;
      }
    }
    if (i < argc)
      i++; /* "---" */
    n++;
  }
  *ncases = n;
  return n > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
  int ch;
  while ((ch = getopt(argc, argv, "+n:w:T:t:s:o:g:c:Pqh")) != -1) {
    switch (ch) {
    case 'n':
      opt.rounds = atol(optarg);
      break;
    case 'w':
      opt.warmup = atol(optarg);
      break;
    case 'T':
      opt.budget_s = atof(optarg);
      break;
    case 't':
      opt.timeout_s = atof(optarg);
      break;
    case 's':
      opt.pause_ms = atof(optarg);
      break;
    case 'o':
      opt.out_path = optarg;
      break;
    case 'g':
      opt.group = optarg;
      break;
    case 'c':
      opt.cmds_path = optarg;
      break;
    case 'P':
      opt.private_mnt = 1;
      break;
    case 'q':
      opt.quiet = 1;
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (optind < argc && strcmp(argv[optind], "--") == 0)
    optind++;
  static struct tcase cases[MAX_CASES];
  int ncases = 0;
  tb_run_timeout_s = opt.timeout_s;
  if (opt.rounds < 1 || opt.warmup < 0 || opt.timeout_s <= 0 ||
      parse_cases(argc - optind, argv + optind, cases, &ncases) < 0) {
    usage(stderr);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  if (opt.private_mnt && private_mount_ns() < 0)
    return 1;
  if (opt.out_path) {
    out = fopen(opt.out_path, "ae");
    if (out == NULL) {
      perror(opt.out_path);
      return 1;
    }
  }
  if (opt.cmds_path) {
    FILE *f = fopen(opt.cmds_path, "ae");
    for (int k = 0; f && k < ncases; k++) {
      fprintf(f, "%s\t%s\t", opt.group, cases[k].name);
      if (cases[k].stdin_path)
        fprintf(f, "<%s ", cases[k].stdin_path);
      for (int i = 0; i < cases[k].argc; i++)
        put_quoted(f, cases[k].argv[i], i > 0);
      fputc('\n', f);
    }
    if (f)
      fclose(f);
  }
  int rc = 0;
  for (int k = 0; k < ncases; k++) {
    struct tcase *c = &cases[k];
    if (c->bi) {
      char *msg = NULL;
      c->st = c->bi->setup(c->argc - 1, c->argv + 1, &msg);
      if (c->st == NULL) {
        fprintf(stderr, "tb: %s: setup failed: %s\n", c->name, msg ? msg : "?");
        free(msg);
        rc = 1;
        goto teardown;
      }
    } else {
      c->errfd = memfd_create("tb-stderr", MFD_CLOEXEC);
    }
  }

  for (long r = 0; r < opt.warmup; r++)
    for (int k = 0; k < ncases; k++)
      run_one(&cases[(r + k) % ncases], 0);
  double start = tb_now_ms();
  long rounds = 0;
  for (; rounds < opt.rounds; rounds++) {
    for (int k = 0; k < ncases; k++)
      run_one(&cases[(rounds + k) % ncases], 1);
    if (opt.budget_s > 0 && tb_now_ms() - start > opt.budget_s * 1000) {
      rounds++;
      break;
    }
  }
  double wall = (tb_now_ms() - start) / 1000;
  if (out)
    fflush(out);

  if (!opt.quiet) {
    printf("# %s: %ld rounds in %.1f s%s\n", opt.group, rounds, wall,
           rounds < opt.rounds ? " (time budget reached)" : "");
    printf("%-28s %6s %10s %10s %10s %10s %10s %6s\n", "case", "n", "median_ms", "p10_ms", "p90_ms",
           "min_ms", "max_ms", "bad");
    for (int k = 0; k < ncases; k++) {
      struct tcase *c = &cases[k];
      qsort(c->samples, c->n, sizeof *c->samples, cmp_double);
      printf("%-28s %6zu %10.3f %10.3f %10.3f %10.3f %10.3f %6u\n", c->name, c->n,
             pct(c->samples, c->n, .5), pct(c->samples, c->n, .1), pct(c->samples, c->n, .9),
             c->n ? c->samples[0] : NAN, c->n ? c->samples[c->n - 1] : NAN, c->fails + c->timeouts);
    }
  }
  for (int k = 0; k < ncases; k++)
    if (cases[k].fails)
      rc = 1;

teardown:
  for (int k = 0; k < ncases; k++) {
    if (cases[k].bi && cases[k].st)
      cases[k].bi->teardown(cases[k].st);
    if (cases[k].errfd >= 0)
      close(cases[k].errfd);
    free(cases[k].samples);
  }
  if (out)
    fclose(out);
  return rc;
}
